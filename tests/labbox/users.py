"""Acting as the lab box's ordinary users (alice, bob, mallory) against its system gflowd.

Inside the VM (hack/labbox/) gflowd runs as the shipped system unit on GFLOW_HOME=/var/lib/gflow with
fake GPUs and /dev/nvidiaN nodes made with mknod; the users are in group gflow and have ~/venv.
Everything here goes through what a user has: gflowctl on the PATH, their uid, groups and login
environment. Outside the VM every test using this module skips with one line.
"""

from __future__ import annotations

import itertools
import json
import os
import pwd
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MARKER = Path("/etc/gflow-labbox")
HOME = Path("/var/lib/gflow")
MI = 1 << 20
in_box = pytest.mark.skipif(
    not MARKER.exists(), reason=f"lab-box test: runs inside the VM (no {MARKER}; hack/labbox/run.sh)"
)

_names = itertools.count(1)


def unique(prefix: str) -> str:
    """A job name no other test or run in this box uses (the spec dir is shared by all users)."""
    return f"{prefix}-{os.getpid() % 100000}-{next(_names)}"


def login_env(user: str, venv: bool = False, **extra: str) -> dict[str, str]:
    """What `su - USER` gives (profile.d sets GFLOW_HOME), with ~/venv activated when asked."""
    pw = pwd.getpwnam(user)
    path = "/usr/local/bin:/usr/bin:/bin"
    env = {
        "HOME": pw.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "SHELL": pw.pw_shell or "/bin/sh",
        "PATH": path,
        "LANG": "C.UTF-8",
        "GFLOW_HOME": str(HOME),
        "TERM": "xterm",
    }
    if venv:
        env.update(PATH=f"{pw.pw_dir}/venv/bin:{path}", VIRTUAL_ENV=f"{pw.pw_dir}/venv")
    env.update(extra)
    return env


def as_user(user: str) -> dict[str, Any]:
    """subprocess keyword arguments that run a child as USER with their groups (gflow among them)."""
    pw = pwd.getpwnam(user)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": os.getgrouplist(user, pw.pw_gid)}


def run_as(
    user: str,
    *argv: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    cwd: str | Path | None = None,
    timeout: float = 300,
    venv: bool = False,
) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv),
        env=env or login_env(user, venv=venv),
        input=input,
        cwd=str(cwd or pwd.getpwnam(user).pw_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
        **as_user(user),
    )


def gflowctl(user: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
    return run_as(user, "gflowctl", *args, **kwargs)


def ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, f"{out.args}: rc {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def manifest(name: str, command: list[str], **spec: Any) -> str:
    """A Job manifest (JSON is YAML: every quote and escape survives)."""
    return json.dumps(
        {
            "apiVersion": "gflow.dev/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"command": command, **spec},
        }
    )


def apply(user: str, text: str) -> str:
    return ok(gflowctl(user, "apply", "-f", "-", input=text))


def status(user: str, name: str) -> dict[str, Any] | None:
    out = gflowctl(user, "get", "jobs", name, "-o", "json")
    return json.loads(out.stdout).get("status") if out.returncode == 0 and out.stdout.strip() else None


def wait_for(check: Callable[[], Any], timeout: float, message: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}")
        time.sleep(interval)


def status_file(name: str) -> dict[str, Any] | None:
    """The job's summary as gflowd wrote it in run/index.json (readable by all; its freshest record):
    polled in-process, as a gflowctl per poll costs seconds under TCG."""
    try:
        return json.loads((HOME / "run" / "index.json").read_text())["jobs"].get(name)
    except (OSError, ValueError, KeyError):
        return None


def wait_phase(user: str, name: str, *phases: str, timeout: float = 600) -> dict[str, Any]:
    """The job's status as gflowctl shows it to USER, once its phase is one of PHASES (generous: the
    VM runs under TCG on a shared machine)."""
    seen: list[Any] = [None]

    def reached():
        seen[0] = status_file(name)
        phase = (seen[0] or {}).get("phase")
        if phase in ("Succeeded", "Failed") and phase not in phases:
            raise AssertionError(f"job/{name} ended {phase} before it was {'|'.join(phases)}: {seen[0]}")
        return seen[0] if phase in phases else None

    try:
        wait_for(reached, timeout, f"job/{name} to be {'|'.join(phases)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status: {seen[0]}") from None
    return status(user, name) or seen[0]


def log_file(name: str) -> str:
    """The job's log as written (root reads it; to wait on, not to judge what users see)."""
    try:
        return (HOME / "logs" / f"{name}.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""


def logs(user: str, name: str) -> str:
    """The job's log as `gflowctl logs` shows it to USER."""
    return ok(gflowctl(user, "logs", name))


@pytest.fixture
def jobs():
    """Names of the jobs a test submits, as (user, name): deleted by their owner at the end, so the
    next test finds the GPUs free."""
    made: list[tuple[str, str]] = []
    yield made
    for user, name in made:
        gflowctl(user, "delete", "job", name)
    for _user, name in made:
        try:
            wait_for(lambda name=name: status_file(name) is None, 300, f"job/{name} to be gone")
        except AssertionError:
            pass
