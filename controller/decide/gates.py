"""Why a pending job may not be offered to the scheduler yet: suspended, backing off, not before
its ``startAfter``, waiting for (or cancelled by) its dependencies, or its Sweep at its
``parallelism``. A held job gets the reason and message that say so.

Pure. The local time zone a naive ``startAfter`` is read in comes with the snapshot.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from datetime import datetime, tzinfo
from typing import cast

from controller.api.units import format_duration, parse_duration
from controller.decide.lifecycle import Pending
from controller.decide.sweep_status import sweep_outcome
from controller.model.documents import AdmittedJob, AdmittedSweep
from controller.model.plan import PlanDraft, Snapshot
from controller.model.reasons import TERMINAL_PHASES, Phase, Reason
from controller.model.records import JobState, rfc3339


def start_after_time(value: str | None, created: float, local_tz: tzinfo) -> float | None:
    """``startAfter`` as a time: ``+2h`` counts from the job's creation; a time without an offset
    is ``local_tz``'s wall clock, as users write it."""
    if not value:
        return None
    if value.startswith("+"):
        return created + parse_duration(value[1:])
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local_tz)
    return moment.timestamp()


def admissible(plan: PlanDraft, snap: Snapshot, pending: list[Pending], now: float) -> list[Pending]:
    """The pending jobs (in queue order) that no gate holds back."""
    # parents' records, newest first; a ChainMap spares copying every record when few jobs wait
    older = cast("MutableMapping[str, JobState]", snap.states)  # a ChainMap writes only to its first map
    all_states = ChainMap({s.name: s for s, _ in pending}, plan.states, older)
    budgets = _parallelism_budgets(plan, snap)
    ready = []
    for state, job in pending:
        state.queue_position = None
        if not _held(plan, snap, state, job, all_states, budgets, now):
            ready.append((state, job))
    return ready


def _held(
    plan: PlanDraft,
    snap: Snapshot,
    state: JobState,
    job: AdmittedJob,
    all_states: Mapping[str, JobState],
    budgets: dict[str, list[int]],
    now: float,
) -> bool:
    spec = job.spec
    if spec.suspend:
        state.reason, state.message = (
            Reason.Suspended,
            "suspended (spec.suspend: true); set it to false or run gflowctl resume",
        )
        return True
    if state.next_attempt_time is not None and now < state.next_attempt_time:
        state.reason = Reason.BackOff
        plan.wake(state.next_attempt_time)
        return True
    not_before = start_after_time(spec.start_after, state.created, snap.host.local_tz)
    if not_before is not None and now < not_before:
        state.reason = Reason.StartAfter
        state.message = f"starts after {rfc3339(not_before)} (in {format_duration(not_before - now)})"
        plan.wake(not_before)
        return True
    blocked = dependency_block(state, job, all_states, now, snap.admitted.sweeps)
    if blocked is not None:
        if blocked == "failed":
            plan.again = True
        return True
    if job.owner is not None and job.owner in budgets:
        budget = budgets[job.owner]
        if budget[0] <= 0:
            cap, running = snap.admitted.sweeps[job.owner].parallelism or 0, budget[1]
            state.reason = Reason.Parallelism
            # only the running ones are counted as such: the others passed this gate and wait for GPUs
            ahead = f", {cap - running} ahead of it waiting to start" if cap > running else ""
            state.message = f"sweep {job.owner} runs at most {cap} children at once: {running} running{ahead}"
            return True
        budget[0] -= 1
    return False


def _parallelism_budgets(plan: PlanDraft, snap: Snapshot) -> dict[str, list[int]]:
    """Sweeps with a parallelism cap: [how many more children may start this pass, how many run]."""
    budgets: dict[str, list[int]] = {}
    for sweep_name, sweep in snap.admitted.sweeps.items():
        if sweep.parallelism is not None:
            running = sum(
                1
                for c in sweep.children
                if c in plan.states
                and (plan.states[c].phase == Phase.Running or (c in snap.runs and snap.runs[c].running))
            )  # a child queued in a cluster (Pending there) counts: it was handed over
            budgets[sweep_name] = [sweep.parallelism - running, running]
    return budgets


def dependency_block(
    state: JobState,
    job: AdmittedJob,
    states: Mapping[str, JobState],
    now: float,
    sweeps: Mapping[str, AdmittedSweep] | None = None,
) -> str | None:
    """None when every parent allows a start; else sets the waiting/cancelled state and says why.
    A parent may be a Sweep: it has Succeeded when every child has."""
    waiting = []
    for dep in job.spec.depends_on:
        sweep = (sweeps or {}).get(dep.job)
        if sweep is not None:
            parent_phase, what = sweep_outcome(states, sweep.children), "sweep"
        else:
            parent = states.get(dep.job)
            if parent is None:
                waiting.append(f"job {dep.job} (does not exist yet)")
                continue
            parent_phase, what = parent.phase, "job"
        done = parent_phase in TERMINAL_PHASES
        ok = (
            (dep.condition == "Succeeded" and parent_phase == Phase.Succeeded)
            or (dep.condition == "Failed" and parent_phase == Phase.Failed)
            or (dep.condition == "Finished" and done)
        )
        if ok:
            continue
        if done:
            state.phase, state.reason = Phase.Cancelled, Reason.DependencyFailed
            state.message = f"{what} {dep.job} ended {parent_phase}; this job needed it to be {dep.condition}"
            state.completion_time = now
            state.run_hash = job.run_hash
            return "failed"
        waiting.append(f"{what} {dep.job} ({parent_phase})")
    if waiting:
        state.reason = Reason.Dependency
        state.message = "waits for " + ", ".join(waiting)
        return "waiting"
    return None
