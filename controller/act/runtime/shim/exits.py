"""Ending an attempt: the exit record, written in place over the room gflowd left for it and
fsync'd; held in memory and retried with backoff if even that needs blocks the disk refuses;
and the notice datagram that tells gflowd at once. Standard library only."""

from __future__ import annotations

import errno
import os
import socket
import sys
import time

try:  # in the project; run as a plain file (shim/main.py), the modules above this one
    from controller.act.runtime import record
    from controller.act.runtime.control_socket import fits_sun_path, unix_address
except ImportError:
    import record  # type: ignore[no-redef]
    from control_socket import fits_sun_path, unix_address  # type: ignore[no-redef]

TYPE_CHECKING = False  # not typing's: the shim loads the standard library's least (type checkers read it as theirs)
if TYPE_CHECKING:
    from typing import Any

    from controller.act.runtime.control_socket import Control

ERROR_CHARS = 3000  # a start error is cut to this, so the record fits in its room
RETRY_FIRST, RETRY_MAX = 0.2, 5.0  # seconds between tries to write an exit record the disk refused


def fsync_dir(directory: str) -> None:
    try:
        dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def still_named(fd: int, path: str) -> bool:
    """``path`` still names the open file ``fd``."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


class ExitRecord:
    """The supervisor's end of an attempt (mixed into ``Supervisor``: its ``spec``, ``fd``,
    ``cgroup``, ``control`` and what the watch learnt: ``stop_reason``, ``max_rss``, ``job_pid``)."""

    record_path: str
    fd: int | None
    spec: dict[str, Any]
    cgroup: Any  # the attempt's cgroup (``child.attempt_cgroup``), or None
    cgroup_removed: bool
    control: Control | None
    stop_reason: str
    max_rss: int
    job_pid: int
    oom_kills: int | None = None  # the cgroup's OOM kill count, read at the end

    def _cgroup_usage(self) -> dict:
        """The tree is gone: the cgroup's counters for the exit record, then the cgroup is removed,
        unless the launch says gflowd ``leave``s it for later (gflowd removes it also should this fail)."""
        if self.cgroup is None:
            return {}
        usage: dict = {}
        try:
            stats = self.cgroup.stats()
            self.oom_kills = stats.oom_kills
            if stats.oom_kills and not self.stop_reason:
                self.stop_reason = "OOMKilled"
            if stats.cpu_usec is not None:
                usage["cpuSeconds"] = round(stats.cpu_usec / 1e6, 3)
            if stats.memory_peak is not None:
                usage["peakMemoryBytes"] = stats.memory_peak
            if not self.spec["cgroup"].get("leave"):  # else gflowd removes it when no start waits on the cgroup lock
                self.cgroup.remove(timeout=5.0)
                self.cgroup_removed = True
        except Exception as exc:
            sys.stderr.write(f"supervisor: cgroup {self.cgroup.name}: {exc}\n")
        return usage

    def _finish(self, started_wall: float, exit_code: int | None, sig: int | None = None, error: str = "") -> bool:
        """The exit record, written (True), or held until the disk takes it (False)."""
        usage = self._cgroup_usage()
        if not usage.get("peakMemoryBytes") and self.max_rss:
            usage["peakMemoryBytes"] = self.max_rss  # polled: the largest tree RSS seen
        exit_record: dict[str, Any] = {
            "name": self.spec.get("name"),
            "attempt": self.spec.get("attempt"),
            "exitCode": exit_code,
            "signal": sig,
            "reason": self.stop_reason if self.stop_reason in ("OOMKilled", "DeadlineExceeded") else "",
            "stopped": bool(self.stop_reason),
            "stopReason": self.stop_reason,  # why gflowd asked it to stop, should its own record be lost
            "error": error[:ERROR_CHARS],
            "startedAt": started_wall,
            "finishedAt": time.time(),
            "maxRssBytes": self.max_rss,
            "usage": usage,
            "oomKills": self.oom_kills,  # the cgroup's count, for the failure's classification
            "jobPid": self.job_pid or None,
            "cgroupRemoved": self.cgroup_removed,  # gflowd then does not look for it
        }
        handshake = getattr(self, "checkpoint", None)  # shim/checkpoint.py: the latest signal and confirmation
        if handshake is not None:
            exit_record["checkpoint"] = handshake.record()
            handshake.close()
        data = record.encode(exit_record)
        while not record.exit_fits(data):  # an error text of escaped characters: cut it further
            exit_record["error"] = exit_record["error"][: len(exit_record["error"]) // 2]
            data = record.encode(exit_record)
        try:
            self._write_exit(data)
        except OSError:
            self._close_control(exit_code)
            self._keep_exit(data)
            return False
        self._close_control(exit_code)
        self._notify("exit")
        return True

    def _close_control(self, exit_code: int | None) -> None:
        """Viewers and exec clients learn the exit code; the control socket goes."""
        if self.control is not None:
            self.control.close(exit_code)
            self.control = None

    def _write_exit(self, data: bytes) -> None:
        """Over the exit region, in place (no new blocks), fsync'd, and the folder too: the record
        file's own name may not be on disk yet."""
        if self.fd is None:
            raise OSError(errno.EBADF, "the attempt's record is not open", self.record_path)
        try:
            record.write_exit(self.fd, data)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self.record_path) from None
        fsync_dir(os.path.dirname(self.record_path))

    def _keep_exit(self, data: bytes) -> None:
        """The disk refused the exit record: hold it, tell gflowd, retry until it is written or
        gflowd has recorded the exit itself (it then removes the record from its name, or keeps
        it as a spare under another). We stay alive, holding the attempt lock, meanwhile."""
        delay = RETRY_FIRST
        while True:
            self._notify("exit", data[record.HEADER :].decode())  # the JSON, without its length and checksum
            time.sleep(delay)
            if self.fd is None or not still_named(self.fd, self.record_path):
                return
            try:
                self._write_exit(data)
            except OSError:
                delay = min(delay * 2, RETRY_MAX)
                continue
            self._notify("exit")
            return

    def _notify(self, what: str, detail: str = "") -> None:
        """Tell gflowd at once (a datagram); if it is down it reads the records when it returns."""
        address = self.spec.get("notify")
        if not address:
            return
        message = f"{what} {self.spec.get('name')} {self.spec.get('attempt')}" + (f" {detail}" if detail else "")
        try:
            if fits_sun_path(address):  # no folder descriptor to open (unix_address): most homes
                _notice_socket().sendto(message.encode(), address)
                return
            with unix_address(address) as short:
                _notice_socket().sendto(message.encode(), short)
        except OSError:
            pass


_socket: socket.socket | None = None
_socket_pid = 0


def _notice_socket() -> socket.socket:
    """The datagram socket this process sends its notices from: one per process, not one per
    notice (two a job; a supervisor process serves many attempts). Unbound and not inherited."""
    global _socket, _socket_pid
    if _socket is None or _socket_pid != os.getpid():  # a forked child makes its own
        _socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _socket.setblocking(False)
        _socket_pid = os.getpid()
    return _socket
