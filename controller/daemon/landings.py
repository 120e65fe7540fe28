"""The files one admission review let a caller store, expected to land together.

``gflowctl apply -f DIR`` asks one review for all its files, then renames them into the spec dir
back to back. gflowd passes at once for a lone change after quiet (a ``run`` need not wait out the
debounce), so the first of those files got a pass of its own, and the others a second pass after
the debounce. Told by the review which files a caller will store (two or more), the loop's at-once
pass waits for the rest of them once the first has landed, at most ``WAIT``: one pass takes the
whole batch. A batch none of whose files land (a dry run, a caller killed or refused at the
rename) is forgotten after ``TTL``; one whose files land only in part (a name another file of the
spec dir defines) costs its first pass ``WAIT``. Nothing here changes what a pass decides, only
when it runs.

Times are the caller's monotonic clock (passed in); safe to call from the review, watcher and
loop threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

WAIT = 0.05  # seconds after a batch's first file lands (the CLI renames them within a few ms): the most a partial batch costs
TTL = 10.0  # seconds a batch waits for its first file (as long as the review's verdicts are kept)
MAX_BATCHES = 64


class _Batch:
    __slots__ = ("expires", "first", "left")

    def __init__(self, paths: set[str], expires: float) -> None:
        self.left, self.expires = paths, expires
        self.first: float | None = None  # when its first file landed


class Landings:
    def __init__(self) -> None:
        self._batches: list[_Batch] = []
        self._lock = threading.Lock()

    def expect(self, paths: Iterable[str], now: float) -> None:
        """The review let one caller store these files (absolute paths). Those that exist already
        are left out (rewritten in place, or left unchanged: they may never land); fewer than two
        new ones: no batch."""
        left = {os.path.abspath(p) for p in paths if not os.path.lexists(p)}
        if len(left) < 2:
            return
        with self._lock:
            self._batches.append(_Batch(left, now + TTL))
            del self._batches[:-MAX_BATCHES]

    def landed(self, paths: Iterable[str], now: float) -> None:
        """Files at ``paths`` changed (the watcher's word)."""
        if not self._batches:  # no lock: a batch added meanwhile waits for its own files' events
            return
        changed = {os.path.abspath(p) for p in paths}
        with self._lock:
            for batch in self._batches:
                if not batch.left.isdisjoint(changed):
                    batch.left -= changed
                    batch.first = now if batch.first is None else batch.first
            self._batches = [b for b in self._batches if b.left]

    def wait_until(self, now: float) -> float | None:
        """Until when a pass should wait for the rest of a batch that began landing; None: no need."""
        if not self._batches:
            return None
        with self._lock:
            self._batches = [
                b for b in self._batches if (now < b.first + WAIT if b.first is not None else now < b.expires)
            ]
            due = [b.first + WAIT for b in self._batches if b.first is not None]
        return min(due) if due else None
