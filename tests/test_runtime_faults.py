"""The runtime under faults a hostile user or an unlucky admin causes (issue 14): a full disk, a
supervisor killed with SIGKILL, a log file replaced by a symlink, a working directory the job's
user may not enter. Real gflowd, real supervisors, real job processes, real tmpfs filesystems.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import fill_filesystem, job_status, pid_alive, read_log, wait_for, wait_phase, write_manifest

from controller.act.runtime import record
from controller.act.runtime.shim.procfs import start_ticks
from controller.act.runtime.shim.supervisor import Supervisor

SUPERVISOR = Path(__file__).resolve().parents[1] / "controller" / "act" / "runtime" / "shim" / "main.py"


def manifest(name: str, body: str) -> str:
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n{body}"


def script_job(name: str, script: str, extra: str = "") -> str:
    indented = "".join(f"    {line}\n" for line in script.strip().splitlines())
    return manifest(name, f"  script: |\n{indented}{extra}")


def events(home: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def region(path: Path, which: str) -> dict | None:
    """One region (launch, run, exit) of an attempt record, if written."""
    return (record.read(str(path), (which,)) or {}).get(which)


def punch_hole(path: Path, offset: int, length: int) -> None:
    """Give back the blocks under a region of a file (FALLOC_FL_PUNCH_HOLE): writing there needs
    new ones again, as an overwrite does on a copy-on-write filesystem (btrfs, ZFS)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fd = os.open(path, os.O_RDWR)
    try:
        if libc.fallocate(fd, 0x02 | 0x01, offset, length) != 0:  # PUNCH_HOLE | KEEP_SIZE
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(path))
    finally:
        os.close(fd)


def uptime_ticks() -> float:
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def temp_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.tmp"))


# -- a filesystem that really fills up -----------------------------------------------------------


def mount_tmpfs(point: Path, size: str) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a size-limited tmpfs")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")


def unmount(point: Path) -> None:
    subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)


@contextlib.contextmanager
def fresh_tmpfs(size: str):
    """A tmpfs of ``size`` on a unique mount point, unmounted and removed afterwards."""
    point = Path(tempfile.mkdtemp(prefix=f"gflow-sec-runtime-{os.getpid()}-"))
    try:
        mount_tmpfs(point, size)
        try:
            yield point
        finally:
            unmount(point)
    finally:
        shutil.rmtree(point, ignore_errors=True)


@pytest.fixture
def tiny_home():
    """A whole GFLOW_HOME on its own 2 MiB tmpfs. Ask for it before ``gflowd``, so the daemons
    stop before the unmount."""
    with fresh_tmpfs("2m") as point:
        yield point


@pytest.fixture
def small_run_dir(home):
    """``run/`` (the runtime's records) on its own 256 KiB tmpfs; status files stay writable."""
    run = home / "run"
    run.mkdir(exist_ok=True)
    mount_tmpfs(run, "256k")
    yield run
    unmount(run)


def free_space(directory: Path) -> None:
    for name in ("filler", "filler2"):
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass


# -- finding 4: a full disk ----------------------------------------------------------------------------


def test_a_full_disk_loses_no_exit_code_and_no_launch(tiny_home, gflowd, tmp_path):
    """The issue's repro: a 2 MiB home, one job's output fills it, four jobs end meanwhile (exit codes
    0/3/5/0), one job is submitted while it is full, gflowd is killed and restarted; once space is
    back every exit code is right, the late job ran exactly once, and nothing was left behind."""
    home = tiny_home
    spec, release, ran = tmp_path / "jobs", tmp_path / "release", tmp_path / "ran"
    for folder in (spec, release, ran):
        folder.mkdir()
    codes = {"exit0": 0, "exit3": 3, "exit5": 5, "exit0b": 0}
    for name, code in codes.items():
        write_manifest(
            spec, f"{name}.yaml", script_job(name, f"while [ ! -e {release}/{name} ]; do sleep 0.05; done\nexit {code}")
        )
    first = gflowd("--spec-dir", spec, home=home)
    runs = {}
    for name in codes:
        wait_phase(home, name, "Running", daemon=first)
        runs[name] = wait_for(
            lambda n=name: region(home / "run" / "attempts" / f"{n}.1", "run"), message=f"{name}'s run record"
        )
        # the room for its exit record was taken with the record, before the job started: real blocks
        assert os.stat(home / "run" / "attempts" / f"{name}.1").st_blocks * 512 >= record.LAUNCH_AT
    write_manifest(
        spec,
        "hog.yaml",
        script_job(  # its tr fails when the disk is full: it says so outside it
            "hog",
            f"head -c 5000000 /dev/zero | tr '\\0' x || touch {ran}/hog-full\nwhile [ ! -e {release}/hog ]; do sleep 0.05; done",
        ),
    )
    # not statvfs: the disk is full only until gflowd's next write gives its spares back (util/spares.py)
    wait_for(lambda: (ran / "hog-full").exists(), timeout=180, message="the hog's output to fill the disk")
    fill_filesystem(home)  # to the last byte
    write_manifest(spec, "late.yaml", manifest("late", f"  command: [touch, {ran}/late]\n"))
    wait_for(
        lambda: "job/late DiskFull" in first.stderr(),
        timeout=20,
        message=lambda: f"gflowd to hold back late's launch\n{first.stderr()[-3000:]}",
    )

    first.proc.send_signal(signal.SIGKILL)  # the jobs end while no gflowd runs: only their records can tell
    first.proc.wait(10)
    for name in codes:
        (release / name).touch()
    for name, run in runs.items():
        wait_for(
            lambda r=run: not pid_alive(r["jobPid"]) and not pid_alive(r["supervisorPid"]),
            message=f"{name}'s process and supervisor to end",
        )
    fill_filesystem(home)  # what their records gave back, the hog would have taken
    second = gflowd("--spec-dir", spec, home=home, ready=False)  # restarted on the full disk
    wait_for(
        lambda: "job/late DiskFull" in second.stderr(),
        timeout=20,
        message=lambda: f"the new gflowd to hold back late's launch\n{second.stderr()[-3000:]}",
    )
    assert not (ran / "late").exists() and second.proc.poll() is None

    (release / "hog").touch()
    hog = region(home / "run" / "attempts" / "hog.1", "run")
    wait_for(lambda: not pid_alive(hog["jobPid"]), message="the hog to end")
    free_space(home)
    os.truncate(home / "logs" / "hog.log", 0)
    for name, code in codes.items():
        status = wait_phase(home, name, ("Succeeded", "Failed"), timeout=180, daemon=second)
        assert (status["phase"], status["exitCode"]) == ("Succeeded" if code == 0 else "Failed", code), (name, status)
        assert status["reason"] != "Lost", status
    status = wait_phase(home, "late", ("Succeeded", "Failed"), timeout=180, daemon=second)
    assert (status["phase"], status["attempt"]) == ("Succeeded", 1), status
    assert (ran / "late").exists()
    second.wait_pass()
    assert temp_files(home) == []
    for daemon in (first, second):
        assert "handing it over again" not in daemon.stderr()
        assert "reconcile pass failed" not in daemon.stderr()


def test_a_launch_the_disk_refuses_stays_pending_and_starts_once_space_returns(home, small_run_dir, gflowd, tmp_path):
    marker, release = tmp_path / "late-ran", tmp_path / "release"
    write_manifest(home / "jobs", "runner.yaml", script_job("runner", f"while [ ! -e {release} ]; do sleep 0.05; done"))
    daemon = gflowd()
    wait_for(lambda: region(small_run_dir / "attempts" / "runner.1", "run"), message="the runner to begin")
    fill_filesystem(small_run_dir)

    write_manifest(home / "jobs", "late.yaml", script_job("late", f"echo ran $GFLOW_ATTEMPT >> {marker}"))
    seen: set[str] = set()

    def late_is(phase: str, reason: str | None = None):
        status = job_status(home, "late") or {}
        seen.add(status.get("phase", ""))
        return status if status.get("phase") == phase and reason in (None, status.get("reason")) else None

    status = wait_for(
        lambda: late_is("Pending", "DiskFull"), message=lambda: f"late held back: {job_status(home, 'late')}"
    )
    assert "No space left on device" in status["message"] and "/run/attempts/late.1" in status["message"], status
    release.touch()  # the runner ends while the disk is full: its exit code is recorded all the same
    wait_for(
        lambda: (job_status(home, "runner") or {}).get("phase") == "Succeeded" and late_is("Pending", "DiskFull"),
        message=lambda: f"runner Succeeded: {job_status(home, 'runner')}",
    )
    assert job_status(home, "runner")["exitCode"] == 0
    assert "Running" not in seen and not marker.exists()

    free_space(small_run_dir)
    status = wait_for(
        lambda: late_is("Succeeded"), timeout=180, message=lambda: f"late to run: {job_status(home, 'late')}"
    )
    assert status["attempt"] == 1 and marker.read_text() == "ran 1\n"
    warnings = [e for e in events(home) if e["object"] == "job/late" and e["reason"] == "DiskFull"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
    assert temp_files(small_run_dir) == []
    assert "handing it over again" not in daemon.stderr()


def test_an_exit_the_disk_refuses_reaches_gflowd_at_once_and_the_supervisor_goes_once_it_is_recorded(
    home, small_run_dir, gflowd, tmp_path
):
    release = tmp_path / "release"
    write_manifest(
        home / "jobs", "three.yaml", script_job("three", f"while [ ! -e {release} ]; do sleep 0.05; done\nexit 3")
    )
    daemon = gflowd()
    attempt = small_run_dir / "attempts" / "three.1"
    run = wait_for(lambda: region(attempt, "run"), message="the job to begin")
    punch_hole(attempt, record.EXIT_AT, record.LAUNCH_AT - record.EXIT_AT)  # as if an overwrite needed new blocks
    fill_filesystem(small_run_dir)
    release.touch()
    status = wait_phase(home, "three", "Failed", daemon=daemon)  # known from the datagram alone
    assert (status["reason"], status["exitCode"]) == ("Error", 3), status
    # recorded in its status file, the attempt's files are removed: the supervisor stops retrying
    wait_for(lambda: not pid_alive(run["supervisorPid"]), timeout=20, message="the supervisor to end")
    assert not attempt.exists()
    assert temp_files(small_run_dir) == []


def test_a_held_launch_is_pending_keeps_its_gpu_and_runs_once_recorded():
    """The decisions around a held launch (pure reconcile): Pending with the runtime's reason and one
    Warning, never "Started"; its GPU is not given to the next job; Started once it runs."""
    from builders import T0, World, job, started

    from controller.act.apply import started_facts
    from controller.decide.acted import fold_acted
    from controller.decide.reconcile import reconcile
    from controller.model.plan import ActResult, RunObservation

    world = World(job("a", resources={"gpus": 1}), n_gpus=1)
    plan = reconcile(world.snapshot(), T0)
    (launch,) = plan.starts
    why = "cannot record its launch: No space left on device (ENOSPC) writing /h/run/attempts/a.1"
    held = RunObservation(
        "a", launch.attempt, None, T0, True, queued="DiskFull", message=why, held=True, devices=tuple(launch.devices)
    )
    # what gflowd does when the runtime held the start it was asked for: act reports it, decide folds it in
    plan = fold_acted(plan, ActResult(started_facts(plan.starts, {"a": held})))
    assert (plan.states["a"].phase, plan.states["a"].reason, plan.states["a"].message) == ("Pending", "DiskFull", why)
    assert [(e.type, e.reason) for e in plan.events if e.object == "a"] == [("Warning", "DiskFull")]
    world.states, world.runs["a"] = dict(plan.states), held

    world.put(job("b", resources={"gpus": 1}))
    plan = world.tick(T0 + 1)
    assert started(plan) == [] and world.phase("a") == ("Pending", "DiskFull")
    assert world.phase("b") == ("Pending", "Resources")
    assert not [e for e in plan.events if e.object == "a"]  # said once, not every pass

    world.runs["a"] = RunObservation(
        "a",
        launch.attempt,
        777,
        T0 + 2,
        True,
        devices=tuple(launch.devices),
        message="started once its launch could be recorded",
    )
    world.tick(T0 + 2)
    assert world.phase("a") == ("Running", "Started") and world.state("a").pid == 777
    assert world.state("a").message == "started once its launch could be recorded"
    assert world.phase("b") == ("Pending", "Resources")


# -- the supervisor alone on a full disk -------------------------------------------------------------


@pytest.fixture
def tiny_dir():
    with fresh_tmpfs("512k") as point:
        yield point


def _launch(folder: Path, notify: str, argv: list[str], cwd: str) -> Path:
    attempts = folder / "run" / "attempts"
    attempts.mkdir(parents=True)
    (folder / "logs").mkdir()
    path = attempts / "solo.1"
    record.create(
        str(path),
        {
            "name": "solo",
            "attempt": 1,
            "generation": 1,
            "argv": argv,
            "env": {"PATH": os.environ["PATH"]},
            "cwd": cwd,
            "log": str(folder / "logs" / "solo.log"),
            "uid": None,
            "gid": None,
            "groups": [],
            "timeLimit": None,
            "memoryLimit": None,
            "grace": 1.0,
            "notify": notify,
        },
    )
    return path


def _listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.05)
    return sock


def _datagrams(sock: socket.socket, into: list[str]) -> list[str]:
    while True:
        try:
            into.append(sock.recv(65536).decode())
        except (TimeoutError, BlockingIOError):
            return into


@pytest.mark.e2e
def test_a_supervisor_that_cannot_record_its_start_never_runs_the_job_and_says_so(tiny_dir, tmp_path):
    marker = tmp_path / "ran"
    sock = _listen(tmp_path / "notify.sock")
    launch = _launch(tiny_dir, str(tmp_path / "notify.sock"), ["touch", str(marker)], str(tmp_path))
    punch_hole(launch, record.RUN_AT, record.EXIT_AT - record.RUN_AT)  # writing the run record needs a block
    fill_filesystem(tiny_dir)
    result = subprocess.run([sys.executable, "-I", "-S", str(SUPERVISOR), str(launch)], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    got = wait_for(lambda: _datagrams(sock, []), timeout=5, message="the supervisor's notice")
    assert got[0].startswith("unlaunched solo 1 ") and "No space left on device" in got[0], got
    assert not marker.exists()
    assert sorted(p.name for p in launch.parent.iterdir()) == ["solo.1"]
    assert region(launch, "run") is None and region(launch, "exit") is None
    free_space(tiny_dir)  # the same launch handed over again now runs
    subprocess.run([sys.executable, "-I", "-S", str(SUPERVISOR), str(launch)], check=True, timeout=30)
    wait_for(lambda: region(launch, "exit"), message="the exit record")
    assert marker.exists()


@pytest.mark.parametrize("recycled", ["renamed", "rewritten"])
def test_a_supervisor_whose_record_was_recycled_after_it_opened_it_runs_nothing(tmp_path, recycled):
    """gflowd rewrites a purged attempt's record for a later attempt as soon as no supervisor holds
    its lock (util/spares.py, ``quiet=0``). A supervisor that opened the record before (one handed
    the attempt twice, across a gflowd restart) and only now takes the lock must see it is no
    longer its attempt's: under another name, or with another launch in it."""
    ran_old, ran_new = tmp_path / "ran-old", tmp_path / "ran-new"
    path = _launch(tmp_path / "home", str(tmp_path / "notify.sock"), ["touch", str(ran_old)], str(tmp_path))
    launch = record.read(str(path), ("launch",))["launch"]
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGCHLD)}
    stale = Supervisor(str(path))  # opened, launch read; the lock not taken yet (in-process: close() sets signals)
    try:
        later = {**launch, "name": "later", "argv": ["touch", str(ran_new)]}
        if recycled == "renamed":  # purged (a spare name) and a new file made for the name
            os.rename(path, path.with_name(".spare.test.1"))
            record.create(str(path), launch)
        else:  # the same inode, rewritten in place as another attempt's record
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, record.contents(later), 0)
            finally:
                os.close(fd)
        assert stale.run() == 0
    finally:
        stale.close()
        for sig, handler in handlers.items():  # close() ignores SIGINT, which every later child would inherit
            signal.signal(sig, handler)
    assert not ran_old.exists() and not ran_new.exists()
    assert region(path, "run") is None  # and the record it left alone is free for its own supervisor
    with open(path, "rb+") as handle:
        assert record.unlocked(handle.fileno())


@pytest.mark.e2e
def test_an_exit_the_disk_refuses_is_kept_sent_to_gflowd_and_written_once_there_is_room(tiny_dir, tmp_path):
    release = tmp_path / "release"
    sock = _listen(tmp_path / "notify.sock")
    launch = _launch(
        tiny_dir,
        str(tmp_path / "notify.sock"),
        ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done; exit 3"],
        str(tmp_path),
    )
    supervisor = subprocess.Popen([sys.executable, "-I", "-S", str(SUPERVISOR), str(launch)])
    try:
        got: list[str] = []
        wait_for(lambda: any(m.startswith("start solo 1") for m in _datagrams(sock, got)), message="the job to start")
        # the room reserved for the exit record is gone too (as on a copy-on-write filesystem, where
        # even an overwrite needs new blocks): only retrying can record the exit now
        punch_hole(launch, record.EXIT_AT, record.LAUNCH_AT - record.EXIT_AT)
        fill_filesystem(tiny_dir)
        release.touch()

        def exit_notice():
            for message in _datagrams(sock, got):
                if message.startswith("exit solo 1 {"):
                    return json.loads(message.split(" ", 3)[3])
            return None

        sent = wait_for(exit_notice, timeout=10, message=lambda: f"the exit sent to gflowd; got {got}")
        assert sent["exitCode"] == 3
        assert supervisor.poll() is None  # alive, holding its attempt lock, retrying
        assert region(launch, "exit") is None
        free_space(tiny_dir)
        assert supervisor.wait(30) == 0
        assert region(launch, "exit")["exitCode"] == 3
        assert temp_files(tiny_dir) == []
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        release.touch()


# -- finding 6: a supervisor killed with SIGKILL ---------------------------------------------------------

ONE_GPU = "gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n"


def _pids(home: Path, name: str, key: str) -> list[int]:
    return [int(line.split("=", 1)[1]) for line in read_log(home, name).splitlines() if line.startswith(f"{key}=")]


def _alive(identities: dict[int, int]) -> list[int]:
    """Which of these processes (pid -> kernel start time) still live; a reused pid is not one of them."""
    return [pid for pid, ticks in identities.items() if pid_alive(pid) and start_ticks(pid) == ticks]


def test_a_killed_supervisor_never_leaves_the_job_running_on_a_gpu_given_to_another(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(ONE_GPU)
    daemon = gflowd("--fake-gpus", fake)
    stubborn = (
        "trap '' TERM\n"
        "echo pid=$$\n"
        "setsid sh -c 'trap \"\" TERM; echo grandchild=$$; exec sleep 300' &\n"
        "sleep 300 &\n"
        "echo child=$!\n"
        "while true; do sleep 0.1; done\n"
    )
    write_manifest(
        home / "jobs",
        "first.yaml",
        script_job("first", stubborn, "  resources: {gpus: 1}\n  terminationGracePeriod: 1s\n"),
    )
    wait_phase(home, "first", "Running", daemon=daemon)
    wait_for(lambda: _pids(home, "first", "grandchild") and _pids(home, "first", "child"), message="the job's tree")
    tree = {pid: start_ticks(pid) for key in ("pid", "child", "grandchild") for pid in _pids(home, "first", key)}
    assert len(tree) == 3 and all(tree.values())
    checks = " ".join(f"{pid}:{ticks}" for pid, ticks in tree.items())
    # the second job itself looks, first thing, for any of the first job's processes
    write_manifest(
        home / "jobs",
        "second.yaml",
        script_job(
            "second",
            (
                f"for p in {checks}; do\n"
                "  pid=${p%:*}; ticks=${p#*:}\n"
                '  if [ -r /proc/$pid/stat ] && [ "$(cut -d\' \' -f22 /proc/$pid/stat)" = "$ticks" ] '
                "&& ! grep -q '^State:[[:space:]]*Z' /proc/$pid/status; then echo still-alive=$pid; fi\n"
                "done\necho checked\n"
            ),
            "  resources: {gpus: 1}\n",
        ),
    )
    wait_phase(home, "second", "Pending", reason="Resources", daemon=daemon)
    supervisor = region(home / "run" / "attempts" / "first.1", "run")["supervisorPid"]
    os.kill(supervisor, signal.SIGKILL)

    alive_when_second_ran: list[int] = []

    def second_started():
        status = job_status(home, "second") or {}
        if status.get("phase") in ("Running", "Succeeded", "Failed"):
            alive_when_second_ran.extend(_alive(tree))
            return status
        return None

    wait_for(second_started, timeout=180, message=lambda: f"second to start; first: {job_status(home, 'first')}")
    assert alive_when_second_ran == [], "the first job still ran when its GPU was given to the second"
    status = wait_phase(home, "first", "Failed", daemon=daemon)
    assert status["reason"] == "Lost"
    assert "supervisor" in status["message"] and "stopped" in status["message"], status["message"]
    assert _alive(tree) == []
    wait_phase(home, "second", "Succeeded", daemon=daemon)
    log = read_log(home, "second")
    assert "checked" in log and "still-alive" not in log, log


@pytest.mark.e2e
def test_an_attempts_processes_are_found_by_group_and_marker_and_never_by_a_reused_pid(tmp_path):
    from controller.act.runtime.orphans import attempt_processes

    marker = f"test.1.{os.getpid()}"
    env = {**os.environ, "GFLOW_ATTEMPT_ID": marker}
    before = subprocess.Popen(["sleep", "60"], env=env)  # carries the marker but started before the job
    wait_for(
        lambda: start_ticks(before.pid) is not None and uptime_ticks() > start_ticks(before.pid) + 1,
        message="a clock tick to pass (start times count in ticks)",
    )
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & setsid sleep 60 & env -i sleep 60 & wait"], env=env, start_new_session=True
    )
    stranger = None
    try:
        job_ticks = start_ticks(leader.pid)
        wait_for(
            lambda: len(attempt_processes(leader.pid, job_ticks, marker)) == 4,
            timeout=10,
            message=lambda: f"the job's 4 processes: {attempt_processes(leader.pid, job_ticks, marker)}",
        )
        found = attempt_processes(leader.pid, job_ticks, marker)
        assert before.pid not in found and os.getpid() not in found
        assert all(start_ticks(pid) == ticks for pid, ticks in found.items())
        # the same job's processes, were the leader's pid to belong to a stranger now: nothing of
        # the group is taken on the pid's word, and a process without the marker is not ours
        stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
        assert attempt_processes(stranger.pid, start_ticks(stranger.pid) + 1, "no-such-marker") == {}
    finally:
        for proc in (before, leader, stranger):
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                proc.wait()
        for pid in list(attempt_processes(leader.pid, None, marker)):
            os.kill(pid, signal.SIGKILL)


# -- finding 8a/8c: log files and error messages, under a root gflowd ----------------------------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")


def _nobody() -> int:
    import pwd

    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no 'nobody' user")


def write_owned(spec_dir: Path, filename: str, text: str, uid: int) -> Path:
    """A manifest owned by ``uid`` from the moment gflowd can see it (chown, then rename in)."""
    import pwd

    tmp = spec_dir / f".{filename}.tmp"
    tmp.write_text(text)
    os.chown(tmp, uid, pwd.getpwuid(uid).pw_gid)
    os.rename(tmp, spec_dir / filename)
    return spec_dir / filename


@root_only
def test_a_log_file_planted_as_a_symlink_is_refused_and_its_target_untouched(home, gflowd, tmp_path):
    nobody = _nobody()
    target = tmp_path / "root-secret"
    target.write_text("root's own data\n")
    os.chmod(target, 0o600)
    (home / "logs").mkdir(exist_ok=True)
    os.symlink(target, home / "logs" / "planted.log")
    daemon = gflowd()
    write_owned(
        home / "jobs", "planted.yaml", manifest("planted", "  command: [echo, overwritten]\n  workingDir: /\n"), nobody
    )
    status = wait_phase(home, "planted", "Failed", daemon=daemon)
    assert "log file" in status["message"] and "symbolic link" in status["message"], status["message"]
    assert target.read_text() == "root's own data\n"
    assert (target.stat().st_uid, target.stat().st_mode & 0o777) == (0, 0o600)
    assert (home / "logs" / "planted.log").is_symlink()


@root_only
def test_a_working_dir_the_user_may_not_enter_is_named_in_the_error(home, gflowd, tmp_path):
    nobody = _nobody()
    daemon = gflowd()
    write_owned(
        home / "jobs", "private.yaml", manifest("private", "  command: ['true']\n  workingDir: /root\n"), nobody
    )
    status = wait_phase(home, "private", "Failed", daemon=daemon)
    # the same words whether /root/... exists or not: see test_job_env.py
    assert status["message"] == f"workingDir /root: not found or not accessible to {pwd.getpwuid(nobody).pw_name}", (
        status["message"]
    )
    # the command step is named as such: a file nobody may not execute
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    os.chmod(tool, 0o700)
    write_owned(home / "jobs", "tool.yaml", manifest("tool", f"  command: [{tool}]\n  workingDir: /\n"), nobody)
    status = wait_phase(home, "tool", "Failed", daemon=daemon)
    assert status["message"] == f"command {str(tool)!r}: Permission denied (as uid {nobody})", status["message"]
    assert status["exitCode"] == 126


@pytest.mark.e2e
def test_the_slurm_backend_holds_a_submission_the_disk_refuses_and_retries_it(tmp_path):
    """The Runtime Protocol's promise, on its other implementation: a start never raises on a full
    disk; it is held (Pending, DiskFull) and tried again once there is room."""
    from test_reconcile import job

    from controller.act.runtime.backends.slurm.runtime import SlurmRuntime
    from controller.model.plan import Launch
    from controller.paths import Home

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    slurm_dir = home.run_dir / "slurm"
    slurm_dir.mkdir()
    mount_tmpfs(slurm_dir, "64k")
    try:
        runtime = SlurmRuntime(home, base_env={"PATH": "/nonexistent"})  # no sbatch: a refusal, once submitted
        fill_filesystem(slurm_dir)
        runtime.start(Launch("s", 1, 1, job("s", command=["true"], workingDir=str(tmp_path)), [], []))
        held = runtime.observe()["s"]
        assert (held.running, held.held, held.queued) == (True, True, "DiskFull")
        assert "No space left on device" in held.message and "run/slurm/s.json" in held.message
        assert runtime.tick(time.time()) is not None and runtime.needs_polling()
        free_space(slurm_dir)
        wait_for(lambda: runtime.tick(time.time()) is None, message="the held submission to be tried again")
        ended = runtime.observe()["s"]
        assert not ended.running and not ended.held and "sbatch could not run" in ended.error
    finally:
        unmount(slurm_dir)
