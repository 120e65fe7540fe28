"""Record, each pass: write down what the pass decided, in the order crash safety needs.

Events first (they are in the log too), then the status files that changed and the Sweeps'; only
once those are on disk may the runtime drop the records of the attempts they show ended (a crash
in between would otherwise find a Running status and no exit record: Lost). Then the index (a
cache, its rewrites coalesced under a flood of passes) and ``node.yaml``. A failing disk is
retried with backoff (``writeguard``); the decisions stay in memory meanwhile.

Timestamps come from the injected clock; the monotonic clock only paces the index rewrites.
"""

from __future__ import annotations

import logging
import os
import pwd
import time
from collections.abc import Callable

from controller import __version__
from controller.model.plan import Event, Plan
from controller.model.reasons import EventType
from controller.paths import Home
from controller.record.fold import EventFolder
from controller.record.recorder import Recorder
from controller.record.writeguard import WriteFailures
from controller.util.fsutil import describe

log = logging.getLogger("gflowd")
INDEX_MIN_GAP = 0.02  # seconds between index rewrites under a flood of passes: at least...
INDEX_MAX_GAP = 1.0  # ...and at most (see PassWriter.write_index)


class PassWriter:
    def __init__(
        self,
        home: Home,
        recorder: Recorder,
        describe_inventory: Callable[[], str],
        describe_limits: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.home = home
        self.recorder = recorder
        self.describe_inventory = describe_inventory
        self.describe_limits = describe_limits  # the runtime's cgroups line, for get node
        self.failures = WriteFailures()
        self.passes = 0
        self.folder = EventFolder()  # waiting-job events folded per owner (fold.py)
        self._user_names: dict[int, str] = {}
        self.index_due: float | None = None  # a coalesced index write is due then (monotonic)
        self._index_at = -1e9  # monotonic time of the last index write
        self._index_cost = 0.0  # seconds it took
        # who writes the index: gflowd status reads the running gflowd's version and uptime here
        self._info = {"pid": os.getpid(), "specDir": str(home.spec_dir), "version": __version__, "started": time.time()}

    def write(self, plan: Plan, now: float, full: bool, first: bool, after_statuses: Callable[[], None]) -> None:
        """One pass's records. ``after_statuses``: what may happen only once the statuses are on
        disk (the runtime's purge). Raises OSError when the state directory refuses a write."""
        self.passes += 1
        owner_of = self._owners(plan)
        try:
            self.recorder.events(self.folder.fold(plan.events, owner_of, now), now)
        except OSError as exc:  # events are in the log too; the status files matter more
            log.warning("could not append to %s: %s", self.home.events_file, exc)
        failing = self.failures.failing
        # after a failed write every record is compared again, so what did not reach the disk does now
        only = None if full or failing else plan.looked_at
        self.recorder.uid_of = self._uids(plan)  # the jobs table's USER (record/recorder.py _table_row)
        changed = self.recorder.write_states(plan.states, plan.removed, only, owner_of)
        changed = self.recorder.write_sweeps(plan.sweeps, plan.removed_sweeps) or changed
        changed = self.recorder.write_reservations(plan.reservations, plan.removed_reservations) or changed
        after_statuses()
        if changed or full or first or failing:
            self.write_index(force=full or first or failing)
        self.recorder.write_node(plan.slots, self.describe_inventory(), plan.cores, self.describe_limits())
        ended = self.failures.succeeded()
        if ended:
            self.event_best_effort(
                EventType.Normal,
                "StateWritable",
                f"state directory writable again after {ended} failed tries; status files caught up",
                now,
            )

    def _owners(self, plan: Plan) -> Callable[[str], str | None]:
        """A job's owner as events name it: the user name of its manifest's owner."""
        jobs = plan.admission.jobs if plan.admission is not None else {}
        names = self._user_names

        def owner_of(name: str) -> str | None:
            job = jobs.get(name)
            if job is None:
                return None
            uid = job.owner_uid
            if uid not in names:
                try:
                    names[uid] = pwd.getpwuid(uid).pw_name
                except (KeyError, OverflowError):
                    names[uid] = f"uid {uid}"
            return names[uid]

        return owner_of

    @staticmethod
    def _uids(plan: Plan) -> Callable[[str], int | None]:
        """A job's user as admission read it from its manifest's descriptor (None: not admitted)."""
        jobs = plan.admission.jobs if plan.admission is not None else {}

        def uid_of(name: str) -> int | None:
            job = jobs.get(name)
            if job is None:
                return None
            uid = job.owner_uid  # a property of a CachedJob (read off its key): once per call
            return None if uid < 0 else uid

        return uid_of

    def failed(self, exc: OSError, now: float) -> float:
        """A write failed: say so (once per run of failures); the seconds until the next try."""
        delay, first = self.failures.failed(exc)
        log.warning(
            "cannot write the state directory: %s; retrying in %.1fs (running jobs are not affected)",
            describe(exc),
            delay,
        )
        if first:
            self.event_best_effort(
                EventType.Warning,
                "StateWriteFailed",
                f"cannot write the state directory: "
                f"{describe(exc)}; retrying with backoff; running jobs are not affected",
                now,
            )
        return delay

    def write_index(self, force: bool = False) -> None:
        """``run/index.json`` after a change, at most once per ``gap``: rewriting it costs O(jobs)
        (~10 ms at 10,000), so under a flood of passes it is coalesced, bounding that cost to a
        fifth of the loop's time; a write deferred here is done by the loop when due."""
        mono = time.monotonic()
        gap = min(max(4 * self._index_cost, INDEX_MIN_GAP), INDEX_MAX_GAP)
        if not force and mono < self._index_at + gap:
            self.index_due = self._index_at + gap
            return
        started = time.perf_counter()
        # what a pass cost, for tests and benchmarks: a flood's waiting jobs must not count per pass
        self._info.update(passes=self.passes, statusWrites=self.recorder.status_writes, eventsFolded=self.folder.folded)
        self.recorder.write_index(self._info)
        self._index_cost = time.perf_counter() - started
        self._index_at = time.monotonic()
        self.index_due = None

    def flush_events(self, now: float) -> None:
        """At a stop: the folded events' summaries of the windows still open."""
        try:
            self.recorder.events(self.folder.close(now, every=True), now)
        except OSError:
            pass  # a full disk: only summaries

    def event_best_effort(self, type_: str, reason: str, message: str, now: float) -> None:
        try:
            self.recorder.events([Event(type_, reason, "", message)], now)
        except OSError:
            pass  # the same disk: the log line above is all we can do
