"""What ``apply`` and ``run`` say beyond ``created``, end to end with real processes: a job gflowd
finds can never start on this machine (still created), and no gflowd running (the job waits for
it; verbs that read statuses say they may be stale)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import helpers
import pytest
from helpers import wait_phase


def ctl(home: Path, *argv: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return helpers.ctl(home, *argv, stdin=stdin, cwd=cwd, env={"XDG_STATE_HOME": str(Path(home).parent / "state")})


pytestmark = pytest.mark.fake_gpus(
    4, gpu="{name: NVIDIA A100-SXM4-40GB, memory: 40Gi}"
)  # what the fake_gpus fixture writes


BIG = "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {name: big}\nspec:\n  command: ['true']\n  resources: {gpus: 99}\n"


def test_apply_warns_when_gflowd_finds_the_job_can_never_start(home, gflowd, fake_gpus, tmp_path):
    daemon = gflowd("--fake-gpus", fake_gpus)
    manifest = tmp_path / "big.yaml"
    manifest.write_text(BIG)
    applied = ctl(home, "apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == "job/big created\n"
    assert applied.stderr == "warning: job/big can never start: needs 99 GPUs, this machine has 4\n"
    assert (home / "jobs" / "big.yaml").is_file()  # still created: a GitOps repo may target a bigger machine
    status = wait_phase(home, "big", "Pending", daemon=daemon)
    assert status["reason"] == "Unschedulable"

    # one that fits gets no warning; nor does one asking for a type or memory this machine has
    fits = ctl(home, "apply", "-f", "-", stdin=BIG.replace("big", "fits").replace("99", "2"))
    assert fits.returncode == 0 and fits.stderr == "", fits.stderr
    typed = ctl(home, "run", "--name", "typed", "--gpus", "1", "--gpu-type", "H100", "--", "true")
    assert typed.returncode == 0
    assert typed.stderr == (
        "warning: job/typed can never start: needs 1 GPU of type H100, no GPU on this machine matches "
        "(it has: NVIDIA A100-SXM4-40GB)\n"
    )
    memory = ctl(home, "run", "--name", "roomy", "--gpus", "1", "--shared", "--gpu-memory", "80Gi", "--", "true")
    assert (
        memory.returncode == 0
        and "job/roomy can never start: needs 1 GPU with 80Gi memory each, 0 GPUs this large (largest 40Gi)"
        in memory.stderr
    )


def test_run_warns_when_the_job_can_never_start(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    submitted = ctl(home, "run", "--name", "huge", "--gpus", "99", "--", "true", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout == "job/huge created\n"
    assert submitted.stderr == "warning: job/huge can never start: needs 99 GPUs, this machine has 4\n"
    assert (home / "jobs" / "huge.yaml").is_file()


def test_without_gflowd_apply_says_the_job_waits_and_status_readers_say_stale(home, tmp_path):
    manifest = tmp_path / "later.yaml"
    manifest.write_text(BIG.replace("big", "later").replace("99", "1"))
    applied = ctl(home, "apply", "-f", str(manifest))
    assert applied.returncode == 0 and applied.stdout == "job/later created\n"
    assert applied.stderr == f"warning: gflowd is not running for {home}; the jobs start when it runs (gflowd up)\n"
    # applying it again changes nothing: nothing to start, nothing to say
    assert ctl(home, "apply", "-f", str(manifest)).stderr == ""
    for argv in (["stats"], ["wait", "job/later", "--for", "phase=Succeeded", "--timeout", "0.1"]):
        result = ctl(home, *argv)
        assert result.stderr.count("gflowd is not running") == 1, (argv, result.stderr)
        assert "may be stale" in result.stderr
