"""A llama_cpp that crashes as a bad native build does: the model loads, and the first decode
dies by a real SIGSEGV (a read of address 0). Put this directory first on PYTHONPATH of a child
process to plant the crash (tests/test_smoke.py); nothing else imports it."""

import ctypes
from types import SimpleNamespace

__version__ = "0.0-crash"


class Llama:
    def __init__(self, **kwargs):
        self._model = SimpleNamespace(vocab=object())
        self.n_batch = kwargs.get("n_batch", 512)
        self.n_tokens = 0

    def n_ctx(self) -> int:
        return 1024

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass

    def create_chat_completion(self, **kwargs):
        ctypes.string_at(0)  # SIGSEGV, as llama_decode did on the AMX machine


class LlamaGrammar:
    @classmethod
    def from_string(cls, text, verbose=False):
        return cls()


def llama_sampler_init_grammar(vocab, text, root):
    return 1


def llama_sampler_free(sampler):
    pass


def llama_print_system_info() -> bytes:
    return b"CPU : AVX2 = 1 | "


LogitsProcessorList = list
