"""``gflowctl top`` against a real gflowd on fake GPUs: in a real terminal (tmux, read back with
``capture-pane``) it redraws in place as the job's GPU use changes; piped, it prints once."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
from helpers import job_status, wait_for, write_manifest
from test_gpu_usage_e2e import running_with_pid, waiting_job, write_gpus

from controller.client.read.usage import job_series


def latest_sample(home, name):
    try:
        series = job_series(json.loads((home / "run" / "gpu-usage.json").read_text()), name)
    except (OSError, ValueError):
        return None
    return series[-1][1] if series else None


@pytest.fixture
def busy_job(home, gflowd, tmp_path):
    """A running 2-GPU job ``ddp`` (timeLimit 1h) whose process uses GPU 0 at 60 % with 10Gi."""
    fake = tmp_path / "gpus.yaml"
    write_gpus(fake, [], [], [])
    release = tmp_path / "release"
    daemon = gflowd("--fake-gpus", fake, "--gpu-sample-interval", "0.5s")
    write_manifest(home / "jobs", "ddp.yaml", waiting_job("ddp", 2, release, extra="  timeLimit: 1h\n"))
    pid = running_with_pid(home, "ddp")["pid"]
    write_gpus(fake, [{"pid": pid, "usedMemory": "10Gi", "utilization": 60}], [], [])
    wait_for(
        lambda: latest_sample(home, "ddp") == [(60, 10240), (0, 0)],
        timeout=20,
        message=lambda: f"a sample of ddp; status {job_status(home, 'ddp')}\n{daemon.stderr()[-2000:]}",
    )
    yield fake, pid
    release.touch()


def test_top_redraws_in_place_in_a_real_terminal(home, busy_job, tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (.ci/run installs it)")
    fake, pid = busy_job
    socket = f"gflow-top-{os.getpid()}"  # our own tmux server: no other session is touched
    command = " ".join(
        shlex.quote(a)
        for a in (
            "env",
            f"GFLOW_HOME={home}",
            "TERM=xterm",
            sys.executable,
            "-m",
            "controller.cli.main",
            "top",
            "--interval",
            "0.2s",
        )
    )

    def screen() -> str:
        return subprocess.run(
            ["tmux", "-L", socket, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True, timeout=10
        ).stdout

    def row(text: str, first: str) -> list[str] | None:
        return next((line.split() for line in text.splitlines() if line.split()[:1] == [first]), None)

    subprocess.run(
        ["tmux", "-L", socket, "new-session", "-d", "-s", "top", "-x", "150", "-y", "30", command],
        check=True,
        timeout=10,
        cwd=tmp_path,
    )
    try:
        text = wait_for(
            lambda: (t := screen()) and row(t, "ddp") and t, timeout=20, message=lambda: f"top's screen:\n{screen()}"
        )
        ddp = row(text, "ddp")
        assert ddp[1:5] == ["root", "0", "60%", "10Gi"] and ddp[-1] == "1h", text
        assert row(text, "1")[:3] == ["1", "0%", "0"]  # its second GPU: no process of the job
        assert "gflow top: 1 running, 0 pending; GPUs: 2 of 3 in use by jobs" in text
        assert row(text, "JOB") == ["JOB", "USER", "GPU", "UTIL", "GPU-MEM", "CPU", "RSS", "ELAPSED", "LIMIT"]
        write_gpus(
            fake,
            [{"pid": pid, "usedMemory": "12Gi", "utilization": 20}],
            [{"pid": pid, "usedMemory": "2Gi", "utilization": 35}],
            [],
        )
        text = wait_for(
            lambda: (t := screen()) and (row(t, "ddp") or [])[2:5] == ["0", "20%", "12Gi"] and t,
            timeout=20,
            message=lambda: f"top to redraw with the new sample:\n{screen()}",
        )
        assert row(text, "1")[:3] == ["1", "35%", "2Gi"]
        assert text.count("gflow top:") == 1 and text.count("JOB") == 1  # redrawn in place, not appended
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)


def test_top_prints_once_when_piped(home, busy_job):
    env = {**os.environ, "GFLOW_HOME": str(home)}
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "top"], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("gflow top: 1 running") and "\x1b[" not in result.stdout
    ddp = next(line.split() for line in lines if line.startswith("ddp"))
    assert ddp[1:5] == ["root", "0", "60%", "10Gi"] and ddp[5].endswith("%")  # CPU % from two looks at /proc
    bad = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "top", "--interval", "soon"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("error: --interval: ") and "Traceback" not in bad.stderr
