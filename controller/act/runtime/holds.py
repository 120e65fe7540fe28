"""Launches the disk refused, for every backend: held, not failed, and tried again with backoff.

A launch whose records cannot be written (a full disk) is not a launch: nothing runs, the job shows
Pending (reason DiskFull, or DiskError for another write error, the message naming the file), and
the backend's ``tick`` tries again once the hold is ``due``, after a delay that doubles from
HOLD_FIRST to HOLD_MAX; when the loop sees free space come back it calls ``retry_held`` and the
holds are due at once (docs/reliability.md, "A full disk").

Standard library only: the shim imports ``DISK_FULL`` from here too (also as the module beside
its folder when it runs as a plain file).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
HOLD_FIRST, HOLD_MAX = 0.5, 10.0  # seconds between tries to launch an attempt the disk refused


def disk_reason(error: int | None) -> str:
    """The Pending reason of a launch the disk refused with ``error`` (an errno)."""
    return "DiskFull" if error in DISK_FULL else "DiskError"


@dataclass
class Hold:
    """One launch held back: why (the message, naming the file), the Pending reason, and when to
    try again (monotonic)."""

    why: str
    reason: str  # DiskFull | DiskError
    retry_at: float
    delay: float

    def due(self, mono: float) -> bool:
        return mono >= self.retry_at

    def pending(self) -> dict:
        """The fields of a held attempt's observation: running (its GPUs stay bound), queued with
        the reason, the message naming the file."""
        return {"queued": self.reason, "message": self.why, "held": True}

    def never_started(self) -> str:
        """The error of a held attempt that was stopped: it ends without ever having run."""
        return f"never started: {self.why}"

    def retry_soon(self) -> None:
        """Free space came back: due now, and from a short delay again should the try fail."""
        self.retry_at = 0.0
        self.delay = HOLD_FIRST / 2  # doubled by a failed try: HOLD_FIRST again


def hold(previous: Hold | None, why: str, error: int | None, mono: float) -> Hold:
    """The hold after a failed try: the first waits HOLD_FIRST, each next one twice the last, up to HOLD_MAX."""
    delay = HOLD_FIRST if previous is None else min(previous.delay * 2, HOLD_MAX)
    return Hold(why, disk_reason(error), mono + delay, delay)
