"""The runtime under faults a hostile user or an unlucky admin causes (issue 14): a full disk, a
supervisor killed with SIGKILL, a log file replaced by a symlink, a working directory the job's
user may not enter. Real gflowd, real supervisors, real job processes, real tmpfs filesystems.
"""

from __future__ import annotations

import contextlib
import json
import os
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

from controller.runtime.supervisor import start_ticks

SUPERVISOR = Path(__file__).resolve().parents[1] / "controller" / "runtime" / "supervisor.py"


def manifest(name: str, body: str) -> str:
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n{body}"


def script_job(name: str, script: str, extra: str = "") -> str:
    indented = "".join(f"    {line}\n" for line in script.strip().splitlines())
    return manifest(name, f"  script: |\n{indented}{extra}")


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def temp_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.tmp"))


# -- a filesystem that really fills up -----------------------------------------------------------

def mount_tmpfs(point: Path, size: str) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a size-limited tmpfs")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point)],
                            capture_output=True, text=True)
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


def free_space(directory: Path) -> None:
    for name in ("filler", "filler2"):
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass


# -- the supervisor alone on a full disk -------------------------------------------------------------

@pytest.fixture
def tiny_dir():
    with fresh_tmpfs("512k") as point:
        yield point


def _launch(folder: Path, notify: str, argv: list[str], cwd: str) -> Path:
    job_dir = folder / "run" / "jobs" / "solo"
    job_dir.mkdir(parents=True)
    (folder / "logs").mkdir()
    path = job_dir / "launch-1.json"
    path.write_text(json.dumps({
        "name": "solo", "attempt": 1, "generation": 1, "argv": argv, "env": {"PATH": os.environ["PATH"]},
        "cwd": cwd, "log": str(folder / "logs" / "solo.log"), "uid": None, "gid": None, "groups": [],
        "timeLimit": None, "memoryLimit": None, "grace": 1.0, "notify": notify,
    }))
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
        except (socket.timeout, BlockingIOError):
            return into


def test_a_supervisor_that_cannot_record_its_start_never_runs_the_job_and_says_so(tiny_dir, tmp_path):
    marker = tmp_path / "ran"
    sock = _listen(tmp_path / "notify.sock")
    launch = _launch(tiny_dir, str(tmp_path / "notify.sock"), ["touch", str(marker)], str(tmp_path))
    fill_filesystem(tiny_dir)
    result = subprocess.run([sys.executable, "-I", "-S", str(SUPERVISOR), str(launch)], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    got = wait_for(lambda: _datagrams(sock, []), timeout=5, message="the supervisor's notice")
    assert got[0].startswith("unlaunched solo 1 ") and "No space left on device" in got[0], got
    assert not marker.exists()
    assert sorted(p.name for p in launch.parent.iterdir()) == ["attempt-1.lock", "launch-1.json"]
    free_space(tiny_dir)  # the same launch handed over again now runs
    subprocess.run([sys.executable, "-I", "-S", str(SUPERVISOR), str(launch)], check=True, timeout=30)
    wait_for(lambda: read_json(launch.parent / "exit-1.json"), message="the exit record")
    assert marker.exists()


def test_an_exit_the_disk_refuses_is_kept_sent_to_gflowd_and_written_once_there_is_room(tiny_dir, tmp_path):
    release = tmp_path / "release"
    sock = _listen(tmp_path / "notify.sock")
    launch = _launch(tiny_dir, str(tmp_path / "notify.sock"),
                     ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done; exit 3"], str(tmp_path))
    supervisor = subprocess.Popen([sys.executable, "-I", "-S", str(SUPERVISOR), str(launch)])
    try:
        got: list[str] = []
        wait_for(lambda: any(m.startswith("start solo 1") for m in _datagrams(sock, got)), message="the job to start")
        # the room reserved for the exit record is gone too (as on a copy-on-write filesystem, where
        # even an overwrite needs new blocks): only retrying can record the exit now
        for reserved in launch.parent.glob("exit-1.*"):
            reserved.unlink()
        fill_filesystem(tiny_dir)
        release.touch()

        def exit_notice():
            for message in _datagrams(sock, got):
                if message.startswith("exit solo 1 {"):
                    return json.loads(message.split(" ", 3)[3])
            return None

        record = wait_for(exit_notice, timeout=10, message=lambda: f"the exit sent to gflowd; got {got}")
        assert record["exitCode"] == 3
        assert supervisor.poll() is None  # alive, holding its attempt lock, retrying
        assert not (launch.parent / "exit-1.json").exists()
        free_space(tiny_dir)
        assert supervisor.wait(30) == 0
        assert read_json(launch.parent / "exit-1.json")["exitCode"] == 3
        assert temp_files(tiny_dir) == []
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        release.touch()


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
    write_owned(home / "jobs", "planted.yaml", manifest("planted", "  command: [echo, overwritten]\n  workingDir: /\n"), nobody)
    status = wait_phase(home, "planted", "Failed", daemon=daemon)
    assert "log file" in status["message"] and "symbolic link" in status["message"], status["message"]
    assert target.read_text() == "root's own data\n"
    assert (target.stat().st_uid, target.stat().st_mode & 0o777) == (0, 0o600)
    assert (home / "logs" / "planted.log").is_symlink()


@root_only
def test_a_working_dir_the_user_may_not_enter_is_named_in_the_error(home, gflowd, tmp_path):
    nobody = _nobody()
    daemon = gflowd()
    write_owned(home / "jobs", "private.yaml", manifest("private", "  command: ['true']\n  workingDir: /root\n"), nobody)
    status = wait_phase(home, "private", "Failed", daemon=daemon)
    assert status["message"] == f"workingDir /root: Permission denied (as uid {nobody})", status["message"]
    # the command step is named as such: a file nobody may not execute
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    os.chmod(tool, 0o700)
    write_owned(home / "jobs", "tool.yaml", manifest("tool", f"  command: [{tool}]\n  workingDir: /\n"), nobody)
    status = wait_phase(home, "tool", "Failed", daemon=daemon)
    assert status["message"] == f"command {str(tool)!r}: Permission denied (as uid {nobody})", status["message"]
    assert status["exitCode"] == 126


