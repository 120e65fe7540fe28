#!/usr/bin/env bash
# Run the test suite in the repo's .venv (created/refreshed by hack/setup.sh), on parallel workers
# (pytest-xdist; tests that share something machine-wide run on one worker: tests/conftest.py).
#   bash hack/test.sh                         # everything: the fast lane and the e2e tests
#   bash hack/test.sh --fast                  # the fast lane only: pure, in-process tests (-m "not e2e"), < 1 min
#   bash hack/test.sh tests/test_e2e_daemon.py -k restart -x   # pytest's own arguments
#   bash hack/test.sh -n 0 tests/test_cli.py  # serially (-n 0: no workers)
# GFLOW_TEST_WORKERS sets the number of workers (default 4: the e2e tests mostly wait on their
# daemons, so 4 workers keep 2 cores busy).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/hack/system-packages.sh"  # as root with apt: the Debian packages some tests use (GFLOW_NO_APT=1: not)
bash "$ROOT/hack/setup.sh"
cd "$ROOT"
# Bytecode caches (__pycache__/, ignored by git) on: without them every worker rewrites the asserts
# of every test module again (~10 s of CPU each) and every gflowd and gflowctl a test starts
# compiles the controller package from source.
unset PYTHONDONTWRITEBYTECODE
lane=()
if [ "${1-}" = "--fast" ]; then
    shift
    lane=(-m "not e2e")
fi
exec .venv/bin/python -m pytest -q -n "${GFLOW_TEST_WORKERS:-4}" --dist loadgroup "${lane[@]}" "$@"
