"""``gflowd up | down | status`` end to end: real processes on a temp home with fake GPUs.

``up`` must return with gflowd running in the background, ``down`` must stop gflowd and never its
jobs, and the next ``up`` must re-adopt them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import job_status, kill_jobs_of_home, pid_alive, read_index, wait_for, wait_phase, write_manifest


def gflowd_cmd(home: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "GFLOW_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "controller.daemon", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


pytestmark = pytest.mark.fake_gpus(4)  # what the fake_gpus fixture writes


@pytest.fixture
def cleanup(home: Path):
    """Whatever a test leaves: a background gflowd (by the pid in its lock) and every job."""
    yield
    try:
        pid = int((home / "run" / "gflowd.lock").read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid_alive(pid) and f"{home}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pid_alive(pid), timeout=20, message="the background gflowd to stop")
    kill_jobs_of_home(home)


def gflowd_pid(home: Path) -> int:
    return int((home / "run" / "gflowd.lock").read_text().strip())


def test_up_status_down_and_up_again_readopts_the_running_job(home, fake_gpus, cleanup):
    started = gflowd_cmd(home, "up", "--fake-gpus", str(fake_gpus), "--resync", "1s")
    assert started.returncode == 0, started.stderr
    assert f"{home / 'gflowd.log'}" in started.stdout
    first = gflowd_pid(home)
    assert pid_alive(first)
    # its own session, no terminal: closing the shell that started it does not reach it
    assert os.getsid(first) == first
    assert os.readlink(f"/proc/{first}/fd/0") == "/dev/null"
    assert (read_index(home) or {})["controller"]["pid"] == first

    again = gflowd_cmd(home, "up")
    assert again.returncode == 0 and "already running" in again.stdout and str(first) in again.stdout
    assert gflowd_pid(home) == first

    write_manifest(home / "jobs", "long.yaml", "spec:\n  command: [sleep, '300']\n  resources: {gpus: 2}\n")
    running = wait_phase(home, "long", "Running")
    job_pid = wait_for(lambda: (job_status(home, "long") or {}).get("pid"), message="a pid for the job")
    assert pid_alive(job_pid)

    shown = gflowd_cmd(home, "status")
    assert shown.returncode == 0, shown.stderr
    assert f"gflowd is running for {home} (pid {first}, version " in shown.stdout
    assert "1 Running" in shown.stdout
    assert "4 (4x NVIDIA H100 80GB HBM3), 2 in use" in shown.stdout

    stopped = gflowd_cmd(home, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_alive(first)
    assert pid_alive(job_pid), "down must stop gflowd, never its jobs"
    off = gflowd_cmd(home, "status")
    assert off.returncode == 3 and "not running" in off.stdout
    assert gflowd_cmd(home, "down").returncode == 0  # stopping a stopped gflowd says so, no error

    restarted = gflowd_cmd(home, "up", "--fake-gpus", str(fake_gpus), "--resync", "1s")
    assert restarted.returncode == 0, restarted.stderr
    second = gflowd_pid(home)
    assert second != first
    # the same attempt, still running: re-adopted, not restarted
    status = wait_for(lambda: (s := job_status(home, "long")) and s.get("phase") == "Running" and s, timeout=15)
    assert status["pid"] == job_pid and status.get("attempt", 1) == running.get("attempt", 1)
    assert "1 Running" in gflowd_cmd(home, "status").stdout
    assert gflowd_cmd(home, "down").returncode == 0
    assert pid_alive(job_pid)


def test_up_that_fails_says_why_in_one_line(home, tmp_path, cleanup):
    failed = gflowd_cmd(home, "up", "--fake-gpus", str(tmp_path / "missing.yaml"))
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1, failed.stderr
    assert "did not start" in lines[0] and "missing.yaml is not a file" in lines[0]
    assert gflowd_cmd(home, "status").returncode == 3


# A stand-in for gflowd's last moments: it holds the home's lock as gflowd does, and on SIGTERM drops
# the lock first and ends a while later (gflowd's interpreter tears down after its lock is gone).
LINGERING_HOLDER = """
import fcntl, os, signal, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, f"{os.getpid()}\\n".encode())
def stop(*_):
    os.close(fd)
    time.sleep(float(sys.argv[2]))
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
print("held", flush=True)
while True:
    signal.pause()
"""


def test_down_returns_only_once_the_process_has_ended_not_when_its_lock_is_dropped(home, cleanup):
    (home / "run").mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", LINGERING_HOLDER, str(home / "run" / "gflowd.lock"), "1.5"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        stopped = gflowd_cmd(home, "down")
        assert stopped.returncode == 0, stopped.stderr
        assert f"gflowd stopped (pid {holder.pid})" in stopped.stdout
        # the holder is this test's child: ended means a zombie, which pid_alive counts as not alive
        assert not pid_alive(holder.pid), "down returned while the old gflowd was still running"
    finally:
        holder.kill()
        holder.wait()
