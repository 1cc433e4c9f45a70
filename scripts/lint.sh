#!/usr/bin/env bash
# The lint gates, as CI runs them: ruff format --check (the formatter changes no file), ruff
# (style, bug patterns and the complexity limit, C901),
# mypy (types; strict on stats/, run/, library.py and config.py), import-linter (the layers of
# CONTRIBUTING.md, settings that import no logic, no circles) and the function-length gate
# (scripts/function_length.py: no function in bias_discovery/ over 100 lines). Their settings
# are in pyproject.toml: [tool.ruff], [tool.mypy], [tool.importlinter]. .pre-commit-config.yaml
# runs this script before a commit. Each gate runs even when one before it failed; the exit status is
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
gate format "$bin/ruff" format --check .
gate ruff "$bin/ruff" check .
gate mypy "$bin/mypy"
gate import-linter "$bin/lint-imports"
gate function-length "$bin/python" scripts/function_length.py
if ((${#failed[@]})); then
  echo "lint: failed: ${failed[*]}" >&2
  exit 1
fi
echo "lint: format, ruff, mypy, import-linter and function-length passed"
