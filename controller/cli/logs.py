"""``gflowctl logs NAME [-f] [--tail N]``: print a job's output; -f follows across attempts. The
reading is ``controller.client.read.logs`` (the Python client's too)."""

from __future__ import annotations

import sys

from controller.cli.common import warn_if_not_running
from controller.client.read.logs import log_chunks
from controller.paths import Home


def logs(home: Home, name: str, follow: bool, tail: int | None, attempt: int | None) -> int:
    chunks = log_chunks(home, name, follow, tail, attempt)
    if follow:
        warn_if_not_running(home)  # -f follows the next attempts, which only a running gflowd starts
    out = sys.stdout.buffer
    try:
        for chunk in chunks:
            out.write(chunk)
            out.flush()
    except KeyboardInterrupt:
        return 0
    return 0
