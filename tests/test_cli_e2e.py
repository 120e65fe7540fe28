"""gflowctl against a running gflowd, as a user drives it: apply, get, wait, logs, cancel, delete."""

from __future__ import annotations

from helpers import ctl, job_status, wait_for, wait_phase

JOB = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: {name}
  labels: {{team: vision}}
spec:
  command: {command}
"""


def test_apply_runs_the_job_and_the_cli_shows_it(home, gflowd, tmp_path):
    daemon = gflowd()
    src = tmp_path / "hello.yaml"
    src.write_text(JOB.format(name="hello", command="[sh, -c, 'echo hello from gflow']"))
    applied = ctl(home, "apply", "-f", str(src))
    assert (applied.returncode, applied.stdout) == (0, "job/hello created\n"), applied.stderr
    waited = ctl(home, "wait", "job/hello", "--for=phase=Succeeded", "--timeout", "30s")
    assert waited.returncode == 0, waited.stderr + daemon.stderr()
    listed = ctl(home, "get", "jobs", "-l", "team=vision")
    assert listed.returncode == 0
    row = listed.stdout.splitlines()[1].split()
    assert row[:4] == ["hello", "root", "Succeeded", "0"]
    assert ctl(home, "logs", "hello").stdout == "hello from gflow\n"
    described = ctl(home, "describe", "job", "hello")
    assert "Succeeded" in described.stdout and "Completed" in described.stdout


def test_apply_from_stdin_then_cancel_then_delete(home, gflowd):
    daemon = gflowd()
    applied = ctl(home, "apply", "-f", "-", stdin=JOB.format(name="long", command="[sleep, '300']"))
    assert applied.returncode == 0, applied.stderr
    wait_phase(home, "long", "Running", daemon=daemon)
    wait_for(lambda: (job_status(home, "long") or {}).get("pid"), message="the job's pid")
    cancelled = ctl(home, "cancel", "long")
    assert cancelled.stdout == "job/long cancelled\n"
    assert "cancelled: true" in (home / "jobs" / "long.yaml").read_text()
    status = wait_phase(home, "long", "Cancelled", timeout=20, daemon=daemon)
    assert status["reason"] == "UserCancelled"
    deleted = ctl(home, "delete", "job", "long")
    assert deleted.stdout == "job/long deleted\n"
    wait_for(lambda: not (home / "status" / "long.yaml").exists(), message="the status to be removed")
    gone = ctl(home, "get", "jobs", "long")
    assert gone.returncode == 1 and "not found" in gone.stderr


def test_rerun_runs_a_finished_job_again(home, gflowd, tmp_path):
    daemon = gflowd()
    marker = tmp_path / "runs"
    ctl(home, "apply", "-f", "-", stdin=JOB.format(name="again", command=f"[sh, -c, 'echo run >> {marker}']"))
    wait_phase(home, "again", "Succeeded", daemon=daemon)
    assert ctl(home, "rerun", "again").returncode == 0
    wait_for(lambda: marker.exists() and marker.read_text() == "run\nrun\n", message="a second run")
    # the second run's own end: the first's Succeeded may still be the file while the second runs
    status = wait_for(
        lambda: (s := job_status(home, "again")) and s.get("attempt") == 2 and s["phase"] == "Succeeded" and s,
        message=lambda: f"attempt 2 Succeeded: {job_status(home, 'again')}",
    )
    assert status["observedGeneration"] == 2


def test_get_gpus_lists_fake_gpus_with_their_jobs(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(
        "gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n"
    )
    daemon = gflowd("--fake-gpus", str(fake))
    ctl(home, "apply", "-f", "-", stdin=JOB.format(name="gpu", command="[sleep, '300']") + "  resources: {gpus: 1}\n")
    wait_phase(home, "gpu", "Running", daemon=daemon)
    shown = wait_for(
        lambda: (out := ctl(home, "get", "gpus").stdout) and "gpu" in out.splitlines()[1] and out,
        message="get gpus to show the job",
    )
    header, first, second = shown.splitlines()
    assert header.split() == ["INDEX", "NAME", "MEMORY", "FREE", "UTIL", "STATE", "JOBS", "USER"]
    assert first.split()[0] == "0" and "Allocated" in first and first.split()[-2:] == ["gpu", "root"]
    assert "Free" in second


def test_ttl_after_finished_removes_manifest_and_status_but_keeps_the_log(home, gflowd):
    daemon = gflowd()
    ctl(
        home,
        "apply",
        "-f",
        "-",
        stdin=JOB.format(name="brief", command="[echo, bye]") + "  ttlSecondsAfterFinished: 1s\n",
    )
    wait_phase(home, "brief", "Succeeded", daemon=daemon)
    wait_for(lambda: not (home / "jobs" / "brief.yaml").exists(), timeout=10, message="the manifest to be removed")
    wait_for(lambda: not (home / "status" / "brief.yaml").exists(), timeout=10, message="the status to be removed")
    assert (home / "logs" / "brief.log").read_text() == "bye\n"
