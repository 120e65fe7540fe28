"""``gflowctl wait job/NAME --for=phase=P|condition=C [--timeout 60s]``: exit 0 when reached,
1 on timeout or when it can no longer happen (waiting for Succeeded on a Failed job)."""

from __future__ import annotations

import time

from controller.api.units import parse_duration
from controller.cli.common import CliError, print_error, warn_if_not_running
from controller.client.state import read_status
from controller.paths import Home

TERMINAL = {"Succeeded", "Failed", "Cancelled"}


def wait(home: Home, target: str, condition: str, timeout_text: str) -> int:
    kind, _, name = target.partition("/")
    if not name:
        kind, name = "job", kind
    if kind not in ("job", "jobs", "sweep", "sweeps"):
        raise CliError(f"unknown resource type {kind!r}; use job/NAME or sweep/NAME")
    kind = "sweep" if kind.startswith("sweep") else "job"
    what, _, value = condition.partition("=")
    if what not in ("phase", "condition") or not value:
        raise CliError(f"--for must be phase=PHASE or condition=TYPE, not {condition!r}")
    try:
        timeout = parse_duration(timeout_text)
    except ValueError as exc:
        raise CliError(f"--timeout: {exc}") from None
    warn_if_not_running(home)  # no gflowd: the status will not change while we wait
    deadline = time.monotonic() + timeout
    while True:
        doc = read_status(home, name)
        status = (doc or {}).get("status") or {}
        phase = status.get("phase")
        if what == "phase":
            if phase is not None and phase.lower() == value.lower():
                print(f"{kind}/{name} {phase}")
                return 0
            if phase in TERMINAL:
                print_error(f"{kind}/{name} is {phase} ({status.get('reason')}); it will not become {value}")
                return 1
        else:
            for cond in status.get("conditions") or []:
                if cond.get("type", "").lower() == value.lower() and cond.get("status") == "True":
                    print(f"{kind}/{name} condition met: {cond['type']}")
                    return 0
        if time.monotonic() >= deadline:
            state = f"{phase} ({status.get('reason')})" if phase else "not found"
            print_error(f"timed out after {timeout_text} waiting for {kind}/{name} {condition}; it is {state}")
            return 1
        time.sleep(0.05)
