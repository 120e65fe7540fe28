"""Finished jobs past their ``ttlSecondsAfterFinished``, and the oldest beyond
``finishedJobsHistory``: which manifests to remove (act deletes them). Sweep children live and go
with their Sweep. Pure."""

from __future__ import annotations

from controller.model.lean_records import finished_times
from controller.model.plan import Event, PlanDraft, Snapshot
from controller.model.reasons import TERMINAL_PHASES, EventType, Reason


def expire(plan: PlanDraft, snap: Snapshot, now: float) -> None:
    if snap.default_ttl is None and snap.finished_history is None and not snap.admitted.ttl_jobs:
        return
    finished = []
    for name, phase, completion_time in finished_times(plan.states):  # finished jobs kept lean: no record built
        job = snap.admitted.jobs.get(name)
        if job is None or job.owner is not None or phase not in TERMINAL_PHASES:
            continue
        done_at = completion_time or now
        finished.append((done_at, name, job))
        ttl = job.ttl  # not job.spec: that builds a settled job's model
        ttl = snap.default_ttl if ttl is None else ttl
        if ttl is not None:
            if now >= done_at + ttl:
                plan.expired.append(job)
            else:
                plan.wake(done_at + ttl)
    if snap.finished_history is not None and len(finished) > snap.finished_history:
        finished.sort(key=lambda item: (item[0], item[1]))
        already = {j.name for j in plan.expired}
        for _, name, job in finished[: len(finished) - snap.finished_history]:
            if name not in already:
                plan.expired.append(job)
    for gone in plan.expired:
        plan.events.append(
            Event(
                EventType.Normal,
                Reason.Expired,
                gone.name,
                f"finished job removed: its manifest {gone.source} is deleted",
            )
        )
