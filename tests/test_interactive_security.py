"""An admin's keystrokes through ``gflowctl exec`` (issue 32, hole 1), tried the way mallory would: an
ordinary user (uid 65534) with a job on a root gflowd, against root running ``gflowctl exec`` on it.

- She replaces her job's control socket with a listener of her own: root's gflowctl must send it
  nothing (no descriptor, no byte): she cannot replace it (the folder is gflowd's), and where a
  folder or a listener is not the supervisor's, gflowctl refuses with one line.
- Her job's ``PATH`` leads to her own ``nvidia-smi``, which keeps what it was given as stdin: it may
  read what root types into the exec'd session (that is the session), never root's terminal after it.

Real gflowd, supervisors, users, sockets and pseudo-terminals (pexpect); every wait polls a condition.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pexpect
import pytest
from helpers import job_status, kill_jobs_of_home, wait_for, wait_phase

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

MALLORY = 65534


def env_for(home: Path) -> dict[str, str]:
    return {**os.environ, "GFLOW_HOME": str(home), "XDG_STATE_HOME": str(Path(home).parent / "state"), "TERM": "xterm"}


@pytest.fixture
def open_home():
    """A home mallory can reach (pytest's tmp folders are root's alone), and a folder of hers in it."""
    import shutil

    root = Path(tempfile.mkdtemp(prefix="gflow-sec-"))
    os.chmod(root, 0o755)
    (root / "jobs").mkdir()
    (root / "mallory").mkdir()
    os.chown(root / "mallory", MALLORY, MALLORY)
    yield root
    kill_jobs_of_home(root)
    wait_for(
        lambda: not shutil.rmtree(root, ignore_errors=True) and not root.exists(), timeout=10, message=f"{root} to go"
    )


def mallorys_job(home: Path, daemon, name: str, env: str = "") -> None:
    """A batch job whose manifest is mallory's (so it runs as her), once it runs and serves its socket."""
    from controller.paths import Home

    hidden = home / "jobs" / f".{name}.yaml.tmp"  # hers before gflowd can see it
    hidden.write_text(f"metadata: {{name: {name}}}\nspec:\n  workingDir: /tmp\n  command: [sleep, '600']\n{env}")
    os.chown(hidden, MALLORY, MALLORY)
    os.rename(hidden, home / "jobs" / f"{name}.yaml")
    wait_phase(home, name, "Running", daemon=daemon)
    path = Home.resolve(home).control_socket(MALLORY, name)
    wait_for(lambda: path.is_socket() and path.stat().st_uid == MALLORY, message=f"job/{name}'s control socket")


class Eavesdropper:
    """Mallory's listener at a job's socket path, in a child process: what it was sent (connections,
    bytes, descriptors). ``bind_as_root``: the harness binds it for her, then drops to her before
    listen() (SO_PEERCRED then names her): a listener where she could never put one herself."""

    def __init__(self, path: Path, bind_as_root: bool = False):
        report_r, report_w = os.pipe()
        self.stop_r, self.stop_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.close(report_r)
                os.close(self.stop_w)
                code = self._listen(path, bind_as_root, report_w)
            finally:
                os._exit(code)
        os.close(report_w)
        os.close(self.stop_r)
        self.report = os.fdopen(report_r)
        self.bound = self.report.readline().strip()

    def _listen(self, path: Path, bind_as_root: bool, report_w: int) -> int:
        def drop() -> None:
            os.setgroups([])
            os.setgid(MALLORY)
            os.setuid(MALLORY)

        if not bind_as_root:
            drop()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            listener.bind(str(path))
        except OSError as exc:
            os.write(report_w, f"denied {exc.strerror}\n".encode())
            return 0
        os.chmod(path, 0o666)
        if bind_as_root:
            drop()
        listener.listen(4)
        os.write(report_w, b"bound\n")
        seen = {"connections": 0, "bytes": 0, "fds": 0}
        while select.select([listener, self.stop_r], [], [])[0] != [self.stop_r]:
            conn, _ = listener.accept()
            seen["connections"] += 1
            with conn:
                conn.settimeout(5)
                try:
                    data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
                except OSError:
                    continue
                seen["bytes"] += len(data)
                for level, kind, fds in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        seen["fds"] += len(fds) // 4
        os.write(report_w, (json.dumps(seen) + "\n").encode())
        return 0

    def stop(self) -> dict:
        os.close(self.stop_w)
        seen = json.loads(self.report.readline() or "null") if self.bound == "bound" else None
        self.report.close()
        os.waitpid(self.pid, 0)
        return seen or {"connections": 0, "bytes": 0, "fds": 0}


def exec_as_root(home: Path, name: str, *argv: str) -> pexpect.spawn:
    """Root's ``gflowctl exec`` on a terminal of its own (a real pty, as root would type it)."""
    return pexpect.spawn(
        sys.executable,
        ["-m", "controller.cli.main", "exec", name, "--", *argv],
        env=env_for(home),
        cwd=str(Path(home).parent),
        encoding="utf-8",
        timeout=60,
    )


def finished(child: pexpect.spawn) -> tuple[int, str]:
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus, child.before


NOTHING = {"connections": 0, "bytes": 0, "fds": 0}


def test_mallorys_own_listener_at_her_jobs_socket_gets_nothing_from_roots_exec(open_home, gflowd):
    from controller.paths import Home

    home = open_home
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob")
    path = Home.resolve(home).control_socket(MALLORY, "mjob")

    # she swaps her job's socket for her own listener: the folder is gflowd's, so she cannot
    spy = Eavesdropper(path)
    try:
        code, out = finished(exec_as_root(home, "mjob", "id", "-u"))
    finally:
        seen = spy.stop()
    assert seen == NOTHING  # the code before this fix: 1 connection, the hello's bytes, root's 3 descriptors
    assert spy.bound == "denied Permission denied"
    assert (code, out.split()) == (0, [str(MALLORY)])  # root's exec reached the job's supervisor

    # a folder left in the layout before (hers, 0700: the supervisor predates the fix) lets her swap
    # it: root's gflowctl then refuses before it connects
    os.chown(path.parent, MALLORY, MALLORY)
    os.chmod(path.parent, 0o700)
    spy = Eavesdropper(path)
    try:
        assert spy.bound == "bound"
        refusal = (
            f"error: {path.parent} belongs to nobody, not to gflowd's user root (a supervisor from "
            "before gflow checked this, or a replaced folder): restart the job to reach it"
        )
        assert finished(exec_as_root(home, "mjob", "nvidia-smi")) == (1, refusal + "\r\n")
        attach = pexpect.spawn(
            sys.executable,
            ["-m", "controller.cli.main", "attach", "mjob"],
            env=env_for(home),
            cwd=str(home.parent),
            encoding="utf-8",
            timeout=60,
        )
        assert finished(attach) == (1, refusal + "\r\n")  # attach asks the same before it sends a key
    finally:
        assert spy.stop() == NOTHING
    os.chown(path.parent, 0, 0)
    os.chmod(path.parent, 0o711)

    # a listener of hers in the right folder (however she got it there): SO_PEERCRED names her
    spy = Eavesdropper(path, bind_as_root=True)
    try:
        code, out = finished(exec_as_root(home, "mjob", "nvidia-smi"))
        assert code == 1
        assert out.strip() == (
            f"error: job/mjob: its control socket is served by nobody's process {spy.pid}, "
            "not by a supervisor of gflowd's user root: nothing sent"
        )
    finally:
        seen = spy.stop()
    assert (seen["bytes"], seen["fds"]) == (0, 0)
    assert job_status(home, "mjob")["phase"] == "Running"


FAKE_NVIDIA_SMI = """#!/bin/sh
# mallory's nvidia-smi: answers one line, then keeps its stdin in the background, to read later input
trap '' HUP
exec 3<&0
IFS= read -r first
echo "fake-smi saw: $first"
( while IFS= read -r line <&3; do echo "caught:$line" >> {caught}; done; echo reader-ended >> {caught} ) &
echo "fake-smi spawned its reader"
"""


def test_a_fake_nvidia_smi_reads_only_the_relayed_session_never_roots_terminal_after_it(open_home, gflowd):
    home = open_home
    bin_dir, caught = home / "mallory" / "bin", home / "mallory" / "caught"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI.format(caught=caught))
    fake.chmod(0o755)
    caught.write_text("")
    for path in (bin_dir, fake, caught):
        os.chown(path, MALLORY, MALLORY)
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob", env=f"  env: {{PATH: '{bin_dir}:/usr/bin:/bin'}}\n")

    # root's own terminal: a shell that runs the exec, then reads root's next lines itself
    gflowctl = f"{sys.executable} -m controller.cli.main exec mjob -- nvidia-smi"
    script = (
        f'{gflowctl}; echo "exec-ended $?"; while IFS= read -r l; do echo "root-got:$l"; [ "$l" = end ] && break; done'
    )
    root = pexpect.spawn("sh", ["-c", script], env=env_for(home), cwd=str(home.parent), encoding="utf-8", timeout=60)
    root.sendline("session-line")  # typed into the exec'd session: the fake may read that
    root.expect("fake-smi saw: session-line")
    root.expect("exec-ended 0")
    secrets = [f"secret-{n}" for n in range(5)]
    for line in secrets:  # root's next command lines and password, at root's own shell
        root.sendline(line)
        root.expect(f"root-got:{line}")
    root.sendline("end")
    root.expect(pexpect.EOF)
    # her reader was left a terminal that hung up with the session, not root's: it ended
    wait_for(
        lambda: "reader-ended" in caught.read_text(),
        message=lambda: f"mallory's reader to lose its terminal: {caught.read_text()!r}",
    )
    assert "secret" not in caught.read_text()


def test_exec_on_a_terminal_gets_a_pty_of_its_own_with_roots_window_and_ctrl_c(open_home, gflowd):
    home = open_home
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob")
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "controller.cli.main",
            "exec",
            "mjob",
            "--",
            "sh",
            "-c",
            "echo tty=$(tty) owner=$(stat -c %u $(tty)) size=$(stty size) uid=$(id -u); "
            "trap 'echo got-INT; exit 5' INT; echo ready; while :; do sleep 0.1; done",
        ],
        env=env_for(home),
        cwd=str(home.parent),
        encoding="utf-8",
        timeout=60,
        dimensions=(33, 101),
    )
    child.expect(r"tty=/dev/pts/\d+ owner=(\d+) size=33 101 uid=(\d+)")  # not root's terminal: one handed to her
    assert (int(child.match.group(1)), int(child.match.group(2))) == (MALLORY, MALLORY)
    child.expect("ready")
    child.sendcontrol("c")  # a key in raw mode: the remote terminal makes it SIGINT for its process group
    child.expect("got-INT")
    assert finished(child)[0] == 5


def test_a_signal_to_gflowctl_exec_reaches_the_command(open_home, gflowd):
    home = open_home
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob")
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "controller.cli.main",
            "exec",
            "mjob",
            "--",
            "sh",
            "-c",
            "trap 'echo got-TERM; exit 7' TERM; echo ready; while :; do sleep 0.1; done",
        ],
        env=env_for(home),
        cwd=str(home.parent),
        encoding="utf-8",
        timeout=60,
    )
    child.expect("ready")
    child.kill(signal.SIGTERM)  # to gflowctl (a closing terminal, a kill): forwarded, not fatal to it
    child.expect("got-TERM")
    assert finished(child)[0] == 7


def test_exec_relays_exactly_both_ways_at_once_for_the_jobs_own_user(open_home, gflowd):
    """3 MiB through ``cat`` while it echoes them back (each way's window is 256 KiB: neither side
    may wait for the other), stderr apart, the exit code; run by mallory on her own job."""
    import controller.act.runtime.record
    import controller.cli.attach
    import controller.client.control_peer  # noqa: F401
    from controller.cli.main import main

    home = open_home
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob")
    sent, received = home / "mallory" / "sent", home / "mallory" / "received"
    payload = os.urandom(3 << 20)
    sent.write_bytes(payload)

    def as_mallory() -> int:
        os.dup2(os.open(sent, os.O_RDONLY), 0)
        os.dup2(os.open(received, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        return main(["--home", str(home), "exec", "mjob", "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3"])

    from helpers import run_as

    code, err = run_as(MALLORY, as_mallory)
    assert (code, err) == (3, "to-stderr\n")
    assert received.read_bytes() == payload


def test_a_command_that_outpaces_its_caller_is_held_at_the_window(tmp_path: Path):
    """A caller that acknowledges nothing gets EXEC_WINDOW bytes (and a read's worth) and the command
    then waits on its pipe, on the supervisor's real socket; acknowledged, the rest follows. A caller
    that sends more than the window is dropped."""
    from builders import job

    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.act.runtime.control_socket import EXEC_WINDOW
    from controller.client.terminal import connect, frame
    from controller.model.plan import Launch
    from controller.paths import Home
    from controller.util.frames import split_frames

    home = Home.resolve(str(tmp_path / "home"), None)
    home.ensure()
    runtime = SupervisorRuntime(home)
    total = (8 << 20) + 4099  # an odd size: no other session's ``head`` runs with it
    try:
        runtime.start(Launch("calm", 1, 1, job("calm", command=["sleep", "60"], workingDir=str(tmp_path)), [], []))
        runtime.observe()
        runtime.purge()
        path = home.control_socket(os.geteuid(), "calm")
        wait_for(path.exists, message="the control socket")
        sock = connect(path)
        sock.sendall(frame(b"H", {"mode": "exec", "argv": ["head", "-c", str(total), "/dev/zero"], "tty": False}))
        inbox, got, frames = bytearray(), 0, []

        def pump(timeout: float = 0) -> None:
            nonlocal got
            while select.select([sock], [], [], timeout)[0]:
                data = sock.recv(1 << 20)
                if not data:
                    break
                inbox.extend(data)
                for kind, payload in split_frames(inbox):
                    frames.append(kind)
                    got += len(payload) if kind == b"O" else 0
                timeout = 0

        def producer_blocked() -> bool:
            pump()
            for pid in os.listdir("/proc"):
                try:
                    if (
                        pid.isdigit()
                        and Path(f"/proc/{pid}/cmdline").read_bytes() == f"head\0-c\0{total}\0/dev/zero\0".encode()
                    ):
                        return (
                            "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()
                        )  # (anon_)pipe_write: asleep on a full pipe
                except OSError:
                    continue
            return False

        # Under load ``head`` also sleeps on a full pipe for a moment before the supervisor next reads it,
        # long before the window is spent: held means asleep *and* at least half the window delivered.
        wait_for(
            lambda: producer_blocked() and got >= EXEC_WINDOW // 2,
            timeout=60,
            message=lambda: f"the command to wait on its pipe with the window spent ({got} bytes out)",
        )
        pump(0.2)  # whatever was already on its way
        assert got <= EXEC_WINDOW + 65536
        acked = 0
        while b"X" not in frames:
            if got > acked:
                sock.sendall(frame(b"A", got - acked))
                acked = got
            pump(1.0)
        assert got == total
        sock.close()

        # the other way: a caller that sends more than the window unacknowledged is not a gflowctl
        pushy = connect(path)
        pushy.sendall(frame(b"H", {"mode": "exec", "argv": ["sleep", "60"], "tty": False}))
        pushy.sendall(frame(b"I", b"x" * (EXEC_WINDOW + 1)))
        pushy.settimeout(60)
        assert pushy.recv(65536) == b""  # dropped (and its command hung up), its bytes not kept
        pushy.close()
    finally:
        # stopped even when an assertion failed above: a job left running would outlive the test
        try:
            runtime.stop("calm", 1.0)
            wait_for(lambda: not runtime.observe()["calm"].running, message="calm to stop")
        finally:
            runtime.close()


def test_a_control_folder_of_the_layout_before_is_moved_aside_when_a_supervisor_binds(open_home, gflowd):
    """Left by an older gflow: run/control/<uid>/ hers, 0700, with a socket of hers in it. The next
    supervisor of hers takes the place back (gflowd's, 0711) and serves there; the old one is gone."""
    from controller.paths import Home

    home = open_home
    folder = Home.resolve(home).control_dir(MALLORY)
    folder.mkdir(parents=True)
    (folder / "mjob.sock").write_text("not a socket")
    os.chown(folder / "mjob.sock", MALLORY, MALLORY)
    os.chown(folder, MALLORY, MALLORY)
    os.chmod(folder, 0o700)
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob")
    info = folder.stat()
    assert (info.st_uid, oct(info.st_mode & 0o777)) == (0, "0o711")
    assert sorted(p.name for p in folder.parent.iterdir()) == [str(MALLORY)]  # moved aside, then removed
    assert finished(exec_as_root(home, "mjob", "id", "-u"))[0] == 0


def test_exec_of_a_shell_on_a_terminal_has_job_control(open_home, gflowd):
    home = open_home
    daemon = gflowd(home=home)
    mallorys_job(home, daemon, "mjob")
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "controller.cli.main",
            "exec",
            "mjob",
            "--",
            "env",
            "PS1=in-job$ ",
            "bash",
            "--norc",
            "--noprofile",
            "-i",
        ],
        env=env_for(home),
        cwd=str(home.parent),
        encoding="utf-8",
        timeout=60,
    )
    child.expect(r"in-job\$ ")
    child.sendline("sh -c 'echo under-way; exec sleep 600'")
    child.expect("under-way\r\n")  # its output, not the echo of its line: it runs, in the foreground
    child.sendcontrol("z")  # Ctrl-Z: the remote terminal stops it; bash takes the terminal back
    child.expect("Stopped")
    child.expect(r"in-job\$ ")
    child.sendline("fg")
    child.expect("sleep 600")
    child.sendcontrol("c")
    child.expect(r"in-job\$ ")
    child.sendline("exit 6")
    assert finished(child)[0] == 6
