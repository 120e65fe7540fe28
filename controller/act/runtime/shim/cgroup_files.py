"""Writing ``0`` to a ``cgroup.procs`` (joining that cgroup) with as little path walking as the
kernel allows. Standard library only.

A supervisor joins its attempt's cgroups to spawn the job inside and steps back out: 8 writes a
job, each to a file ``/sys/fs/cgroup/<hierarchy>/<base...>/<group>/<attempt>/cgroup.procs``,
whose every open walked the whole path (most of the supervisor's ``openat`` cost in a drain).
Two kinds of descriptor are kept per process instead (reads of an attempt's counters use the
second too, ``open_in_group``):

- the ``cgroup.procs`` a supervisor steps back to (its own cgroups, ``keep="file"``): opened once,
  written again and again (a write moves the writer; the descriptor stays valid);
- each attempt's parent folder (the group folder gflowd makes once, ``O_PATH``, ``keep="folder"``):
  an attempt's file is opened relative to it (``<attempt>/cgroup.procs``, two components).

A descriptor outlives what it names when gflowd makes the group folder anew (a restart that
removed it): the relative open then finds nothing (ENOENT) and, the folder at that path being
another inode, the full path is opened and the folder's descriptor taken again. The descriptors
are close-on-exec; a forked child (the job before its exec, ``gflowctl exec``'s commands, the
launcher's supervisors, which close every inherited descriptor) never uses its parent's: they
are dropped at each fork (``os.register_at_fork``).
"""

from __future__ import annotations

import errno
import os

_MAX_KEPT = 64  # folders and files kept: a supervisor sees one group folder per hierarchy (4 here)

_folders: dict[str, int] = {}  # a group folder -> an O_PATH descriptor of it
_files: dict[str, int] = {}  # a cgroup.procs kept open (``kept``) -> its descriptor


def join(path: str, keep: str = "") -> None:
    """Move this process into the cgroup of ``path`` (a ``cgroup.procs``); raises OSError naming
    ``path``. ``keep``: what this process will use again, "file" (its own cgroup, stepped back
    to after every spawn: the descriptor stays open) or "folder" (an attempt's: opened relative
    to its kept group folder); "" for a process that joins once (a forked job)."""
    fd = _files.get(path) if keep == "file" else None
    if fd is None:
        fd = _open(path, relative=keep == "folder")
        if keep == "file" and len(_files) < _MAX_KEPT:
            _files[path] = fd
    try:
        os.write(fd, b"0")
    except OSError as exc:
        if _files.get(path) == fd:  # opened anew next time
            del _files[path]
        raise OSError(exc.errno, exc.strerror, path) from None
    finally:
        if _files.get(path) != fd:
            os.close(fd)


def _open(path: str, relative: bool) -> int:
    """``path`` opened for writing; ``relative``: to its group folder's kept descriptor."""
    try:
        return (
            open_in_group(path, os.O_WRONLY | os.O_CLOEXEC) if relative else os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        )
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None


def open_in_group(path: str, flags: int) -> int:
    """``os.open(path, flags)`` for a file of an attempt's cgroup, ``.../GROUP/ATTEMPT/FILE``:
    opened relative to the kept descriptor of GROUP (``_folder``). A file missing there is looked
    for by its full path only if GROUP was made anew meanwhile (another inode at its path)."""
    folder, _, leaf = path.rpartition("/")
    group, _, attempt = folder.rpartition("/")
    at = _folder(group) if group and attempt else None
    if at is not None:
        try:
            return os.open(f"{attempt}/{leaf}", flags, dir_fd=at)
        except FileNotFoundError:
            if _still_there(group, at):
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None
            os.close(_folders.pop(group))
    return os.open(path, flags)


def _still_there(group: str, at: int) -> bool:
    """The folder at ``group`` is the one ``at`` holds (not removed, nor made anew)."""
    try:
        return os.stat(group).st_ino == os.fstat(at).st_ino
    except OSError:
        return False


def _folder(group: str) -> int | None:
    """A kept descriptor of the folder ``group``; None if it cannot be opened or too many are kept."""
    at = _folders.get(group)
    if at is None and len(_folders) < _MAX_KEPT:
        try:
            at = _folders[group] = os.open(group, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
    return at


def _forget() -> None:
    """In a forked child: its parent's descriptors are not its own (the launcher's supervisors
    closed them, and their numbers may name other files now): dropped, never closed."""
    _folders.clear()
    _files.clear()


os.register_at_fork(after_in_child=_forget)
