"""The runtime's side of the cgroups, on a fake cgroup2 kernel (this machine's cgroup v2 has no
controllers): what gflowd says once about them, the cgroup it makes for a launch and the record
the supervisor joins it by, the v2 OOM counter, the line ``gflowctl get node`` shows."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from cgroupfs_fake import FakeCgroup2
from helpers import wait_for

from controller.act.runtime.backends.local.attempt_cgroups import cgroup_group, start_cgroups
from controller.act.runtime.backends.local.runtime import SupervisorRuntime
from controller.act.runtime.cgroups import CgroupError, Probe, probe_v2
from controller.act.runtime.shim.child import attempt_cgroup, join_cgroup
from controller.paths import Home


@pytest.fixture
def kernel(tmp_path):
    return FakeCgroup2(tmp_path / "cgroup")


@pytest.fixture
def home(tmp_path):
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    return home


def test_v2_says_once_that_device_isolation_is_unavailable_and_why(kernel, home, caplog):
    caplog.set_level(logging.INFO, "gflowd.runtime")
    cgroups, found = start_cgroups("auto", home, probe_v2(str(kernel.root), kernel), kernel)
    assert cgroups is not None and found.mode == "v2"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "no devices: device isolation is unavailable on cgroup v2" in lines[0]
    assert (kernel.root / cgroup_group(home.root)).is_dir()  # prepared: the group with controllers handed down


def test_auto_without_cgroups_falls_back_to_polling_and_says_so_once(home, caplog):
    caplog.set_level(logging.INFO, "gflowd.runtime")
    cgroups, _found = start_cgroups("auto", home, Probe.none("/sys/fs/cgroup is on a read-only mount"))
    assert cgroups is None
    assert [r.getMessage() for r in caplog.records] == [
        "cgroups unavailable: /sys/fs/cgroup is on a read-only mount; memory limits are enforced by polling "
        "each job's RSS every 100 ms instead"
    ]


def test_required_without_cgroups_refuses_in_one_line(home):
    with pytest.raises(CgroupError) as raised:
        start_cgroups("required", home, Probe.none("cgroup v2 at /sys/fs/cgroup offers no memory controller"))
    assert str(raised.value) == "--cgroups required, but cgroup v2 at /sys/fs/cgroup offers no memory controller"


@pytest.mark.e2e
def test_off_says_nothing_and_get_node_shows_it_off(home, caplog):
    caplog.set_level(logging.INFO, "gflowd.runtime")
    runtime = SupervisorRuntime(home, cgroups="off")
    try:
        assert runtime.cgroups is None and caplog.records == []
        assert runtime.limits_summary() == "cgroups unavailable: cgroups are off (--cgroups off)"
    finally:
        runtime.close()


@pytest.mark.e2e
def test_a_launchs_cgroup_on_v2_carries_its_limits_and_the_paths_to_join(kernel, home):
    runtime = SupervisorRuntime(home, cgroup_probe=probe_v2(str(kernel.root), kernel), cgroupfs=kernel)
    try:
        spec = {"memoryLimit": 50 << 20, "cpus": [1, 2], "pidsLimit": 64, "deviceMinors": [1]}
        record = runtime.cgroup_keeper.make("train", 3, spec)
        group = cgroup_group(home.root)
        assert kernel.text(f"{group}/train-3/memory.max") == f"{50 << 20}\n"
        assert kernel.text(f"{group}/train-3/cpuset.cpus") == "1-2\n"
        assert kernel.text(f"{group}/train-3/pids.max") == "64\n"
        assert record["procs"] == [str(kernel.root / group / "train-3" / "cgroup.procs")]
        assert (record["name"], record["group"], record["memory"]) == ("train-3", group, True)
        assert runtime.limits_summary().startswith("cgroup v2: memory, cpuset, pids")
        # the supervisor rebuilds the attempt from the record alone: no probing, no project import
        attempt = attempt_cgroup(record)
        assert attempt.dirs == {"unified": str(kernel.root / group / "train-3")}
        kernel.set(f"{group}/train-3/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 1\n")
        assert attempt.oom_kills() == 2
    finally:
        runtime.close()


@pytest.mark.e2e
def test_ended_attempts_cgroups_wait_while_passes_start_jobs_then_go_a_chunk_at_a_time(kernel, home, monkeypatch):
    """No rmdir while a flood's starts queue on the kernel's cgroup lock: a pass that started jobs
    removes only what exceeds ``max_unremoved``; once a pass starts nothing, the loop's ticks
    remove the rest, REAP_CHUNK at a time, asking for the next turn at once while some are left."""
    from controller.act.runtime.backends.local import runtime as supervised

    runtime = SupervisorRuntime(home, cgroup_probe=probe_v2(str(kernel.root), kernel), cgroupfs=kernel)
    try:
        group = kernel.root / cgroup_group(home.root)
        names = [f"j{k}" for k in range(5)]
        for name in names:
            attempt = supervised.Attempt(name, 1, runtime._record_path(name, 1), 0.0)
            attempt.spec = {"cgroup": runtime.cgroup_keeper.make(name, 1, {})}
            runtime.cgroup_keeper.ended(attempt)  # ended and recorded, oldest first

        def left() -> list[str]:
            return [name for name in names if (group / f"{name}-1").is_dir()]

        assert left() == names
        runtime.cgroup_keeper.max_unremoved = 2
        runtime._started = True  # this pass started a job
        runtime.purge()
        assert left() == ["j3", "j4"]  # the oldest beyond the cap, at once
        assert runtime.tick(100.0) is None and left() == ["j3", "j4"]  # no idle pass yet
        monkeypatch.setattr(supervised, "REAP_CHUNK", 1)
        runtime.purge()  # a pass that started nothing
        assert runtime.tick(100.0) == 100.0 and left() == ["j4"]  # one more turn, at once
        assert runtime.tick(100.0) is None and left() == []
    finally:
        runtime.close()


@pytest.mark.e2e
def test_after_a_pass_that_ended_attempts_their_cgroups_wait_until_no_pass_ended_more(kernel, home, monkeypatch):
    """A drain's tail: passes start nothing and each ends a few jobs. Their rmdirs would hold back the
    last jobs' ends, so cgroups go only once REAP_QUIET passed with no pass ending more; tick says
    when, and a quiet pass (nothing started or ended) lets them go at once."""
    from controller.act.runtime.backends.local import runtime as supervised
    from controller.model.plan import RunObservation

    monkeypatch.setattr(supervised, "REAP_QUIET", 30.0)  # no stall of a loaded machine reaches it
    runtime = SupervisorRuntime(home, cgroup_probe=probe_v2(str(kernel.root), kernel), cgroupfs=kernel)
    try:
        group = kernel.root / cgroup_group(home.root)
        attempts = []
        for name in ("e0", "e1", "e2", "e3"):
            attempt = supervised.Attempt(name, 1, runtime._record_path(name, 1), 0.0)
            attempt.spec = {"cgroup": runtime.cgroup_keeper.make(name, 1, {})}
            attempt.result = RunObservation(name, 1, None, 0.0, False, exit_code=0)
            attempts.append(attempt)
        every = ["e0-1", "e1-1", "e2-1", "e3-1"]

        def left() -> list[str]:
            return sorted(p.name for p in group.iterdir() if p.is_dir())

        def pass_that_ended(attempt) -> None:
            runtime._forgotten.append((attempt.name, attempt))
            runtime.purge()

        pass_that_ended(attempts[0])
        due = runtime.tick(100.0)
        assert due is not None and 100.0 < due <= 130.0 and left() == every
        pass_that_ended(attempts[1])  # another end: still waiting
        assert runtime.tick(100.0) > 100.0 and left() == every
        monkeypatch.setattr(supervised, "REAP_QUIET", 0.05)
        pass_that_ended(attempts[2])  # the last end: once the quiet went by, every one waiting goes
        wait_for(lambda: runtime.tick(100.0) is None and left() == ["e3-1"], 30)
        monkeypatch.setattr(supervised, "REAP_QUIET", 30.0)
        pass_that_ended(attempts[3])
        assert runtime.tick(100.0) > 100.0 and left() == ["e3-1"]
        runtime.purge()  # a quiet pass: nothing started or ended
        assert runtime.tick(100.0) is None and left() == []
    finally:
        runtime.close()


@pytest.mark.e2e
def test_a_stopping_gflowd_removes_ended_attempts_cgroups_and_keeps_running_ones(kernel, home):
    """Ended, its end not recorded yet (the exit observed, or only in its record), or recorded and
    waiting: gone at close. Still running: kept, with the group, for the next gflowd."""
    from controller.act.runtime import record
    from controller.act.runtime.backends.local import runtime as supervised
    from controller.model.plan import RunObservation

    runtime = SupervisorRuntime(home, cgroup_probe=probe_v2(str(kernel.root), kernel), cgroupfs=kernel)
    group = kernel.root / cgroup_group(home.root)

    def attempt(name: str) -> supervised.Attempt:
        made = supervised.Attempt(name, 1, runtime._record_path(name, 1), 0.0)
        made.spec = {"cgroup": runtime.cgroup_keeper.make(name, 1, {})}
        return made

    seen, unseen, waiting, running = attempt("seen"), attempt("unseen"), attempt("waiting"), attempt("running")
    seen.result = RunObservation("seen", 1, 1234, 1.0, False, 0, None, 2.0)
    record.create(str(unseen.record), {"name": "unseen"})
    fd = os.open(unseen.record, os.O_RDWR)
    try:
        record.write_exit(fd, record.encode({"exitCode": 0}))  # its supervisor's; gflowd has not read it
    finally:
        os.close(fd)
    record.create(str(running.record), {"name": "running"})
    runtime.attempts.update(seen=seen, unseen=unseen, running=running)
    runtime.cgroup_keeper.ended(waiting)
    runtime.close()
    assert sorted(p.name for p in group.iterdir() if p.is_dir()) == ["running-1"]


def test_join_cgroup_writes_the_callers_pid_to_each_file_and_names_the_one_that_fails(tmp_path):
    first, second = tmp_path / "memory.procs", tmp_path / "pids.procs"
    first.write_text("")
    second.write_text("")
    join_cgroup([str(first), str(second)])
    assert first.read_text() == "0" and second.read_text() == "0"  # "0": the writing process itself
    with pytest.raises(FileNotFoundError) as raised:
        join_cgroup([str(first), str(tmp_path / "gone" / "cgroup.procs")])
    assert raised.value.filename == str(tmp_path / "gone" / "cgroup.procs")


@pytest.mark.e2e
def test_the_supervisor_loads_the_cgroups_package_when_run_as_a_plain_file():
    # gflowd runs it as `python -I -S shim/main.py`: the project is not importable then
    from controller.act.runtime.shim import child

    shim = os.path.dirname(child.__file__)
    code = (
        f"import sys; sys.argv = ['x']; sys.path[:0] = [{shim!r}, {os.path.dirname(shim)!r}]; "
        "import child; package = child.cgroups_package(); print(package.__name__, package.Limits.__name__)"
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["cgroups", "Limits"], out.stderr
