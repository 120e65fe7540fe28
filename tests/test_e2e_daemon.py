"""End to end: a real gflowd process, real manifest files, real job processes.

Every test drives the controller only through the spec directory and reads only what it writes
(status files, logs, /proc), the way users and gflowctl do. Waiting is poll-with-deadline.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import (
    job_status,
    line_number,
    pid_alive,
    process_state,
    read_index,
    read_log,
    read_status,
    wait_for,
    wait_phase,
    write_manifest,
)


def manifest(name: str | None, spec: str, extra_meta: str = "") -> str:
    """A Job manifest; ``spec`` is the YAML body under ``spec:`` (dedented here)."""
    meta = f"metadata:\n  name: {name}\n" if name else "metadata: {}\n"
    body = textwrap.indent(textwrap.dedent(spec).strip("\n"), "  ")
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\n{meta}{extra_meta}spec:\n{body}\n"


def gated_spec(go: Path, extra: str = "", prelude: str = "") -> str:
    """A job that runs until the file ``go`` exists: lets a test see Running, then end it."""
    return f"""\
command: [sh, -c, '{prelude}while [ ! -e "$GO" ]; do sleep 0.02; done; echo finished']
env:
  GO: {go}
{extra}"""


def sleeper_spec(extra: str = "") -> str:
    return f"command: [sleep, '300']\n{extra}"


def running_pid(home: Path, name: str, daemon) -> int:
    status = wait_phase(home, name, "Running", daemon=daemon)
    pid = wait_for(lambda: (job_status(home, name) or {}).get("pid"), message=f"a pid for {name}")
    assert pid_alive(pid), f"status says {name} runs as pid {pid}, but no such live process"
    assert status["phase"] == "Running"
    return pid


# -- the happy path --------------------------------------------------------------------------------


def test_dropped_manifest_runs_then_succeeds(home, gflowd, tmp_path):
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "hello.yaml", manifest("hello", gated_spec(go, prelude="env; ")))

    pid = running_pid(home, "hello", daemon)
    status = job_status(home, "hello")
    assert status["attempt"] == 1
    assert status["devices"] == []
    assert status["manifest"] == "jobs/hello.yaml"

    go.touch()
    status = wait_phase(home, "hello", "Succeeded", daemon=daemon)
    assert status["exitCode"] == 0
    assert status["reason"] == "Completed"
    wait_for(lambda: not pid_alive(pid), message=f"pid {pid} to end")
    log = read_log(home, "hello")
    assert "finished" in log
    env_lines = log.splitlines()
    assert "CUDA_VISIBLE_DEVICES=" in env_lines  # a CPU job sees no GPU
    assert "GFLOW_JOB_NAME=hello" in env_lines
    assert "GFLOW_ATTEMPT=1" in env_lines
    assert read_status(home, "hello")["metadata"]["name"] == "hello"


def test_failing_command_ends_failed_with_its_exit_code(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", "fails.yaml", manifest("fails", "command: [sh, -c, 'echo hi; exit 3']"))

    status = wait_phase(home, "fails", "Failed", daemon=daemon)
    assert status["exitCode"] == 3
    assert status["reason"] == "Error"
    assert "3" in status["message"]
    assert read_log(home, "fails") == "hi\n"


def test_name_defaults_to_file_stem(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", "stem-named.yaml", manifest(None, "command: ['true']"))
    wait_phase(home, "stem-named", "Succeeded", daemon=daemon)


# -- bad input -------------------------------------------------------------------------------------

BAD_TYPE = manifest(
    "bad-type",
    """\
command: [sh, -c, 'exit 0']
resources:
  gpus: "two"
""",
)
NEGATIVE = manifest(
    "negative",
    """\
command: [sh, -c, 'exit 0']
resources:
  gpus: -1
""",
)
UNKNOWN_FIELD = manifest(
    "unknown-field",
    """\
command: [sh, -c, 'exit 0']
priorty: 5
""",
)
SYNTAX_ERROR = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: not-this-name
spec:
  command: [sh, -c, 'exit 0'
  priority: 1
"""


def test_invalid_manifests_are_rejected_with_field_and_line_while_good_jobs_run(home, gflowd):
    daemon = gflowd()
    jobs = home / "jobs"
    write_manifest(jobs, "bad-type.yaml", BAD_TYPE)
    write_manifest(jobs, "negative.yaml", NEGATIVE)
    write_manifest(jobs, "unknown-field.yaml", UNKNOWN_FIELD)
    write_manifest(jobs, "broken.yaml", SYNTAX_ERROR)
    write_manifest(jobs, "good.yaml", manifest("good", "command: [sh, -c, 'echo fine']"))

    status = wait_phase(home, "bad-type", "Rejected", daemon=daemon)
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(
        f"spec.resources.gpus: must be an integer (jobs/bad-type.yaml line {line_number(BAD_TYPE, 'gpus:')})"
    ), status["message"]

    status = wait_phase(home, "negative", "Rejected", daemon=daemon)
    assert status["reason"] == "Invalid"
    assert (
        status["message"]
        == f"spec.resources.gpus: must be >= 0 (jobs/negative.yaml line {line_number(NEGATIVE, 'gpus:')})"
    )

    status = wait_phase(home, "unknown-field", "Rejected", daemon=daemon)
    assert status["reason"] == "Invalid"
    line = line_number(UNKNOWN_FIELD, "priorty:")
    assert status["message"].startswith("spec.priorty: unknown field"), status["message"]
    assert f"(jobs/unknown-field.yaml line {line})" in status["message"]
    assert "did you mean priority?" in status["message"]

    # unparseable: reported under the file stem, with the line of the problem
    status = wait_phase(home, "broken", "Rejected", daemon=daemon)
    assert status["reason"] == "YAMLError"
    assert "jobs/broken.yaml line " in status["message"]
    assert read_status(home, "not-this-name") is None

    # none of that stops a good job in the same folder
    status = wait_phase(home, "good", "Succeeded", daemon=daemon)
    assert read_log(home, "good") == "fine\n"
    assert daemon.proc.poll() is None, "gflowd must survive bad manifests"
    for name in ("bad-type", "negative", "unknown-field", "broken"):
        assert job_status(home, name)["phase"] == "Rejected"
        assert not (home / "logs" / f"{name}.log").exists(), f"rejected job {name} must not run"


def test_duplicate_name_is_rejected_and_never_disturbs_the_first(home, gflowd, tmp_path):
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "first.yaml", manifest("dup", gated_spec(go)))
    pid = running_pid(home, "dup", daemon)

    write_manifest(home / "jobs", "second.yaml", manifest("dup", "command: [sh, -c, 'echo impostor']"))
    status = wait_phase(home, "second", "Rejected", daemon=daemon)
    assert status["reason"] == "DuplicateName"
    assert "jobs/first.yaml" in status["message"] and "jobs/second.yaml" in status["message"], status["message"]

    daemon.wait_pass()
    first = job_status(home, "dup")
    assert first["phase"] == "Running" and first["pid"] == pid and first["manifest"] == "jobs/first.yaml"
    assert first["attempt"] == 1
    assert pid_alive(pid)

    go.touch()
    wait_phase(home, "dup", "Succeeded", daemon=daemon)
    assert read_log(home, "dup") == "finished\n"
    assert job_status(home, "second")["reason"] == "DuplicateName"


def test_fixing_a_rejected_manifest_admits_it(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", "negative.yaml", NEGATIVE)
    wait_phase(home, "negative", "Rejected", reason="Invalid", daemon=daemon)

    write_manifest(home / "jobs", "negative.yaml", NEGATIVE.replace("gpus: -1", "gpus: 0"))
    status = wait_phase(home, "negative", "Succeeded", daemon=daemon)
    assert status["exitCode"] == 0
    admitted = [c for c in status["conditions"] if c["type"] == "Admitted"]
    assert admitted and admitted[0]["status"] == "True"


# -- acting on a running job by editing files ------------------------------------------------------------


def test_deleting_the_manifest_stops_the_job_and_removes_its_status(home, gflowd):
    daemon = gflowd()
    path = write_manifest(home / "jobs", "sleeper.yaml", manifest("sleeper", sleeper_spec()))
    pid = running_pid(home, "sleeper", daemon)

    path.unlink()
    wait_for(
        lambda: not (home / "status" / "sleeper.yaml").exists(), message=lambda: f"status removed\n{daemon.stderr()}"
    )
    assert not pid_alive(pid), f"pid {pid} still runs after its manifest was deleted"
    assert (home / "logs" / "sleeper.log").exists(), "logs stay after a delete"


def test_a_manifest_read_half_rewritten_in_place_keeps_its_running_job(home, gflowd):
    """``>``, nano and Python's write_text truncate, then write. A pass between the two read an empty
    file: the running job was stopped as deleted and made anew. Now jobs missing from a file rewritten
    in place count only once it has read so for SHRINK_GRACE; left empty, it is a delete then."""
    from controller.observe.manifests import SHRINK_GRACE

    daemon = gflowd()
    path = write_manifest(home / "jobs", "steady.yaml", manifest("steady", sleeper_spec()))
    pid = running_pid(home, "steady", daemon)
    text = path.read_text()
    with open(path, "r+") as writer:
        began = time.monotonic()
        writer.truncate(0)  # ...and the writer is descheduled here
        # a job written after the truncation has a status: a pass has read steady.yaml empty
        write_manifest(home / "jobs", "witness.yaml", manifest("witness", sleeper_spec()))
        wait_phase(home, "witness", ("Pending", "Running"), daemon=daemon)
        if time.monotonic() - began >= SHRINK_GRACE:
            pytest.skip("the machine took longer than the grace for one pass: inconclusive, not a failure")
        writer.write(text)
    daemon.wait_pass()
    status = job_status(home, "steady")
    assert pid_alive(pid), f"steady's attempt (pid {pid}) was stopped while its manifest was being written"
    assert status["phase"] == "Running" and status["pid"] == pid, status

    path.write_text("")  # emptied for good: after the grace, with no further file event, a delete
    wait_for(
        lambda: not (home / "status" / "steady.yaml").exists(),
        message=lambda: f"steady's status removed\n{daemon.stderr()}",
    )
    assert not pid_alive(pid), f"pid {pid} still runs after its manifest was emptied"
    assert job_status(home, "witness")["phase"] in ("Pending", "Running")


def test_editing_cancelled_true_stops_a_running_job(home, gflowd):
    daemon = gflowd()
    text = manifest("to-cancel", sleeper_spec())
    write_manifest(home / "jobs", "to-cancel.yaml", text)
    pid = running_pid(home, "to-cancel", daemon)

    write_manifest(home / "jobs", "to-cancel.yaml", text + "  cancelled: true\n")
    status = wait_phase(home, "to-cancel", "Cancelled", daemon=daemon)
    assert status["reason"] == "UserCancelled"
    assert not pid_alive(pid)
    daemon.wait_pass()
    assert job_status(home, "to-cancel")["phase"] == "Cancelled", "a cancelled job stays cancelled"


@pytest.mark.parametrize(
    "new_command, exit_code, reason, log_text",
    [
        pytest.param("[sh, -c, 'echo second; exit 4']", 4, "Error", "second", id="exits-at-once"),
        pytest.param("[no-such-program-gflow-e2e]", 127, "Error", None, id="cannot-start"),
    ],
)
def test_spec_change_while_running_reruns_the_new_spec_when_the_attempt_ends(
    home, gflowd, tmp_path, new_command, exit_code, reason, log_text
):
    """A started job keeps its running attempt when its spec changes; when that attempt ends the
    job runs again with the new spec, and that run's own end is recorded (not Lost)."""
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "edited.yaml", manifest("edited", gated_spec(go)))
    pid = running_pid(home, "edited", daemon)

    write_manifest(home / "jobs", "edited.yaml", manifest("edited", f"command: {new_command}"))
    status = wait_for(
        lambda: (s := job_status(home, "edited")) and any(c["type"] == "SpecOutdated" for c in s["conditions"]) and s,
        message=lambda: f"a SpecOutdated condition: {job_status(home, 'edited')}",
    )
    assert status["phase"] == "Running" and status["pid"] == pid, "the running attempt is not touched"
    assert status["observedGeneration"] == 2

    go.touch()  # the old attempt ends (exit 0) and the new spec runs: it ends at once
    status = wait_phase(home, "edited", "Failed", daemon=daemon)
    assert status["reason"] == reason, status
    assert status["exitCode"] == exit_code, status
    assert status["observedGeneration"] == 2
    if log_text:
        assert log_text in read_log(home, "edited")


def test_stop_gives_the_whole_process_tree_its_grace_period(home, gflowd, tmp_path):
    """TERM goes to the whole tree; a child that handles TERM (to save a checkpoint) gets the
    grace period even when the job's leader (here bash) dies of TERM at once."""
    daemon = gflowd()
    saved = tmp_path / "saved"
    spec = f"""\
script: |
  python3 -c 'import os, signal, sys, time
  def term(*_):
      time.sleep(0.3)  # saving a checkpoint
      open(os.environ["SAVED"], "w").write("saved")
      sys.exit(0)
  signal.signal(signal.SIGTERM, term)
  print("ready", flush=True)
  time.sleep(300)'
  echo "python ended"
env:
  SAVED: {saved}
terminationGracePeriod: 10s
"""
    text = manifest("checkpointer", spec)
    write_manifest(home / "jobs", "checkpointer.yaml", text)
    running_pid(home, "checkpointer", daemon)
    wait_for(lambda: "ready" in read_log(home, "checkpointer"), message="the job to install its TERM handler")

    write_manifest(home / "jobs", "checkpointer.yaml", text + "  cancelled: true\n")
    status = wait_phase(home, "checkpointer", "Cancelled", daemon=daemon)
    assert status["reason"] == "UserCancelled"
    assert saved.exists(), (
        "the python child was KILLed before its TERM handler finished, well within the 10s grace "
        f"period; status: {status['message']}"
    )


# -- the daemon's own life ---------------------------------------------------------------------------


def test_second_gflowd_on_the_same_home_exits_1_with_one_line(home, gflowd):
    first = gflowd()
    second = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), "--resync", "1s"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert "already running" in lines[0]
    assert "Traceback" not in second.stderr
    assert first.proc.poll() is None, "the first gflowd keeps running"


def test_sigterm_exits_0_promptly_leaves_jobs_running_and_restart_readopts(home, gflowd, tmp_path):
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "survivor.yaml", manifest("survivor", gated_spec(go)))
    pid = running_pid(home, "survivor", daemon)

    began = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=10) == 0
    assert time.monotonic() - began < 5, "gflowd must stop promptly on SIGTERM"
    assert "Traceback" not in daemon.stderr()
    assert pid_alive(pid), "stopping gflowd must not stop running jobs"
    assert job_status(home, "survivor")["phase"] == "Running"

    again = gflowd()
    again.wait_pass()
    status = job_status(home, "survivor")
    assert status["phase"] == "Running", status
    assert status["pid"] == pid
    assert status["attempt"] == 1
    assert pid_alive(pid)


def test_crashed_gflowd_restarts_and_readopts(home, gflowd, tmp_path):
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "crash.yaml", manifest("crash", gated_spec(go)))
    pid = running_pid(home, "crash", daemon)

    daemon.proc.kill()  # no clean shutdown: the instance lock must not outlive the process
    daemon.proc.wait(timeout=10)
    assert pid_alive(pid)

    again = gflowd()
    again.wait_pass()
    status = job_status(home, "crash")
    assert status["phase"] == "Running" and status["pid"] == pid, status


def test_a_flood_killed_while_its_started_jobs_have_no_status_file_runs_each_job_once(home, gflowd, tmp_path):
    """A flood's started jobs get their status files a moment late (record/recorder.py
    ``_may_wait``); gflowd kill -9'd in that moment re-adopts them from their attempt records:
    each job runs once, and ends Succeeded.

    The moment lasts RUNNING_UNWRITTEN_MAX (1 s) from the start decision: too short to look and
    then kill on a busy machine. So gflowd is stopped (SIGSTOP) before the test looks: a stopped
    gflowd writes nothing, the state seen is the state killed. The flood lands while gflowd is
    stopped, so one pass sees all of it (a busy gflowd could otherwise take it in pieces, none more
    than a pass starts); its second pass starts only 8 jobs, a small part of that second. Where
    the machine is so busy that the moment passes unseen (every started job got its status file),
    a new gflowd (SIGTERM'd, the old one's jobs go on) gets another flood, up to four."""
    unlimited = ("--max-running-cpu-jobs", "0")  # all run at once (the default lets 64)
    go, ledger, stage = tmp_path / "go", tmp_path / "ledger", tmp_path / "stage"
    stage.mkdir()
    first = 32  # MIN_STARTS: a new gflowd's first pass starts these; the rest wait as Queued, with no status file
    spec = f"""\
command: [sh, -c, 'echo "$GFLOW_JOB_NAME $GFLOW_ATTEMPT" >> "$LEDGER"; while [ ! -e "$GO" ]; do sleep 0.3; done']
env:
  GO: {go}
  LEDGER: {ledger}
"""
    everyone: list[str] = []
    for flood in range(4):
        daemon = gflowd(*unlimited)
        names = [f"flood{flood}-{i:03d}" for i in range(first + 8)]
        everyone += names
        for name in names:
            (stage / f"{name}.yaml").write_text(manifest(name, spec))
        daemon.proc.send_signal(signal.SIGSTOP)  # all at once, as a git pull or a sweep does: one pass sees them all
        wait_for(lambda daemon=daemon: process_state(daemon.pid) == "T", message="gflowd to stop")
        for name in names:
            (stage / f"{name}.yaml").rename(home / "jobs" / f"{name}.yaml")
        daemon.proc.send_signal(signal.SIGCONT)

        def started(names=names) -> tuple[list[str], list[str]]:
            """This flood's started jobs, and those of them without a status file (a cheap look)."""
            rows = (read_index(home) or {}).get("jobs", {})
            running = [n for n in names if (rows.get(n) or {}).get("phase") == "Running"]
            return running, [n for n in running if not (home / "status" / f"{n}.yaml").exists()]

        def caught_or_passed(daemon=daemon, names=names) -> tuple[str, list[str]] | None:
            running, unwritten = started()
            if len(running) > first and unwritten:
                daemon.proc.send_signal(signal.SIGSTOP)
                wait_for(lambda: process_state(daemon.pid) == "T", message="gflowd to stop")
                _, unwritten = started()  # gflowd writes nothing now: what is seen stays so until the kill
                if unwritten:
                    return "caught", unwritten
                daemon.proc.send_signal(signal.SIGCONT)
            if len(running) == len(names) and not unwritten:
                return "passed", []  # every job of the flood started and has its status file: the moment is gone
            return None

        outcome, seen = wait_for(
            caught_or_passed,
            timeout=60,
            interval=0.005,
            message="the flood's jobs to start, some without their status file yet",
        )
        if outcome == "caught":
            break
        daemon.terminate()  # its jobs go on; the next gflowd adopts them
    else:
        pytest.fail("four floods started, and every started job had its status file whenever the test looked")
    daemon.proc.kill()
    daemon.proc.wait(timeout=10)
    assert all(job_status(home, n) is None for n in seen)

    again = gflowd(*unlimited)
    wait_for(
        lambda: all((job_status(home, n) or {}).get("phase") == "Running" for n in everyone),
        timeout=60,
        message=lambda: f"all {len(everyone)} running; index: {(read_index(home) or {}).get('counts')}",
    )
    assert {(job_status(home, n) or {}).get("attempt") for n in everyone} == {1}
    go.touch()
    wait_for(
        lambda: all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in everyone),
        timeout=60,
        message=lambda: (
            f"all {len(everyone)} succeeded; index: {(read_index(home) or {}).get('counts')}; "
            f"gflowd: {again.stderr()[-2000:]}"
        ),
    )
    runs = ledger.read_text().split("\n")[:-1]
    assert sorted(runs) == sorted(f"{n} 1" for n in everyone)  # each job ran once, as attempt 1


def test_readopted_job_that_ends_is_recorded_with_its_exit_code(home, gflowd, tmp_path):
    """After a restart the job is no longer the old gflowd's; its end is still seen, exit code and all."""
    daemon = gflowd()
    go = tmp_path / "go"
    write_manifest(home / "jobs", "adopted.yaml", manifest("adopted", gated_spec(go)))
    pid = running_pid(home, "adopted", daemon)
    assert daemon.terminate() == 0
    again = gflowd()
    again.wait_pass()
    assert job_status(home, "adopted")["pid"] == pid

    go.touch()
    status = wait_phase(home, "adopted", ("Succeeded", "Failed"), daemon=again)
    assert status["phase"] == "Succeeded" and status["exitCode"] == 0, status
    assert read_log(home, "adopted") == "finished\n"


def test_job_that_ends_while_gflowd_is_down_is_recorded_on_restart(home, gflowd, tmp_path):
    daemon = gflowd()
    go = tmp_path / "go"
    spec = f"""\
command: [sh, -c, 'while [ ! -e "$GO" ]; do sleep 0.02; done; echo bye; exit 3']
env:
  GO: {go}
"""
    write_manifest(home / "jobs", "while-down.yaml", manifest("while-down", spec))
    pid = running_pid(home, "while-down", daemon)
    assert daemon.terminate() == 0

    go.touch()
    wait_for(lambda: not pid_alive(pid), message=f"pid {pid} to end while gflowd is down")
    assert job_status(home, "while-down")["phase"] == "Running", "nobody wrote the status meanwhile"

    again = gflowd()
    status = wait_phase(home, "while-down", "Failed", daemon=again)
    assert status["reason"] == "Error" and status["exitCode"] == 3, status
    assert read_log(home, "while-down") == "bye\n"


# -- GPUs ----------------------------------------------------------------------------------------------------

TWO_FAKE_GPUS = """\
gpus:
  - {name: NVIDIA A100-SXM4-40GB, memory: 40Gi}
  - {name: NVIDIA A100-SXM4-40GB, memory: 40Gi}
"""


def test_fake_gpus_bind_devices_and_refuse_what_never_fits(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(TWO_FAKE_GPUS)
    daemon = gflowd("--fake-gpus", fake)
    go = tmp_path / "go"
    write_manifest(
        home / "jobs", "one-gpu.yaml", manifest("one-gpu", gated_spec(go, "resources:\n  gpus: 1\n", prelude="env; "))
    )
    write_manifest(
        home / "jobs", "eight-gpus.yaml", manifest("eight-gpus", "command: ['true']\nresources:\n  gpus: 8\n")
    )

    running_pid(home, "one-gpu", daemon)
    status = job_status(home, "one-gpu")
    assert status["devices"] == [0]
    assert len(status["deviceUUIDs"]) == 1
    log = wait_for(
        lambda: "CUDA_VISIBLE_DEVICES=0" in read_log(home, "one-gpu").splitlines() and read_log(home, "one-gpu"),
        message=lambda: f"CUDA_VISIBLE_DEVICES=0 in the log: {read_log(home, 'one-gpu')!r}",
    )
    lines = log.splitlines()
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in lines
    assert "MASTER_ADDR=127.0.0.1" in lines
    assert any(line.startswith("MASTER_PORT=") and line[len("MASTER_PORT=") :].isdigit() for line in lines)

    status = wait_phase(home, "eight-gpus", "Pending", reason="Unschedulable", daemon=daemon)
    assert "8" in status["message"] and "2" in status["message"], status["message"]
    assert not (home / "logs" / "eight-gpus.log").exists()

    go.touch()
    wait_phase(home, "one-gpu", "Succeeded", daemon=daemon)
    daemon.wait_pass()
    assert job_status(home, "eight-gpus")["reason"] == "Unschedulable", "never silently started"


def test_a_home_deeper_than_a_socket_path_may_be_runs_jobs(tmp_path, gflowd):
    """run/notify.sock under a home past sun_path's 108 bytes: gflowd binds it through its folder's
    descriptor (it used to exit with "AF_UNIX path too long"), and supervisors send to it the same way."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "home"
    (deep / "jobs").mkdir(parents=True)
    assert len(str(deep / "run" / "notify.sock")) > 108
    write_manifest(deep / "jobs", "quick.yaml", manifest("quick", "command: ['true']"))
    daemon = gflowd(home=deep)
    status = wait_phase(deep, "quick", "Succeeded", daemon=daemon)
    assert status["exitCode"] == 0
    assert "Traceback" not in daemon.stderr()


def test_the_end_of_an_attempt_under_a_reused_supervisor_wakes_gflowd_without_a_notice(home, gflowd):
    """A supervisor that lives on for a next attempt never exits, so no pidfd tells gflowd its
    attempt ended, and its notice datagram may be dropped (a full queue): the launcher wakes gflowd
    instead. With no notice socket at all and a resync of a minute, the second job (under the first
    one's supervisor) must still be seen to end at once."""
    daemon = gflowd("--resync", "60s")
    write_manifest(home / "jobs", "first.yaml", manifest("first", "command: ['true']"))
    wait_phase(home, "first", "Succeeded", timeout=20, daemon=daemon)
    (home / "run" / "notify.sock").unlink()  # every notice is lost from now on
    write_manifest(home / "jobs", "second.yaml", manifest("second", "command: ['true']"))
    status = wait_phase(home, "second", "Succeeded", timeout=20, daemon=daemon)
    assert status["exitCode"] == 0
