"""The crash-safe runtime, end to end: real gflowd, real supervisors, real job processes.

Limits are enforced by the supervisor, stops reach the whole process tree, and jobs outlive the
controller: a gflowd killed with SIGKILL mid-job is restarted and finds every job where it left it,
exit codes included, with nothing run twice.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from helpers import (
    job_status,
    pid_alive,
    read_log,
    wait_for,
    wait_phase,
    write_manifest,
)

from controller.act.runtime import record
from controller.api.validation import validate_document
from controller.util.yamlio import load_one


def manifest(name: str, body: str) -> str:
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n{body}"


def script_job(name: str, script: str, extra: str = "") -> str:
    indented = "".join(f"    {line}\n" for line in script.strip().splitlines())
    return manifest(name, f"  script: |\n{indented}{extra}")


def tree_gone(pids: list[int]) -> bool:
    return not any(pid_alive(p) for p in pids)


def pids_in_log(home: Path, name: str, key: str) -> list[int]:
    return [int(line.split("=", 1)[1]) for line in read_log(home, name).splitlines() if line.startswith(f"{key}=")]


def test_time_limit_ends_deadline_exceeded_and_leaves_no_process(home, gflowd):
    daemon = gflowd()
    write_manifest(
        home / "jobs",
        "slow.yaml",
        script_job(
            "slow", "echo pid=$$\nsleep 300 &\necho child=$!\nwait", "  timeLimit: 1s\n  terminationGracePeriod: 1s\n"
        ),
    )
    status = wait_phase(home, "slow", "Failed", timeout=20, daemon=daemon)
    assert status["reason"] == "DeadlineExceeded"
    pids = pids_in_log(home, "slow", "pid") + pids_in_log(home, "slow", "child")
    assert len(pids) == 2
    wait_for(lambda: tree_gone(pids), timeout=5, message="the job's processes to be gone")


def test_memory_limit_ends_oomkilled(home, gflowd):
    daemon = gflowd()
    hog = 'python3 -c "import time; x = bytearray(600 * 1024 * 1024); [x.__setitem__(i, 1) for i in range(0, len(x), 4096)]; time.sleep(60)"'
    write_manifest(home / "jobs", "hog.yaml", script_job("hog", hog, "  resources:\n    memory: 200Mi\n"))
    status = wait_phase(home, "hog", "Failed", timeout=30, daemon=daemon)
    assert status["reason"] == "OOMKilled", status
    assert "memory limit" in status["message"]


def test_cancel_kills_a_term_ignoring_job_and_its_setsid_grandchild(home, gflowd):
    daemon = gflowd()
    script = (
        "trap '' TERM\n"
        "echo pid=$$\n"
        "setsid sh -c 'trap \"\" TERM; echo grandchild=$$; exec sleep 300' &\n"
        "while true; do sleep 0.1; done\n"
    )
    path = write_manifest(
        home / "jobs", "stubborn.yaml", script_job("stubborn", script, "  terminationGracePeriod: 1s\n")
    )
    wait_phase(home, "stubborn", "Running", daemon=daemon)
    wait_for(lambda: pids_in_log(home, "stubborn", "grandchild"), timeout=10, message="the grandchild to start")
    pids = pids_in_log(home, "stubborn", "pid") + pids_in_log(home, "stubborn", "grandchild")
    assert all(pid_alive(p) for p in pids)
    write_manifest(home / "jobs", "stubborn.yaml", path.read_text() + "  cancelled: true\n")
    status = wait_phase(home, "stubborn", "Cancelled", timeout=20, daemon=daemon)
    assert status["reason"] == "UserCancelled"
    assert tree_gone(pids), [p for p in pids if pid_alive(p)]


def test_suspend_stops_a_running_job_and_resume_runs_it_again(home, gflowd):
    daemon = gflowd()
    original = script_job("nap", "echo run=$GFLOW_ATTEMPT\nsleep 300")
    write_manifest(home / "jobs", "nap.yaml", original)
    wait_phase(home, "nap", "Running", daemon=daemon)
    write_manifest(home / "jobs", "nap.yaml", original + "  suspend: true\n")
    status = wait_phase(home, "nap", "Pending", reason="Suspended", timeout=20, daemon=daemon)
    assert status.get("pid") is not None
    write_manifest(home / "jobs", "nap.yaml", original + "  suspend: false\n")
    status = wait_phase(home, "nap", "Running", timeout=20, daemon=daemon)
    assert status["attempt"] == 2


def test_gflowd_killed_mid_job_readopts_it_and_it_succeeds_exactly_once(home, gflowd, tmp_path):
    marker = tmp_path / "runs.txt"
    release = tmp_path / "release"
    script = f"echo started >> {marker}\nwhile [ ! -e {release} ]; do sleep 0.05; done\necho done"
    first = gflowd()
    write_manifest(home / "jobs", "once.yaml", script_job("once", script))
    wait_for(lambda: marker.exists(), message="the job to start")
    running = wait_for(lambda: (job_status(home, "once") or {}).get("pid"), message="its pid in the status")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    job_pid = running
    assert job_pid and pid_alive(job_pid), "the job must survive its controller"

    second = gflowd()
    status = wait_phase(home, "once", "Running", daemon=second)
    assert status["pid"] == job_pid
    release.touch()
    status = wait_phase(home, "once", "Succeeded", timeout=20, daemon=second)
    assert status["exitCode"] == 0 and status["attempt"] == 1
    assert marker.read_text() == "started\n"  # ran exactly once
    assert "done" in read_log(home, "once")


def test_exit_code_of_a_job_that_ends_while_gflowd_is_down_survives(home, gflowd, tmp_path):
    release = tmp_path / "release"
    first = gflowd()
    write_manifest(
        home / "jobs", "seven.yaml", script_job("seven", f"while [ ! -e {release} ]; do sleep 0.05; done\nexit 7")
    )
    wait_phase(home, "seven", "Running", daemon=first)
    assert first.terminate() == 0
    release.touch()  # the job ends now, while no gflowd runs
    wait_for(lambda: _region(home, "seven.1", "exit"), message="the supervisor's exit record")
    second = gflowd()
    status = wait_phase(home, "seven", "Failed", daemon=second)
    assert (status["reason"], status["exitCode"]) == ("Error", 7)


def test_backoff_limit_2_means_exactly_three_attempts(home, gflowd, tmp_path):
    marker = tmp_path / "attempts.txt"
    daemon = gflowd()
    write_manifest(
        home / "jobs",
        "flaky.yaml",
        script_job("flaky", f"echo attempt $GFLOW_ATTEMPT >> {marker}\nexit 1", "  backoffLimit: 2\n"),
    )
    status = wait_phase(home, "flaky", "Failed", timeout=30, daemon=daemon)
    assert status["reason"] == "BackoffLimitExceeded"
    assert marker.read_text().splitlines() == ["attempt 1", "attempt 2", "attempt 3"]
    assert status["attempt"] == 3
    logs = sorted(p.name for p in (home / "logs").glob("flaky*.log"))
    assert logs == ["flaky.1.log", "flaky.2.log", "flaky.log"]


def test_a_start_decided_but_never_begun_is_started_after_a_crash(home, gflowd, tmp_path):
    """A launch record without a run record and without a live supervisor: the job never ran."""
    marker = tmp_path / "ran.txt"
    (home / "run" / "attempts").mkdir(parents=True)
    (home / "logs").mkdir(exist_ok=True)
    launch = {
        "name": "late",
        "attempt": 1,
        "generation": 1,
        "argv": ["sh", "-c", f"echo ran adopted >> {marker}"],
        "env": dict(os.environ),
        "cwd": str(tmp_path),
        "log": str(home / "logs" / "late.log"),
        "uid": None,
        "gid": None,
        "groups": [],
        "timeLimit": None,
        "memoryLimit": None,
        "grace": 1.0,
        "notify": str(home / "run" / "notify.sock"),
        "devices": [],
        "deviceUUIDs": [],
    }
    text = manifest("late", f"  command: [sh, -c, 'echo ran >> {marker}']\n")
    launch["runHash"] = validate_document(
        load_one(text), source="jobs/late.yaml", path="", stem="late", single=True
    ).run_hash
    record.create(str(home / "run" / "attempts" / "late.1"), launch)
    write_manifest(home / "jobs", "late.yaml", text)
    daemon = gflowd()
    status = wait_phase(home, "late", "Succeeded", daemon=daemon)
    assert marker.read_text() == "ran adopted\n"  # started once: by the adoption, not again by the scheduler
    assert status["attempt"] == 1


def test_a_record_gflowd_died_writing_was_never_handed_over(home, gflowd, tmp_path):
    """A record whose launch region is torn (gflowd killed mid-write) is absent: removed at adoption,
    and the job is decided and started as if it were not there, once."""
    marker = tmp_path / "ran.txt"
    attempts = home / "run" / "attempts"
    attempts.mkdir(parents=True)
    torn = attempts / "torn.1"
    record.create(str(torn), {"name": "torn", "attempt": 1, "argv": ["sh", "-c", f"echo torn >> {marker}"]})
    os.truncate(torn, torn.stat().st_size - 5)
    write_manifest(home / "jobs", "torn.yaml", manifest("torn", f"  command: [sh, -c, 'echo ran >> {marker}']\n"))
    daemon = gflowd()
    status = wait_phase(home, "torn", "Succeeded", daemon=daemon)
    assert marker.read_text() == "ran\n"
    assert status["attempt"] == 1


def test_attempts_of_an_older_gflowd_are_not_lost_it_refuses_to_start_with_one_line(tmp_path):
    import subprocess
    import sys

    home = tmp_path / "h"
    old = home / "run" / "jobs" / "train"
    old.mkdir(parents=True)
    (old / "launch-1.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"gflowd: {home / 'run' / 'jobs'} holds 1 attempt(s) of an older gflowd (train); ")
    assert result.stderr.count("\n") == 1 and (old / "launch-1.json").exists()


def test_an_older_gflowds_leftovers_without_attempts_are_removed(home, gflowd):
    leftover = home / "run" / "jobs" / "done"
    leftover.mkdir(parents=True)
    (leftover / "supervisor.log").write_text("")
    gflowd()
    assert not (home / "run" / "jobs").exists()


def test_supervisor_killed_without_exit_record_is_lost(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", "victim.yaml", script_job("victim", "sleep 300"))
    wait_phase(home, "victim", "Running", daemon=daemon)
    run = wait_for(lambda: _region(home, "victim.1", "run"), message="the run record")
    os.kill(run["supervisorPid"], signal.SIGKILL)
    status = wait_phase(home, "victim", "Failed", timeout=20, daemon=daemon)
    assert status["reason"] == "Lost"
    assert not pid_alive(run["jobPid"])  # its job was stopped before it was called Lost


def test_command_not_found_fails_with_a_clear_message(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", "typo.yaml", manifest("typo", "  command: [pyhton3, train.py]\n"))
    status = wait_phase(home, "typo", "Failed", daemon=daemon)
    assert status["exitCode"] == 127
    assert "pyhton3" in status["message"]


def test_job_environment(home, gflowd):
    daemon = gflowd()
    write_manifest(
        home / "jobs",
        "envy.yaml",
        manifest("envy", "  command: [sh, -c, 'env | sort']\n  env: {SEED: 42, MODE: fast}\n"),
    )
    wait_phase(home, "envy", "Succeeded", daemon=daemon)
    env = dict(line.split("=", 1) for line in read_log(home, "envy").splitlines() if "=" in line)
    assert env["GFLOW_JOB_NAME"] == "envy"
    assert env["GFLOW_ATTEMPT"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) >= 1024
    assert (env["SEED"], env["MODE"]) == ("42", "fast")


def _region(home: Path, attempt: str, region: str) -> dict | None:
    """One region (launch, run, exit) of the attempt record run/attempts/NAME.N, if written."""
    return (record.read(str(home / "run" / "attempts" / attempt), (region,)) or {}).get(region)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_root_controller_runs_the_job_as_the_manifest_owner(home, gflowd):
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user")
    daemon = gflowd()
    os.chmod(home, 0o755)
    for sub in ("logs",):
        (home / sub).mkdir(exist_ok=True)
    text = manifest("who", "  command: [id, -u]\n  workingDir: /\n")
    write_manifest(home / "jobs", "who.yaml", text, owner=(nobody.pw_uid, nobody.pw_gid))
    wait_phase(home, "who", ("Succeeded", "Failed"), daemon=daemon)
    assert read_log(home, "who").strip() == str(nobody.pw_uid), job_status(home, "who")


def test_exit_record_stays_until_the_status_showing_it_is_written(tmp_path):
    # forget() lets a new attempt start at once; the records of the ended one go only with purge(),
    # which gflowd calls after writing the status files, so a crash in between loses no exit code.
    import sys

    from test_reconcile import job

    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.model.plan import Launch
    from controller.paths import Home

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    runtime = SupervisorRuntime(home)
    try:
        admitted = job("r", command=[sys.executable, "-c", "raise SystemExit(3)"], workingDir=str(tmp_path))
        runtime.start(Launch("r", 1, 1, admitted, [], []))
        wait_for(
            lambda: (run := runtime.observe().get("r")) is not None and not run.running,
            timeout=20,
            message="the attempt to end",
        )
        assert runtime.observe()["r"].exit_code == 3
        attempts = home.run_dir / "attempts"
        assert record.read(str(attempts / "r.1"), ("exit",))["exit"]["exitCode"] == 3
        assert os.listdir(attempts) == ["r.1"]  # one file: no folder, lock, run or exit file, no empty trace
        runtime.forget("r")
        assert "r" not in runtime.observe()
        assert (attempts / "r.1").exists()  # not yet recorded in a status file
        runtime.purge()
        left = os.listdir(attempts)  # the record is kept as a spare for a later attempt's (spares.py)
        assert len(left) == 1 and left[0].startswith(".spare."), left
    finally:
        runtime.close()


def test_a_later_attempt_is_recorded_over_a_purged_record_never_reading_its_old_regions(tmp_path):
    """A purged record is a spare (no inode freed); once quiet and unlocked it becomes the next
    attempt's record, its run and exit regions emptied: the new attempt runs and reports its own exit."""
    import sys

    from test_reconcile import job

    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.model.plan import Launch
    from controller.paths import Home
    from controller.util.spares import QUIET

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    runtime = SupervisorRuntime(home)
    now = [0.0]
    runtime.spares.clock = lambda: now[0]
    attempts = home.run_dir / "attempts"
    try:
        first = job("first", command=[sys.executable, "-c", "raise SystemExit(3)"], workingDir=str(tmp_path))
        runtime.start(Launch("first", 1, 1, first, [], []))
        wait_for(
            lambda: (run := runtime.observe().get("first")) is not None and not run.running,
            timeout=20,
            message="the first attempt to end",
        )
        inode = os.stat(attempts / "first.1").st_ino
        runtime.forget("first")
        fd = os.open(attempts / "first.1", os.O_RDONLY | os.O_CLOEXEC)
        try:
            wait_for(lambda: record.unlocked(fd), timeout=20, message="the first supervisor to go")
        finally:
            os.close(fd)
        runtime.purge()
        now[0] += QUIET
        second = job("second", command=[sys.executable, "-c", "raise SystemExit(5)"], workingDir=str(tmp_path))
        runtime.start(Launch("second", 1, 1, second, [], []))
        runtime.observe()
        runtime.purge()  # as a pass does: its starts reach the launcher after its purge
        assert os.stat(attempts / "second.1").st_ino == inode  # the recycled inode
        wait_for(
            lambda: (run := runtime.observe().get("second")) is not None and not run.running,
            timeout=20,
            message="the second attempt to end",
        )
        assert runtime.observe()["second"].exit_code == 5
        assert record.read(str(attempts / "second.1"), ("launch",))["launch"]["name"] == "second"
        assert [n for n in os.listdir(attempts) if n.startswith(".spare.")] == []
    finally:
        runtime.close()


def _ended(runtime, name: str) -> None:
    wait_for(
        lambda: (run := runtime.observe().get(name)) is not None and not run.running,
        timeout=20,
        message=f"{name} to end",
    )


def _supervisor_of(home, name: str) -> int:
    return record.read(str(home.run_dir / "attempts" / f"{name}.1"), ("run",))["run"]["supervisorPid"]


def _runtime(tmp_path):
    """A fresh home and the supervisor runtime on it."""
    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.paths import Home

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    return home, SupervisorRuntime(home)


def _start_exiting(runtime, tmp_path, name: str, code: int) -> None:
    """Start attempt 1 of job ``name``: a Python that exits with ``code`` at once."""
    import sys

    from test_reconcile import job

    from controller.model.plan import Launch

    admitted = job(name, command=[sys.executable, "-c", f"raise SystemExit({code})"], workingDir=str(tmp_path))
    runtime.start(Launch(name, 1, 1, admitted, [], []))


def _until_taken_by(runtime, home, tmp_path, supervisor: int, code: int, prefix: str) -> list[str]:
    """Start attempts ``<prefix>1``, ``<prefix>2``... (each exiting with ``code``, none purged) until
    one is taken by ``supervisor``; their names. The launcher frees a supervisor once it has heard
    both the supervisor's "done" and gflowd's purge: a start handed to it before the "done" (a
    loaded machine) goes to a new supervisor, which is no fault, so the next start is tried."""
    names: list[str] = []

    def taken() -> bool:
        name = f"{prefix}{len(names) + 1}"
        _start_exiting(runtime, tmp_path, name, code)
        runtime.observe()
        runtime.purge()
        names.append(name)
        _ended(runtime, name)
        return _supervisor_of(home, name) == supervisor

    wait_for(taken, timeout=60, interval=0.05, message=f"an attempt taken by supervisor {supervisor}")
    return names


def test_a_supervisor_takes_a_next_attempt_only_once_gflowd_purged_its_last(tmp_path):
    """Supervisor processes are reused (supervisor.py: forking one per attempt was most of an
    attempt's cost), but never while gflowd may still signal them about the attempt they ended."""
    home, runtime = _runtime(tmp_path)

    def start(name: str, code: int) -> None:
        _start_exiting(runtime, tmp_path, name, code)
        runtime.observe()
        runtime.purge()  # as a pass does: its starts reach the launcher after its purge

    try:
        start("a", 3)
        _ended(runtime, "a")
        first = _supervisor_of(home, "a")
        start("b", 4)  # "a" is not purged yet: its supervisor must not take "b"
        _ended(runtime, "b")
        assert _supervisor_of(home, "b") != first
        assert runtime.observe()["a"].exit_code == 3 and runtime.observe()["b"].exit_code == 4
        runtime.forget("a")
        runtime.purge()  # now it may
        taken = _until_taken_by(runtime, home, tmp_path, first, 5, "c")
        assert all(runtime.observe()[name].exit_code == 5 for name in taken)
        assert pid_alive(first)
    finally:
        runtime.close()
    wait_for(lambda: not pid_alive(first), timeout=20, message="the waiting supervisor to end with the launcher")


def test_signals_sent_to_a_supervisor_between_its_attempts_reach_neither(tmp_path):
    """A reused supervisor keeps its signal handlers between attempts (supervisor.py
    ``_catch_signals``): a TERM, HUP or INT that comes after an attempt ended (gflowd stopping a
    job that just exited) ends neither the process nor its next attempt."""
    home, runtime = _runtime(tmp_path)

    def start(name: str, code: int) -> None:
        _start_exiting(runtime, tmp_path, name, code)
        runtime.observe()
        runtime.purge()

    try:
        start("a", 3)
        _ended(runtime, "a")
        first = _supervisor_of(home, "a")
        runtime.forget("a")
        runtime.purge()  # "a" is purged: its supervisor waits for a next attempt
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            os.kill(first, sig)
        assert pid_alive(first)
        taken = _until_taken_by(runtime, home, tmp_path, first, 4, "b")
        assert all(runtime.observe()[name].exit_code == 4 for name in taken)
        assert not (home.run_dir / "attempts" / f"{taken[-1]}.1.log").exists()  # nothing to say: no trace
        assert pid_alive(first)
    finally:
        runtime.close()
    wait_for(lambda: not pid_alive(first), timeout=20, message="the waiting supervisor to end with the launcher")


def test_a_pass_hands_its_starts_over_after_its_purge_so_they_reuse_the_supervisors_it_freed(tmp_path):
    """A pass that records an exit and starts a job: the start reaches the launcher after the
    purge (``SupervisorRuntime._holding``), so the supervisor freed by that purge takes it. Handed
    over while the pass acted, a burst forked a supervisor for nearly every job. A pass that ends
    nothing hands its starts over at once: holding them would only delay them."""
    home, runtime = _runtime(tmp_path)

    def launch(name: str, code: int) -> None:
        _start_exiting(runtime, tmp_path, name, code)

    try:
        launch("a", 3)
        runtime.observe()  # act's look at what it started: nothing ended in this pass, so it goes at once
        wait_for(lambda: _record_has_run(home, "a"), timeout=20, message="a to start before any purge")
        _ended(runtime, "a")
        first = _supervisor_of(home, "a")
        wait_for(lambda: _reading(first), timeout=20, message="a's supervisor to say done and wait for work")
        # the next pass: "a"'s exit is recorded and "b" starts, as the loop does it
        runtime.forget("a")
        launch("b", 4)
        runtime.observe()
        runtime.purge()
        _ended(runtime, "b")
        assert _supervisor_of(home, "b") == first and runtime.observe()["b"].exit_code == 4
    finally:
        runtime.close()


def _reading(pid: int) -> bool:
    """``pid`` waits in read(2): a supervisor that said "done" and waits for its next attempt."""
    try:
        with open(f"/proc/{pid}/syscall") as handle:
            return handle.read().split(" ", 1)[0] == "0"
    except OSError:
        return False


def _record_has_run(home, name: str) -> bool:
    return ((record.read(str(home.run_dir / "attempts" / f"{name}.1"), ("run",)) or {}).get("run") or {}).get(
        "supervisorPid"
    ) is not None
