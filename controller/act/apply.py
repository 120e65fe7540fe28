"""Act: carry one plan out on the runtime, in the order that keeps a crash harmless, and report
what happened (the pids the starts got, whether one failed at once, what the starts cost).

Idempotent: stops and time limits are requests the runtime may receive again; an attempt is
started once, because the plan that starts it also records it as Running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controller.act.prune import prune_manifests
from controller.act.runtime import Runtime
from controller.model.documents import AdmittedJob, AdmittedReservation
from controller.model.plan import Event, Plan, RunObservation
from controller.model.reasons import EventType, Phase, Reason


@dataclass
class Acted:
    again: bool = False  # a start failed at once, or manifests were removed: pass again now
    pruned: list[str] = field(default_factory=list)  # manifest files changed (expired jobs cut out)
    starts_began: float = 0.0  # perf_counter when the starts began: what came before was deciding
    start_cost: float | None = None  # seconds per start in this pass (None: nothing started)


def act(
    plan: Plan,
    runtime: Runtime,
    prune: Callable[[Iterable[AdmittedJob | AdmittedReservation]], list[str]] = prune_manifests,
) -> Acted:
    """Stop, retune, forget, prune, then start; the plan's records of the started jobs get their pids."""
    acted = Acted()
    for stop in plan.stops:
        runtime.stop(stop.name, stop.grace, stop.reason)
    for name, limit in plan.time_limits.items():
        runtime.set_time_limit(name, limit)
    for notice in plan.notices:
        runtime.notify(notice.name, notice.text)
    for name in plan.consumed:  # before starts (a pass may record an exit and start anew); the
        runtime.forget(name)  # records on disk stay until purge(), after the status is written
    if plan.expired:
        acted.pruned = prune(plan.expired)
        acted.again = bool(acted.pruned)
    acted.starts_began = time.perf_counter()
    for launch in plan.starts:
        runtime.start(launch)
    if plan.starts:
        acted.start_cost = (time.perf_counter() - acted.starts_began) / len(plan.starts)
        acted.again = _note_started(plan, runtime.observe()) or acted.again
    return acted


def _note_started(plan: Plan, runs: dict[str, RunObservation]) -> bool:
    """Each started job's record gets the pid (and cluster id) it got; True when one could not
    start at all (record that at once, in a pass of its own)."""
    failed = False
    for launch in plan.starts:
        run = runs.get(launch.name)
        if run is not None and run.held:  # its launch could not be recorded: not a launch
            hold_start(plan, run)
        elif run is not None:
            plan.states[launch.name].pid = run.pid
            plan.states[launch.name].backend_id = run.external_id or None
            if not run.running:
                failed = True
    return failed


def hold_start(plan: Plan, run: RunObservation) -> None:
    """A start this plan decided was held back by the runtime (``run.held``: its launch could not be
    recorded): the job was never launched, so it shows Pending with the runtime's reason, never
    Running, and the event says why instead of "Started"."""
    state = plan.states[run.name]
    state.phase, state.reason, state.message = Phase.Pending, run.queued, run.message
    state.start_time = state.pid = None
    plan.events = [e for e in plan.events if not (e.object == run.name and e.reason == Reason.Started)]
    plan.events.append(Event(EventType.Warning, run.queued, run.name, run.message))
