"""Shared fixtures, and the two lanes. End-to-end tests use ``home`` + ``gflowd``: a real daemon
on a temp home.

Teardown stops every daemon a test started (SIGTERM, wait, KILL if needed) and then kills every
job process left behind, so no orphan survives a test even though stopping gflowd deliberately
leaves jobs running.

Lanes: a test is ``e2e`` (the slow lane) when it uses a fixture of ``E2E_FIXTURES``, lives in a
module of ``E2E_MODULES`` or under ``labbox/``, or carries ``@pytest.mark.e2e``; every other test
is the fast lane (``pytest -m "not e2e"``: pure and in-process). The fast lane is checked, not
trusted: a test of it that starts a process fails, naming what it started (``_no_process_in_fast_lane``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # `import helpers` from any test module

from helpers import Daemon, fake_gpus_file, home_cgroups, kill_jobs_of_home, scrub_cgroups

# gflowctl keeps a cache of the manifests ``get -o yaml|json`` read (client/read/specs.py) in the
# user's ~/.cache: the tests' many homes keep theirs in one folder of the run, removed at its end.
_CACHE = tempfile.mkdtemp(prefix="gflow-test-cache-")
os.environ["GFLOW_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

TESTS = Path(__file__).parent

# -- the two lanes ----------------------------------------------------------------------------------

# Fixtures that start real processes (a gflowd, a compiler, a probe, a cluster): a test using one,
# even through another fixture, is e2e.
E2E_FIXTURES = frozenset(
    {"gflowd", "gpu_sim", "nvml_probe", "fake_nvml_lib", "fake_cuda_lib", "slurm", "cluster_daemon"}
)
# Modules whose every test starts processes (gflowctl, gflowd, users, ptys, a browser) another way.
E2E_MODULES = frozenset(
    {
        "test_apply_workdir.py",
        "test_cli_conventions.py",
        "test_completion.py",
        "test_edit_owner.py",
        "test_front_door_warnings.py",
        "test_gflowd_service.py",
        "test_hostile_input.py",
        "test_interactive.py",
        "test_interactive_runtime.py",
        "test_interactive_security.py",
        "test_labbox_runner.py",
        "test_live.py",
        "test_mcp.py",
        "test_multi_user.py",
        "test_nvml.py",
        "test_rejected_e2e.py",
        "test_review_for_users.py",
        "test_run_e2e.py",
        "test_runtime.py",
    }
)
# Parallel workers (hack/test.sh: pytest -n N --dist loadgroup) share the machine: each test has its
# own home, tmp dirs, users (random or per-pid names), cgroups (named from the home) and ports (0: the
# kernel picks). What is one per machine is run by one worker at a time: the local Slurm cluster
# (hack/slurm-dev.sh: one slurmctld, 4 GRES GPUs every test of it expects to be free).
SERIAL_GROUPS = {"test_slurm_e2e.py": "slurm", "test_slurm_examples.py": "slurm"}
SPAWNS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"})
_fast_lane_watch: list[list[str]] = []  # while a fast-lane test runs: the processes it tried to start
_started = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "e2e: the slow lane: starts a gflowd, real processes, users or VMs, or runs "
        "for long (tests/conftest.py marks most by their fixtures and modules)",
    )
    config.addinivalue_line("markers", "fake_gpus(count=2, gpu=H100): what the `fake_gpus` fixture's file holds")
    config.addinivalue_line(
        "markers", "xdist_group(name): run by one worker (known here also when xdist is not loaded)"
    )
    sys.addaudithook(_refuse_processes)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if (
            E2E_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or path.name in E2E_MODULES
            or TESTS / "labbox" in path.parents
        ):
            item.add_marker(pytest.mark.e2e)
        if path.name in SERIAL_GROUPS:
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUPS[path.name]))


def _refuse_processes(event: str, args: tuple) -> None:
    if event in SPAWNS and _fast_lane_watch:
        what = f"{event} {args[1] if event == 'subprocess.Popen' else ''}".rstrip()
        _fast_lane_watch[-1].append(what)
        raise RuntimeError(f"a fast-lane test started a process ({what}): mark it e2e (tests/conftest.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Watch a fast-lane test from before its first fixture (of any scope) is set up."""
    if item.get_closest_marker("e2e") is None:
        item.stash[_started] = started = []
        _fast_lane_watch.append(started)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    """Stop watching once the test is torn down, even when its teardown failed (a fixture raised):
    a watch left behind failed every later test of that worker, e2e ones included."""
    yield
    started = item.stash.get(_started, None)
    if started is not None:  # by identity: two tests' lists of nothing started are equal
        _fast_lane_watch[:] = [watch for watch in _fast_lane_watch if watch is not started]


@pytest.fixture(autouse=True)
def _no_process_in_fast_lane(request: pytest.FixtureRequest):
    """A test not marked e2e starts no process (even where the code under test swallows the error
    the attempt raised): the fast lane stays pure and in-process."""
    yield
    started = request.node.stash.get(_started, None)
    if started:
        pytest.fail(f"a fast-lane test started processes ({'; '.join(started)}): mark it e2e (tests/conftest.py)")


@pytest.fixture(autouse=True)
def _signal_handlers_restored():
    """Code run in-process (a supervisor's close, the launcher) may ignore SIGINT or SIGTERM; every
    later child of this worker would inherit that, and a Ctrl-C sent to one (``run -it``) would do
    nothing (CI: test_interactive's Ctrl-C hung). Each test ends with the handlers it began with."""
    import signal

    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)}
    yield
    for sig, handler in kept.items():
        if handler is not None and signal.getsignal(sig) != handler:
            signal.signal(sig, handler)


# -- fixtures ----------------------------------------------------------------------------------------


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
            warnings.warn(f"job processes of {root} survived SIGKILL: {sorted(left)}", stacklevel=2)


@pytest.fixture
def fake_gpus(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """``tmp_path/gpus.yaml`` for ``gflowd --fake-gpus``: two H100 80GB, or what the test's (or its
    module's) mark says: ``@pytest.mark.fake_gpus(4)``, ``fake_gpus(4, gpu="{name: X, memory: 40Gi}")``."""
    mark = request.node.get_closest_marker("fake_gpus")
    return fake_gpus_file(tmp_path / "gpus.yaml", *(mark.args if mark else ()), **(mark.kwargs if mark else {}))
