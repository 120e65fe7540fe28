"""The runtime's two hooks for idleTimeout, on a real supervisor and a real pty: ``notify`` puts a line
on the attached terminals (and in the log), never into the job's input; ``observe`` reports the last
terminal input as ``last_input``."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import time
from pathlib import Path

from builders import job
from helpers import wait_for

from controller.act.runtime import record
from controller.act.runtime.backends.local.runtime import SupervisorRuntime
from controller.client.terminal import connect, frame
from controller.model.plan import Launch
from controller.paths import Home


class Viewer:
    """A raw client of the control socket: sends frames, collects what comes back."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""
        self.frames: list[tuple[bytes, bytes]] = []

    def pump(self) -> None:
        while select.select([self.sock], [], [], 0)[0]:
            data = self.sock.recv(65536)
            if not data:
                break
            self.buffer += data
        while len(self.buffer) >= 5:
            kind, size = struct.unpack("!cI", self.buffer[:5])
            if len(self.buffer) < 5 + size:
                break
            self.frames.append((kind, self.buffer[5 : 5 + size]))
            self.buffer = self.buffer[5 + size :]

    def output(self) -> bytes:
        self.pump()
        return b"".join(payload for kind, payload in self.frames if kind == b"O")

    def of_kind(self, kind: bytes) -> list[bytes]:
        self.pump()
        return [payload for k, payload in self.frames if k == kind]


def test_notify_reaches_the_viewers_not_the_job_and_last_input_follows_typing(tmp_path: Path):
    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    runtime = SupervisorRuntime(home)
    try:
        talk = job(
            "talk", tty=True, command=["sh", "-c", "read line; echo got:$line; read end"], workingDir=str(tmp_path)
        )
        calm = job("calm", command=["sleep", "30"], workingDir=str(tmp_path))
        runtime.start(Launch("talk", 1, 1, talk, [], []))
        runtime.start(Launch("calm", 1, 1, calm, [], []))
        runtime.observe()
        runtime.purge()  # as a pass does: its starts reach the launcher after its purge
        path = home.control_socket(os.geteuid(), "talk")
        wait_for(path.exists, message="the control socket")
        run = wait_for(
            lambda: (r := runtime.observe().get("talk")) is not None and r.running and r.last_input and r,
            message="the tty job's first last_input",
        )
        started = run.last_input
        assert abs(started - time.time()) < 30  # the session's start: nobody typed yet
        assert runtime.observe()["calm"].last_input is None  # not a tty job: no terminal, no input

        runtime.notify("talk", "idle for 30m: stops in 5m unless you type")  # nobody watching: the log has it
        runtime.notify("calm", "a job without a terminal ignores this")
        wait_for(lambda: "idle for 30m" in (home.log_file("talk")).read_text(), message="the notice in the log")

        viewer = Viewer(connect(path))
        viewer.sock.sendall(frame(b"H", {"mode": "attach", "size": [30, 90]}))
        runtime.notify("talk", "gflow: second notice")
        wait_for(lambda: viewer.of_kind(b"N"), message="the notice on the viewer's terminal")
        assert viewer.of_kind(b"N") == [b"gflow: second notice"]
        assert runtime.observe()["talk"].last_input == started  # a notice and an attach are not input

        viewer.sock.sendall(frame(b"I", b"hello\n"))
        wait_for(lambda: b"got:hello" in viewer.output(), message=lambda: f"the job's answer; saw {viewer.output()!r}")
        wait_for(
            lambda: (runtime.observe()["talk"].last_input or 0) > started,
            timeout=10,
            message="last_input to move past the start",
        )
        assert runtime.observe()["talk"].last_input <= time.time()
        viewer.sock.sendall(frame(b"I", b"bye\n"))
        wait_for(lambda: viewer.of_kind(b"X"), message="the job's end on the viewer")
        assert json.loads(viewer.of_kind(b"X")[0]) == {"code": 0}
        log = home.log_file("talk").read_text()
        assert "got:hello" in log and "got:gflow" not in log and "gflow: second notice" in log
        wait_for(lambda: not runtime.observe()["talk"].running, message="the attempt to end")
        assert runtime.observe()["talk"].exit_code == 0
        assert not path.exists()  # the socket goes with the attempt
        runtime.stop("calm", 1.0)
        wait_for(lambda: not runtime.observe()["calm"].running, message="calm to stop")
    finally:
        runtime.close()


def test_a_killed_supervisors_socket_goes_with_its_attempts_records(tmp_path: Path):
    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    runtime = SupervisorRuntime(home)
    try:
        runtime.start(
            Launch(
                "gone",
                1,
                1,
                job("gone", tty=True, command=["sleep", "60"], workingDir=str(tmp_path), terminationGracePeriod="1s"),
                [],
                [],
            )
        )
        runtime.observe()
        runtime.purge()  # as a pass does: its starts reach the launcher after its purge
        path = home.control_socket(os.geteuid(), "gone")
        wait_for(path.exists, message="the control socket")
        run_record = record.read(str(home.run_dir / "attempts" / "gone.1"), ("run",))["run"]
        os.kill(run_record["supervisorPid"], signal.SIGKILL)  # no chance to remove its socket
        run = wait_for(
            lambda: (r := runtime.observe().get("gone")) is not None and not r.running and r,
            timeout=20,
            message="the attempt to be found Lost",
        )
        assert run.lost and path.exists()
        runtime.forget("gone")
        runtime.purge()
        assert not path.exists()
    finally:
        runtime.close()
