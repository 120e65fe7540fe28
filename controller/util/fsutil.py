"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader never sees half a file and a crash never leaves one. Files are created 0644 at most:
never world-writable.

Files that belong to someone else (a user's manifest) are rewritten only by :func:`rewrite_locked`:
it keeps the file's owner, group and mode (or refuses), serialises with every other such rewrite,
and never overwrites a change it did not read.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import stat
import time
from collections.abc import Callable

from controller.util.locks import lock_held  # noqa: F401  (here too: callers import it from fsutil)

TYPE_CHECKING = False  # not typing's: run's and apply's start-up imports no pathlib (util/lean_path.py)
if TYPE_CHECKING:
    from pathlib import Path


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644, durable: bool = True, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically. ``durable=False`` skips fsync (caches only);
    ``sync_dir=False`` leaves the folder's fsync to the caller, who batches many files into one."""
    payload = data.encode() if isinstance(data, str) else data
    directory = path.parent
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None and exc.errno:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc  # say which file (ENOSPC on write)
        raise
    if durable and sync_dir:
        fsync_dir(directory)


def temp_beside(path: Path) -> tuple[int, str]:
    """A new empty file ``.NAME.RANDOM.tmp`` in ``path``'s folder, open read-write: the contract of
    ``tempfile.mkstemp`` (created 0600 with O_EXCL, no symlink followed, not inherited), without
    importing tempfile, which loads shutil and random: ~4 ms for every gflowctl verb that writes."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = os.path.join(path.parent, f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


def remove_stale_temps(directory: Path, only: frozenset[str] | None = None) -> int:
    """Remove the ``temp_beside`` files (``.NAME.<12 hex>.tmp``) a writer killed mid-write left in
    ``directory``: plain files of this user, for every NAME or those in ``only``. For gflowd at
    start, holding the home's lock, in the folders only it writes. Returns how many went."""
    removed = 0
    try:
        # names, not DirEntry objects, filtered in one comprehension: status/ holds 50,000 files
        # and a start looks through it for the few temps (~0.03 s of a start by entry, ~5 ms so)
        temps = [name for name in os.listdir(directory) if name.endswith(".tmp") and name.startswith(".")]
    except OSError:
        return 0
    for name in temps:
        stem, dot, token = name[1:-4].rpartition(".")
        if not (dot and stem and len(token) == 12 and all(c in "0123456789abcdef" for c in token)):
            continue
        if only is not None and stem not in only:
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on ``directory``'s disk (root's reserved blocks
    left out). Raises OSError."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def fsync_dir(directory: Path) -> None:
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class RewriteError(Exception):
    """A rewrite that did not happen; the file is as it was. The message is one line."""


class LockBusy(RewriteError):
    """Another program held the file's lock for longer than we were willing to wait."""


def rewrite_locked(
    path: Path,
    change: Callable[[str], str | None],
    *,
    within: Path | None = None,
    wait: float = 30.0,
    attempts: int = 5,
) -> bool:
    """Read-modify-write of a file others may edit, losing nobody's edit: ``change(text)`` returns
    the new text, the same text (nothing is written) or None (the file is removed). True when the
    file changed.

    The lock is an ``flock`` on the file itself, not on a lock file beside it: any process that
    can read the file can take it (root, the owner, a user's gflowctl in a sticky shared folder
    where it may not create files), it leaves nothing behind, and the kernel drops it when its
    holder dies. Because a rewrite replaces the file (a new inode), a waiter that gets the lock
    checks that its descriptor is still the file at ``path``, else locks the new one. Writers that
    do not take the lock (a user's editor or script) are caught instead: just before the rename
    the file must still be what ``change`` was given (same inode, mtime, size and bytes), else the
    edit starts over from the new text, at most ``attempts`` times, then fails (RewriteError).

    The new file gets the old one's uid, gid and mode (``fchown``/``fchmod`` on the temp file
    before the rename), so a rewrite by root or an admin never changes whose job a manifest is;
    an editor who cannot do that (another user in a shared folder) gets PermissionError and the
    file is untouched. ``path`` may be a symlink: the file it leads to is edited, which must lie
    inside ``within`` when given; a removal removes the link itself.
    """
    from pathlib import Path  # lazy: only a rewrite (not apply of a new file)

    real = Path(os.path.realpath(path))
    if within is not None and not real.is_relative_to(os.path.realpath(within)):
        if os.path.islink(path):
            raise RewriteError(f"{path} is a symlink to {real}, outside {within}; edit that file instead")
        raise RewriteError(f"{path} is outside {within}")
    for attempt in range(attempts):
        fd, seen = _open_locked(real, wait)
        try:
            data = _read_all(fd)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise RewriteError(f"{path} is not UTF-8 text") from None
            new = change(text)
            if new == text:
                return False
            tmp = None if new is None else _temp_like(real, new.encode(), seen)
            try:
                if _unchanged(real, fd, seen, data):
                    if tmp is None:
                        os.unlink(path)
                    else:
                        os.replace(tmp, real)
                        tmp = None
                    fsync_dir(real.parent)
                    return True
            finally:
                if tmp is not None:
                    os.unlink(tmp)
        finally:
            os.close(fd)  # drops the lock
        if attempt + 1 < attempts:
            import random  # lazy: only a contended rewrite backs off; every gflowctl write would pay ~1 ms

            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))  # let the other writer finish
    raise RewriteError(
        f"{path} changed while it was being edited, {attempts} times in a row "
        "(another program keeps writing it); try again"
    )


def _open_locked(path: Path, wait: float) -> tuple[int, os.stat_result]:
    """A descriptor of the file now at ``path``, with its flock held, and its fstat."""
    deadline = time.monotonic() + wait
    while True:
        # O_NONBLOCK: a FIFO put in a file's place must not hang us; O_NOFOLLOW: path is resolved
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise RewriteError(f"{path} was replaced by a symlink meanwhile; try again") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RewriteError(f"{path} is not a regular file")
            _flock(fd, path, deadline, wait)
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is None:
                raise FileNotFoundError(errno.ENOENT, "removed while waiting for its lock", str(path))
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                return fd, os.fstat(fd)  # fstat again: the holder before us may have changed it in place
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # replaced while we waited: lock the file that is there now


def _flock(fd: int, path: Path, deadline: float, wait: float) -> None:
    """LOCK_EX, polled so that a lock somebody never releases ends in an error, not a hang."""
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockBusy(f"{path} is locked by another program (waited {wait:g}s); try again") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _unchanged(path: Path, fd: int, seen: os.stat_result, data: bytes) -> bool:
    """Is the file at ``path`` still the one we read, with the bytes we read? (The stat alone is
    not enough: two in-place writes within one timestamp tick leave mtime and size alike.)"""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if (now.st_dev, now.st_ino, now.st_mtime_ns, now.st_size) != (
        seen.st_dev,
        seen.st_ino,
        seen.st_mtime_ns,
        seen.st_size,
    ):
        return False
    return _read_all(fd) == data  # the same inode: our descriptor reads what is there now


def _temp_like(path: Path, payload: bytes, like: os.stat_result) -> str:
    """A synced temp file beside ``path`` holding ``payload``, with ``like``'s owner and mode."""
    try:
        fd, tmp = temp_beside(path)
    except OSError as exc:  # name the file being edited, not our temp name (EACCES, ENOSPC)
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        mine = os.fstat(fd)
        if (mine.st_uid, mine.st_gid) != (like.st_uid, like.st_gid):
            try:
                os.fchown(fd, -1 if mine.st_uid == like.st_uid else like.st_uid, like.st_gid)
            except PermissionError:
                raise PermissionError(
                    errno.EPERM,
                    f"owned by uid {like.st_uid} gid {like.st_gid}, and a rewrite by uid "
                    f"{os.geteuid()} cannot keep that owner",
                    str(path),
                ) from None
        os.fchmod(fd, stat.S_IMODE(like.st_mode))  # after fchown, which clears set-id bits
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def create_new(path: Path, data: str, mode: int = 0o644, sync_folder: bool = True) -> None:
    """Create ``path`` atomically, failing with FileExistsError when it exists: two ``apply`` runs
    creating one file never both say "created" with one of them lost. ``sync_folder=False``: the
    caller fsyncs the folder itself, once for several files, before it reports any of them."""
    NewFile(path, data, mode).commit(sync_folder)


class NewFile:
    """``create_new`` in two steps, so the slow half can overlap a wait (gflowctl asks gflowd's
    review meanwhile): the constructor writes ``data`` to a hidden temp beside ``path`` and
    fsyncs it; :meth:`commit` renames it into place only if ``path`` does not exist, then fsyncs
    the folder; :meth:`abandon` removes the temp. Until committed nothing is at ``path``: a
    manifest gflowd refuses never lands (only a hidden temp, as from a writer killed mid-write)."""

    __slots__ = ("data", "mode", "path", "tmp")

    def __init__(self, path: Path, data: str, mode: int = 0o644) -> None:
        self.path, self.data, self.mode = path, data, mode
        self.tmp: str | None = None
        fd, self.tmp = temp_beside(path)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data.encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(self.tmp, mode)
            _renameat2()  # resolved now, while the caller waits anyway
        except BaseException:
            self.abandon()
            raise

    def commit(self, sync_folder: bool = True) -> None:
        assert self.tmp is not None, "committed or abandoned already"
        try:
            _rename_noreplace(self.tmp, self.path)
        except BaseException:
            self.abandon()
            raise
        self.tmp = None
        if sync_folder:
            fsync_dir(self.path.parent)

    def abandon(self) -> None:
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass
            self.tmp = None


@functools.cache
def _renameat2() -> tuple[Callable[..., int], Callable[[], int]] | None:
    """glibc's ``renameat2`` (>= 2.28), resolved once, and the errno it sets; None without it (``os``
    has none). Called through ``_ctypes``, the extension ``ctypes`` wraps, as ``ctypes.CDLL(None,
    use_errno=True).renameat2`` is: ``import ctypes`` builds ~30 classes (~2 ms of every ``run`` and
    ``apply``) for this one call of ints and bytes, which needs only an int result type."""
    try:
        import _ctypes  # lazy: only for a create that must not replace (apply of a new file)
    except ImportError:
        return None

    # _ctypes is CPython's own, undocumented: should a later Python change it (AttributeError,
    # TypeError), the create falls back to the hard link below instead of failing.
    try:

        class CInt(_ctypes._SimpleCData):  # ctypes.c_int
            _type_ = "i"

        class Function(_ctypes.CFuncPtr):  # the function type of ctypes.CDLL(None, use_errno=True)
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = CInt

        program = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]  # None: this process's symbols
        return Function(_ctypes.dlsym(program, "renameat2")), _ctypes.get_errno
    except (OSError, AttributeError, TypeError):  # no such symbol (an older glibc, another libc), or see above
        return None


def _rename_noreplace(source: str, target: Path) -> None:
    resolved = _renameat2()
    at_fdcwd, rename_noreplace = -100, 1
    err = errno.ENOSYS
    if resolved is not None:
        renameat2, get_errno = resolved
        if renameat2(at_fdcwd, os.fsencode(source), at_fdcwd, os.fsencode(str(target)), rename_noreplace) == 0:
            return
        err = get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):  # an old kernel or a file system without it: a hard link is atomic too
        os.link(source, target)
        os.unlink(source)
        return
    raise OSError(err, os.strerror(err), str(target))


def describe(exc: OSError) -> str:
    """An OSError in words: ``No space left on device (ENOSPC) writing /home/u/.local/share/gflow/status/a.yaml``."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    where = f" writing {os.fsdecode(exc.filename)}" if exc.filename else ""
    return f"{text}{f' ({name})' if name else ''}{where}"
