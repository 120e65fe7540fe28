"""The verdicts gflowd's admission review just gave, kept for the manifests about to land.

``gflowctl run`` and ``apply`` ask the review (``daemon/review.py``) about a manifest, then rename
that very text into the spec dir: the store would parse and validate it a second time, on the way
from the file landing to Running. The review thread instead works out, after its answer is sent
(while the CLI writes the file), what the store makes of that text at that path (``verdict_of``,
the store's own functions) and keeps it here; the store takes it when a file with exactly those
bytes, that owner and that path lands. Anything else (other bytes, a later edit, another owner,
an expired or evicted entry) is parsed as always. A verdict is a function of the text and the path
alone (the owner and the file's times are filled in when it lands): keyed by all three, it is the
result the store would have computed.

Bounded (``LIMIT`` entries, the oldest dropped) and short-lived (``TTL`` seconds on an injected
clock); thread-safe: the review threads keep, the watcher takes.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from controller.model.documents import AdmittedJob, Rejection

LIMIT = 256  # verdicts kept at most (a burst of files applied at once is one review)
TTL = 10.0  # seconds a verdict waits for its file
PENDING_WAIT = 1.0  # seconds the store waits for a verdict the review is still working out

Key = tuple[str, int, bytes]  # path, owner uid, the file's exact bytes


class Verdict:
    """What the store makes of one text at one path: its parse as JSON (the parse cache's) and
    each document's job (name, model, index, spec hash, run hash); every document a plain valid Job."""

    __slots__ = ("jobs", "parsed_json")

    def __init__(self, parsed_json: str | None, jobs: list[tuple]) -> None:
        self.parsed_json, self.jobs = parsed_json, jobs

    def documents(self, source: str, path: str, owner_uid: int, mtime_ns: int) -> list[AdmittedJob | Rejection]:
        """The AdmittedJobs ``validate_document`` makes of the file, with its owner and time (no Rejection)."""
        return [
            AdmittedJob(name, job, source, path, doc_index, spec_hash, run_hash, owner_uid, mtime_ns)
            for name, job, doc_index, spec_hash, run_hash in self.jobs
        ]


class ReviewVerdicts:
    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl: float = TTL, limit: int = LIMIT) -> None:
        self._clock, self._ttl, self._limit = clock, ttl, limit
        self._lock = threading.Lock()
        # key -> (deadline, the verdict or None while pending, set once it is known)
        self._entries: OrderedDict[Key, tuple[float, list, threading.Event]] = OrderedDict()
        self.hits = 0  # for tests and benchmarks

    def __len__(self) -> int:  # a hint, unlocked: the store skips building a key when none is kept
        return len(self._entries)

    def expect(self, key: Key) -> Callable[[Verdict | None], None]:
        """Announce the verdict on ``key`` before the review answers (the file may land before it
        is worked out); the returned function gives it (None: the store parses the file)."""
        slot: list = [None]
        ready = threading.Event()
        with self._lock:
            self._drop_expired()
            self._entries.pop(key, None)
            self._entries[key] = (self._clock() + self._ttl, slot, ready)
            while len(self._entries) > self._limit:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                dropped.set()  # a store waiting on it parses instead

        def give(verdict: Verdict | None) -> None:
            slot[0] = verdict
            ready.set()

        return give

    def take(self, key: Key) -> Verdict | None:
        """The verdict kept for ``key`` (once: it is removed), waiting briefly for one the review
        is still working out; None when there is none."""
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None:
            return None
        deadline, slot, ready = entry
        if not ready.wait(PENDING_WAIT) or self._clock() > deadline:
            return None
        if slot[0] is not None:
            self.hits += 1
        return slot[0]

    def _drop_expired(self) -> None:
        now = self._clock()
        while self._entries:
            key, (deadline, _, _) = next(iter(self._entries.items()))
            if deadline >= now:
                return
            del self._entries[key]
