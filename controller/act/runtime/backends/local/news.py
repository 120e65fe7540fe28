"""How the loop learns, without polling, that the local backend has news: the supervisors' notice
datagrams (``run/notify.sock``: ``start|exit|unlaunched NAME N [detail]``), each live supervisor's
pidfd (readable when it exits), and a pipe that gflowd itself and the launcher write to (a reused
supervisor does not exit, and a datagram may be dropped: the kernel queues only
net.unix.max_dgram_qlen, often 10). ``fds`` are what the loop waits on."""

from __future__ import annotations

import os
import select
import socket

from controller.act.runtime.backends.local.attempt import Attempt
from controller.act.runtime.control_socket import unix_address


class News:
    def __init__(self, notify_path: str) -> None:
        self.notify_path = notify_path
        self.epoll = select.epoll()
        self.sock = self._bind()
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # readable: observe() has news

    def fds(self) -> list[int]:
        return [self.epoll.fileno(), self.sock.fileno(), self.read_fd]

    def poke(self) -> None:
        """Wake gflowd's loop: observe() has something new to say."""
        try:
            os.write(self.write_fd, b"x")
        except BlockingIOError:
            pass

    def drain(self) -> list[bytes]:
        """The notices that came, oldest first; the wake-ups are consumed."""
        notices = []
        while True:
            try:
                notices.append(self.sock.recv(65536))
            except (BlockingIOError, OSError):
                break
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        # pidfd readiness is consumed by unwatching; nothing to read from epoll itself
        self.epoll.poll(0)
        return notices

    def watch(self, attempt: Attempt, identity_ok) -> None:
        """The attempt's supervisor's exit, through its pidfd; ``identity_ok()`` checks, after the
        open, that the pid still names that supervisor."""
        if attempt.pidfd is not None or attempt.supervisor_pid is None:
            return
        try:
            attempt.pidfd = os.pidfd_open(attempt.supervisor_pid)
        except (OSError, AttributeError):
            return
        if not identity_ok():  # the pid was reused between the check and the open
            os.close(attempt.pidfd)
            attempt.pidfd = None
            return
        self.epoll.register(attempt.pidfd, select.EPOLLIN)

    def unwatch(self, attempt: Attempt) -> None:
        if attempt.pidfd is not None:
            try:
                self.epoll.unregister(attempt.pidfd)
            except OSError:
                pass
            os.close(attempt.pidfd)
            attempt.pidfd = None

    def close(self) -> None:
        self.sock.close()
        os.close(self.read_fd)
        os.close(self.write_fd)

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            os.unlink(self.notify_path)
        except FileNotFoundError:
            pass
        with unix_address(self.notify_path) as address:
            sock.bind(address)
        os.chmod(self.notify_path, 0o600)
        sock.setblocking(False)
        return sock
