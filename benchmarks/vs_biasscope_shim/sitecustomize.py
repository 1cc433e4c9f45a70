"""The one shim benchmarks/vs_biasscope.py puts around vLLM: CPU settings and a meter.

Python imports `sitecustomize` at start-up from the first directory on `sys.path` that holds
one; the benchmark puts this directory first on PYTHONPATH of the processes it measures (the
official BiasScope scripts, and our own CLI, so that both are metered the same way), and
vLLM's engine-core child inherits it. It does nothing unless `VS_BIASSCOPE_LOG` names a file.
Then it times the import of torch and vLLM (seconds; the peer imports them at the top of its
scripts, ours inside its first stage: both count them with the engine loads), and when
`vllm.entrypoints.llm` is first imported it wraps three methods of `vllm.LLM`, without
touching a line of the code that calls them:

- `LLM.__init__`: adds `enforce_eager=True` when `VS_BIASSCOPE_ENFORCE_EAGER=1` (vLLM's CPU
  build otherwise compiles the model with inductor, which starts slowly and gave a different
  greedy output on this machine; our own engine sets the same on a CPU), and logs each engine
  load (its start, end and the model).
- `LLM.generate` and `LLM.chat`: log each call (start, end, requests, prompt and generated
  tokens counted from the `RequestOutput`s: `len(prompt_token_ids)` and
  `len(outputs[0].token_ids)`, as our own meter counts them) with the first prompt's opening
  characters, which tell the benchmark which stage of the peer made the call.

Memory is set through vLLM's own `VLLM_CPU_KVCACHE_SPACE` environment variable, not here.
Every log line is one JSON object, appended and flushed at once, by the main process only
(vLLM's engine-core and worker children import vLLM again while the main process loads the
engine, which is already timed).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from typing import Any

_LOG = os.environ.get("VS_BIASSCOPE_LOG")
_PREFIX_CHARS = 400
"""Characters of the first prompt kept in the log: enough to tell the prompt templates apart."""
_lock = threading.Lock()


_MAIN = "VS_BIASSCOPE_MAIN_PID"
"""The first process of a measured command (the processes it starts inherit the variable)."""
if _LOG:
    os.environ.setdefault(_MAIN, str(os.getpid()))


def _main_process() -> bool:
    """False in the processes the measured one starts (vLLM's engine core and worker, which
    import vLLM again while the main process is loading the engine, already timed)."""
    return os.environ.get(_MAIN) == str(os.getpid())


def _write(record: dict[str, Any]) -> None:
    if not _main_process():
        return
    line = json.dumps({**record, "pid": os.getpid(), "argv0": os.path.basename(sys.argv[0] if sys.argv else "")})
    with _lock, open(_LOG or os.devnull, "a", encoding="utf-8") as stream:
        stream.write(line + "\n")
        stream.flush()


def _prompt_text(output: Any) -> str:
    prompt = getattr(output, "prompt", None)
    return prompt if isinstance(prompt, str) else ""


def _usage(outputs: Any) -> dict[str, Any]:
    outputs = list(outputs or [])
    return {
        "requests": len(outputs),
        "prompt_tokens": sum(len(getattr(o, "prompt_token_ids", None) or ()) for o in outputs),
        "completion_tokens": sum(len(getattr(o.outputs[0], "token_ids", None) or ()) for o in outputs if o.outputs),
        "prompt_head": _prompt_text(outputs[0])[:_PREFIX_CHARS] if outputs else "",
    }


def _patch(llm_class: Any) -> None:
    if getattr(llm_class, "_vs_biasscope_patched", False):
        return
    init, generate, chat = llm_class.__init__, llm_class.generate, llm_class.chat
    eager = os.environ.get("VS_BIASSCOPE_ENFORCE_EAGER") == "1"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if eager:
            kwargs["enforce_eager"] = True
        start = time.time()
        init(self, *args, **kwargs)
        model = kwargs.get("model", args[0] if args else None)
        _write({"event": "load", "start": start, "end": time.time(), "model": str(model)})

    def metered(method: Any, name: str) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.time()
            outputs = method(self, *args, **kwargs)
            _write({"event": name, "start": start, "end": time.time(), **_usage(outputs)})
            return outputs

        call.__name__ = method.__name__
        call.__doc__ = method.__doc__
        return call

    llm_class.__init__ = __init__
    llm_class.generate = metered(generate, "generate")
    llm_class.chat = metered(chat, "chat")
    llm_class._vs_biasscope_patched = True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds `torch`, `vllm` and `vllm.entrypoints.llm` as usual, times their import (one side
    imports them at the top of its scripts, the other inside its first stage: both count it
    with the engine loads), and patches `LLM` right after `vllm.entrypoints.llm` executes."""

    timed = ("torch", "vllm", "vllm.entrypoints.llm")

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.timed:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_timed(module: Any) -> None:
            start = time.time()
            exec_module(module)
            if name == "vllm.entrypoints.llm":
                _patch(module.LLM)
            _write({"event": "import", "start": start, "end": time.time(), "module": name})

        loader.exec_module = exec_timed  # type: ignore[method-assign]
        return spec


if _LOG:
    sys.meta_path.insert(0, _PatchOnImport())
