"""Events about waiting jobs, folded per owner and reason, so one user's backlog cannot flood the
event log (and gflowd's log) and rotate other users' events away.

A waiting job's event (reason ``Resources``, ``Priority``, ``Queued``, ``GPUMemory``, ``Quota``)
passes as it is while its owner has budget left in the current window (``BUDGET`` events per owner
per ``WINDOW`` seconds); the rest of that window's events of the owner are counted per reason and
said once, when the window closes, as one event naming the owner, how many and a few of the jobs.
With 20,000 of one user's jobs waiting, every GPU turnover used to log an event per waiting job.

Every other event (a job started, ended, failed, a Warning) passes untouched. Pure: the clock comes
in with each call; nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controller.model.plan import Event
from controller.model.reasons import QUEUE_REASONS, EventType

WINDOW = 10.0  # seconds an owner's waiting-job events are counted in
BUDGET = 20  # waiting-job events per owner per window that pass as they are
EXAMPLES = 3  # job names a folded event names
WAITING_REASONS = QUEUE_REASONS  # the queue's answers: the rows of model/reasons.py marked queue


@dataclass(slots=True)
class _Window:
    opened: float
    passed: int = 0
    folded: Counter = field(default_factory=Counter)  # reason -> events not written
    examples: dict = field(default_factory=dict)  # reason -> the first few job names folded


class EventFolder:
    def __init__(self, window: float = WINDOW, budget: int = BUDGET) -> None:
        self.window = window
        self.budget = budget
        self._open: dict[str, _Window] = {}  # owner -> its current window
        self.folded = 0  # for tests and gflowd's counters: events not written one by one

    def fold(self, events: Iterable[Event], owner_of: Callable[[str], str | None], now: float) -> list[Event]:
        """The events to write for this pass: the summaries of the windows that closed, then
        ``events`` with each owner's waiting-job events beyond its budget taken out."""
        out = self.close(now)
        for event in events:
            owner = owner_of(event.object) if event.kind == "job" and event.reason in WAITING_REASONS else None
            if owner is None:
                out.append(event)
                continue
            window = self._open.get(owner)
            if window is None:
                window = self._open[owner] = _Window(now)
            if window.passed < self.budget:
                window.passed += 1
                out.append(event)
                continue
            window.folded[event.reason] += 1
            names = window.examples.setdefault(event.reason, [])
            if len(names) < EXAMPLES:
                names.append(event.object)
            self.folded += 1
        return out

    def close(self, now: float, every: bool = False) -> list[Event]:
        """The summaries of the windows that ended by ``now`` (``every``: of all, e.g. at a stop)."""
        out: list[Event] = []
        for owner in [o for o, w in self._open.items() if every or now >= w.opened + self.window]:
            window = self._open.pop(owner)
            for reason, count in sorted(window.folded.items()):
                names = ", ".join(window.examples[reason])
                more = ", ..." if count > len(window.examples[reason]) else ""
                out.append(
                    Event(
                        EventType.Normal,
                        reason,
                        owner,
                        f"{count} more waiting-job events of {owner} in {self.window:g}s folded into this one "
                        f"(jobs {names}{more}); gflowctl explain says why a job waits",
                        kind="user",
                    )
                )
        return out
