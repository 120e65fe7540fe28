"""A Sweep's own status: its children counted by phase, and one phase for the whole (which is also
what a job that ``dependsOn`` the Sweep waits for). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from controller.model.plan import Event, PlanDraft, Snapshot
from controller.model.reasons import (
    TERMINAL_PHASES,
    EventType,
    Phase,
    Reason,
    SweepReason,
)
from controller.model.records import JobState, SweepState

COUNTED = (Phase.Pending, Phase.Running, Phase.Succeeded, Phase.Failed, Phase.Cancelled, Phase.Rejected)


def sweep_statuses(plan: PlanDraft, snap: Snapshot, now: float) -> None:
    """Each Sweep's status from its children's records in ``plan``; deleted Sweeps are removed."""
    for name, sweep in snap.admitted.sweeps.items():
        old = snap.sweep_states.get(name)
        state = SweepState(name=name, created=old.created if old else now, generation=old.generation if old else 0)
        if old is None or old.spec_hash != sweep.spec_hash:
            state.generation += 1
        state.spec_hash = sweep.spec_hash
        state.manifest = sweep.source
        state.labels = dict(sweep.sweep.metadata.labels)
        state.children = list(sweep.children)
        state.parallelism = sweep.parallelism
        phases = [plan.states[c].phase for c in sweep.children if c in plan.states]
        state.counts = {p: phases.count(p) for p in COUNTED if p in phases}
        state.phase, state.reason = _sweep_phase(phases, len(sweep.children))
        parts = ", ".join(f"{n} {p}" for p, n in state.counts.items())
        state.message = f"{len(sweep.children)} children" + (f": {parts}" if parts else "")
        failed = [c for c in sweep.children if c in plan.states and plan.states[c].phase == Phase.Failed]
        if failed:
            state.message += f" (failed: {', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''})"
        plan.sweeps[name] = state
        if old is None or (old.phase, old.reason) != (state.phase, state.reason):
            warning = state.phase == Phase.Failed
            plan.events.append(
                Event(
                    EventType.Warning if warning else EventType.Normal, state.reason, name, state.message, kind="sweep"
                )
            )
    for name in snap.sweep_states:
        if name not in snap.admitted.sweeps:
            plan.removed_sweeps.append(name)
            plan.events.append(
                Event(
                    EventType.Normal,
                    Reason.Deleted,
                    name,
                    "manifest deleted; children stopped and removed",
                    kind="sweep",
                )
            )


def _sweep_phase(phases: list[str], total: int) -> tuple[Phase, SweepReason]:
    if total == 0:
        return Phase.Succeeded, SweepReason.NoChildren
    if len(phases) == total and all(p == Phase.Succeeded for p in phases):
        return Phase.Succeeded, SweepReason.AllSucceeded
    if len(phases) == total and all(p in TERMINAL_PHASES for p in phases):
        if Phase.Failed in phases:
            return Phase.Failed, SweepReason.ChildFailed
        return Phase.Cancelled, SweepReason.ChildCancelled
    if Phase.Running in phases:
        return Phase.Running, SweepReason.ChildrenRunning
    if any(p in TERMINAL_PHASES for p in phases):
        return Phase.Running, SweepReason.InProgress
    return Phase.Pending, SweepReason.ChildrenPending


def sweep_outcome(plan_states: Mapping[str, JobState], children: tuple[str, ...] | list[str]) -> str:
    """A Sweep as a dependency: Succeeded / Failed / Cancelled once all children ended, else Running."""
    phases = [plan_states[c].phase if c in plan_states else Phase.Pending for c in children]
    phase, _ = _sweep_phase(phases, len(children))
    return phase
