"""The Slurm backend against a real Slurm: ``hack/slurm-dev.sh`` runs slurmctld + slurmd on localhost
with 4 GPUs declared as GRES, and a real ``gflowd --backend slurm`` submits to it.

Skipped, with the reason, where Slurm's Debian packages are not installed or we are not root
(slurmd must be). ``.ci/run`` installs them. What is checked is what a user sees: status files,
logs, and Slurm's own view (``squeue --json``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import job_status, read_log, wait_for, wait_phase, write_manifest

REPO = Path(__file__).resolve().parent.parent
DEV = REPO / "hack" / "slurm-dev.sh"
SLURM_DIR = os.environ.get("SLURM_DEV_DIR", "/tmp/gflow-slurm-dev")
SLURM_ENV = {"SLURM_CONF": f"{SLURM_DIR}/slurm.conf"}


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm tests need root (slurmd runs jobs as their users)"
    missing = [
        c
        for c in ("slurmctld", "slurmd", "sbatch", "munged")
        if not (shutil.which(c) or os.path.exists(f"/usr/sbin/{c}"))
    ]
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}): apt-get install -y slurmctld slurmd slurm-client munge"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


@pytest.fixture(scope="module")
def slurm():
    """The dev cluster, up; stopped again at the end by the last module using it, if tests started it."""
    import fcntl

    env = {**os.environ, **SLURM_ENV}
    os.makedirs(SLURM_DIR, exist_ok=True)
    # another test run (another checkout) may share the cluster: it is stopped only by the last user
    users = open(os.path.join(SLURM_DIR, ".test-users"), "w")
    fcntl.flock(users, fcntl.LOCK_SH)
    # started by tests (this module or another's, on another xdist worker): the last of them stops it;
    # one a person started stays up
    marker = os.path.join(SLURM_DIR, ".started-by-tests")
    if subprocess.run(["bash", str(DEV), "status"], env=env, capture_output=True).returncode != 0:
        open(marker, "w").close()
    start = subprocess.run(["bash", str(DEV), "start"], env=env, capture_output=True, text=True, timeout=90)
    if start.returncode != 0:
        users.close()
        if "mknod is not permitted" in start.stderr:  # the environment, not our code
            pytest.skip(f"hack/slurm-dev.sh cannot make its fake GPU devices here: {start.stderr.strip()}")
        pytest.fail(f"hack/slurm-dev.sh start failed:\n{start.stderr}")
    yield env
    try:
        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        alone = True
    except BlockingIOError:
        alone = False
    if alone and os.path.exists(marker):
        subprocess.run(["bash", str(DEV), "stop"], env=env, capture_output=True, timeout=60)
        os.unlink(marker)
    users.close()


def squeue(env: dict[str, str], timeout: float = 60) -> list[dict]:
    """The cluster's jobs. A slurmctld busy on a loaded machine answers squeue with an error for a
    while (CI shares its machine): ask again until ``timeout``, then fail with what squeue said."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(["squeue", "--json", "--states=all"], env=env, capture_output=True, text=True)
        if done.returncode == 0:
            return json.loads(done.stdout)["jobs"]
        if time.monotonic() > deadline:
            raise AssertionError(f"squeue failed for {timeout:.0f} s: {done.stderr.strip()}")
        time.sleep(0.5)


def slurm_jobs_of(env: dict[str, str], home: Path, name: str) -> list[dict]:
    """Slurm jobs this home's gflowd submitted for job ``name`` (by the comment every submission carries)."""
    from controller.act.runtime.backends.slurm.words import home_id
    from controller.paths import Home

    prefix = f"gflow:{home_id(Home.resolve(home))}:{name}:"
    return [j for j in squeue(env) if str(j.get("comment") or "").startswith(prefix)]


def slurm_state(env: dict[str, str], job_id: str) -> str:
    for job in squeue(env):
        if str(job["job_id"]) == str(job_id):
            return str(job["job_state"])
    return ""


@pytest.fixture
def cluster_daemon(slurm, gflowd, home: Path):
    """``start()``: a gflowd with the slurm backend on ``home``; every Slurm job it made is
    cancelled at the end, so no test leaves work on the cluster."""

    def start(*args: str, home: Path = home):
        return gflowd("--backend", "slurm", *args, env=SLURM_ENV, home=home)

    yield start
    from controller.act.runtime.backends.slurm.words import home_id
    from controller.paths import Home

    prefix = f"gflow:{home_id(Home.resolve(home))}:"
    live = [
        str(j["job_id"])
        for j in squeue(slurm)
        if str(j.get("comment") or "").startswith(prefix) and j["job_state"] in ("PENDING", "RUNNING", "CONFIGURING")
    ]
    if live:
        subprocess.run(["scancel", *live], env=slurm, capture_output=True)


def test_a_gpu_job_runs_on_slurm_and_reports_its_slurm_job_and_devices(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(
        home / "jobs",
        "g1.yaml",
        (
            "spec:\n"
            "  script: |\n"
            '    echo "devices=$CUDA_VISIBLE_DEVICES job=$GFLOW_JOB_NAME attempt=$GFLOW_ATTEMPT"\n'
            "  resources: {gpus: 1}\n"
        ),
    )
    status = wait_phase(home, "g1", "Succeeded", timeout=30, daemon=daemon)
    assert status["exitCode"] == 0
    job_id = status["backendJobId"]
    assert slurm_state(slurm, job_id) == "COMPLETED"
    assert status["node"] == socket.gethostname().split(".")[0]
    log = read_log(home, "g1")
    given = log.split("devices=")[1].split()[0]  # what Slurm exported to the job
    assert status["devices"] == [int(d) for d in given.split(",")] and len(status["devices"]) == 1
    assert "job=g1 attempt=1" in log
    [submitted] = slurm_jobs_of(slurm, home, "g1")
    assert str(submitted["job_id"]) == job_id and submitted["comment"].endswith(":g1:a1")
    described = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "--home", str(home), "describe", "job", "g1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    slurm_line = next(line for line in described.splitlines() if line.startswith("Backend Job"))
    assert slurm_line.split()[-1] == job_id


def test_exit_code_3_is_failed_with_exit_code_3(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(home / "jobs", "e3.yaml", "spec:\n  command: [sh, -c, 'echo bye; exit 3']\n")
    status = wait_phase(home, "e3", "Failed", timeout=30, daemon=daemon)
    assert (status["reason"], status["exitCode"]) == ("Error", 3)
    assert slurm_state(slurm, status["backendJobId"]) == "FAILED"
    assert read_log(home, "e3") == "bye\n"


def test_a_time_limit_ends_deadline_exceeded(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(home / "jobs", "slow.yaml", "spec:\n  command: [sleep, '120']\n  timeLimit: 2s\n")
    status = wait_phase(home, "slow", "Failed", timeout=40, daemon=daemon)
    assert status["reason"] == "DeadlineExceeded", status
    # gflowd stops it at 2 s (Slurm itself counts whole minutes and would TIMEOUT at 1 min)
    assert slurm_state(slurm, status["backendJobId"]) in ("CANCELLED", "TIMEOUT")


def test_cancel_by_edit_cancels_the_slurm_job(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    path = write_manifest(home / "jobs", "long.yaml", "spec:\n  command: [sleep, '120']\n  resources: {gpus: 1}\n")
    status = wait_phase(home, "long", "Running", reason="Started", timeout=30, daemon=daemon)
    job_id = status["backendJobId"]
    wait_for(lambda: slurm_state(slurm, job_id) == "RUNNING", timeout=15, message="Slurm to run it")
    write_manifest(home / "jobs", "long.yaml", path.read_text() + "  cancelled: true\n")
    status = wait_phase(home, "long", "Cancelled", timeout=30, daemon=daemon)
    assert status["reason"] == "UserCancelled"
    assert slurm_state(slurm, job_id) == "CANCELLED"


def test_a_dependent_job_is_submitted_after_its_parent_succeeded(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(
        home / "jobs",
        "flow.yaml",
        (
            "metadata: {name: parent}\nspec:\n  command: [sleep, '2']\n"
            "---\n"
            "metadata: {name: child}\nspec:\n  command: [echo, child ran]\n  dependsOn: [parent]\n"
        ),
    )
    waiting = wait_phase(home, "child", "Pending", reason="Dependency", timeout=30, daemon=daemon)
    assert "parent" in waiting["message"]
    child = wait_phase(home, "child", "Succeeded", timeout=40, daemon=daemon)
    parent = job_status(home, "parent")
    assert parent["phase"] == "Succeeded"
    jobs = {str(j["job_id"]): j for j in squeue(slurm)}
    p, c = jobs[parent["backendJobId"]], jobs[child["backendJobId"]]
    assert c["submit_time"] >= p["end_time"], (p["end_time"], c["submit_time"])
    assert read_log(home, "child") == "child ran\n"


def test_a_job_slurm_cannot_place_fails_with_sbatchs_reason(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(home / "jobs", "big.yaml", "spec:\n  command: [true]\n  resources: {gpus: 9}\n")
    status = wait_phase(home, "big", "Failed", timeout=30, daemon=daemon)
    assert "sbatch refused the job" in status["message"], status
    assert "exitCode" not in status, status  # it never ran: no exit code (it said 127, issue 37 item 6)
    # slurmctld keeps a record of the refused submission (FAILED, BadConstraints); nothing runs
    assert all(j["job_state"] == "FAILED" for j in slurm_jobs_of(slurm, home, "big"))


def test_a_job_waiting_for_gpus_is_pending_with_slurms_reason(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(home / "jobs", "all.yaml", "spec:\n  command: [sleep, '120']\n  resources: {gpus: 4}\n")
    wait_phase(home, "all", "Running", reason="Started", timeout=30, daemon=daemon)
    write_manifest(home / "jobs", "one.yaml", "spec:\n  command: [true]\n  resources: {gpus: 1}\n")
    status = wait_phase(home, "one", "Pending", reason="Resources", timeout=30, daemon=daemon)
    assert "Slurm job" in status["message"] and status["backendJobId"]
    assert "startTime" not in status
    os.unlink(home / "jobs" / "all.yaml")  # deleting the manifest cancels it in Slurm: GPUs free
    wait_phase(home, "one", "Succeeded", timeout=30, daemon=daemon)


def test_a_controller_killed_right_after_submission_does_not_submit_twice(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(home / "jobs", "once.yaml", "spec:\n  command: [sleep, '3']\n")
    wait_for(lambda: slurm_jobs_of(slurm, home, "once"), timeout=30, interval=0.005, message="the submission")
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.proc.wait(10)
    again = cluster_daemon()
    status = wait_phase(home, "once", "Succeeded", timeout=40, daemon=again)
    submitted = slurm_jobs_of(slurm, home, "once")
    assert len(submitted) == 1, submitted
    assert status["backendJobId"] == str(submitted[0]["job_id"]) and status["attempt"] == 1


def test_an_interrupted_submission_is_adopted_by_comment_not_resubmitted(slurm, home: Path, tmp_path: Path):
    """The window a kill -9 rarely hits: sbatch done, its job id not yet recorded. The record
    says only "about to submit"; the restarted runtime finds the job by its comment."""
    from controller.act.runtime.backends.slurm.runtime import SlurmRuntime, comment_for, home_id
    from controller.paths import Home

    h = Home.resolve(home)
    h.ensure()
    env = {**os.environ, **SLURM_ENV}
    comment = comment_for(home_id(h), "lost", 1, 1)
    out = subprocess.run(
        ["sbatch", "--parsable", f"--comment={comment}", f"--output={tmp_path}/o.log", "--wrap", "sleep 1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    existing = out.strip().split(";")[0]
    record = {
        "name": "lost",
        "attempt": 1,
        "generation": 1,
        "comment": comment,
        "options": [f"--output={tmp_path}/o.log"],
        "script": "#!/bin/bash\nsleep 1\n",
        "submitted_at": time.time(),
    }
    (h.run_dir / "slurm").mkdir(parents=True, exist_ok=True)
    (h.run_dir / "slurm" / "lost.json").write_text(json.dumps(record))
    runtime = SlurmRuntime(h, base_env=env)
    assert runtime.adopt() == ["lost"]
    assert runtime.records["lost"].job_id == existing
    assert [str(j["job_id"]) for j in squeue(env) if j.get("comment") == comment] == [existing]
    run = wait_for(lambda: (r := runtime.observe()["lost"]) and not r.running and r, timeout=30)
    assert (run.exit_code, run.external_id) == (0, existing)


def test_a_slurm_job_slurm_has_forgotten_is_lost(slurm, home: Path):
    """squeue forgets a finished job after MinJobAge; without slurmdbd sacct knows nothing either
    (the dev cluster has no accounting): the attempt is Lost, said in one sentence."""
    from controller.act.runtime.backends.slurm.runtime import SlurmRuntime
    from controller.paths import Home

    h = Home.resolve(home)
    h.ensure()
    (h.run_dir / "slurm").mkdir(parents=True, exist_ok=True)
    record = {
        "name": "old",
        "attempt": 3,
        "generation": 2,
        "comment": "gflow:x:old:g2:a3",
        "options": [],
        "script": "",
        "job_id": "987654",
        "submitted_at": time.time(),
    }
    (h.run_dir / "slurm" / "old.json").write_text(json.dumps(record))
    runtime = SlurmRuntime(h, base_env={**os.environ, **SLURM_ENV})
    assert runtime.adopt() == ["old"]
    run = runtime.observe()["old"]
    assert (run.running, run.lost, run.attempt, run.external_id) == (False, True, 3, "987654")
    assert "no longer known to Slurm" in run.error
    assert runtime._accounting is False  # sacct said accounting is disabled, and is not asked again


def test_suspend_cancels_in_slurm_and_resume_submits_the_next_attempt(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    path = write_manifest(home / "jobs", "held.yaml", "spec:\n  command: [sleep, '120']\n")
    first = wait_phase(home, "held", "Running", reason="Started", timeout=30, daemon=daemon)
    write_manifest(home / "jobs", "held.yaml", path.read_text() + "  suspend: true\n")
    wait_phase(home, "held", "Pending", reason="Suspended", timeout=30, daemon=daemon)
    assert slurm_state(slurm, first["backendJobId"]) == "CANCELLED"
    write_manifest(home / "jobs", "held.yaml", path.read_text().replace("  suspend: true\n", ""))
    second = wait_phase(home, "held", "Running", reason="Started", timeout=30, daemon=daemon)
    assert second["attempt"] == 2 and second["backendJobId"] != first["backendJobId"]
    comments = sorted(j["comment"].rsplit(":", 1)[1] for j in slurm_jobs_of(slurm, home, "held"))
    assert comments == ["a1", "a2"]


def test_retries_are_new_submissions_until_the_backoff_limit(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(home / "jobs", "flaky.yaml", "spec:\n  command: [sh, -c, 'exit 1']\n  backoffLimit: 1\n")
    status = wait_phase(home, "flaky", "Failed", timeout=40, daemon=daemon)
    assert (status["reason"], status["attempt"], status["exitCode"]) == ("BackoffLimitExceeded", 2, 1)
    submitted = slurm_jobs_of(slurm, home, "flaky")
    assert sorted(j["comment"].rsplit(":", 1)[1] for j in submitted) == ["a1", "a2"]
    assert {j["job_state"] for j in submitted} == {"FAILED"}
    assert (home / "logs" / "flaky.1.log").exists()  # attempt 1's log kept, as locally


def test_a_job_runs_in_slurm_as_the_owner_of_its_manifest(slurm, gflowd):
    """SPEC 8 on a cluster: a root gflowd submits with --uid/--gid of the manifest's owner."""
    import shutil as sh
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="gflow-slurm-uid-"))  # under /tmp: the job's user must reach its log
    try:
        root.chmod(0o755)
        (root / "jobs").mkdir()
        path = write_manifest(
            root / "jobs", "who.yaml", "spec:\n  command: [sh, -c, 'echo \"uid=$(id -u) gid=$(id -g)\"']\n"
        )
        os.chown(path, 65534, 65534)
        daemon = gflowd("--backend", "slurm", env=SLURM_ENV, home=root)
        wait_phase(root, "who", "Succeeded", timeout=30, daemon=daemon)
        assert read_log(root, "who") == "uid=65534 gid=65534\n"
        assert (root / "logs" / "who.log").stat().st_uid == 65534
        daemon.terminate()
    finally:
        sh.rmtree(root, ignore_errors=True)


def test_a_users_priority_is_submitted_at_the_nice_that_user_may_set(slurm, gflowd):
    """Issue 37 item 3, the backend: a root gflowd submits with operator rights, but another
    user's ``priority`` must not become a negative nice they could not set themselves (it would
    put their job ahead of the whole cluster's queue). Root's own manifest still gets one."""
    import shutil as sh
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="gflow-slurm-nice-"))  # under /tmp: the job's user must reach its log
    daemon = None
    try:
        root.chmod(0o755)
        (root / "jobs").mkdir()
        for name, owner in (("theirs", 65534), ("roots", 0)):
            path = write_manifest(root / "jobs", f"{name}.yaml", "spec:\n  command: [true]\n  priority: 10\n")
            os.chown(path, owner, owner)
        daemon = gflowd("--backend", "slurm", env=SLURM_ENV, home=root)
        nice = {}
        for name in ("theirs", "roots"):
            job_id = wait_phase(root, name, "Succeeded", timeout=60, daemon=daemon)["backendJobId"]
            shown = subprocess.run(
                ["scontrol", "show", "job", "-o", job_id], env=slurm, capture_output=True, text=True, check=True
            ).stdout
            nice[name] = next(word.split("=", 1)[1] for word in shown.split() if word.startswith("Nice="))
        assert nice == {"theirs": "0", "roots": "-10"}, nice
    finally:
        if daemon is not None:
            daemon.terminate()  # before its home goes, or it writes there again
        sh.rmtree(root, ignore_errors=True)


def test_a_job_over_its_memory_is_oomkilled(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    write_manifest(
        home / "jobs",
        "hog.yaml",
        (
            "spec:\n"
            "  command: [python3, -c, 'import time; x = bytearray(300 * 2**20); time.sleep(30)']\n"
            "  resources: {memory: 50Mi}\n"
        ),
    )
    status = wait_phase(home, "hog", "Failed", timeout=40, daemon=daemon)
    assert status["reason"] == "OOMKilled", status
    assert "memory" in status["message"]


def test_a_checkpoint_is_sbatchs_signal_before_the_time_limit_and_requeue(slurm, cluster_daemon, home: Path):
    """spec.checkpoint under the Slurm backend: Slurm itself sends the signal ``before`` its time
    limit to the batch shell (B:, scope Main); it may send it up to a minute early (sbatch(1)),
    here at once. requeue: true is sbatch's --requeue."""
    daemon = cluster_daemon()
    write_manifest(
        home / "jobs",
        "ck.yaml",
        (
            "spec:\n"
            "  timeLimit: 60s\n"
            "  checkpoint: {signal: USR1, before: 50s, requeue: true}\n"
            "  script: |\n"
            "    trap 'echo \"got-$GFLOW_CHECKPOINT_SIGNAL restarts=$GFLOW_RESTART_COUNT\"; exit 0' USR1\n"
            "    echo started\n"
            "    while true; do sleep 0.2; done\n"
        ),
    )
    status = wait_phase(home, "ck", ("Succeeded", "Failed"), timeout=120, daemon=daemon)
    assert "got-USR1 restarts=0" in read_log(home, "ck"), (read_log(home, "ck"), status)
    assert status["phase"] == "Succeeded", status  # the trap ended it before gflowd's limit did
    [submitted] = slurm_jobs_of(slurm, home, "ck")
    assert submitted.get("requeue") is True, submitted


def test_a_failed_slurm_jobs_reason_comes_from_its_output(slurm, cluster_daemon, home: Path):
    """The same classification as on one box (docs/failures.md), from the tail of the output file
    Slurm wrote: a CUDA out-of-memory traceback is CUDAOutOfMemory with its fix, not FAILED/Error."""
    daemon = cluster_daemon()
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.83 GiB. GPU 0 has a total capacity "
        "of 79.25 GiB of which 1.02 GiB is free."
    )
    write_manifest(
        home / "jobs",
        "oom.yaml",
        f"spec:\n  script: |\n    echo 'epoch 1'\n    echo '{oom}' >&2\n    exit 1\n",
    )
    status = wait_phase(home, "oom", "Failed", timeout=60, daemon=daemon)
    assert (status["reason"], status["exitCode"]) == ("CUDAOutOfMemory", 1), status
    assert "lower the batch size" in status["message"], status
    assert slurm_state(slurm, status["backendJobId"]) == "FAILED"
    triage = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "--home", str(home), "triage", "oom"],
        capture_output=True,
        text=True,
    )
    assert triage.returncode == 0 and "CUDAOutOfMemory" in triage.stdout, triage.stdout + triage.stderr
