"""The client end of a job supervisor's control socket: attach this terminal to a tty job, or run a
command in a job's allocation. Standard library only; no gflowd involved (it may be down).

The wire format is ``controller/util/frames.py``; the server is
``controller/act/runtime/control_socket.py`` (see its docstring for the frames each side sends).

Attach puts the local terminal in raw mode (every key, Ctrl-C included, goes to the job) and
restores it on every way out: detach, the job's end, an error, a signal. ``DETACH_KEY`` (Ctrl-])
leaves the job running.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import termios
import tty
from pathlib import Path

from controller.util.frames import frame, split_frames

DETACH_KEY = b"\x1d"  # Ctrl-]: telnet's and virsh console's escape; shells and editors leave it alone
DETACH_NAME = "Ctrl-]"


class Refused(Exception):
    """The supervisor said no (not yours, no terminal, ended): its one-line reason."""


class NoSession(Exception):
    """Nothing listens on the control socket (no such job running, or it is just starting)."""

    def __init__(self, why: str, denied: bool = False):
        super().__init__(why)
        self.denied = denied  # the kernel refused us the folder: another user's job


class _Frames:
    """Frames out of a byte stream."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self.buffer += data
        try:
            return split_frames(self.buffer)
        except ValueError as exc:
            raise Refused(f"the supervisor sent nonsense ({exc})") from None


def connect(path: Path) -> socket.socket:
    """A connection to a control socket; a long path is reached through its folder (sun_path holds
    108 bytes)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder_fd = None
    address = str(path)
    try:
        if len(os.fsencode(address)) >= 100:
            folder_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            address = f"/proc/self/fd/{folder_fd}/{path.name}"
        sock.connect(address)
    except OSError as exc:
        sock.close()
        denied = exc.errno in (errno.EACCES, errno.EPERM)
        raise NoSession(exc.strerror or str(exc), denied=denied) from None
    finally:
        if folder_fd is not None:
            os.close(folder_fd)
    return sock


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data) :]
        except BlockingIOError:
            select.select([], [fd], [])


def _window(fd: int) -> list[int] | None:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return [size.lines, size.columns] if size.lines and size.columns else None


def attach(sock: socket.socket, read_only: bool = False, stdin: int = 0, stdout: int = 1) -> int | None:
    """Relay this terminal and the job's until the job ends (its exit code; None when unknown) or
    the user detaches (raises Detached). Raises Refused with the supervisor's reason."""
    is_tty = os.isatty(stdin)
    saved = termios.tcgetattr(stdin) if is_tty else None
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous_wakeup = signal.set_wakeup_fd(wake_w)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGWINCH, lambda *_: None)  # noticed through the wakeup pipe
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _leave)
    try:
        sock.sendall(frame(b"H", {"mode": "attach", "size": _window(stdin), "readOnly": read_only}))
        if saved is not None:
            tty.setraw(stdin, termios.TCSANOW)
        return _relay(sock, stdin, stdout, wake_r)
    finally:
        if saved is not None:
            try:
                termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
            except termios.error:
                pass  # the terminal hung up (a closed ssh connection): nothing left to restore
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)


class Detached(Exception):
    """The user pressed the detach key: the job runs on."""


def _leave(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # the finally blocks restore the terminal


def _relay(sock: socket.socket, stdin: int, stdout: int, wake_r: int) -> int | None:
    frames = _Frames()
    reading_stdin = True
    while True:
        watched: list[socket.socket | int] = [sock, wake_r, *([stdin] if reading_stdin else [])]
        ready, _, _ = select.select(watched, [], [])
        if wake_r in ready:
            signals = os.read(wake_r, 512)
            if signal.SIGWINCH in signals:
                size = _window(stdin)
                if size:
                    sock.sendall(frame(b"W", size))
        if stdin in ready:
            data = os.read(stdin, 4096)
            if not data:
                reading_stdin = False  # a pipe ran dry: keep watching the job
            else:
                typed, key, _ = data.partition(DETACH_KEY)
                if typed:
                    sock.sendall(frame(b"I", typed))
                if key:
                    raise Detached()
        if sock in ready:
            data = sock.recv(65536)
            if not data:
                raise Refused("the job's supervisor closed the connection")
            for kind, payload in frames.feed(data):
                if kind == b"O":
                    _write_all(stdout, payload)
                elif kind in (b"N", b"S"):
                    _write_all(stdout, b"\r\n" + (payload if kind == b"N" else b"[gflow] " + payload) + b"\r\n")
                elif kind == b"E":
                    raise Refused(payload.decode(errors="replace"))
                elif kind == b"X":
                    code = json.loads(payload).get("code")
                    return code if isinstance(code, int) else None


EXEC_WINDOW = 256 * 1024  # bytes of input in flight to the command (the supervisor's EXEC_WINDOW)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def run_command(sock: socket.socket, argv: list[str], stdin: int = 0, stdout: int = 1, stderr: int = 2) -> int:
    """Run ``argv`` in the job's allocation and relay its input and output: on a pseudo-terminal of
    its own when our stdin and stdout are terminals (ours then in raw mode: Ctrl-C, Ctrl-Z reach it
    as keys; the window size follows ours), else on pipes. Our descriptors never leave this process.
    Signals that would stop us (INT, TERM, HUP, QUIT) go to the command instead. Returns its exit
    code; raises Refused with the supervisor's reason."""
    on_tty = os.isatty(stdin) and os.isatty(stdout)
    saved = termios.tcgetattr(stdin) if on_tty else None
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous_wakeup = signal.set_wakeup_fd(wake_w)
    caught = (*FORWARDED, signal.SIGWINCH)
    handlers = {sig: signal.getsignal(sig) for sig in caught}
    for sig in caught:
        signal.signal(sig, lambda *_: None)  # noticed through the wakeup pipe
    try:
        hello: dict = {"mode": "exec", "argv": argv, "tty": on_tty}
        if on_tty:
            hello.update(size=_window(stdin), term=os.environ.get("TERM"))
        sock.sendall(frame(b"H", hello))
        if saved is not None:
            tty.setraw(stdin, termios.TCSANOW)
        return _relay_exec(sock, stdin, stdout, stderr, wake_r)
    finally:
        if saved is not None:
            try:
                termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
            except termios.error:
                pass  # the terminal hung up: nothing left to restore
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)


def _relay_exec(sock: socket.socket, stdin: int, stdout: int, stderr: int, wake_r: int) -> int:
    frames = _Frames()
    reading_stdin, in_flight = True, 0
    while True:
        watched: list[socket.socket | int] = [
            sock,
            wake_r,
            *([stdin] if reading_stdin and in_flight < EXEC_WINDOW else []),
        ]
        try:
            ready, _, _ = select.select(watched, [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            for signum in os.read(wake_r, 512):
                if signum == signal.SIGWINCH:
                    size = _window(stdin)
                    if size:
                        sock.sendall(frame(b"W", size))
                elif signum in FORWARDED:
                    sock.sendall(frame(b"K", int(signum)))
        if stdin in ready:
            try:
                data = os.read(stdin, EXEC_WINDOW - in_flight)
            except OSError:  # our terminal hung up
                data = b""
            if data:
                sock.sendall(frame(b"I", data))
                in_flight += len(data)
            else:
                reading_stdin = False
                sock.sendall(frame(b"C"))
        if sock in ready:
            data = sock.recv(EXEC_WINDOW)
            if not data:
                raise Refused("the job's supervisor closed the connection (the job ended?)")
            written = 0
            for kind, payload in frames.feed(data):
                if kind in (b"O", b"R"):
                    _write_all(stdout if kind == b"O" else stderr, payload)
                    written += len(payload)
                elif kind == b"A":
                    in_flight = max(0, in_flight - int(json.loads(payload)))
                elif kind == b"E":
                    raise Refused(payload.decode(errors="replace"))
                elif kind == b"X":
                    code = json.loads(payload).get("code")
                    return code if isinstance(code, int) else 1
            if written:
                sock.sendall(frame(b"A", written))
