"""The cgroup layer on the real hierarchy of this machine: real cgroups, real processes, real kernel
enforcement (the OOM killer, the devices controller, cpusets, pids.max, cgroup.kill, the freezer).

Skipped with a reason where we are not root or no cgroup mode is usable. Everything made here is
named ``gflow-test-<pid>-...``, removed by the fixtures even when a test fails, and a session-level
check fails the run if any such cgroup is left. The cgroup v2 limit files are tested against a fake
cgroup2 tree in ``test_cgroups_v2.py`` (this machine's cgroup v2 has no controllers).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import pid_alive, wait_for

from controller.act.runtime.cgroups import (
    AttemptCgroup,
    CgroupError,
    Cgroupfs,
    Cgroups,
    DeviceRule,
    Limits,
    Probe,
    gpu_deny_rules,
    probe,
    probe_v1,
    setup,
)
from controller.act.runtime.cgroups.discover import locate, parse_mountinfo, parse_proc_cgroup

MI = 1 << 20
PREFIX = f"gflow-test-{os.getpid()}-"
FOUND = probe()

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroup tests need root (or a delegated cgroup)"),
    pytest.mark.skipif(FOUND.mode == "none", reason=f"no usable cgroups here: {FOUND.reason}"),
]


def leftovers(found: Probe) -> list[str]:
    """Our test cgroups still present in any hierarchy."""
    fs = Cgroupfs()
    return [
        os.path.join(base, name) for base in found.dirs.values() for name in fs.subdirs(base) if name.startswith(PREFIX)
    ]


@pytest.fixture(scope="session", autouse=True)
def no_cgroup_left_behind():
    """Fail the run if the suite leaves any gflow-test cgroup, after removing it without the help
    of the code under test (which may be what is broken): SIGKILL its members, rmdir bottom-up."""
    yield
    left = leftovers(FOUND)
    for path in left:
        _scrub(path)
    if left:
        pytest.fail(f"the suite left cgroups behind: {left}")


def _scrub(path: str) -> None:
    def members() -> list[int]:
        found = []
        for root, _, files in os.walk(path):
            if "cgroup.procs" in files:
                with open(os.path.join(root, "cgroup.procs")) as handle:
                    found.extend(int(pid) for pid in handle.read().split())
        return found

    for pid in members():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        wait_for(lambda: not members(), timeout=10, message=f"the members of {path} to die")
    except AssertionError:
        pass  # a frozen v1 cgroup keeps them: rmdir below fails and the run fails anyway
    for root, dirs, _ in os.walk(path, topdown=False):
        for name in dirs:
            _rmdir_quietly(os.path.join(root, name))
    _rmdir_quietly(path)


def _rmdir_quietly(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def need(found: Probe, *features: str) -> None:
    for name in features:
        if not found.features[name].available:
            pytest.skip(f"no {name} here: {found.features[name].reason}")


def _open_cgroups(found: Probe, group: str) -> Cgroups:
    cgroups = Cgroups(found, PREFIX + group)
    cgroups.prepare()
    return cgroups


def _tear_down(cgroups: Cgroups) -> None:
    for name in cgroups.names():
        attempt = cgroups.adopt(name)
        if attempt is not None:
            attempt.kill_all()
            attempt.remove()
    cgroups.remove_group()


@pytest.fixture
def cgroups(request):
    made = _open_cgroups(FOUND, request.node.name.split("[")[0].removeprefix("test_")[:40].strip("_").replace("_", "-"))
    yield made
    _tear_down(made)


def spawn(attempt: AttemptCgroup | None, code: str, *args: str) -> subprocess.Popen:
    """A Python child that joins ``attempt`` itself before it execs, as the supervisor's job will."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,  # "hold" reads it until closed: never pytest's own stdin, which may be at EOF
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: attempt.join(0)) if attempt is not None else None,
    )


def read_line(process: subprocess.Popen, timeout: float = 30) -> str:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no output from pid {process.pid} within {timeout}s"
    return process.stdout.readline().strip()


def finish(process: subprocess.Popen) -> None:
    """Kill and reap; no communicate(): a grandchild may hold the pipes open."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)
    for stream in (process.stdin, process.stdout, process.stderr):
        stream.close()


ALLOCATE = """
import sys
chunks = []
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    chunks.append(bytearray(b"x" * (1 << 20)))  # touched: resident, charged
print("allocated", flush=True)
sys.stdin.read() if len(sys.argv) > 2 else None
"""

SLEEP = "import time; print('ready', flush=True); time.sleep(300)"


# -- discovery on this machine ---------------------------------------------------------------------


def test_probe_finds_the_cgroups_we_are_in():
    assert FOUND.usable, FOUND.summary()
    for key, directory in FOUND.dirs.items():
        members = Cgroupfs().read(os.path.join(directory, "cgroup.procs")).split()
        assert str(os.getpid()) in members, f"{key}: {directory} is not our own cgroup"
    assert "\n" not in FOUND.summary()


def test_setup_required_prepares_the_group_here():
    cgroups, found = setup("required", PREFIX + "setup")
    try:
        assert cgroups is not None and found.mode == FOUND.mode
        assert all(os.path.isdir(directory) for directory in cgroups.group_dirs.values())
    finally:
        cgroups.remove_group()
    assert not any(os.path.exists(directory) for directory in cgroups.group_dirs.values())


def test_the_leftover_check_can_fail(cgroups):
    fake_leftover = os.path.join(next(iter(FOUND.dirs.values())), PREFIX + "leak-check")
    os.mkdir(fake_leftover)
    try:
        assert fake_leftover in leftovers(FOUND)
    finally:
        os.rmdir(fake_leftover)
    assert fake_leftover not in leftovers(FOUND)


# -- memory ----------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_job_over_its_memory_limit_is_oom_killed_and_its_sibling_is_not(cgroups):
    need(FOUND, "memory")
    attempt = cgroups.create("oom", Limits(memory=50 * MI))
    sibling = spawn(None, ALLOCATE, "100", "hold")  # outside, and using more than the job's limit
    job = spawn(attempt, ALLOCATE, "200")
    try:
        assert read_line(sibling) == "ready" and read_line(sibling) == "allocated"
        assert job.wait(timeout=60) == -signal.SIGKILL
        stats = attempt.stats()
        assert stats.oom_kills == 1
        assert 40 * MI <= stats.memory_peak <= 50 * MI
        assert sibling.poll() is None, "the sibling outside the cgroup was hit"
    finally:
        finish(job)
        finish(sibling)


@pytest.mark.e2e
def test_a_job_under_its_limit_is_not_counted_as_oom(cgroups):
    need(FOUND, "memory")
    attempt = cgroups.create("fits", Limits(memory=200 * MI))
    job = spawn(attempt, ALLOCATE, "50")
    assert job.wait(timeout=60) == 0
    stats = attempt.stats()
    assert stats.oom_kills == 0 and stats.memory_peak >= 50 * MI


# -- devices ----------------------------------------------------------------------------------------

OPEN = """
import errno, os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
        print("ok")
    except OSError as exc:
        print(errno.errorcode[exc.errno])
"""


@pytest.fixture
def gpu_nodes(tmp_path):
    """Stand-ins for /dev/nvidia0 and /dev/nvidia1 (real char nodes 195:0 and 195:1) and
    ``other``, a char node 240:0 that is no GPU: no driver behind any of them."""
    for minor in (0, 1):
        os.mknod(tmp_path / f"nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    os.mknod(tmp_path / "other", 0o666 | stat.S_IFCHR, os.makedev(240, 0))
    return tmp_path


def _opens(attempt: AttemptCgroup | None, *paths: Path | str) -> list[str]:
    job = spawn(attempt, OPEN, *map(str, paths))
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err
    return out.split()


@pytest.mark.e2e
def test_a_job_bound_to_gpu_1_cannot_open_gpu_0(cgroups, gpu_nodes):
    need(FOUND, "devices")
    attempt = cgroups.create("gpu1", Limits(deny_devices=gpu_deny_rules([1], dev_dir=str(gpu_nodes))))
    assert _opens(attempt, gpu_nodes / "nvidia0", gpu_nodes / "nvidia1", "/dev/null") == ["EPERM", "ENXIO", "ok"]
    # outside the cgroup both are merely driverless: the EPERM above is the devices controller's
    assert _opens(None, gpu_nodes / "nvidia0", gpu_nodes / "nvidia1") == ["ENXIO", "ENXIO"]


@pytest.mark.e2e
def test_a_cpu_job_opens_no_gpu_node_but_every_other_device(cgroups, gpu_nodes):
    need(FOUND, "devices")
    attempt = cgroups.create("cpu-job", Limits(deny_devices=gpu_deny_rules([], dev_dir=str(gpu_nodes))))
    opened = _opens(
        attempt, gpu_nodes / "nvidia0", gpu_nodes / "nvidia1", gpu_nodes / "other", "/dev/null", "/dev/ptmx"
    )
    # ENXIO, not EPERM: the devices controller let the open through to the (missing) driver
    assert opened == ["EPERM", "EPERM", "ENXIO", "ok", "ok"]


def test_an_attempt_starts_from_its_parents_device_list_and_only_denies(cgroups):
    need(FOUND, "devices")
    if FOUND.mode != "v1":
        pytest.skip("devices.list is cgroup v1")
    attempt = cgroups.create("list", Limits(deny_devices=[DeviceRule("c", 195, 0)]))
    read = lambda directory: Cgroupfs().read(os.path.join(directory, "devices.list"))
    # with an allow-all parent the list stays "a *:* rwm" (the kernel lists no deny exceptions)
    assert read(attempt.dirs["devices"]) == read(os.path.dirname(attempt.dirs["devices"]))


# -- cpus -------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("which", ["first", "last"])
def test_a_cpuset_of_one_core_is_the_jobs_affinity(cgroups, which):
    need(FOUND, "cpuset")
    mine = sorted(os.sched_getaffinity(0))
    core = mine[0] if which == "first" else mine[-1]
    attempt = cgroups.create("one-core", Limits(cpus={core}))
    job = spawn(attempt, "import os; print(sorted(os.sched_getaffinity(0)))")
    out, err = job.communicate(timeout=60)
    assert out.strip() == f"[{core}]", err


def test_an_attempts_cpuset_is_born_with_the_groups_mems(cgroups):
    """v1: the group's cgroup.clone_children makes each attempt's cpuset a copy of the group's at
    mkdir: ``create`` writes only its cpus (it used to read four files and write two)."""
    need(FOUND, "cpuset")
    if cgroups.mode != "v1":
        pytest.skip("cgroup v2 cpusets are inherited as they are")
    group = cgroups.group_dirs["cpuset"]
    assert _text(os.path.join(group, "cgroup.clone_children")) == "1"
    core = sorted(os.sched_getaffinity(0))[-1]
    attempt = cgroups.create("last-core", Limits(cpus={core}))
    own = attempt.dirs["cpuset"]
    assert _text(os.path.join(own, "cpuset.mems")) == _text(os.path.join(group, "cpuset.mems")) != ""
    assert _text(os.path.join(own, "cpuset.cpus")) == str(core)


def _text(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def test_a_cpuset_the_machine_lacks_is_refused_in_one_line_and_leaves_nothing(cgroups):
    need(FOUND, "cpuset")
    with pytest.raises(CgroupError) as raised:
        cgroups.create("no-such-core", Limits(cpus={4095}))
    message = str(raised.value)
    assert message.startswith("cannot write '4095' to ") and "\n" not in message
    assert message.endswith(
        (
            "/no-such-core/cpuset.cpus: ERANGE (no such CPU or memory node on this machine)",
            "/no-such-core/cpuset.cpus: EINVAL (the kernel rejected the value)",
        )
    )
    assert cgroups.names() == []


# -- processes -------------------------------------------------------------------------------------

# A bounded fork bomb: at most 200 children, each sleeping at most 60 s, for at most 20 s.
FORK_BOMB = """
import os, sys, time
made, refused, deadline = 0, 0, time.monotonic() + 20
while made < 200 and time.monotonic() < deadline:
    try:
        pid = os.fork()
    except BlockingIOError:
        refused = 1
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print(made, refused, flush=True)
time.sleep(60)
"""


@pytest.mark.e2e
def test_a_fork_bomb_under_pids_max_gets_eagain_and_is_contained(cgroups):
    need(FOUND, "pids")
    attempt = cgroups.create("bomb", Limits(pids=50))
    job = spawn(attempt, FORK_BOMB)
    try:
        made, refused = map(int, read_line(job, timeout=60).split())
        assert refused == 1 and made < 50
        stats = attempt.stats()
        assert stats.pids_limit_hits >= 1 and stats.pids_current <= 50
        assert len(attempt.pids()) == made + 1
        attempt.kill_all()
        assert attempt.pids() == []
        assert job.wait(timeout=30) == -signal.SIGKILL
    finally:
        finish(job)


# -- killing everything ----------------------------------------------------------------------------

# The job forks a child that calls setsid (a new session: no longer in the job's process group)
# and forks a grandchild, then exits: the grandchild is orphaned and reparented away from the job.
ESCAPE = """
import os, time
if os.fork() == 0:
    os.setsid()
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(300)
        os._exit(0)
    print(grandchild, flush=True)
    os._exit(0)
os.wait()
time.sleep(300)
"""


def _without(*keys: str) -> Probe:
    """This machine's probe without some hierarchies: the kill_all paths older kernels take."""
    with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as own:
        located = locate(parse_mountinfo(mountinfo.read()), parse_proc_cgroup(own.read()))
    return probe_v1({key: where for key, where in located.items() if key not in keys})


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["cgroup.kill", "freezer", "signals"])
def test_kill_all_kills_a_setsid_grandchild(method, request):
    if method == "cgroup.kill":
        need(FOUND, "kill")
        found = FOUND
    elif FOUND.mode != "v1":
        pytest.skip("the freezer and signal paths are tested on cgroup v1 machines")
    else:
        found = _without("unified") if method == "freezer" else _without("unified", "freezer")
        need(found, "freezer") if method == "freezer" else None
    assert found.features["kill"].available == (method == "cgroup.kill")
    cgroups = _open_cgroups(found, f"kill-{method.replace('.', '-')}")
    try:
        attempt = cgroups.create("escape", Limits())
        job = spawn(attempt, ESCAPE)
        try:
            grandchild = int(read_line(job))
            assert os.getsid(grandchild) != os.getsid(job.pid)  # another session: killpg would miss it
            wait_for(lambda: grandchild in attempt.pids() and job.pid in attempt.pids(), timeout=10)
            attempt.kill_all(timeout=10)
            assert attempt.pids() == []
            assert job.wait(timeout=10) == -signal.SIGKILL
            wait_for(lambda: not pid_alive(grandchild), timeout=10, message="the setsid'd grandchild to die")
        finally:
            finish(job)
    finally:
        _tear_down(cgroups)


# -- accounting, removal, adoption -----------------------------------------------------------------

BURN = "import time\nwhile time.process_time() < 0.3:\n    pass"


@pytest.mark.e2e
def test_cpu_time_is_counted(cgroups):
    need(FOUND, "cputime")
    attempt = cgroups.create("burn", Limits())
    job = spawn(attempt, BURN)
    assert job.wait(timeout=60) == 0
    assert attempt.stats().cpu_usec >= 300_000


@pytest.mark.e2e
def test_remove_leaves_nothing_in_any_hierarchy(cgroups):
    attempt = cgroups.create("short", Limits(memory=64 * MI if FOUND.features["memory"].available else None))
    job = spawn(attempt, "print('done')")
    assert job.wait(timeout=60) == 0
    wait_for(lambda: attempt.pids() == [], timeout=10)
    assert attempt.complete and list(attempt.dirs) == cgroups.hierarchies(Limits(memory=64 * MI))
    attempt.remove()
    assert [d for d in attempt.dirs.values() if os.path.exists(d)] == []
    assert cgroups.names() == []
    attempt.remove()  # again: nothing to do


def test_remove_takes_the_sub_cgroups_a_job_made_with_it(cgroups):
    """remove tries the rmdir first and lists children only when refused: sub-cgroups two deep
    (a job's own nesting) in every hierarchy still go, and an empty one never needs a listing."""
    attempt = cgroups.create("nests", Limits())
    for directory in attempt.dirs.values():
        os.makedirs(os.path.join(directory, "inner", "deeper"))
        os.mkdir(os.path.join(directory, "beside"))
    listed = []
    subdirs = cgroups.fs.subdirs
    cgroups.fs.subdirs = lambda path: listed.append(path) or subdirs(path)
    try:
        attempt.remove()
        assert [d for d in attempt.dirs.values() if os.path.exists(d)] == []
        assert cgroups.names() == []
        assert set(attempt.dirs.values()) <= set(listed)
        empty = cgroups.create("empty", Limits())
        listed.clear()
        empty.remove()
        assert listed == [] and cgroups.names() == []
    finally:
        del cgroups.fs.subdirs


@pytest.mark.e2e
def test_an_attempt_joins_only_the_hierarchies_its_limits_use(cgroups):
    """cgroup v1: no cpuset without cpus, no pids hierarchy without a pids limit, no freezer where
    cgroup v2 kills; each hierarchy costs a mkdir, joins and an rmdir under the kernel's one lock."""
    if cgroups.mode != "v1":
        pytest.skip("cgroup v2 has one hierarchy")
    plain = cgroups.create("plain", Limits())
    assert "cpuset" not in plain.dirs and "pids" not in plain.dirs
    assert ("freezer" in plain.dirs) == (not FOUND.features["kill"].available and "freezer" in FOUND.dirs)
    for key in ("memory", "devices", "cpuacct"):
        assert (key in plain.dirs) == (key in FOUND.dirs)
    assert sorted(cgroups.names()) == ["plain"] and sorted(plain.existing()) == sorted(plain.dirs)
    wanted = Limits(
        cpus={sorted(os.sched_getaffinity(0))[0]} if FOUND.features["cpuset"].available else None,
        pids=20 if FOUND.features["pids"].available else None,
    )
    limited = cgroups.create("limited", wanted)
    for key in ("cpuset", "pids"):
        assert (key in limited.dirs) == FOUND.features[key].available
    job = spawn(plain, "import os; print(open('/proc/self/cgroup').read(), flush=True)")
    out, err = job.communicate(timeout=60)
    joined = {line.split(":")[1] for line in out.split() if line.split(":", 2)[2].endswith("/plain")}
    assert joined == {("" if key == "unified" else key) for key in plain.dirs}, (out, err)
    plain.remove()
    limited.remove()
    assert cgroups.names() == []


@pytest.mark.e2e
def test_remove_of_a_cgroup_with_a_live_member_names_it(cgroups):
    attempt = cgroups.create("busy", Limits())
    job = spawn(attempt, SLEEP)
    try:
        assert read_line(job) == "ready"
        with pytest.raises(CgroupError) as raised:
            attempt.remove(timeout=0.2)
        assert "EBUSY" in str(raised.value) and f"processes still in it: [{job.pid}]" in str(raised.value)
    finally:
        finish(job)


@pytest.mark.e2e
def test_a_restarted_gflowd_adopts_the_cgroup_by_name(cgroups):
    need(FOUND, "memory", "pids")
    attempt = cgroups.create("adopt-me", Limits(memory=64 * MI, pids=20))
    job = spawn(attempt, SLEEP)
    try:
        assert read_line(job) == "ready"
        restarted = Cgroups(Probe.from_dict(FOUND.to_dict()), cgroups.group)  # from the launch record
        adopted = restarted.adopt("adopt-me", list(attempt.dirs))  # and its hierarchies, from the record too
        assert adopted is not None and adopted.complete
        assert adopted.pids() == [job.pid]
        assert adopted.dirs == attempt.dirs
        unknown = restarted.adopt("adopt-me")  # a record written before it named them: every hierarchy
        assert unknown is not None and set(unknown.existing()) == set(attempt.dirs) and unknown.pids() == [job.pid]
        assert adopted.stats().pids_current == 1
        assert restarted.adopt("not-there") is None
        adopted.kill_all()
        assert job.wait(timeout=10) == -signal.SIGKILL
        adopted.remove()
        assert restarted.names() == []
    finally:
        finish(job)


def test_a_half_made_cgroup_is_found_and_completed_or_removed(cgroups):
    if len(cgroups.group_dirs) < 2:
        pytest.skip("one hierarchy: a cgroup cannot be half made")
    first_key = next(iter(cgroups.group_dirs))
    os.mkdir(os.path.join(cgroups.group_dirs[first_key], "half"))  # a create killed after one mkdir
    os.mkdir(os.path.join(cgroups.group_dirs[first_key], "half-again"))
    assert cgroups.names() == ["half", "half-again"]
    half = cgroups.adopt("half")
    assert half is not None and not half.complete and half.existing() == [first_key]
    with pytest.raises(CgroupError) as raised:
        half.join(os.getpid())  # cannot join an incomplete cgroup: some hierarchy has no directory
    assert raised.value.errno == errno.ENOENT
    completed = cgroups.create("half", Limits(pids=10) if FOUND.features["pids"].available else Limits())
    assert completed.complete
    cgroups.adopt("half-again").remove()
    assert cgroups.names() == ["half"]
