"""The I/O edge of the cgroup layer: read, write, mkdir and rmdir on cgroupfs, one-line errors.

Every failure becomes a ``CgroupError`` whose message names the file, the errno and what it usually
means on cgroupfs ("read-only mount", "not delegated to uid 1000", "controller not enabled here"),
so a caller can log it or show it in ``gflowctl get node`` as it is.

``Cgroupfs`` is an object, not module functions, so the tests of the cgroup v2 paths can hand in a
subclass that plays the kernel's part on a temp dir (it must populate interface files on mkdir, which
no plain directory does). Nothing else is faked.

Standard library only and nothing imported from the rest of the project: the supervisor loads this
package as plain files.
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False  # not typing's: the shim loads the standard library's least
if TYPE_CHECKING:
    from collections.abc import Callable


class CgroupError(Exception):
    """The environment refused a cgroup operation; ``str()`` is one line that says where and why."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno  # of the OSError behind it, so callers can tell EBUSY (retry) from the rest


_MEANING = {
    errno.EACCES: "not root and not delegated to uid {uid}",
    errno.EPERM: "not permitted (the parent cgroup does not allow it, or not root)",
    errno.EROFS: "cgroupfs is mounted read-only",
    errno.ENOENT: "missing: the controller is not enabled here, or the cgroup is gone",
    errno.EBUSY: "busy: the cgroup has processes or child cgroups",
    errno.EINVAL: "the kernel rejected the value",
    errno.ENOSPC: "the cpuset has no cpus or mems to give",
    errno.ERANGE: "no such CPU or memory node on this machine",
    errno.ENOTDIR: "not a directory",
}


def why(exc: OSError) -> str:
    """``EACCES (not root and not delegated to uid 1000)``: the errno's name and what it means here."""
    code = exc.errno or 0
    name = errno.errorcode.get(code, str(code))
    meaning = _MEANING.get(code, exc.strerror or "")
    return f"{name} ({meaning.format(uid=os.geteuid())})" if meaning else name


class Cgroupfs:
    """Real cgroupfs operations. Each public method raises ``CgroupError`` with a one-line message.
    ``opener``: how a file is opened for a read (``os.open``; a supervisor opens its attempt's
    files relative to a folder descriptor it keeps, ``shim/cgroup_files.py``)."""

    opener: Callable[[str, int], int] = staticmethod(os.open)

    def __init__(self, opener: Callable[[str, int], int] | None = None):
        if opener is not None:
            self.opener = opener

    def read(self, path: str) -> str:
        try:
            return self._read(path)
        except OSError as exc:
            raise CgroupError(f"cannot read {path}: {why(exc)}", exc.errno) from None

    def read_optional(self, path: str) -> str | None:
        """The file's text, or None when it does not exist (an older kernel, a controller not here)."""
        try:
            return self.read(path)
        except CgroupError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise

    def write(self, path: str, value: str) -> None:
        """One ``write()`` of ``value``: cgroupfs parses each write on its own (one device rule, one pid)."""
        try:
            self._write(path, value)
        except OSError as exc:
            raise CgroupError(f"cannot write {value!r} to {path}: {why(exc)}", exc.errno) from None

    def write_each(self, path: str, values: list[str]) -> None:
        """One ``write()`` per value, through one open of ``path`` (v1 ``devices.deny`` takes one
        rule a write; an attempt of a CPU job denies every GPU: one open, not one per GPU)."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise CgroupError(
                f"cannot write {values[0] if values else ''!r} to {path}: {why(exc)}", exc.errno
            ) from None
        try:
            for value in values:
                try:
                    os.write(fd, value.encode())
                except OSError as exc:
                    raise CgroupError(f"cannot write {value!r} to {path}: {why(exc)}", exc.errno) from None
        finally:
            os.close(fd)

    def mkdir(self, path: str) -> bool:
        """Create the cgroup; False when it already exists (so create is idempotent)."""
        try:
            self._mkdir(path)
            return True
        except FileExistsError:
            if not os.path.isdir(path):
                raise CgroupError(
                    f"cannot create cgroup {path}: it exists and is not a directory", errno.EEXIST
                ) from None
            return False
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {path}: {why(exc)}", exc.errno) from None

    def rmdir(self, path: str) -> bool:
        """Remove the cgroup; False when it was already gone. The caller retries on ``errno`` EBUSY."""
        try:
            self._rmdir(path)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise CgroupError(f"cannot remove cgroup {path}: {why(exc)}", exc.errno) from None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def subdirs(self, path: str) -> list[str]:
        """Names of the child cgroups of ``path`` (none when it does not exist)."""
        try:
            with os.scandir(path) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CgroupError(f"cannot list {path}: {why(exc)}", exc.errno) from None

    # The raw operations a fake kernel overrides; they raise OSError like the syscalls.

    def _read(self, path: str) -> str:
        # os.read, not open(): a buffered file costs two fstats, an ioctl and two lseeks more a read,
        # and a supervisor reads four counters per attempt
        fd = self.opener(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks).decode()

    def _write(self, path: str, value: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # never O_CREAT: a missing file is an answer
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def _mkdir(self, path: str) -> None:
        os.mkdir(path, 0o755)

    def _rmdir(self, path: str) -> None:
        os.rmdir(path)


def parse_keyed(text: str) -> dict[str, int]:
    """``key value`` lines (memory.events, cpu.stat, pids.events, memory.oom_control) as a dict."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


def parse_pids(text: str) -> list[int]:
    return [int(word) for word in text.split()]
