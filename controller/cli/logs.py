"""``gflowctl logs NAME [-f] [--tail N]``: print a job's output; -f follows across attempts."""

from __future__ import annotations

import os
import sys
import time
from collections import deque

from controller.cli.common import CliError, warn_if_not_running
from controller.client.state import job_rows
from controller.paths import Home

TERMINAL = {"Succeeded", "Failed", "Cancelled", "Rejected"}


def logs(home: Home, name: str, follow: bool, tail: int | None, attempt: int | None) -> int:
    path = home.log_file(name, attempt)
    if tail is not None and tail < 0:
        raise CliError("--tail must be >= 0")
    if follow:
        warn_if_not_running(home)  # -f follows the next attempts, which only a running gflowd starts
    if not path.exists() and not follow:
        rows = job_rows(home)
        if name not in rows:
            raise CliError(f"job/{name} not found")
        raise CliError(f"job/{name} has no log yet ({rows[name].get('phase')}: {rows[name].get('reason')})")
    out = sys.stdout.buffer
    handle = None
    inode = None
    if path.exists():
        handle = open(path, "rb")
        inode = os.fstat(handle.fileno()).st_ino
        if tail is not None:
            for line in deque(handle, maxlen=tail) if tail else []:
                out.write(line)
            handle.seek(0, os.SEEK_END) if tail == 0 else None
        else:
            _copy(handle, out)
        out.flush()
    if not follow or attempt is not None:
        return 0
    try:
        while True:
            if handle is not None:
                _copy(handle, out)
                out.flush()
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino != inode:
                # a new attempt started a new log: finish the old one, then switch
                if handle is not None:
                    _copy(handle, out)
                    handle.close()
                handle = open(path, "rb")
                inode = st.st_ino
                continue
            row = job_rows(home).get(name)
            if row is not None and row.get("phase") in TERMINAL:
                if handle is not None:
                    _copy(handle, out)
                    out.flush()
                return 0
            time.sleep(0.1)
    except KeyboardInterrupt:
        return 0


def _copy(handle, out) -> None:
    while True:
        chunk = handle.read(65536)
        if not chunk:
            return
        out.write(chunk)
