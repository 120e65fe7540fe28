"""gflowd under systemd, the parts that run without systemd: whether to use a scope, the D-Bus call
that makes it (systemd-run --scope), moving its first process out of its root, the launcher entering it, a job lost to a
reboot, and log lines for the journal. The whole path under systemd is tests/labbox/test_systemd.py.

Cgroups here are real: directories on this host's cgroup2 mount (no controllers, but cgroup.procs
moves processes as on any v2 machine).
"""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import pid_alive, wait_for, wait_phase, write_manifest

from controller.act.runtime import record
from controller.act.runtime.backends.local.attempt import rebooted_since
from controller.act.runtime.cgroups import CgroupError, Cgroupfs, systemd_scope
from controller.act.runtime.cgroups.discover import parse_mountinfo
from controller.act.runtime.shim import MAIN_FILE as SUPERVISOR_FILE
from controller.daemon.main import JournalFormatter, on_journal

PURE_V2 = "0::/system.slice/gflowd.service\n"
HYBRID = "12:memory:/system.slice/gflowd.service\n1:name=systemd:/system.slice/gflowd.service\n0::/system.slice/gflowd.service\n"


# -- deciding ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "booted, proc_cgroup, euid, manager, reason",
    [
        (False, PURE_V2, 0, None, "not booted with systemd"),
        (True, PURE_V2, 0, "system", ""),
        (True, "0::/user.slice/user-1000.slice/session-3.scope\n", 1000, "user", ""),
        (True, HYBRID, 0, None, "cgroup v1 controllers are mounted (memory)"),
        (True, "4:memory:/\n", 0, None, "no cgroup v2 line"),
    ],
)
def test_decide_uses_a_scope_only_under_systemd_on_pure_cgroup_v2(booted, proc_cgroup, euid, manager, reason):
    found = systemd_scope.decide(booted, proc_cgroup, euid)
    assert found.manager == manager
    assert reason in found.reason


def test_scope_argv_is_systemd_run_scope_delegated_collected_exec_ing_the_keeper():
    assert systemd_scope.scope_argv("system", "gflow-0123456789.scope", "gflow jobs") == [
        "systemd-run",
        "--scope",
        "--quiet",
        "--collect",
        "--unit=gflow-0123456789.scope",
        "--property=Delegate=yes",
        "--description=gflow jobs",
        "--",
        "sleep",
        "infinity",
    ]
    assert systemd_scope.scope_argv("user", "x.scope", "d")[:3] == ["systemd-run", "--user", "--scope"]
    assert systemd_scope.show_argv("user", "x.scope")[:3] == ["systemctl", "--user", "show"]


def test_from_systemd_253_the_scope_continues_past_a_jobs_oom_kill_instead_of_stopping_every_job():
    assert systemd_scope.parse_systemd_version("systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT") == 252
    assert systemd_scope.parse_systemd_version("") is None
    assert "--property=OOMPolicy=continue" not in systemd_scope.scope_argv("system", "x.scope", "d", 252)
    assert "--property=OOMPolicy=continue" in systemd_scope.scope_argv("system", "x.scope", "d", 253)
    assert "--property=OOMPolicy=continue" in systemd_scope.scope_argv("user", "x.scope", "d", 256)


def test_parse_show_reads_key_value_lines():
    shown = systemd_scope.parse_show(
        "ActiveState=active\nControlGroup=/system.slice/gflow-a.scope\nDelegate=yes\nX=a=b\n"
    )
    assert shown == {
        "ActiveState": "active",
        "ControlGroup": "/system.slice/gflow-a.scope",
        "Delegate": "yes",
        "X": "a=b",
    }


def test_the_user_hint_names_linger_and_the_delegate_dropin():
    hint = systemd_scope.user_hint("alice")
    assert "loginctl enable-linger alice" in hint
    assert "/etc/systemd/system/user@.service.d/delegate.conf" in hint and "Delegate=cpu cpuset io memory pids" in hint


# -- real cgroups on this host's cgroup2 mount --------------------------------------------------------


def _cgroup2_point() -> str | None:
    with open("/proc/self/mountinfo") as mountinfo:
        for mount in parse_mountinfo(mountinfo.read()):
            if mount.fstype == "cgroup2" and mount.root == "/" and not mount.read_only:
                return mount.point
    return None


@pytest.fixture
def cgroup2(tmp_path):
    """A fresh directory on the cgroup2 mount, removed with everything in it after the test."""
    point = _cgroup2_point()
    if point is None or os.geteuid() != 0 or not os.access(point, os.W_OK):
        pytest.skip("needs root and a writable cgroup2 mount showing its whole hierarchy")
    base = os.path.join(point, f"gflow-test-scope-{os.getpid()}")
    os.mkdir(base)
    made: list[subprocess.Popen] = []
    yield base, made
    for proc in made:
        proc.kill()
        proc.wait()
    for root, dirs, _ in sorted(os.walk(base), key=lambda entry: -entry[0].count("/")):
        for name in dirs:
            wait_for(
                lambda root=root, name=name: _rmdir(os.path.join(root, name)),
                timeout=10,
                message=f"{root}/{name} to be empty",
            )
    wait_for(lambda: _rmdir(base), timeout=10, message=f"{base} to be empty")


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _cgroup_of(pid: int) -> str:
    with open(f"/proc/{pid}/cgroup") as own:
        return next(line.split(":", 2)[2].strip() for line in own if line.startswith("0::"))


@pytest.mark.e2e
def test_settle_moves_the_keeper_out_of_the_scope_root_into_supervisors(cgroup2):
    base, made = cgroup2
    keeper = subprocess.Popen(systemd_scope.KEEPER)
    made.append(keeper)
    Path(base, "cgroup.procs").write_text(str(keeper.pid))  # where systemd puts a new scope's first process
    scope = systemd_scope.Scope("gflow-x.scope", "system", base, created=True)
    systemd_scope.settle(scope)
    assert _cgroup_of(keeper.pid).endswith("/supervisors")
    assert Path(base, "cgroup.procs").read_text().split() == []  # the root may now enable controllers
    systemd_scope.settle(scope)  # a later gflowd settles again: nothing to do, no error
    assert _cgroup_of(keeper.pid).endswith("/supervisors")


def _fake_systemd_run(tmp_path: Path, script: str) -> str:
    """A ``systemd-run`` first on PATH: systemd is not PID 1 here (its manager is the edge we cannot
    have). It plays the manager's part on a real cgroup: the caller's pid into the scope's cgroup."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "systemd-run"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


@pytest.mark.e2e
def test_create_waits_until_the_keeper_runs_in_the_scope(cgroup2, tmp_path, monkeypatch):
    base, _ = cgroup2
    unit = "gflow-0123456789.scope"
    scope_dir = os.path.join(base, unit)
    argv_file = tmp_path / "argv"
    # the job queue: the move comes a little after the call; then systemd-run execs the command
    monkeypatch.setenv(
        "PATH",
        _fake_systemd_run(
            tmp_path,
            f'echo "$@" > {argv_file}\nsleep 0.3\nmkdir -p {scope_dir}\n'
            f"echo $$ > {scope_dir}/cgroup.procs\n"
            'while [ "$1" != -- ]; do shift; done; shift; exec "$@"\n',
        ),
    )
    scope = systemd_scope.create(unit, "system", "gflow jobs")
    keeper = int(Path(scope_dir, "cgroup.procs").read_text().split()[0])
    try:
        assert scope.directory == scope_dir and scope.created
        assert Path(f"/proc/{keeper}/cmdline").read_bytes() == b"sleep\0infinity\0"
        assert f"--unit={unit} --property=Delegate=yes" in argv_file.read_text()
        systemd_scope.settle(scope)
        assert _cgroup_of(keeper).endswith(f"/{unit}/supervisors")
    finally:
        os.kill(keeper, signal.SIGKILL)


@pytest.mark.e2e
def test_a_refused_scope_is_one_line_naming_what_systemd_run_said(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "PATH", _fake_systemd_run(tmp_path, 'echo "Failed to start transient scope unit: Access denied" >&2\nexit 1\n')
    )
    with pytest.raises(
        CgroupError,
        match=r"^systemd scope: systemd-run --scope --unit=gflow-a.scope failed: "
        r"Failed to start transient scope unit: Access denied$",
    ):
        systemd_scope.create("gflow-a.scope", "system", "d", Cgroupfs())


@pytest.mark.e2e
def test_the_launcher_enters_the_scope_leaf_before_it_forks_any_supervisor(cgroup2):
    base, made = cgroup2
    leaf = os.path.join(base, "supervisors")
    os.mkdir(leaf)
    wake_r, wake_w = os.pipe()
    launcher = subprocess.Popen(
        [sys.executable, "-I", "-S", SUPERVISOR_FILE, "--launcher", str(wake_w), os.path.join(leaf, "cgroup.procs")],
        stdin=subprocess.PIPE,
        pass_fds=(wake_w,),
    )
    made.append(launcher)
    os.close(wake_w)
    wait_for(
        lambda: _cgroup_of(launcher.pid).endswith(f"/{os.path.basename(base)}/supervisors"),
        timeout=20,
        message="the launcher in the scope's supervisors leaf",
    )
    launcher.stdin.close()  # gflowd gone: the launcher ends, its (no) supervisors live on
    assert launcher.wait(20) == 0
    os.close(wake_r)


# -- a job lost to a reboot ---------------------------------------------------------------------------


def test_rebooted_since_names_both_boots_or_nothing():
    assert rebooted_since("aaaaaaaa-1", "bbbbbbbb-2") == (
        "lost to a reboot of the machine: it was started in boot aaaaaaaa, this is boot bbbbbbbb"
    )
    assert rebooted_since("same", "same") == ""
    assert rebooted_since(None, "b") == "" and rebooted_since("a", "") == ""  # an older record; no boot id


def _script_job(name: str, script: str) -> str:
    body = "".join(f"    {line}\n" for line in script.strip().splitlines())
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n  script: |\n{body}"


def test_a_job_recorded_in_another_boot_is_lost_to_the_reboot_and_its_old_pids_are_never_signalled(home, gflowd):
    """After a reboot the records of running jobs remain, their pids name other processes: the job
    is Failed/Lost saying it was the reboot, and no process is signalled for it. Simulated by
    killing gflowd and the supervisor, then writing another boot id into the launch record: the
    job's process, still alive, plays a process that took over its pid in the new boot."""
    first = gflowd("--cgroups", "off")  # after a reboot its cgroup is gone too: no cgroup to remove here
    write_manifest(home / "jobs", "long.yaml", _script_job("long", "sleep 300"))
    wait_phase(home, "long", "Running", daemon=first)
    path = home / "run" / "attempts" / "long.1"
    run = wait_for(
        lambda: (
            ((record.read(str(path), ("run",)) or {}).get("run") or {}).get("jobPid")
            and record.read(str(path), ("run",))["run"]
        ),
        message="the run record with the job's pid",
    )
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    os.kill(run["supervisorPid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(run["supervisorPid"]), message="the supervisor gone")
    launch = record.read(str(path), ("launch",))["launch"]
    assert launch["bootId"]  # recorded at launch
    launch["bootId"] = "00000000-0000-4000-8000-000000000000"
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, record.encode(launch), record.LAUNCH_AT)
    finally:
        os.close(fd)
    job = run["jobPid"]
    try:
        assert pid_alive(job)
        second = gflowd("--cgroups", "off")
        status = wait_phase(home, "long", "Failed", timeout=30, daemon=second)
        assert status["reason"] == "Lost"
        assert "lost to a reboot of the machine: it was started in boot 00000000" in status["message"]
        assert pid_alive(job), "a pid from another boot names another process: it must not be signalled"
    finally:
        os.kill(job, signal.SIGKILL)


def test_a_job_its_supervisor_stopped_at_shutdown_says_so_after_the_reboot(home, gflowd):
    """An orderly reboot: systemd TERMs the scope, the supervisor stops the job and records the
    SIGTERM, nobody reads it before the machine is gone. The next boot's gflowd says it was the
    shutdown, not just "killed by SIGTERM". Simulated: gflowd killed, the supervisor TERMed (as
    systemd does), the launch record given another boot id, a new gflowd."""
    first = gflowd("--cgroups", "off")
    write_manifest(home / "jobs", "long.yaml", _script_job("long", "sleep 300"))
    wait_phase(home, "long", "Running", daemon=first)
    path = home / "run" / "attempts" / "long.1"
    run = wait_for(
        lambda: (
            ((record.read(str(path), ("run",)) or {}).get("run") or {}).get("jobPid")
            and record.read(str(path), ("run",))["run"]
        ),
        message="the run record with the job's pid",
    )
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    os.kill(run["supervisorPid"], signal.SIGTERM)
    wait_for(lambda: (record.read(str(path), ("exit",)) or {}).get("exit"), message="the supervisor's exit record")
    wait_for(lambda: not pid_alive(run["supervisorPid"]), message="the supervisor gone")
    launch = record.read(str(path), ("launch",))["launch"]
    launch["bootId"] = "00000000-0000-4000-8000-000000000000"
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, record.encode(launch), record.LAUNCH_AT)
    finally:
        os.close(fd)
    status = wait_phase(home, "long", "Failed", timeout=30, daemon=gflowd("--cgroups", "off"))
    assert "killed by SIGTERM" in status["message"] and "when the machine shut down" in status["message"], status
    assert "started in boot 00000000" in status["message"], status


# -- the journal ---------------------------------------------------------------------------------------


def test_on_journal_only_when_JOURNAL_STREAM_names_this_stream(tmp_path):
    with open(tmp_path / "log", "w") as stream:
        found = os.fstat(stream.fileno())
        assert on_journal(stream, {"JOURNAL_STREAM": f"{found.st_dev}:{found.st_ino}"})
        assert not on_journal(stream, {"JOURNAL_STREAM": f"{found.st_dev}:{found.st_ino + 1}"})
        assert not on_journal(stream, {})
    assert not on_journal(io.StringIO(), {"JOURNAL_STREAM": "1:2"})


def test_journal_lines_carry_a_priority_and_no_timestamp():
    formatter = JournalFormatter()
    line = formatter.format(logging.LogRecord("gflowd", logging.WARNING, __file__, 1, "job/%s: %s", ("a", "b"), None))
    assert line == "<4>WARNING job/a: b"
    two = formatter.format(logging.LogRecord("gflowd", logging.ERROR, __file__, 1, "one\ntwo", None, None))
    assert two.splitlines() == ["<3>ERROR   one", "<3>two"]
