"""Reaching a job's supervisor, and making sure it is one, before ``attach`` or ``exec`` sends a byte.

Whoever listens at a job's control socket gets what the caller types. So the socket is reached
only through folders that gflowd's user owns and nobody else may write (each opened by descriptor,
``O_NOFOLLOW``, and checked with ``fstat``: the path is never looked up twice), and the process
that answers must be one of gflowd's user (``SO_PEERCRED``) and, where the caller may read the
attempt's record (root, or gflowd's own user), the supervisor that record names. gflowd's user is
the owner of ``run/``. A folder of the layout before this check existed (the job user's) fails it:
its supervisor predates the check, and the job must be restarted to be reached.

The supervisor's side (the folder it makes, the socket's owner and mode) is
``controller/act/runtime/control_socket.py``; the threat is in docs/interactive.md, "Security".
"""

from __future__ import annotations

import errno
import os
import pwd
import socket
import stat
import struct
import sys
from pathlib import Path

from controller.client.terminal import NoSession
from controller.paths import Home

_DIR_FLAGS = (
    os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
)  # O_PATH: a 0711 folder is passed through, never listed


class NotSupervisor(Exception):
    """The socket is not gflow's supervisor's (or could have been replaced): one line saying why."""


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _open_checked(name: str, display: str, dir_fd: int | None, owner: int | None) -> tuple[int, int]:
    """(descriptor, owner) of folder ``name``: not a symlink, owned by ``owner`` (when given), and
    writable by its owner alone."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotSupervisor(f"{display} is not a folder (a symlink?): not trusted with your terminal") from None
        raise NoSession(exc.strerror or str(exc), denied=exc.errno in (errno.EACCES, errno.EPERM)) from None
    info = os.fstat(fd)
    if owner is not None and info.st_uid != owner:
        os.close(fd)
        raise NotSupervisor(
            f"{display} belongs to {_user(info.st_uid)}, not to gflowd's user {_user(owner)} "
            "(a supervisor from before gflow checked this, or a replaced folder): restart the job to reach it"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise NotSupervisor(
            f"{display} is writable by others (mode {stat.S_IMODE(info.st_mode):o}): not trusted with your terminal"
        )
    return fd, info.st_uid


def _record_module():
    """``controller/act/runtime/record.py`` (the attempt record's format), loaded by its path: its
    package's ``__init__`` imports the runtime's models, ~100 ms that exec has no use for."""
    import importlib.util  # lazy: only attach and exec need it

    loaded = sys.modules.get("controller.act.runtime.record")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(
        "gflow_attempt_record", Path(__file__).parents[1] / "act" / "runtime" / "record.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def supervisor_pids(home: Home, name: str) -> set[int] | None:
    """The supervisor pids the records of job ``name`` name; None when we may not read them."""
    record = _record_module()
    folder = home.run_dir / "attempts"
    pids: set[int] = set()
    try:
        entries = [e.name for e in os.scandir(folder) if e.name.startswith(f"{name}.")]
    except PermissionError:
        return None
    except FileNotFoundError:
        return pids
    for entry in entries:
        parsed = record.attempt_of(entry)
        if parsed is None or parsed[0] != name:
            continue
        try:
            fd = os.open(folder / entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except PermissionError:
            return None  # a user's own job under a root gflowd: the owner and folder checks stand alone
        except OSError:
            continue
        try:
            run = record.read_run(fd) or {}
        except OSError:
            continue
        finally:
            os.close(fd)
        if isinstance(run.get("supervisorPid"), int):
            pids.add(run["supervisorPid"])
    return pids


def open_control(home: Home, uid: int, name: str) -> socket.socket:
    """A connection to job ``name``'s supervisor (the job runs as ``uid``), verified (module notes).
    Raises NoSession when nothing listens (yet), NotSupervisor when something else does."""
    run = home.run_dir
    fds: list[int] = []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        run_fd, gflowd = _open_checked(str(run), str(run), None, None)
        fds.append(run_fd)
        control_fd, _ = _open_checked("control", str(run / "control"), run_fd, gflowd)
        fds.append(control_fd)
        user_fd, _ = _open_checked(str(uid), str(home.control_dir(uid)), control_fd, gflowd)
        fds.append(user_fd)
        socket_name = home.control_socket(uid, name).name
        try:
            sock.connect(f"/proc/self/fd/{user_fd}/{socket_name}")
        except OSError as exc:
            raise NoSession(exc.strerror or str(exc), denied=exc.errno in (errno.EACCES, errno.EPERM)) from None
        pid, peer_uid, _ = struct.unpack(
            "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
        if peer_uid != gflowd:
            raise NotSupervisor(
                f"job/{name}: its control socket is served by {_user(peer_uid)}'s process {pid}, "
                f"not by a supervisor of gflowd's user {_user(gflowd)}: nothing sent"
            )
        expected = supervisor_pids(home, name)
        if expected is not None and pid not in expected:
            raise NotSupervisor(
                f"job/{name}: its control socket is served by process {pid}, not by the job's supervisor: nothing sent"
            )
    except BaseException:
        sock.close()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return sock
