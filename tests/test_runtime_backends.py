"""The runtime's rooms (issue 35): the backend registry, the hold every backend shares, and an
upgrade of gflowd while jobs run. An attempt supervised by the previous release's supervisor is
adopted by this gflowd, and a Slurm job recorded in the old form (``slurmJobId``) keeps its id.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import typing
from pathlib import Path

import pytest
from helpers import wait_for

from controller.act.runtime.backends import BACKENDS, backend, switch_problem
from controller.act.runtime.holds import HOLD_FIRST, HOLD_MAX, hold
from controller.api.config import ControllerConfig
from controller.model.records import JobState
from controller.paths import Home

REPO = Path(__file__).resolve().parents[1]
PREVIOUS = "fb97fd9"  # main before the runtime was split into rooms (issue 35)


def test_every_backend_the_config_accepts_is_in_the_registry_and_answers_its_questions(tmp_path):
    assert set(typing.get_args(ControllerConfig.model_fields["backend"].annotation)) == set(BACKENDS)
    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    for name in BACKENDS:
        package = backend(name)
        assert package.unfinished(home) == [] and package.home_problem(home) is None
        assert callable(package.make_runtime) and callable(package.service_problem)
    assert switch_problem(home, "local") is None and switch_problem(home, "slurm") is None


def test_a_held_launch_waits_twice_as_long_after_each_failed_try_up_to_the_cap_and_at_once_when_space_returns():
    first = hold(None, "cannot record its launch: No space left on device (ENOSPC)", 28, 100.0)
    assert (first.reason, first.delay, first.retry_at) == ("DiskFull", HOLD_FIRST, 100.0 + HOLD_FIRST)
    assert not first.due(100.0) and first.due(100.0 + HOLD_FIRST)
    delays = []
    current = first
    for _ in range(8):
        current = hold(current, current.why, 28, 200.0)
        delays.append(current.delay)
    assert delays == [1.0, 2.0, 4.0, 8.0, HOLD_MAX, HOLD_MAX, HOLD_MAX, HOLD_MAX]
    current.retry_soon()
    assert current.due(0.0)
    assert hold(current, current.why, 28, 300.0).delay == HOLD_FIRST  # failed again: from the start
    assert hold(None, "cannot record its launch: Input/output error (EIO)", 5, 0.0).reason == "DiskError"
    assert first.pending() == {"queued": "DiskFull", "message": first.why, "held": True}


def _previous_release(tmp_path: Path) -> Path:
    """The previous release's runtime folder (its supervisor, record format, control socket and
    cgroups), as ``git archive`` gives it; skipped where the repository's history is not at hand."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, "controller/act/runtime", "controller/util/frames.py"],
        capture_output=True,
        timeout=60,
    )
    if archive.returncode != 0:
        pytest.skip(f"commit {PREVIOUS} is not in this checkout's history")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp_path / "previous", filter="data")
    folder = tmp_path / "previous" / "controller" / "act" / "runtime"
    for path in (tmp_path / "previous").rglob("*"):  # root-owned: every supervisor reads them as root
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder / "supervisor.py"


@pytest.mark.e2e  # runs a process
def test_an_attempt_supervised_by_the_previous_release_is_adopted_by_this_one_and_stops_cleanly(tmp_path, monkeypatch):
    """gflowd upgraded while a job runs: the running supervisor is the old release's code, the
    gflowd that adopts it is this one. Same record, same signals, same notices: it is found
    running (same pid), and a stop ends it with the exit recorded by the old supervisor."""
    from test_reconcile import job

    from controller.act.runtime.backends.local import launcher_pipe
    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.model.plan import Launch

    old_supervisor = _previous_release(tmp_path)
    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    monkeypatch.setattr(launcher_pipe, "MAIN_FILE", str(old_supervisor))  # the launcher the old gflowd started
    before = SupervisorRuntime(home)
    try:
        assert before.launcher.process is not None and str(old_supervisor) in before.launcher.process.args
        admitted = job("u", command=["sleep", "300"], workingDir=str(tmp_path))
        before.start(Launch("u", 1, 1, admitted, [], []))
        running = wait_for(
            lambda: (run := before.observe().get("u")) is not None and run.running and run.pid and run,
            timeout=60,
            message="the job to run under the old supervisor",
        )
    finally:
        before.close()  # gflowd stops for the upgrade; the supervisor and the job live on
    monkeypatch.undo()
    after = SupervisorRuntime(home)
    try:
        assert after.adopt() == ["u"]
        adopted = after.observe()["u"]
        assert adopted.running and adopted.pid == running.pid
        after.stop("u", 5.0, "Stopped")
        ended = wait_for(
            lambda: (run := after.observe()["u"]) is not None and not run.running and run,
            timeout=60,
            message="the adopted job to end",
        )
        assert (ended.signal, ended.stop_reason, ended.lost) == (signal.SIGTERM, "Stopped", False)
        wait_for(lambda: not os.path.exists(f"/proc/{running.pid}"), timeout=30, message="the job's process to be gone")
        after.forget("u")
        after.purge()
    finally:
        after.close()


@pytest.mark.e2e  # runs a process
def test_an_adopted_retry_reports_the_failures_counted_when_it_was_decided(tmp_path):
    """A retry launched just before gflowd died, its status never written: the launch record is all
    a restart has, and it must say how many attempts had failed (else the job gets extra retries)."""
    from test_reconcile import job

    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.model.plan import Launch

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    before = SupervisorRuntime(home)
    try:
        admitted = job("u", command=["sleep", "300"], workingDir=str(tmp_path), backoffLimit=2)
        before.start(Launch("u", 2, 1, admitted, [], [], failed=1))
        running = wait_for(
            lambda: (run := before.observe().get("u")) is not None and run.running and run.pid and run,
            timeout=60,
            message="the retry to run",
        )
        assert running.failed_before == 1
    finally:
        before.close()  # gflowd dies; the supervisor and the job live on
    after = SupervisorRuntime(home)
    try:
        assert after.adopt() == ["u"]
        adopted = after.observe()["u"]
        assert (adopted.attempt, adopted.failed_before, adopted.pid) == (2, 1, running.pid)
        after.stop("u", 5.0, "Stopped")
        ended = wait_for(
            lambda: (run := after.observe()["u"]) is not None and not run.running and run,
            timeout=60,
            message="the adopted retry to end",
        )
        assert ended.failed_before == 1
        after.forget("u")
        after.purge()
    finally:
        after.close()


@pytest.mark.e2e  # runs a process
def test_a_slurm_job_recorded_by_the_previous_release_keeps_its_job_id_across_the_upgrade(tmp_path):
    """The previous release wrote the job id as ``slurmJobId`` in the status and ``job_id`` in
    ``run/slurm/<name>.json``. This one reads both, adopts the running Slurm job, and writes the
    id back as ``backendJobId``."""
    from controller.act.runtime.backends.slurm.runtime import SlurmRuntime
    from controller.act.runtime.backends.slurm.words import comment_for, home_id

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    comment = comment_for(home_id(home), "train", 1, 1)
    (home.run_dir / "slurm").mkdir(parents=True)
    (home.run_dir / "slurm" / "train.json").write_text(
        json.dumps(
            {  # as the previous release's _Record, asdict
                "name": "train",
                "attempt": 1,
                "generation": 1,
                "comment": comment,
                "options": ["--job-name=train"],
                "script": "#!/bin/bash\nsleep 600\n",
                "run_hash": "h",
                "time_limit": None,
                "job_id": "4242",
                "devices": [],
                "node": "",
                "submitted_at": time.time() - 60,
                "error": "",
                "stop_sent": False,
            }
        )
    )
    bin_dir = tmp_path / "bin"  # the cluster's edge: squeue says the job runs on node vm1
    bin_dir.mkdir()
    listing = {
        "jobs": [
            {
                "job_id": 4242,
                "job_state": "RUNNING",
                "comment": comment,
                "nodes": "vm1",
                "gres_detail": ["gpu:1(IDX:0)"],
                "start_time": int(time.time()) - 30,
            }
        ]
    }
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(listing)}\nEOF\n")
    squeue.chmod(0o755)
    runtime = SlurmRuntime(home, base_env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert runtime.adopt() == ["train"]
    run = runtime.observe()["train"]
    assert (run.running, run.external_id, run.node, run.devices) == (True, "4242", "vm1", (0,))

    old_status = {
        "apiVersion": "gflow.dev/v1",
        "kind": "JobStatus",
        "metadata": {"name": "train"},
        "status": {"phase": "Running", "attempt": 1, "slurmJobId": "4242", "node": "vm1"},
    }
    state = JobState.from_status(old_status)
    assert state.backend_id == "4242"
    written = state.to_status()["status"]
    assert written["backendJobId"] == "4242" and "slurmJobId" not in written


def test_the_supervisors_transition_table_ends_every_live_state_and_names_real_handlers():
    """The shim's watch is its table: every state but DONE ends when the tree is gone, DONE leads
    nowhere, each named handler exists, and a stop or a deadline never replaces a stop under way."""
    from controller.act.runtime.shim.supervisor import TRANSITIONS, Event, State, Supervisor

    live = {state for state in State if state is not State.DONE}
    assert {state for state, event in TRANSITIONS if event is Event.TREE_GONE} == live
    assert all(TRANSITIONS[(state, Event.TREE_GONE)][1] is State.DONE for state in live)
    assert not any(state is State.DONE for state, _ in TRANSITIONS)
    assert all(callable(getattr(Supervisor, handler, None)) for handler, _ in TRANSITIONS.values())
    assert (State.STOPPING, Event.STOP_ASKED) not in TRANSITIONS and (State.STOPPING, Event.DEADLINE) not in TRANSITIONS
    assert (State.KILLED, Event.DEADLINE) not in TRANSITIONS  # OOMKilled stays the reason
