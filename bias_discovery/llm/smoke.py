"""Does the embedded engine work on this CPU? Asked of a child process, so a crash is a finding.

The embedded default is the transformers engine (`hf/smollm2`); llama.cpp (`llamacpp/`) is the
optional one. Either can die on a CPU it was not built or tested for: a llama.cpp compiled for
the wrong CPU (a native build made elsewhere, an AMX code path the kernel does not allow) dies
by a signal inside its first multi-token decode, and a torch or xgrammar wheel can do the same
in its kernels. In a run's process that is a lost run; here it is a line that names the engine,
the signal and the remedy. `scripts/setup.sh` ends with this check (`python -m
bias_discovery.llm.smoke`), and `bias-discovery check` runs it for every `hf/` and `llamacpp/`
role before loading the model in-process.

What the child does is what a run does first: it loads the model through the engine and asks
for a grammar-constrained (JSON schema), multi-token chat completion; the transformers engine
answers it in a batch with a choices- and a regex-constrained request, as the stages batch
them, and every reply must satisfy its constraint. The embedder check embeds one sentence with
the configured sentence-transformers model.

The build check (llama.cpp): `scripts/setup.sh --llamacpp` records the flags it built
llama-cpp-python with in `VENV/llama-cpp-build.json`. When that file exists, the CPU features the
loaded library reports (`llama_print_system_info`) must be the ones those flags ask for; a
library with more (say AVX512 or AMX from a wheel built natively elsewhere) is not the build
setup made.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

__all__ = [
    "BUILD_STAMP",
    "SmokeResult",
    "check_embedder",
    "check_engine",
    "check_llamacpp",
    "check_transformers",
    "feature_mismatch",
    "main",
]

BUILD_STAMP = "llama-cpp-build.json"
"""The file, in the environment's prefix, where scripts/setup.sh records the build it installed."""

CHILD_TIMEOUT_S = 600.0
"""A child that neither answers nor dies in this long is reported as hung (a loaded 2-core
machine loads and runs SmolLM2 in seconds)."""

_FLAG_FEATURES = {
    "GGML_AVX": "AVX",
    "GGML_AVX2": "AVX2",
    "GGML_FMA": "FMA",
    "GGML_F16C": "F16C",
    "GGML_BMI2": "BMI2",
    "GGML_AVX_VNNI": "AVX_VNNI",
    "GGML_AVX512": "AVX512",
    "GGML_AVX512_VBMI": "AVX512_VBMI",
    "GGML_AVX512_VNNI": "AVX512_VNNI",
    "GGML_AVX512_BF16": "AVX512_BF16",
    "GGML_AMX_INT8": "AMX_INT8",
}
"""llama.cpp's x86 build options and the feature names `llama_print_system_info` reports for them."""

_SMOKE_SCHEMA = {
    "type": "object",
    "properties": {"better": {"type": "string", "enum": ["A", "B"]}, "reason": {"type": "string", "maxLength": 80}},
    "required": ["better", "reason"],
    "additionalProperties": False,
}
_SMOKE_PROMPT = (
    "Question: what is 2 + 3?\nAnswer A: 2 + 3 = 5.\nAnswer B: 2 + 3 = 6.\n"
    'Which answer is better? Reply as JSON: {"better": "A" or "B", "reason": "..."}'
)


class SmokeResult(BaseModel):
    """One engine's check: it answered, or how it failed and what to do."""

    engine: str
    """What was checked, e.g. `transformers (hf/smollm2)`, `llama.cpp (llamacpp/smollm2)` or
    `embedder (all-MiniLM-L6-v2)`."""
    ok: bool
    detail: str
    """What it answered, or the error."""
    failure: Literal["signal", "error", "hung", "build_mismatch"] | None = None
    signal: str | None = None
    """The signal that ended the child (SIGSEGV, SIGILL, ...), when one did."""
    remedy: str | None = None
    seconds: float = 0.0
    system_info: str | None = None
    """llama.cpp's report of the CPU features it was built with (llama.cpp only)."""
    build: dict[str, Any] | None = None
    """The build setup recorded (`BUILD_STAMP`), when there is one."""

    def line(self) -> str:
        """One line for a terminal."""
        if self.ok:
            return f"ok   {self.engine}: {self.detail} ({self.seconds:.1f} s)"
        how = f"killed by {self.signal}" if self.signal else self.failure or "failed"
        text = f"FAIL {self.engine}: {how}: {self.detail}"
        return text + (f"\n     remedy: {self.remedy}" if self.remedy else "")


def build_stamp() -> dict[str, Any] | None:
    """The build scripts/setup.sh installed in this environment, or None."""
    try:
        data = json.loads((Path(sys.prefix) / BUILD_STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def rebuild_remedy(build: dict[str, Any] | None) -> str:
    """What rebuilds the engine portably: setup's flag in a checkout, the pip command elsewhere."""
    version = (build or {}).get("version") or _installed_version() or "VERSION"
    return (
        "rebuild llama.cpp portably: ./scripts/setup.sh --llamacpp --rebuild-llama in a checkout; elsewhere "
        "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON' pip install --force-reinstall "
        f"--no-cache-dir --no-deps --no-binary llama-cpp-python llama-cpp-python=={version}"
    )


def _installed_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("llama-cpp-python")
    except Exception:  # noqa: BLE001 - not installed: the remedy names a placeholder
        return None


def feature_mismatch(cmake_args: list[str], system_info: str) -> str | None:
    """None when the features llama.cpp reports are the ones the flags ask for, else what differs.

    Only x86 builds with native off are checked (a native build's features are the build
    machine's, which is what it is for)."""
    if "-DGGML_NATIVE=OFF" not in cmake_args:
        return None
    asked = {}
    for arg in cmake_args:
        name, _, value = arg.removeprefix("-D").partition("=")
        if name in _FLAG_FEATURES:
            asked[_FLAG_FEATURES[name]] = value.upper() in ("ON", "1", "TRUE")
    reported = {}
    for part in system_info.split("|"):
        key, _, value = part.partition("=")
        key = key.strip().split(":")[-1].strip()
        if key in _FLAG_FEATURES.values():
            reported[key] = value.strip() == "1"
    if not reported:
        return None  # not an x86 build: nothing to compare
    extra = sorted(k for k, on in reported.items() if on and not asked.get(k, False))
    missing = sorted(k for k, on in asked.items() if on and not reported.get(k, False))
    if not extra and not missing:
        return None
    parts = []
    if extra:
        parts.append(f"it has {', '.join(extra)}, which the flags do not ask for")
    if missing:
        parts.append(f"it lacks {', '.join(missing)}, which they do")
    return (
        f"the installed llama-cpp-python is not the build setup made ({'; '.join(parts)}; flags: "
        f"{' '.join(cmake_args)}): a wheel built elsewhere or from pip's cache?"
    )


def _run_child(args: list[str], engine: str, timeout_s: float) -> tuple[SmokeResult | None, dict[str, Any] | None]:
    """Run `python -m bias_discovery.llm.smoke --child ...`; a failure as a result, else the
    child's JSON."""
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bias_discovery.llm.smoke", "--child", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return SmokeResult(
            engine=engine,
            ok=False,
            failure="hung",
            seconds=time.monotonic() - started,
            detail=f"no answer within {timeout_s:.0f} s",
        ), None
    seconds = time.monotonic() - started
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        tail = proc.stderr.strip().splitlines()[-3:]
        return SmokeResult(
            engine=engine,
            ok=False,
            failure="signal",
            signal=name,
            seconds=seconds,
            detail="the engine crashed the process" + (f" (stderr: {' | '.join(tail)[:400]})" if tail else ""),
        ), None
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    try:
        data = json.loads(last)
    except ValueError:
        data = None
    if proc.returncode != 0 or not isinstance(data, dict):
        last_error = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return SmokeResult(
            engine=engine,
            ok=False,
            failure="error",
            seconds=seconds,
            detail=f"exit code {proc.returncode}: {last_error[:400]}",
        ), None
    data["seconds"] = seconds
    return None, data


def check_llamacpp(model: str = "smollm2", *, timeout_s: float = CHILD_TIMEOUT_S) -> SmokeResult:
    """Load `llamacpp/MODEL` in a child process and ask it for a constrained multi-token reply."""
    engine = f"llama.cpp (llamacpp/{model})"
    build = build_stamp()
    failed, data = _run_child(["llamacpp", model], engine, timeout_s)
    if failed is not None:
        failed.build = build
        if failed.failure in ("signal", "hung") or "llama" in failed.detail.lower():
            failed.remedy = rebuild_remedy(build)
        return failed
    assert data is not None
    if data.get("error"):
        return SmokeResult(
            engine=engine,
            ok=False,
            failure="error",
            detail=data["error"],
            seconds=data["seconds"],
            system_info=data.get("system_info"),
            build=build,
        )
    system_info = data.get("system_info") or ""
    mismatch = feature_mismatch(list(build.get("cmake_args", [])), system_info) if build else None
    if mismatch:
        return SmokeResult(
            engine=engine,
            ok=False,
            failure="build_mismatch",
            detail=mismatch,
            seconds=data["seconds"],
            remedy=rebuild_remedy(build),
            system_info=system_info,
            build=build,
        )
    return SmokeResult(
        engine=engine,
        ok=True,
        seconds=data["seconds"],
        system_info=system_info,
        build=build,
        detail=f"a constrained reply of {data['completion_tokens']} tokens: {data['text'][:60]!r}",
    )


TORCH_REMEDY = (
    "reinstall the tested torch, transformers and xgrammar (./scripts/setup.sh installs them); meanwhile "
    "llama.cpp can stand in: ./scripts/setup.sh --llamacpp, then --set target=llamacpp/smollm2 "
    "--set teacher=llamacpp/smollm2"
)
"""What to do when the transformers engine fails on this machine."""


def check_transformers(model: str = "smollm2", *, timeout_s: float = CHILD_TIMEOUT_S) -> SmokeResult:
    """Load `hf/MODEL` in a child process and ask it for a batch of constrained replies (a
    multi-token JSON object, a choice, a regex), as the stages send them."""
    engine = f"transformers (hf/{model})"
    failed, data = _run_child(["hf", model], engine, timeout_s)
    if failed is not None:
        if failed.failure in ("signal", "hung"):
            failed.remedy = TORCH_REMEDY
        return failed
    assert data is not None
    if data.get("error"):
        return SmokeResult(
            engine=engine, ok=False, failure="error", detail=data["error"], seconds=data["seconds"], remedy=TORCH_REMEDY
        )
    return SmokeResult(
        engine=engine,
        ok=True,
        seconds=data["seconds"],
        detail=(
            f"a batch of {data['batch']} constrained replies on {data['device']} in {data['dtype']} "
            f"({data.get('dtype_reason', 'no reason given')}), the JSON one "
            f"{data['completion_tokens']} tokens: {data['text'][:60]!r}"
        ),
    )


def check_engine(provider: str, model: str, *, timeout_s: float = CHILD_TIMEOUT_S) -> SmokeResult:
    """The child-process check of an in-process engine: `hf` or `llamacpp`."""
    if provider == "hf":
        return check_transformers(model, timeout_s=timeout_s)
    if provider == "llamacpp":
        return check_llamacpp(model, timeout_s=timeout_s)
    raise ValueError(f"no smoke check for the {provider} provider")


def check_embedder(model: str = "all-MiniLM-L6-v2", *, timeout_s: float = CHILD_TIMEOUT_S) -> SmokeResult:
    """Embed one sentence with the sentence-transformers model in a child process."""
    engine = f"embedder ({model})"
    failed, data = _run_child(["embedder", model], engine, timeout_s)
    if failed is not None:
        if failed.failure == "signal":
            failed.remedy = (
                "reinstall torch and sentence-transformers (./scripts/setup.sh installs the tested versions)"
            )
        return failed
    assert data is not None
    if data.get("error"):
        return SmokeResult(engine=engine, ok=False, failure="error", detail=data["error"], seconds=data["seconds"])
    return SmokeResult(
        engine=engine, ok=True, seconds=data["seconds"], detail=f"a {data['dimensions']}-dimensional embedding"
    )


def _child(kind: str, model: str) -> dict[str, Any]:
    """In the child: do the work and return what the parent reads (errors as text)."""
    from ..errors import BiasDiscoveryError

    try:
        if kind == "llamacpp":
            return _child_llamacpp(model)
        if kind == "hf":
            return _child_transformers(model)
        from ..config import EmbedderConfig
        from ..embeddings import SentenceTransformerEmbedder

        vectors = SentenceTransformerEmbedder(EmbedderConfig(model=model)).embed(
            ["The judge prefers the first answer."]
        )
        return {"dimensions": int(vectors.shape[1])}
    except (BiasDiscoveryError, ImportError, OSError, ValueError, RuntimeError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _smoke_json_request() -> Any:
    from .types import Constraint, GenerationRequest

    return GenerationRequest.chat(
        _SMOKE_PROMPT, max_tokens=48, temperature=0.0, seed=0, constraint=Constraint(json_schema=_SMOKE_SCHEMA)
    )


def _child_llamacpp(model: str) -> dict[str, Any]:
    import llama_cpp

    from .config import ModelConfig
    from .llamacpp import LlamaCppEngine

    engine = LlamaCppEngine(ModelConfig(provider="llamacpp", model=model, n_ctx=1024))
    try:
        response = engine.generate([_smoke_json_request()])[0]
    finally:
        engine.close()
    if response.finish_reason == "error":
        return {"error": response.text}
    if response.completion_tokens < 2:
        return {"error": f"the engine answered {response.completion_tokens} token(s); a working build answers more"}
    return {
        "text": response.text,
        "completion_tokens": response.completion_tokens,
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
    }


def _child_transformers(model: str) -> dict[str, Any]:
    from .config import ModelConfig
    from .conformance import violation
    from .hf import TransformersEngine
    from .types import Constraint, GenerationRequest

    engine = TransformersEngine(ModelConfig(provider="hf", model=model))
    batch = [
        _smoke_json_request(),
        GenerationRequest.chat(
            "Which is larger, 3 or 5? Answer A for 3, B for 5.",
            max_tokens=4,
            temperature=0.0,
            seed=0,
            constraint=Constraint(choices=("A", "B")),
        ),
        GenerationRequest.chat(
            "Give a score from 1 to 9 for the answer '2 + 3 = 5'.",
            max_tokens=8,
            temperature=0.7,
            seed=1,
            constraint=Constraint(regex=r"Score: [1-9]"),
        ),
    ]
    try:
        responses = engine.generate(batch)
    finally:
        engine.close()
    for request, response in zip(batch, responses):
        if response.finish_reason == "error":
            return {"error": response.text}
        problem = violation(request.constraint, response.text) if request.constraint is not None else None
        if problem:
            return {
                "error": f"a {request.constraint.kind if request.constraint else ''} reply broke its constraint: {problem}"
            }
    if responses[0].completion_tokens < 2:
        return {
            "error": f"the engine answered {responses[0].completion_tokens} token(s); a working engine answers more"
        }
    return {
        "text": responses[0].text,
        "completion_tokens": responses[0].completion_tokens,
        "batch": len(batch),
        "device": engine.device,
        "dtype": engine.dtype,
        "dtype_reason": engine.dtype_reason,
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m bias_discovery.llm.smoke [--engine hf|llamacpp ...] [--model M] [--embedder E] [--json]`:
    check the embedded engines (default: the transformers engine) and the embedder; exit 1 when
    any fails."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bias_discovery.llm.smoke", description=main.__doc__)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--engine",
        action="append",
        choices=("hf", "llamacpp"),
        help="engine to check (repeatable; default: hf, the embedded default)",
    )
    parser.add_argument(
        "--model", default="smollm2", help="model: smollm2, a Hugging Face directory (hf) or a .gguf path (llamacpp)"
    )
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2")
    parser.add_argument("--json", action="store_true", help="one JSON object per check")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(*args.child)))
        return 0
    results = [check_engine(engine, args.model) for engine in (args.engine or ["hf"])]
    results.append(check_embedder(args.embedder))
    for result in results:
        if args.json:
            print(result.model_dump_json())
        else:
            print(result.line())
            if result.system_info and result.ok:
                print(
                    f"     llama.cpp build: {result.system_info.strip()}"
                    + (f" (flags: {' '.join(result.build['cmake_args'])})" if result.build else "")
                )
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
