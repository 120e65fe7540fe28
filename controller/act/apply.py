"""Act: carry one plan out on the runtime, in the order that keeps a crash harmless, and report
what happened (the pids the starts got, a launch held back, one that failed at once, what the
starts cost) as an :class:`ActResult`. The plan is not changed: ``decide/acted.py`` folds the
report into the records record writes.

Idempotent: stops and time limits are requests the runtime may receive again; an attempt is
started once, because the plan that starts it also records it as Running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from controller.act.prune import prune_manifests
from controller.act.runtime import Runtime
from controller.model.documents import AdmittedJob, AdmittedReservation
from controller.model.plan import ActResult, Launch, Plan, RunObservation, StartFact


def act(
    plan: Plan,
    runtime: Runtime,
    prune: Callable[[Iterable[AdmittedJob | AdmittedReservation]], list[str]] = prune_manifests,
) -> ActResult:
    """Stop, retune, forget, prune, then start; report what each start got."""
    for stop in plan.stops:
        runtime.stop(stop.name, stop.grace, stop.reason)
    for name, limit in plan.time_limits.items():
        runtime.set_time_limit(name, limit)
    for notice in plan.notices:
        runtime.notify(notice.name, notice.text)
    for name in plan.consumed:  # before starts (a pass may record an exit and start anew); the
        runtime.forget(name)  # records on disk stay until purge(), after the status is written
    pruned = tuple(prune(plan.expired)) if plan.expired else ()
    starts_began = time.perf_counter()
    for launch in plan.starts:
        runtime.start(launch)
    if not plan.starts:
        return ActResult(again=bool(pruned), pruned=pruned, starts_began=starts_began)
    start_cost = (time.perf_counter() - starts_began) / len(plan.starts)
    started = started_facts(plan.starts, runtime.observe())
    failed = any(fact.failed for fact in started)  # record that at once, in a pass of its own
    return ActResult(started, failed or bool(pruned), pruned, starts_began, start_cost)


def started_facts(starts: Iterable[Launch], runs: Mapping[str, RunObservation]) -> tuple[StartFact, ...]:
    """What the runtime reports of each start: the pid (and cluster id) it got, that it could not
    start at all, or that its launch was held (``run.held``: it could not be recorded, nothing runs)."""
    facts = []
    for launch in starts:
        run = runs.get(launch.name)
        if run is None:
            continue
        if run.held:
            facts.append(StartFact(run.name, held=True, reason=run.queued, message=run.message))
        else:
            facts.append(StartFact(launch.name, run.pid, run.external_id or None, failed=not run.running))
    return tuple(facts)
