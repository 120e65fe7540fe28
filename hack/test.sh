#!/usr/bin/env bash
# Run the test suite in the repo's .venv (created/refreshed by hack/setup.sh).
#   bash hack/test.sh                         # everything
#   bash hack/test.sh tests/test_e2e_daemon.py -k restart -x
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/hack/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m pytest -q "$@"
