"""``gflowctl wait job/NAME... --for=phase=P|condition=C [--timeout 60s]``: exit 0 when every one
reached it, 1 on timeout or when one can no longer get there (waiting for Succeeded on a Failed
job). Each is printed as it gets there, as ``kubectl wait`` does."""

from __future__ import annotations

import time

from controller.api.units import parse_duration
from controller.cli.common import CliError, print_error, warn_if_not_running
from controller.client.read.state import await_index, reached, read_status
from controller.paths import Home


def wait(home: Home, refs: list[tuple[str, str]], condition: str, timeout_text: str) -> int:
    what, _, value = condition.partition("=")
    if what not in ("phase", "condition") or not value:
        raise CliError(f"--for must be phase=PHASE or condition=TYPE, not {condition!r}")
    try:
        timeout = parse_duration(timeout_text)
    except ValueError as exc:
        raise CliError(f"--timeout: {exc}") from None
    warn_if_not_running(home)  # no gflowd: the status will not change while we wait
    deadline = time.monotonic() + timeout
    waiting = list(refs)
    failed = False
    while True:
        for kind, name in list(waiting):
            met, never = _check(home, kind, name, what, value)
            if met or never:
                waiting.remove((kind, name))
                failed = failed or never
        if not waiting:
            return 1 if failed else 0
        if time.monotonic() >= deadline:
            for kind, name in waiting:
                status = (read_status(home, name) or {}).get("status") or {}
                phase = status.get("phase")
                state = f"{phase} ({status.get('reason')})" if phase else "not found"
                print_error(f"timed out after {timeout_text} waiting for {kind}/{name} {condition}; it is {state}")
            return 1
        time.sleep(0.05)


def _check(home: Home, kind: str, name: str, what: str, value: str) -> tuple[bool, bool]:
    """(reached, can no longer be reached), printing which."""
    status = (read_status(home, name) or {}).get("status") or {}
    met, never = reached(status, what, value)
    if met is not None or never:
        await_index(home, kind, name, status)  # so that a get jobs right after shows it too
    if met is not None:
        print(f"{kind}/{name} {met}" if what == "phase" else f"{kind}/{name} condition met: {met}", flush=True)
    elif never:
        print_error(f"{kind}/{name} is {status['phase']} ({status.get('reason')}); it will not become {value}")
    return met is not None, never
