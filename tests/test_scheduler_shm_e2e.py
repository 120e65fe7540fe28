"""``resources.shm`` end to end with a real gflowd and gflowctl: booked against the real size of
/dev/shm (statvfs), ``apply`` warns of more than there is, a job waits while another holds the shm
it needs and starts when that one is deleted, ``describe`` shows what it asked. (Only the booking:
a running job's /dev/shm is not limited to it yet.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import helpers
import pytest
from helpers import wait_phase

from controller.api.units import format_quantity
from controller.observe.host import machine_capacity

GIB = 2**30
CAPACITY = machine_capacity().get("shm", 0)
pytestmark = pytest.mark.skipif(CAPACITY < 4 * GIB, reason="needs a /dev/shm of at least 4Gi")


def ctl(home: Path, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return helpers.ctl(home, *argv, stdin=stdin, timeout=120, env={"XDG_STATE_HOME": str(Path(home).parent / "state")})


def manifest(name: str, shm: int, command: str = "['true']") -> str:
    return (
        f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}}}\n"
        f"spec:\n  command: {command}\n  resources: {{shm: {shm}}}\n"
    )


def test_shm_is_booked_against_dev_shm_from_apply_to_start(home, gflowd):
    daemon = gflowd()
    huge = ctl(home, "apply", "-f", "-", stdin=manifest("huge", CAPACITY + GIB))
    assert huge.returncode == 0 and huge.stdout == "job/huge created\n", huge.stderr
    too_much = f"needs {format_quantity(CAPACITY + GIB)} of /dev/shm, this machine has {format_quantity(CAPACITY)}"
    assert huge.stderr == f"warning: job/huge can never start: {too_much}\n"
    status = wait_phase(home, "huge", "Pending", reason="Unschedulable", daemon=daemon, timeout=120)
    assert status["message"] == too_much

    # a holds all but 1Gi; b asks 2Gi: it waits, naming a, until a is gone
    held = CAPACITY - GIB
    assert ctl(home, "apply", "-f", "-", stdin=manifest("a", held, "[sleep, '600']")).returncode == 0
    wait_phase(home, "a", "Running", daemon=daemon, timeout=120)
    assert ctl(home, "apply", "-f", "-", stdin=manifest("b", 2 * GIB)).returncode == 0
    status = wait_phase(home, "b", "Pending", reason="Resources", daemon=daemon, timeout=120)
    assert status["message"] == "needs 2Gi of /dev/shm, 1Gi free (booked by a)"
    described = ctl(home, "describe", "job", "b")
    assert described.returncode == 0 and f"shm={2 * GIB}" in described.stdout, described.stdout

    assert ctl(home, "delete", "job", "a").returncode == 0
    wait_phase(home, "b", "Succeeded", daemon=daemon, timeout=120)
