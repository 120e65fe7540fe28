"""One user holding the box (issue 32 holes 4, 5, 6's limits, 10's CPU-only flood), as the attacks
were made: two ordinary users made with ``useradd`` (alice and mallory) write manifests into a
shared spec dir (1777) served by a root gflowd on fake GPUs, with gflowd's default config.

- mallory's 60 jobs at ``priority: 2147483647`` do not start before alice's job;
- mallory's ``gpus: 2, start: +3650d, duration: 36500d`` Reservation is Rejected/Forbidden and
  fences nothing: alice's job without a timeLimit runs on those GPUs;
- mallory's 1001st waiting job is Rejected/QueueLimit;
- 300 CPU-only jobs: at most 64 run at once, the rest wait (JobLimit).
Each failed on the code before the policy (docs/multi-user.md, "Policy").
"""

from __future__ import annotations

import contextlib
import io
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import fake_gpus_file, job_status, read_status, run_as, wait_for, wait_phase

from controller.cli.main import main

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: useradd, and gflowd as root running jobs as users"
)

TOP = 2**31 - 1


@pytest.fixture
def users():
    """Two fresh ordinary users, removed afterwards: {"alice": uid, "mallory": uid}."""
    made = {}
    try:
        for short in ("alice", "mallory"):
            name = f"gfp-{short}-{os.getpid() % 100000}"
            subprocess.run(["userdel", name], capture_output=True)  # a leftover of a killed run
            subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)
            made[short] = (name, pwd.getpwnam(name).pw_uid)
        yield made
    finally:
        for name, _ in made.values():
            subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared():
    root = Path(tempfile.mkdtemp(prefix="gflow-policy-e2e-"))
    os.chmod(root, 0o755)
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "jobs", 0o1777)  # every user may add manifests; sticky: only the owner removes one
    yield home
    shutil.rmtree(root, ignore_errors=True)


def submit_as(uid: int, spec_dir: Path, filename: str, text: str) -> None:
    """The user writes the manifest (so it is theirs), temp file and rename, as an editor does."""

    def write() -> int:
        tmp = spec_dir / f".{filename}.tmp"
        tmp.write_text(text)
        os.rename(tmp, spec_dir / filename)
        return 0

    code, err = run_as(uid, write)
    assert code == 0, err


def jobs(prefix: str, n: int, spec: str) -> str:
    return "".join(f"---\nmetadata: {{name: {prefix}{i}}}\nspec:\n{spec}" for i in range(n))


def phases(home: Path, prefix: str, n: int) -> list[tuple[str | None, str | None]]:
    out = []
    for i in range(n):
        status = job_status(home, f"{prefix}{i}") or {}
        out.append((status.get("phase"), status.get("reason")))
    return out


def test_mallorys_top_priority_jobs_do_not_run_before_alices(users, shared, gflowd, tmp_path):
    (_, alice), (_, mallory) = users["alice"], users["mallory"]
    daemon = gflowd("--fake-gpus", fake_gpus_file(tmp_path / "gpus.yaml", 1), home=shared)
    spec = shared / "jobs"
    (spec / "blocker.yaml").write_text(
        "metadata: {name: blocker}\nspec:\n  command: [sleep, '600']\n  resources: {gpus: 1}\n"
    )
    wait_phase(shared, "blocker", "Running", daemon=daemon, timeout=60)
    submit_as(
        alice, spec, "a.yaml", "metadata: {name: alice-job}\nspec:\n  command: ['true']\n  resources: {gpus: 1}\n"
    )
    wait_phase(shared, "alice-job", "Pending", daemon=daemon, timeout=60)
    submit_as(
        mallory,
        spec,
        "m.yaml",
        jobs("m", 60, f"  command: [sleep, '600']\n  resources: {{gpus: 1}}\n  priority: {TOP}\n"),
    )
    wait_for(
        lambda: all(p == "Pending" for p, _ in phases(shared, "m", 60)),
        timeout=90,
        message=lambda: f"mallory's 60 jobs to wait: {phases(shared, 'm', 60)}\n{daemon.stderr()[-2000:]}",
    )
    (spec / "blocker.yaml").unlink()  # the GPU frees: alice's job is next, whatever mallory's priority
    wait_phase(shared, "alice-job", "Succeeded", daemon=daemon, timeout=90)
    # (before the policy, mallory's first job took the GPU and held it: alice's never ran)
    wait_for(lambda: sum(p == "Running" for p, _ in phases(shared, "m", 60)) == 1, timeout=60)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--home", str(shared), "describe", "job", "m59"]) == 0
    assert re.search(
        r"^Queue Order: +#\d+: class default \(rank 0\); behind jobs of the same user", out.getvalue(), re.M
    ), out.getvalue()


def test_mallorys_decade_long_reservation_is_forbidden_and_blocks_nobody(users, shared, gflowd, tmp_path):
    (mallory_name, mallory), (_, alice) = users["mallory"], users["alice"]
    daemon = gflowd("--fake-gpus", fake_gpus_file(tmp_path / "gpus.yaml", 2), home=shared)
    spec = shared / "jobs"
    submit_as(
        mallory,
        spec,
        "hog.yaml",
        f"kind: Reservation\nmetadata: {{name: hog}}\nspec:\n  users: [{mallory_name}]\n"
        "  gpus: 2\n  start: '+3650d'\n  duration: 36500d\n",
    )
    record = wait_for(
        lambda: (
            (read_status(shared, "hog") or {}).get("status", {}).get("phase") in ("Rejected", "Pending", "Active")
            and read_status(shared, "hog")["status"]
        ),
        timeout=60,
        message=lambda: f"the reservation's status\n{daemon.stderr()[-2000:]}",
    )
    assert (record["phase"], record["reason"]) == ("Rejected", "Forbidden"), record
    for bound in ("reservations.maxGpus", "reservations.maxDuration", "reservations.maxStartAhead"):
        assert bound in record["message"], record["message"]
    submit_as(
        alice, spec, "a.yaml", "metadata: {name: alice-job}\nspec:\n  command: ['true']\n  resources: {gpus: 2}\n"
    )
    wait_phase(shared, "alice-job", "Succeeded", daemon=daemon, timeout=90)


def test_mallorys_1001st_waiting_job_is_rejected(users, shared, gflowd, tmp_path):
    (_, mallory), (_, alice) = users["mallory"], users["alice"]
    daemon = gflowd("--fake-gpus", fake_gpus_file(tmp_path / "gpus.yaml", 1), home=shared)
    spec = shared / "jobs"
    submit_as(
        mallory,
        spec,
        "flood.yaml",
        jobs("m-", 1001, "  command: ['true']\n  resources: {gpus: 1}\n  startAfter: '+1d'\n"),
    )
    status = wait_phase(shared, "m-1000", "Rejected", daemon=daemon, timeout=180)
    assert status["reason"] == "QueueLimit", status
    assert status["message"].startswith(
        f"user {users['mallory'][0]} already has 1000 jobs waiting to start, the most maxPendingJobsPerUser allows"
    ), status["message"]
    wait_phase(shared, "m-999", "Pending", reason="StartAfter", daemon=daemon, timeout=60)
    submit_as(
        alice, spec, "a.yaml", "metadata: {name: alice-job}\nspec:\n  command: ['true']\n  resources: {gpus: 1}\n"
    )
    wait_phase(shared, "alice-job", "Succeeded", daemon=daemon, timeout=90)  # her own queue is hers


def test_300_cpu_only_jobs_run_at_most_64_at_once(users, shared, gflowd, tmp_path):
    (_, mallory) = users["mallory"]
    daemon = gflowd("--fake-gpus", fake_gpus_file(tmp_path / "gpus.yaml", 0), home=shared)
    submit_as(mallory, shared / "jobs", "cpu.yaml", jobs("c", 300, "  command: [sleep, '600']\n"))

    def settled():
        seen = phases(shared, "c", 300)
        running = sum(p == "Running" for p, _ in seen)
        limited = sum((p, r) == ("Pending", "JobLimit") for p, r in seen)
        assert running <= 64, f"{running} CPU-only jobs running"
        return running == 64 and limited == 236

    wait_for(
        settled,
        timeout=240,
        interval=0.5,
        message=lambda: f"64 running, 236 JobLimit: {sorted(set(phases(shared, 'c', 300)))}\n{daemon.stderr()[-2000:]}",
    )
    daemon.wait_pass(timeout=60)
    assert sum(p == "Running" for p, _ in phases(shared, "c", 300)) == 64
