#!/usr/bin/env bash
# The drift tier (off by default; CI runs the locked versions): install the newest releases that
# pyproject's ranges allow into a venv of its own (.venv-latest) and run the fast tests there, so
# that a release that breaks us is seen before a user meets it. When it passes, ./scripts/lock.sh
# moves the lock forward.
#
#   ./scripts/test_latest.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
BIAS_DISCOVERY_VENV=.venv-latest ./scripts/setup.sh --unlocked --test
echo "newest releases installed; what differs from requirements/lock.txt:" >&2
.venv-latest/bin/python -m pip list --format=freeze --exclude-editable 2>/dev/null \
  | sed -E 's/\+cpu$//' | awk -F'==' '{ name = tolower($1); gsub(/[._]+/, "-", name); print name "==" $2 }' \
  | LC_ALL=C sort | comm -13 <(grep -v '^#' requirements/lock.txt) - >&2 || true
.venv-latest/bin/python -m pytest -q -m "not model and not server and not slow and not vllm" "$@"
