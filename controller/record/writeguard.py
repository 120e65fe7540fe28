"""When the state directory cannot be written (disk full, read-only): back off, say so once, catch up.

The recorder's writes can fail for reasons outside gflowd (ENOSPC, EROFS, EIO). The controller
then keeps its decisions in memory (running jobs are never touched for it), reports the problem
as one Warning event (and in its log), and retries the writes after a growing delay; the status
files catch up on the first pass that succeeds, since the recorder rewrites whatever differs from
what it last wrote. Nothing here sleeps: the loop must go on serving job exits meanwhile.
"""

from __future__ import annotations

from controller.util.fsutil import describe

BASE_DELAY = 0.5
MAX_DELAY = 30.0


class WriteFailures:
    """Backoff state for failing state-directory writes (pure: the caller supplies the clock)."""

    def __init__(self, base: float = BASE_DELAY, cap: float = MAX_DELAY):
        self.base, self.cap = base, cap
        self.failures = 0
        self.first_error = ""

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, exc: OSError) -> tuple[float, bool]:
        """Record a failure: (seconds until the next try, whether this is the first of a run)."""
        first = self.failures == 0
        self.failures += 1
        if first:
            self.first_error = describe(exc)
        return min(self.cap, self.base * 2 ** (self.failures - 1)), first

    def succeeded(self) -> int:
        """Record a success; returns how many failed tries it ends (0 when all was well)."""
        ended, self.failures, self.first_error = self.failures, 0, ""
        return ended
