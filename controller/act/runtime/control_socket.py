"""The control socket of one attempt, served by its supervisor: a tty job's pseudo-terminal for
``gflowctl attach``, ``gflowctl exec`` in the job's allocation, gflowd's notices.

Standard library only, like ``supervisor.py``, which imports it (also when it runs as a plain
file, ``python -I -S supervisor.py``, where the package cannot be imported: then as the module beside
it, and this one finds ``util/frames.py``, the wire format, the same way).

One Unix stream socket per attempt, ``spec["control"]`` (run/control/<uid>/<name>.sock; the folder
is ours (gflowd's user), 0711, the socket the job user's, 0600; nothing on the network). Frames both
ways: one kind byte, a 4-byte big-endian length, the payload (``controller/util/frames.py``;
``controller/client/terminal.py`` speaks the other end).

    client -> us:  H hello (JSON: {"mode": attach|exec|notice|checkpoint, ...}), I input, W window size
                   [rows, cols], K a signal for the exec'd command, C the exec's stdin ended,
                   A n: the client wrote n more bytes of our O/R output (exec's flow control)
    us -> client:  O output, R the exec'd command's stderr (without a pty), N a notice line,
                   S a status line, E refused (then EOF), A n: n more bytes of I reached the
                   command, X {"code": N}: the job (attach) or the command (exec) ended

Only the job's user and root get past the connection (SO_PEERCRED). Of the attached viewers the
most recent one types (read-only ones never do); the others watch.

Exec never takes a descriptor from its caller (a root caller's terminal handed to a process of the
job's user would let that user read the caller's later keystrokes; docs/interactive.md, Security):
the command runs on a pseudo-terminal of its own when the caller's stdin and stdout are terminals
(hello ``"tty": true``, like ``su --pty`` or ``kubectl exec -it``), else on pipes, and we copy bytes
both ways. Each way has EXEC_WINDOW bytes in flight at most, acknowledged with A frames, so neither
a fast command nor a fast caller makes anyone buffer more.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import termios
import time
from collections.abc import Callable

try:  # the wire format, shared with the client
    from controller.util.frames import frame, split_frames
except ImportError:  # imported by a supervisor run as a plain file: util/ is two folders up
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "util"))
    from frames import frame, split_frames  # type: ignore[no-redef,import-not-found]

HISTORY_BYTES = 16384  # the terminal's recent output, replayed to a viewer that attaches
VIEWER_BACKLOG = 1 << 20  # a viewer this far behind is dropped: a stuck viewer never blocks the job
MAX_CLIENTS = 64  # connections at once; more are closed unanswered
INPUT_STAMP_EVERY = 2.0  # seconds: how stale the last-input stamp (gflowd's idleTimeout) may be
DEFAULT_SIZE = (24, 80)
CLOSE_WAIT = 1.0  # seconds, for all viewers together, to take the last output and the exit code
EXEC_WINDOW = 256 * 1024  # bytes in flight each way between an exec'd command and its caller
ACK_EVERY = 32 * 1024  # bytes of input written before we acknowledge them (or when none is left)
CONTROL_MODE = 0o711  # run/control/<uid>/: ours; others may pass through to their own socket, no more


def open_terminal(spec: dict) -> tuple[int, int]:
    """A pty for a tty job: (master, slave), both close-on-exec, the window DEFAULT_SIZE."""
    master, slave = os.openpty()
    set_window(master, DEFAULT_SIZE)
    os.set_blocking(master, False)
    return master, slave


def set_window(fd: int, size: tuple[int, int]) -> None:
    """TIOCSWINSZ: the kernel then sends SIGWINCH to the terminal's foreground process group."""
    rows, cols = size
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def enter_terminal(tty_fd: int, uid: int | None, gid: int | None) -> None:
    """In the job child: a session of its own with the pty as controlling terminal, on 0, 1 and 2,
    owned by the job's user (so ``tty`` and programs that reopen /dev/pts/N work after setuid)."""
    os.setsid()
    fcntl.ioctl(tty_fd, termios.TIOCSCTTY, 0)
    if uid is not None and os.geteuid() == 0:
        os.fchown(tty_fd, uid, gid if gid is not None else -1)
        os.fchmod(tty_fd, 0o620)
    for target in (0, 1, 2):
        os.dup2(tty_fd, target)
    if tty_fd > 2:
        os.close(tty_fd)


def _become_exec(
    spec: dict,
    argv: list[str],
    stdio: list[int],
    tty_fd: int | None,
    term: str | None,
    join_cgroup: Callable[[list[str]], None] | None,
    environment: Callable[[dict], dict] | None = None,
) -> None:
    """In the forked child: ``argv`` in the job's allocation (its user, environment, working dir,
    cgroups) on ``tty_fd`` (a pty of its own, its controlling terminal) or on the pipes ``stdio``.
    Never returns; 127 when there is no such command, 126 when it cannot run, as a shell says."""
    try:
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        uid, gid = spec.get("uid"), spec.get("gid")
        if tty_fd is not None:
            enter_terminal(tty_fd, uid, gid)
        else:
            os.setsid()
            high = [os.dup(fd) for fd in stdio]  # out of 0-2 first, so no dup2 clobbers another
            for target, fd in enumerate(high):
                os.dup2(fd, target)
        if join_cgroup is not None:  # the attempt's cgroup, as the job child joined it (supervisor.py)
            join_cgroup((spec.get("cgroup") or {}).get("procs") or [])
        if uid is not None and os.geteuid() == 0:
            os.setgroups(spec.get("groups") or [])
            if gid is None:  # gflowd names both; never run under a group that was not chosen
                raise OSError(errno.EINVAL, "the launch record names a uid but no gid")
            os.setgid(gid)
            os.setuid(uid)
        env = (
            environment(spec) if environment is not None else spec["env"]
        )  # as the job's user: its submitter's env file
        try:
            os.chdir(spec["cwd"])
        except OSError:
            os.chdir("/")
        if tty_fd is not None and term and "TERM" not in env:
            env = {**env, "TERM": term}  # the caller's terminal type: it is the caller's screen
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        missing = isinstance(exc, FileNotFoundError)
        try:
            os.write(
                2, f"gflowctl exec: {argv[0] if argv else '?'}: {'command not found' if missing else text}\n".encode()
            )
        finally:
            os._exit(127 if missing else 126)


class _Exec:
    """One exec'd command's side of the relay: the descriptors we hold (the pty master, or our ends
    of its three pipes) and the flow control of both ways."""

    def __init__(self, pid: int, stdin: int | None, outputs: dict[int, bytes], master: int | None):
        self.pid = pid
        self.stdin = stdin  # where the caller's input goes (the master, or the stdin pipe)
        self.outputs = outputs  # fd -> the frame kind its bytes go out as (O, or R for stderr)
        self.master = master
        self.pending = bytearray()  # input not yet written to the command
        self.stdin_ended = False  # the caller's stdin ended (C): close the pipe once pending is out
        self.unacked = 0  # output bytes sent that the caller has not yet written
        self.to_ack = 0  # input bytes written to the command, not yet acknowledged


class _Client:
    """One connection to the control socket."""

    def __init__(self, sock: socket.socket, uid: int):
        self.sock = sock
        self.uid = uid
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.mode = ""  # "" until its hello; attach | exec
        self.read_only = False
        self.size = DEFAULT_SIZE
        self.told_read_only = False
        self.pid = 0  # exec: the command's pid
        self.exec: _Exec | None = None  # exec: the relay to the command
        self.closing = False  # close once the outbox is sent

    def fileno(self) -> int:
        return self.sock.fileno()

    def close_exec(self) -> None:
        if self.exec is not None:
            for fd in {*self.exec.outputs, self.exec.stdin} - {None}:
                with contextlib.suppress(OSError):
                    os.close(fd)  # type: ignore[arg-type]
            self.exec = None

    def close(self) -> None:
        self.close_exec()
        self.sock.close()


class Control:
    """The attempt's control socket and, for a tty job, the pty master behind it (module notes)."""

    def __init__(
        self,
        spec: dict,
        stamp_path: str,
        listener: socket.socket | None = None,
        join_cgroup: Callable[[list[str]], None] | None = None,
        environment: Callable[[dict], dict] | None = None,
    ):
        self.spec = spec
        self.join_cgroup = join_cgroup  # how an exec'd command enters the job's cgroup
        self.environment = environment  # the job's whole environment, read as its user (supervisor.py)
        self.name = str(spec.get("name"))
        self.owner = spec.get("uid") if spec.get("uid") is not None else os.geteuid()
        self.stamp_path = stamp_path
        self.listener = listener
        self.bound = 0  # the socket file's inode
        self.clients: dict[int, _Client] = {}
        self.viewers: list[_Client] = []  # attached, in attach order: the last writable one types
        self.master: int | None = None
        self.log_fd: int | None = None
        self.history = bytearray()
        self.pending_input = bytearray()
        self.stamped_at = 0.0
        self.typed_at: float | None = None  # an input not yet in the stamp file
        # ``gflowctl checkpoint done`` from the job (hello mode checkpoint): the supervisor's handshake
        self.on_checkpoint: Callable[[str | None], None] | None = None

    def listen(self) -> None:
        """Bind the socket (once the job is under way: never a delay to its start). Without one (no
        path, an unusable folder) attach and exec are off, and a tty job's output still reaches its log."""
        path = self.spec.get("control")
        if not path or self.listener is not None:
            return
        try:
            self.listener = _listen(path, self.spec.get("uid"), self.spec.get("gid"))
            self.bound = os.lstat(path).st_ino
        except OSError as exc:
            sys.stderr.write(f"control socket {path}: {exc.strerror or exc}; attach and exec are off\n")

    # -- the terminal ---------------------------------------------------------------------------

    def serve_terminal(self, master: int, log_fd: int) -> None:
        self.master, self.log_fd = master, log_fd
        self._stamp(force=True)  # a session nobody typed in is idle since its start

    def _stamp(self, force: bool = False) -> None:
        """The stamp's mtime := the last input's time; written at most every INPUT_STAMP_EVERY (an
        input inside that window is written when it is up: ``handle`` comes by at least every second)."""
        now = time.time()
        if self.typed_at is None and not force:
            return
        if not force and now - self.stamped_at < INPUT_STAMP_EVERY:
            return
        when = self.typed_at if self.typed_at is not None else now
        self.stamped_at, self.typed_at = now, None
        try:
            fd = os.open(self.stamp_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            try:
                os.utime(fd, (when, when))
            finally:
                os.close(fd)
        except OSError:
            pass  # a full disk costs only the idle clock's accuracy

    def _read_master(self) -> bool:
        """Copy what the job wrote to the log and the viewers. False once the pty is closed."""
        assert self.master is not None
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return True
        except OSError:  # EIO: every process of the session closed the terminal
            data = b""
        if not data:
            os.close(self.master)
            self.master = None
            return False
        self._to_log(data)
        self.history += data
        del self.history[:-HISTORY_BYTES]
        self._broadcast(frame(b"O", data))
        return True

    def _to_log(self, data: bytes) -> None:
        if self.log_fd is None:
            return
        try:
            while data:
                data = data[os.write(self.log_fd, data) :]
        except OSError:
            pass  # a full disk: the session goes on, the log misses it

    def drain(self) -> None:
        """The job ended: whatever is still in the pty, then no more terminal."""
        while self.master is not None:
            if not self._read_master():
                break
            try:
                if not select.select([self.master], [], [], 0)[0]:
                    break
            except (OSError, ValueError):
                break
        if self.master is not None:
            os.close(self.master)
            self.master = None

    def _broadcast(self, data: bytes) -> None:
        for viewer in list(self.viewers):
            if len(viewer.outbox) > VIEWER_BACKLOG:
                self._drop(viewer)
            else:
                viewer.outbox += data

    def _typer(self) -> _Client | None:
        for viewer in reversed(self.viewers):
            if not viewer.read_only:
                return viewer
        return None

    def _resize(self) -> None:
        typer = self._typer()
        if typer is not None and self.master is not None:
            try:
                set_window(self.master, typer.size)
            except OSError:
                pass

    def notice(self, text: str) -> None:
        """A line of gflowd's (it says it is gflow's: ``gflow: job x has been idle ...``) on every
        viewer's terminal and in the log, on a line of its own; never the job's input."""
        line = text.replace("\n", " ").replace("\r", " ")
        self._to_log(f"\r\n{line}\r\n".encode())
        self._broadcast(frame(b"N", line))

    # -- the loop's part ------------------------------------------------------------------------

    def wanted(self) -> tuple[list, list]:
        readers: list = list(self.clients.values())
        if self.listener is not None:
            readers.append(self.listener)
        if self.master is not None:
            readers.append(self.master)
        writers: list = [c for c in self.clients.values() if c.outbox]
        if self.pending_input and self.master is not None:
            writers.append(self.master)
        self._exec_wanted(readers, writers)
        return readers, writers

    def handle(self, ready: list, writable: list, job_running: bool) -> None:
        if self.master is not None and self.master in ready:
            self._read_master()
        if self.master is not None and self.master in writable:
            self._write_input()
        self._exec_handle(ready, writable)
        if self.listener is not None and self.listener in ready:
            self._accept()
        for client in list(self.clients.values()):
            if client in writable:
                self._send(client)
            if client in ready and client.fileno() in self.clients:
                self._receive(client, job_running)
        self._stamp()  # an input the rate limit held back, once its time is up

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        if len(self.clients) >= MAX_CLIENTS:
            sock.close()
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        client = _Client(sock, uid)
        self.clients[client.fileno()] = client
        if uid not in (0, self.owner):
            self._refuse(
                client,
                f"permission denied: job/{self.name} runs as uid {self.owner}; only its owner or root may attach or exec",
            )

    def _refuse(self, client: _Client, why: str) -> None:
        client.outbox += frame(b"E", why)
        client.closing = True
        self._send(client)

    def _send(self, client: _Client) -> None:
        try:
            sent = client.sock.send(client.outbox)
        except BlockingIOError:
            return
        except OSError:
            self._drop(client)
            return
        del client.outbox[:sent]
        if client.closing and not client.outbox:
            # our last word is out: say EOF and drop it at its EOF (closing first, with its input
            # unread, would reset the connection before it reads the answer)
            with contextlib.suppress(OSError):
                client.sock.shutdown(socket.SHUT_WR)

    def _receive(self, client: _Client, job_running: bool) -> None:
        try:
            data = client.sock.recv(EXEC_WINDOW)  # plain recv: a descriptor someone sends along is discarded
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        if client.closing:
            return
        client.inbox += data
        try:
            frames = split_frames(client.inbox)
        except ValueError:
            self._drop(client)
            return
        for kind, payload in frames:
            if client.fileno() not in self.clients or client.closing:
                return
            self._on_frame(client, kind, payload, job_running)

    def _on_frame(self, client: _Client, kind: bytes, payload: bytes, job_running: bool) -> None:
        if kind == b"H" and not client.mode:
            try:
                hello = json.loads(payload)
            except ValueError:
                hello = None
            if not isinstance(hello, dict):
                self._refuse(client, "bad hello")
                return
            self._on_hello(client, hello, job_running)
        elif kind == b"I" and client.mode == "attach":
            if client is not self._typer():
                if not client.told_read_only:
                    client.told_read_only = True
                    client.outbox += frame(b"S", "read-only: another terminal types (the most recent to attach)")
                return
            self.pending_input += payload
            self._write_input()
            self.typed_at = time.time()
            self._stamp()
        elif kind == b"W" and client.mode == "attach":
            try:
                rows, cols = (int(x) for x in json.loads(payload))
            except (ValueError, TypeError):
                return
            if 0 < rows < 10000 and 0 < cols < 10000:
                client.size = (rows, cols)
                if client is self._typer():
                    self._resize()
        elif kind == b"K" and client.mode == "exec" and client.pid:
            try:
                sig = int(json.loads(payload))
                master = client.exec.master if client.exec is not None else None
                # on its pty, to the foreground job (a shell's, under job control), as the terminal would
                os.killpg(os.tcgetpgrp(master) if master is not None else client.pid, sig)
            except (ValueError, TypeError, OSError):
                pass
        elif client.mode == "exec" and client.exec is not None:
            self._on_exec_frame(client, client.exec, kind, payload)

    def _on_hello(self, client: _Client, hello: dict, job_running: bool) -> None:
        mode = hello.get("mode")
        if mode == "notice":
            self.notice(str(hello.get("text", "")))
            self._drop(client)
        elif not job_running:
            self._refuse(client, f"job/{self.name} has ended")
        elif mode == "checkpoint":  # only the job's user and root get this far (module notes)
            if self.on_checkpoint is None:
                self._refuse(client, f"job/{self.name} has no spec.checkpoint: nothing waits for a checkpoint")
                return
            path = hello.get("path")
            self.on_checkpoint(path if isinstance(path, str) and path else None)
            client.outbox += frame(b"X", {"code": 0})
            client.closing = True
        elif mode == "attach":
            if self.master is None:
                self._refuse(
                    client,
                    f"job/{self.name} has no terminal (spec.tty is false): gflowctl logs -f {self.name} "
                    f"follows its output; gflowctl exec {self.name} -- CMD runs a command beside it",
                )
                return
            client.mode, client.read_only = "attach", bool(hello.get("readOnly"))
            size = hello.get("size")
            if isinstance(size, list) and len(size) == 2 and all(isinstance(x, int) and 0 < x < 10000 for x in size):
                client.size = (size[0], size[1])
            previous = self._typer()
            self.viewers.append(client)
            client.outbox += frame(b"O", bytes(self.history))
            if not client.read_only:
                if previous is not None:
                    previous.outbox += frame(b"S", "another terminal attached and types now; you are watching")
                self._resize()
        elif mode == "exec":
            argv = hello.get("argv")
            if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                self._refuse(client, "exec needs a command")
                return
            self._start_exec(client, argv, hello)
        else:
            self._refuse(client, f"unknown mode {mode!r}")

    # -- exec: the relay ------------------------------------------------------------------------

    def _start_exec(self, client: _Client, argv: list[str], hello: dict) -> None:
        """Fork the command on a pty of its own (``hello["tty"]``) or on pipes; we keep the other ends."""
        size = hello.get("size")
        term = hello.get("term") if isinstance(hello.get("term"), str) else None
        if hello.get("tty"):
            master, slave = open_terminal(self.spec)
            if isinstance(size, list) and len(size) == 2 and all(isinstance(x, int) and 0 < x < 10000 for x in size):
                set_window(master, (size[0], size[1]))
            ours, theirs, stdin, outputs = [master], [slave], master, {master: b"O"}
        else:
            (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
            ours, theirs, stdin, outputs = [in_w, out_r, err_r], [in_r, out_w, err_w], in_w, {out_r: b"O", err_r: b"R"}
            master = None
        pid = os.fork()
        if pid == 0:
            _become_exec(
                self.spec, argv, theirs, slave if master is not None else None, term, self.join_cgroup, self.environment
            )
        for fd in theirs:
            os.close(fd)
        for fd in ours:
            os.set_blocking(fd, False)
        client.mode, client.pid = "exec", pid
        client.exec = _Exec(pid, stdin, outputs, master)

    def _on_exec_frame(self, client: _Client, run: _Exec, kind: bytes, payload: bytes) -> None:
        if kind == b"I":
            run.pending += payload
            if len(run.pending) > EXEC_WINDOW:  # more than the window: not a gflowctl
                self._drop(client)
                return
            self._write_exec_input(client, run)
        elif kind == b"C":
            run.stdin_ended = True
            self._write_exec_input(client, run)
        elif kind == b"A":
            try:
                run.unacked = max(0, run.unacked - int(json.loads(payload)))
            except (ValueError, TypeError):
                pass
        elif kind == b"W" and run.master is not None:
            try:
                rows, cols = (int(x) for x in json.loads(payload))
                if 0 < rows < 10000 and 0 < cols < 10000:
                    set_window(run.master, (rows, cols))
            except (ValueError, TypeError, OSError):
                pass

    def _write_exec_input(self, client: _Client, run: _Exec) -> None:
        if run.stdin is not None and run.pending:
            try:
                written = os.write(run.stdin, run.pending)
            except BlockingIOError:
                written = 0
            except OSError:  # the command closed its stdin: what it will never read counts as taken
                written = len(run.pending)
            del run.pending[:written]
            run.to_ack += written
        if run.to_ack and (run.to_ack >= ACK_EVERY or not run.pending):
            client.outbox += frame(b"A", run.to_ack)
            run.to_ack = 0
        if run.stdin_ended and not run.pending and run.stdin is not None and run.master is None:
            os.close(run.stdin)  # the pipe: the command reads EOF
            run.stdin = None

    def _read_exec_output(self, client: _Client, run: _Exec, fd: int) -> bool:
        """One read of the command's output to the caller; False when that output has ended or, for
        now, is empty."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:  # EIO: the pty's last user is gone
            data = b""
        if not data:
            del run.outputs[fd]
            if fd != run.stdin:
                os.close(fd)
            return False
        client.outbox += frame(run.outputs[fd], data)
        run.unacked += len(data)
        return True

    def _exec_wanted(self, readers: list, writers: list) -> None:
        for client in self.clients.values():
            run = client.exec
            if run is None:
                continue
            if run.unacked < EXEC_WINDOW:
                readers.extend(run.outputs)
            if run.pending and run.stdin is not None:
                writers.append(run.stdin)

    def _exec_handle(self, ready: list, writable: list) -> None:
        for client in list(self.clients.values()):
            run = client.exec
            if run is None:
                continue
            for fd in list(run.outputs):
                if fd in ready:
                    for _ in range(4):  # a pipe refills while we send: a few reads a turn halve the turns
                        if run.unacked >= EXEC_WINDOW or not self._read_exec_output(client, run, fd):
                            break
            if run.stdin is not None and run.stdin in writable:
                self._write_exec_input(client, run)
            if client.outbox:
                self._send(client)

    def _write_input(self) -> None:
        if self.master is None:
            self.pending_input.clear()
            return
        try:
            written = os.write(self.master, self.pending_input)
        except BlockingIOError:
            return
        except OSError:
            written = len(self.pending_input)
        del self.pending_input[:written]
        if len(self.pending_input) > VIEWER_BACKLOG:  # the job reads nothing: typing ahead has a limit
            del self.pending_input[:-VIEWER_BACKLOG]

    def reaped(self, pid: int, status: int) -> None:
        for client in list(self.clients.values()):
            if client.mode == "exec" and client.pid == pid:
                client.pid = 0
                run = client.exec
                for fd in list(run.outputs if run is not None else ()):
                    assert run is not None  # (no outputs without it)
                    for _ in range(16):  # what it wrote last, window or not (a pipe's or pty's worth)
                        if not (select.select([fd], [], [], 0)[0] and self._read_exec_output(client, run, fd)):
                            break
                client.close_exec()  # a process it left behind keeps no line to the caller
                client.outbox += frame(b"X", {"code": _exit_code(status)})
                client.closing = True
                self._send(client)

    def _drop(self, client: _Client) -> None:
        self.clients.pop(client.fileno(), None)
        if client in self.viewers:
            was_typer = client is self._typer()
            self.viewers.remove(client)
            if was_typer and self._typer() is not None:
                self._typer().outbox += frame(b"S", "you type now")  # type: ignore[union-attr]
                self._resize()
        if client.mode == "exec" and client.pid:
            try:
                os.killpg(client.pid, signal.SIGHUP)  # its caller went away, like a closed terminal
            except OSError:
                pass
        client.close()

    def close(self, exit_code: int | None) -> None:
        """The attempt is over: every client learns the exit code (best effort), the socket goes."""
        if self.master is not None:
            self.drain()
        if self.typed_at is not None:
            self.stamped_at = 0.0
            self._stamp()
        deadline = time.monotonic() + CLOSE_WAIT
        for client in list(self.clients.values()):
            if client.mode == "attach":
                client.outbox += frame(b"X", {"code": exit_code})
            try:
                client.sock.settimeout(max(0.01, deadline - time.monotonic()))
                client.sock.sendall(client.outbox)
            except OSError:
                pass  # a viewer that reads nothing learns the end from the closed connection
            self._drop(client)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            path = str(self.spec.get("control"))
            with contextlib.suppress(OSError):
                if os.lstat(path).st_ino == self.bound:  # not a next attempt's socket, bound meanwhile
                    os.unlink(path)
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _listen(path: str, uid: int | None, gid: int | None) -> socket.socket:
    """The socket, the job user's and 0600, in ``run/control/<uid>/``, a folder of ours (gflowd's user),
    0711: the user can reach the socket but never replace it, so whoever connects there reaches us
    (gflowctl also checks that: ``controller/client/control_peer.py``)."""
    folder = control_folder(os.path.dirname(path))
    name = os.path.basename(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)  # a dead attempt's socket
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # srw-------: no moment in which another user could connect
    try:
        sock.bind(f"/proc/self/fd/{folder}/{name}")
        if uid is not None and os.geteuid() == 0 and uid != 0:
            os.chown(name, uid, gid if gid is not None else -1, dir_fd=folder, follow_symlinks=False)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
        os.close(folder)
    sock.listen(16)
    sock.setblocking(False)
    return sock


def control_folder(folder: str) -> int:
    """``run/control/<uid>/`` opened (a descriptor): made ours and CONTROL_MODE. A folder of the
    layout before (the job user's, 0700: the user could replace the socket) or anything else in its
    place is moved aside first, then removed."""
    os.makedirs(os.path.dirname(folder), mode=0o755, exist_ok=True)
    for _ in range(5):  # supervisors of the same user race here: each try sees the other's work
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, CONTROL_MODE)
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            _move_aside(folder)
            continue
        info = os.fstat(fd)
        if info.st_uid == os.geteuid():
            if stat.S_IMODE(info.st_mode) != CONTROL_MODE:
                os.fchmod(fd, CONTROL_MODE)
            return fd
        os.close(fd)
        _move_aside(folder)
    raise OSError(errno.EEXIST, "cannot make it ours (something keeps replacing it)", folder)


def _move_aside(path: str) -> None:
    aside = f"{path}.old-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another supervisor moved it first
    if os.path.isdir(aside) and not os.path.islink(aside):
        import shutil  # lazy: once per user, on the first start after an upgrade

        shutil.rmtree(aside, ignore_errors=True)  # fd-based on Linux: no symlink in it is followed
    else:
        with contextlib.suppress(OSError):
            os.unlink(aside)


def fits_sun_path(path: str) -> bool:
    """``path`` is a socket address as it is (``unix_address``)."""
    return len(os.fsencode(path)) < 100


@contextlib.contextmanager
def unix_address(path: str):
    """``path`` as a socket address the kernel takes: a path longer than sun_path's 108 bytes (a deep
    GFLOW_HOME) is reached through its folder's descriptor, ``/proc/self/fd/N/NAME``."""
    if fits_sun_path(path):
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)
