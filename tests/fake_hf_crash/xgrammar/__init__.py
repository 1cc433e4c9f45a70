"""An xgrammar that crashes as a bad native wheel would: it imports, and the first grammar the
transformers engine compiles dies by a real SIGSEGV (a read of address 0). Put this directory
first on PYTHONPATH of a child process to plant the crash (tests/test_smoke.py); nothing else
imports it."""

import ctypes

__version__ = "0.0-crash"


class TokenizerInfo:
    @classmethod
    def from_huggingface(cls, tokenizer, **kwargs):  # type: ignore[no-untyped-def]
        ctypes.string_at(0)  # SIGSEGV


class GrammarCompiler:
    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        ctypes.string_at(0)
