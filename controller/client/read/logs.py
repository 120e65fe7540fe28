"""A job's output as chunks of bytes: the whole log, its last lines, or (``follow``) every new
byte across attempts until the job ends. Shared by ``gflowctl logs`` (which writes the chunks to
stdout) and ``Client.logs``."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from typing import BinaryIO

from controller.client.errors import GflowError, NotFound
from controller.client.read.state import job_rows
from controller.paths import Home

TERMINAL = {"Succeeded", "Failed", "Cancelled", "Rejected"}


def log_chunks(
    home: Home,
    name: str,
    follow: bool = False,
    tail: int | None = None,
    attempt: int | None = None,
    interval: float = 0.1,
) -> Iterator[bytes]:
    """Checks now (a bad ``tail``, no job, no log yet: GflowError), then yields the output.
    ``follow`` keeps yielding new output, switching to each new attempt's log, until the job ends."""
    path = home.log_file(name, attempt)
    if tail is not None and tail < 0:
        raise GflowError("--tail must be >= 0")
    if not path.exists() and not follow:
        rows = job_rows(home)
        if name not in rows:
            raise NotFound(f"job/{name} not found")
        raise GflowError(f"job/{name} has no log yet ({rows[name].get('phase')}: {rows[name].get('reason')})")
    return _chunks(home, name, path, follow and attempt is None, tail, interval)


def _chunks(home: Home, name: str, path, follow: bool, tail: int | None, interval: float) -> Iterator[bytes]:
    handle = None
    inode = None
    if path.exists():
        handle = _open_log(path, name)
        inode = os.fstat(handle.fileno()).st_ino
        if tail is not None:
            lines = deque(handle, maxlen=tail) if tail else []
            if lines:
                yield b"".join(lines)
        else:
            yield from _read(handle)
    try:
        while follow:
            if handle is not None:
                yield from _read(handle)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino != inode:
                # a new attempt started a new log: finish the old one, then switch
                if handle is not None:
                    yield from _read(handle)
                    handle.close()
                handle = _open_log(path, name)
                inode = st.st_ino
                continue
            row = job_rows(home).get(name)
            if row is not None and row.get("phase") in TERMINAL:
                if handle is not None:
                    yield from _read(handle)
                return
            time.sleep(interval)
    finally:
        if handle is not None:
            handle.close()


def _open_log(path, name: str) -> BinaryIO:
    """The log, open; a log the file system keeps from the caller is one line naming whose it is."""
    try:
        return open(path, "rb")
    except PermissionError:
        raise GflowError(_not_yours(path, name)) from None


def _not_yours(path, name: str) -> str:
    import pwd  # lazy: only a refused read names the owner

    try:
        uid = os.stat(path).st_uid
    except OSError:
        return f"job/{name}: its log cannot be read by you; its owner and root can (gflowctl logs {name} as them)"
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = f"uid {uid}"
    return (
        f"job/{name}: its log is {owner}'s and only {owner} and root may read it; run gflowctl logs {name} as {owner}"
    )


def _read(handle: BinaryIO) -> Iterator[bytes]:
    while True:
        chunk = handle.read(65536)
        if not chunk:
            return
        yield chunk
