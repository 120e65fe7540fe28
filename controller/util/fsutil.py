"""Crash-safe file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader never sees half a file and a crash never leaves one. Files are created 0644 at most:
never world-writable.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644, durable: bool = True, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically. ``durable=False`` skips fsync (caches only);
    ``sync_dir=False`` leaves the folder's fsync to the caller, who batches many files into one."""
    payload = data.encode() if isinstance(data, str) else data
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
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


def fsync_dir(directory: Path) -> None:
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def lock_held(path: Path) -> bool:
    """True when some process holds an flock on ``path`` (gflowd's instance lock, a supervisor's
    attempt lock). The kernel drops such a lock when its holder dies, so it is never stale."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        return False
    finally:
        os.close(fd)  # closing drops our shared lock, if we got it
