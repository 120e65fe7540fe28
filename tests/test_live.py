"""Live views: ``get gpus -w`` / ``get jobs -w`` redraw in place on a terminal (a real pty) and
print plain appended rows into a pipe; ``apply -f DIR`` of many files shows progress on a
terminal's stderr only."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from helpers import wait_for

NODE = """\
apiVersion: gflow.dev/v1alpha1
kind: Node
inventory: fake GPUs
gpus:
- {{index: 0, uuid: GPU-0, name: NVIDIA H100, memory: 80Gi, memoryUsed: '0', utilization: 0, state: {s0}, jobs: [{j0}]}}
- {{index: 1, uuid: GPU-1, name: NVIDIA H100, memory: 80Gi, memoryUsed: '0', utilization: 0, state: Free, jobs: []}}
"""


def write_node(home: Path, s0: str = "Free", j0: str = "") -> None:
    tmp = home / ".node.tmp"
    tmp.write_text(NODE.format(s0=s0, j0=j0))
    os.replace(tmp, home / "node.yaml")


def spawn(home: Path, argv: list[str], tty_stdout: bool, tty_stderr: bool = False):
    """gflowctl with stdout (and/or stderr) on a pty of 120x40 or a pipe; returns (proc, output
    list filled by a reader thread: [stdout text, stderr text])."""
    env = {**os.environ, "GFLOW_HOME": str(home), "TERM": "xterm", "PYTHONUNBUFFERED": "1"}
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave if tty_stdout else subprocess.PIPE,
        stderr=slave if tty_stderr else subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(slave)
    out = ["", ""]

    def pump():
        streams = {master: 0 if tty_stdout else 1}
        if not tty_stdout:
            streams[proc.stdout.fileno()] = 0
        if not tty_stderr:
            streams[proc.stderr.fileno()] = 1
        if tty_stderr and not tty_stdout:
            streams[master] = 1
        while streams:
            ready, _, _ = select.select(list(streams), [], [], 0.1)
            for fd in ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    del streams[fd]
                    continue
                out[streams[fd]] += data.decode(errors="replace")

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return proc, out, thread, master


def stop(proc, thread, master) -> int:
    proc.send_signal(signal.SIGINT)
    code = proc.wait(10)
    thread.join(5)
    os.close(master)
    return code


def test_get_gpus_watch_redraws_in_place_on_a_terminal(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_node(home)
    proc, out, thread, master = spawn(home, ["get", "gpus", "-w"], tty_stdout=True)
    try:
        wait_for(lambda: "Free" in out[0] and "Ctrl-C" in out[0], message=lambda: f"the first table: {out[0]!r}")
        assert "\x1b[" not in out[0].split("INDEX")[0]  # nothing to erase before the first draw
        write_node(home, "Allocated", "train")
        wait_for(lambda: "train" in out[0], message=lambda: f"the redrawn table: {out[0]!r}")
        _before, after = out[0].rsplit("\x1b[4F\x1b[J", 1)  # up over header + 2 GPUs + footer, clear
        assert "INDEX" in after and "Allocated" in after and "train" in after
        assert after.count("INDEX") == 1
    finally:
        assert stop(proc, thread, master) == 0


def test_get_gpus_watch_appends_changed_rows_into_a_pipe(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_node(home)
    proc, out, thread, master = spawn(home, ["get", "gpus", "-w"], tty_stdout=False)
    try:
        wait_for(lambda: out[0].count("\n") >= 3, message=lambda: f"the first table: {out[0]!r}")
        write_node(home, "Allocated", "train")
        wait_for(lambda: "train" in out[0], message=lambda: f"a changed row: {out[0]!r}")
        time.sleep(0.5)  # would another (unchanged) row or a header follow? give it the chance
        lines = out[0].splitlines()
        assert "\x1b" not in out[0]
        assert [ln.split()[0] for ln in lines] == ["INDEX", "0", "1", "0"]
        assert lines[-1].split()[-3:] == ["Allocated", "train", "?"]  # ?: no job of that name to own it
    finally:
        assert stop(proc, thread, master) == 0


def test_get_jobs_watch_redraws_in_place_on_a_terminal(tmp_path):
    from controller.model.records import JobState
    from controller.paths import Home
    from controller.record.recorder import Recorder

    home = Home.resolve(tmp_path / "home")
    home.ensure()

    def record(phase, reason):
        recorder = Recorder(home)
        recorder.write_states({"w": JobState(name="w", phase=phase, reason=reason, created=time.time())}, [])
        recorder.write_index({})

    record("Pending", "Resources")
    proc, out, thread, master = spawn(home.root, ["get", "jobs", "-w"], tty_stdout=True)
    try:
        wait_for(lambda: "Pending" in out[0], message=lambda: f"the first table: {out[0]!r}")
        record("Running", "Started")
        wait_for(lambda: "Running" in out[0], message=lambda: f"the redrawn table: {out[0]!r}")
        after = out[0].rsplit("\x1b[3F\x1b[J", 1)[1]  # header + 1 job + footer
        assert "Running" in after and "Pending" not in after
    finally:
        assert stop(proc, thread, master) == 0


def test_apply_of_many_files_shows_progress_on_a_terminal_only(tmp_path):
    home = tmp_path / "home"
    (home / "jobs").mkdir(parents=True)
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(25):
        (folder / f"j{i}.yaml").write_text(f"metadata: {{name: j{i}}}\nspec:\n  command: [true]\n")
    proc, out, thread, master = spawn(home, ["apply", "-f", str(folder)], tty_stdout=False, tty_stderr=True)
    assert proc.wait(60) == 0
    thread.join(5)
    os.close(master)
    assert out[0].count(" created") == 25 and "\x1b" not in out[0]
    assert "\rapplying 0/25" in out[1].replace("\x1b[K", "")
    # the progress line is gone at the end, before the one warning line (no gflowd runs here)
    progress, warning = out[1].split("warning: ")
    assert progress.endswith("\r\x1b[K")
    assert warning.startswith("gflowd is not running") and warning.endswith("(gflowd up)\r\n")
    plain = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "apply", "-f", str(folder)],
        env={**os.environ, "GFLOW_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0 and plain.stderr == "" and plain.stdout.count(" unchanged") == 25
