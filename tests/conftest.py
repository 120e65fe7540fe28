"""Shared fixtures. End-to-end tests use ``home`` + ``gflowd``: a real daemon on a temp home.

Teardown stops every daemon a test started (SIGTERM, wait, KILL if needed) and then kills every
job process left behind, so no orphan survives a test even though stopping gflowd deliberately
leaves jobs running.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import helpers` from any test module

from helpers import Daemon, home_cgroups, kill_jobs_of_home, scrub_cgroups  # noqa: E402  (kill_jobs_of_home scrubs cgroups too)


@pytest.fixture(scope="session", autouse=True)
def no_gflowd_cgroup_left_behind(tmp_path_factory):
    """Fail the run if any home of this session still has an attempt cgroup at the end (each test's
    teardown removes what its daemons left, so one found here escaped that too)."""
    yield
    base = tmp_path_factory.getbasetemp()
    left = []
    for run_dir in base.glob("**/run"):
        if run_dir.is_dir() and (run_dir.parent / "jobs").is_dir():
            left += scrub_cgroups(home_cgroups(run_dir.parent))
    if left:
        pytest.fail(f"the suite left attempt cgroups behind: {left}")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fresh GFLOW_HOME with an empty spec directory ``jobs/``."""
    root = tmp_path / "home"
    (root / "jobs").mkdir(parents=True)
    return root


@pytest.fixture
def gflowd(home: Path, tmp_path: Path):
    """Factory: ``gflowd(*extra_args, home=..., ready=True, env=None)`` starts a real gflowd.

    Runs ``python -m controller.daemon --home HOME --resync 1s *extra_args``; stderr goes to a
    file (``daemon.stderr()``). With ``ready`` it returns once the first pass is recorded.
    """
    started: list[Daemon] = []

    def start(*args: str, home: Path = home, ready: bool = True, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(home, [str(a) for a in args], tmp_path, len(started) + 1, env)
        started.append(daemon)
        if ready:
            daemon.wait_ready()
        return daemon

    yield start

    for daemon in started:
        daemon.terminate()
    for root in {d.home for d in started}:
        left = kill_jobs_of_home(root)
        if left:
            warnings.warn(f"job processes of {root} survived SIGKILL: {sorted(left)}")
