#!/usr/bin/env bash
# The lint gates, as CI runs them: ruff (style and bug patterns), mypy (types; strict on
# stats/, run/, library.py and config.py) and import-linter (the layers of CONTRIBUTING.md,
# and no circles). Their settings are in pyproject.toml: [tool.ruff], [tool.mypy],
# [tool.importlinter]. Each gate runs even when one before it failed; the exit status is
# non-zero when any failed.
#
#   ./scripts/lint.sh                  # the tools of .venv (./scripts/setup.sh --test installs them)
#   VENV=/path/to/venv ./scripts/lint.sh
set -uo pipefail
cd "$(dirname "$0")/.."
bin="${VENV:-.venv}/bin"
failed=()
gate() {
  local name=$1
  shift
  echo "== $name: $*"
  "$@" || failed+=("$name")
}
gate ruff "$bin/ruff" check .
gate mypy "$bin/mypy"
gate import-linter "$bin/lint-imports"
if ((${#failed[@]})); then
  echo "lint: failed: ${failed[*]}" >&2
  exit 1
fi
echo "lint: ruff, mypy and import-linter passed"
