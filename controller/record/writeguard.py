"""When the state directory cannot be written (disk full, read-only): back off, say so once, catch up.

The recorder's writes can fail for reasons outside gflowd (ENOSPC, EROFS, EIO). The controller
then keeps its decisions in memory (running jobs are never touched for it), reports the problem
as one Warning event (and in its log), and retries the writes after a growing delay, or at once
when free space comes back (``SpaceWatch``); the status files catch up on the first pass that
succeeds, since the recorder rewrites whatever differs from what it last wrote. Nothing here
sleeps: the loop must go on serving job exits meanwhile.
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

    def retry_now(self) -> None:
        """Space came back: the next try is not put off (the backoff starts over if it fails)."""
        if self.failures:
            self.failures = 1

    def succeeded(self) -> int:
        """Record a success; returns how many failed tries it ends (0 when all was well)."""
        ended, self.failures, self.first_error = self.failures, 0, ""
        return ended


class SpaceWatch:
    """While the disk refuses what gflowd must write (status files, launch records): has free
    space come back since the last look? The loop looks at every wake-up, at least every
    ``DISK_POLL`` seconds, and retries at once when it has: a freed disk is used within a pass,
    not after a backoff of up to ``MAX_DELAY``. Pure: the caller supplies the free bytes."""

    def __init__(self) -> None:
        self.seen: int | None = None

    def returned(self, free: int) -> bool:
        before, self.seen = self.seen, free
        return before is not None and free > before

    def reset(self) -> None:
        self.seen = None


DISK_POLL = 0.5  # seconds between looks at the free space while the disk refuses writes
