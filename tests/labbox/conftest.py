"""The lab box's suite runs only inside the VM of hack/labbox (the image carries /etc/gflow-labbox).

Elsewhere every test here skips with one line. Tests that need a reboot mark their second half
``after_reboot`` and call ``request_reboot`` in the first: guest.sh runs the rest of the suite,
reboots the box, then runs the ``after_reboot`` tests (hack/labbox/README.md).
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

MARKER = Path("/etc/gflow-labbox")
REBOOT_REQUEST = Path("/var/lib/labbox/reboot-requested")
USERS = ("alice", "bob", "mallory")  # guest.sh makes them: group gflow, a venv in ~/venv
GFLOW_HOME = "/var/lib/gflow"  # what /etc/profile.d/gflow.sh gives every login


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_reboot: runs in the lab box after the reboot a test asked for")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MARKER.exists():
        return
    skip = pytest.mark.skip(reason=f"lab-box test: runs inside the VM of hack/labbox/run.sh (no {MARKER} here)")
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(skip)


@pytest.fixture(name="request_reboot")
def request_reboot_fixture():
    """``request_reboot`` for tests, as a fixture like ``run_as``."""
    return request_reboot


def request_reboot(why: str) -> None:
    """Ask guest.sh to reboot the box after this phase; ``after_reboot`` tests check what follows."""
    REBOOT_REQUEST.parent.mkdir(parents=True, exist_ok=True)
    with REBOOT_REQUEST.open("a") as handle:
        handle.write(why + "\n")


@pytest.fixture(name="run_as")
def run_as_fixture():
    """``run_as`` for tests (test files here are not a package: they take it as a fixture)."""
    return run_as


def run_as(
    user: str, *argv: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` with the environment a login gives them (not root's), and capture it.

    ``runuser -u`` drops to the user's uid, gid and groups without a shell in between, so argv
    reaches the program as given; the environment is built here the way a login builds it: the
    user's venv and /usr/local/bin (where the admin linked gflowctl) on PATH, GFLOW_HOME from
    /etc/profile.d/gflow.sh. ``env`` adds to (or overrides) that. The timeout is generous: the box
    runs under TCG on a busy machine.
    """
    entry = pwd.getpwnam(user)
    login = {
        "HOME": entry.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "SHELL": entry.pw_shell,
        "PATH": f"{entry.pw_dir}/venv/bin:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "GFLOW_HOME": GFLOW_HOME,
    }
    login.update(env or {})
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in login.items()), *argv],
        cwd=entry.pw_dir,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
