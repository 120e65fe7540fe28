#!/usr/bin/env bash
# Make .venv (in the repo) hold this checkout installed editable with the extras GFLOW_EXTRAS names
# (default "test,plot", what hack/test.sh needs; hack/run-example.sh sets GFLOW_EXTRAS= for a
# runtime-only install). The stamp records the extras installed: a venv holding fewer is upgraded.
#
# Needs only python3 >= 3.11 (set PYTHON=/path/to/python3.x to pick another). Idempotent and
# fast when nothing changed: the install is skipped while .venv/.gflow-installed is newer than
# pyproject.toml, records this .venv's path, and the package still imports from this checkout.
# A missing or broken .venv (e.g. its python was removed, or the repo was moved) is rebuilt.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.gflow-installed"
PYTHON="${PYTHON:-python3}"
EXTRAS="${GFLOW_EXTRAS-test,plot}"

say() { printf 'setup: %s\n' "$*" >&2; }

# The stamp: line 1 the venv's path, line 2 the extras installed (comma-separated).
stamp_venv() { sed -n 1p "$STAMP" 2>/dev/null || true; }
stamp_extras() { sed -n 2p "$STAMP" 2>/dev/null || true; }

# Every extra asked for is among those installed.
has_extras() {
    local want have
    have=",$(stamp_extras),"
    for want in ${EXTRAS//,/ }; do
        case "$have" in *",$want,"*) ;; *) return 1 ;; esac
    done
}

# The venv works, belongs to this path, holds the extras asked for, and imports this checkout's package.
installed() {
    [ -f "$STAMP" ] && [ "$STAMP" -nt "$ROOT/pyproject.toml" ] &&
        [ "$(stamp_venv)" = "$VENV" ] && has_extras &&
        "$VENV/bin/python" - "$ROOT" "$EXTRAS" >/dev/null 2>&1 <<'PY'
import os, sys
import controller
if "test" in sys.argv[2].split(","):
    import pytest
root = os.path.realpath(sys.argv[1])
sys.exit(0 if os.path.realpath(controller.__file__).startswith(root + os.sep) else 1)
PY
}

if installed; then
    exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    say "$PYTHON not found: install Python 3.11 or newer (or set PYTHON=/path/to/python3)"
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    say "$("$PYTHON" -V 2>&1) is too old: gflow needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)"
    exit 1
fi

venv_ok() {
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 &&
        "$VENV/bin/python" -m pip --version >/dev/null 2>&1 &&
        # a moved repo leaves scripts whose #! points at the old path
        { [ ! -f "$STAMP" ] || [ "$(stamp_venv)" = "$VENV" ]; }
}

if ! venv_ok; then
    if [ -e "$VENV" ]; then
        say "rebuilding the broken $VENV"
        rm -rf "$VENV"
    else
        say "creating $VENV"
    fi
    if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
        # Debian/Ubuntu without python3-venv: no ensurepip. Use the host's pip if it has one.
        rm -rf "$VENV"
        "$PYTHON" -m venv --without-pip "$VENV"
        if "$PYTHON" -m pip --version >/dev/null 2>&1; then
            "$PYTHON" -m pip --python "$VENV/bin/python" install --quiet pip
        else
            rm -rf "$VENV"
            say "cannot create a virtualenv: $PYTHON has neither ensurepip nor pip"
            say "install one of them (Debian/Ubuntu: apt-get install python3-venv) and re-run"
            exit 1
        fi
    fi
fi

# keep what an earlier install brought: run-example.sh after test.sh must not shrink the venv
installed_extras="$(stamp_extras)"
for extra in ${installed_extras//,/ }; do
    case ",$EXTRAS," in *",$extra,"*) ;; *) EXTRAS="${EXTRAS:+$EXTRAS,}$extra" ;; esac
done
TARGET="$ROOT${EXTRAS:+[$EXTRAS]}"
say "installing gflow-controller (editable${EXTRAS:+, extras $EXTRAS}) into $VENV"
rm -f "$STAMP"
# pip and build back-ends are chatty even with --quiet: keep their output, show it on failure
LOG="$(mktemp "${TMPDIR:-/tmp}/gflow-setup.XXXXXX")"
trap 'rm -f "$LOG"' EXIT
pip_quiet() { "$VENV/bin/python" -m pip --quiet --disable-pip-version-check "$@" >>"$LOG" 2>&1; }
if ! pip_quiet install --upgrade pip; then
    say "warning: could not upgrade pip; continuing with $("$VENV/bin/python" -m pip --version | cut -d' ' -f1-2)"
fi
# test: pytest and friends (with mcp and cloudpickle: gflowctl mcp, Client.submit_function); plot:
# matplotlib, so the test of gflowctl simulate --plot runs
if ! pip_quiet install -e "$TARGET"; then
    cat "$LOG" >&2
    say "pip install -e '.${EXTRAS:+[$EXTRAS]}' failed (output above)"
    exit 1
fi
printf '%s\n%s\n' "$VENV" "$EXTRAS" >"$STAMP"
