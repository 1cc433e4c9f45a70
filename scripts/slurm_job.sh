#!/usr/bin/env bash
# Example cluster job: one node serves the target and the teacher with vLLM, checks the run
# (`bias-discovery check`: servers answer, serve the configured names, enforce constraints,
# fit the prompts), runs the discovery loop, and reports its status. Resubmitting the same job
# resumes the run where it stopped (no call is paid twice).
#
#   sbatch scripts/slurm_job.sh                                               # 8 x 80 GB
#   CONFIG=experiments/biasscope-qwen-1gpu.yaml sbatch --gres=gpu:1 scripts/slurm_job.sh
#
# The servers are started with the `# serve_vllm.sh env:` line of CONFIG, so the ports, model
# names and memory split are the ones the config's base_urls expect.
#SBATCH --job-name=bias-discovery
#SBATCH --nodes=1
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=32
#SBATCH --mem=256G
#SBATCH --time=24:00:00
#SBATCH --output=runs/slurm-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
export HF_HOME="${HF_HOME:-$PWD/.hf}"
CONFIG="${CONFIG:-experiments/biasscope-qwen.yaml}"
RUN_DIR="${RUN_DIR:-runs/$(basename "$CONFIG" .yaml)}"
DATA_DIR="${DATA_DIR:-$PWD/data}"
export LOG_DIR="${LOG_DIR:-runs/servers-${SLURM_JOB_ID:-local}}"

serve_env=$(sed -n 's/^# serve_vllm.sh env: //p' "$CONFIG")
if [ -z "$serve_env" ]; then
  echo "$CONFIG has no '# serve_vllm.sh env:' line: cannot tell how to serve its models" >&2
  exit 2
fi
trap 'for p in $(cat "$LOG_DIR/pids" 2>/dev/null); do kill -- "-$p" 2>/dev/null || true; done' EXIT
env $serve_env scripts/serve_vllm.sh

.venv/bin/bias-discovery check "$CONFIG" --set data.data_dir="$DATA_DIR"
if [ -f "$RUN_DIR/checkpoints.sqlite" ]; then
  .venv/bin/bias-discovery resume "$RUN_DIR"
else
  .venv/bin/bias-discovery run "$CONFIG" --run-dir "$RUN_DIR" --set data.data_dir="$DATA_DIR"
fi
.venv/bin/bias-discovery status "$RUN_DIR"
