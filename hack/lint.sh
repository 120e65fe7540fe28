#!/usr/bin/env bash
# What the code claims, checked: ruff (lint and format) and mypy, as pyproject.toml configures them.
#   bash hack/lint.sh          # check (CI runs this)
#   bash hack/lint.sh --fix    # apply ruff's safe fixes and the formatter, then check
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GFLOW_EXTRAS="${GFLOW_EXTRAS:-test,plot,lint}" bash "$ROOT/hack/setup.sh"
cd "$ROOT"
bin=.venv/bin
if [ "${1:-}" = --fix ]; then
    "$bin/ruff" check --fix --quiet . || true
    "$bin/ruff" format --quiet .
fi
rc=0
"$bin/ruff" check . || rc=1
"$bin/ruff" format --check --quiet . || { echo "lint: run 'bash hack/lint.sh --fix' to format" >&2; rc=1; }
"$bin/mypy" || rc=1
exit "$rc"
