"""A running attempt, each pass: take in what the runtime knows of it, and decide whether it must
stop (cancelled, suspended, deleted, over its time limit or its GPU memory, idle, preempted).

Pure. A stop is a request (``Plan.stops``) plus a ``Terminating`` condition that says why; the
request is repeated every pass until the attempt has ended (level-triggered).
"""

from __future__ import annotations

from controller.api.units import format_duration, format_quantity
from controller.decide.exits import checkpoint_confirmed
from controller.decide.gpu_usage import gpu_findings, idle_stop
from controller.model.conditions import find_condition, remove_condition, set_condition
from controller.model.documents import AdmittedJob
from controller.model.plan import Event, PlanDraft, RunObservation, Snapshot, Stop
from controller.model.reasons import Condition, EventType, Phase, Reason, StopReason
from controller.model.records import JobState

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from controller.api.job import Checkpoint


def running(
    plan: PlanDraft, state: JobState, job: AdmittedJob, run: RunObservation, snap: Snapshot, now: float, now_text: str
) -> None:
    spec = job.spec
    # a cluster's queue, or a disk that refused the launch record, held it until now
    was_queued = state.phase == Phase.Pending and (bool(run.external_id) or run.attempt == state.attempt)
    state.phase = Phase.Running
    state.pid = run.pid
    plan.time_limits[state.name] = spec.time_limit
    _adopt(state, run)
    grace = spec.termination_grace_period if spec.termination_grace_period is not None else snap.default_grace
    deadline = (
        (state.start_time or run.started_at) + spec.time_limit
        if spec.time_limit is not None and not run.queued
        else None
    )
    stop = _stop_wanted(state, job, run, snap, deadline, now)
    if stop is not None:
        request_stop(plan, state, run, stop[0], stop[1], grace, now_text, spec.checkpoint)
    elif deadline is not None:
        plan.wake(deadline)
    _gpu_health(plan, state, snap, now_text)
    gpu_findings(plan, state, job, run, snap, now, now_text)
    plan.events.extend(checkpoint_confirmed(state, run))  # describe shows it while the job runs
    if find_condition(state.conditions, Condition.Terminating) is None:
        if run.queued:
            state.phase, state.reason, state.message = Phase.Pending, run.queued, run.message
        elif was_queued:
            state.reason, state.message = (
                Reason.Started,
                run.message or ("started by the cluster" if run.external_id else "started"),
            )
    _spec_outdated(plan, state, job, now_text)


def _adopt(state: JobState, run: RunObservation) -> None:
    """After a crash the status may predate the start: the runtime's records are the truth."""
    if run.external_id:
        state.backend_id, state.node = run.external_id, run.node or state.node
    if run.attempt > state.attempt:
        state.attempt = run.attempt
        state.failed = max(state.failed, run.failed_before)  # failures its unrecorded decision had counted
        state.reason, state.message = Reason.Started, "re-adopted after a controller restart"
    if run.run_hash and not state.run_hash:
        state.run_hash = run.run_hash
    if run.devices and list(run.devices) != state.devices:
        state.devices, state.device_uuids = list(run.devices), list(run.device_uuids)
    if run.queued:
        state.start_time = None  # the time limit counts from the cluster's start, as it does there
    elif state.start_time is None or run.external_id:
        state.start_time = run.started_at


def _stop_wanted(
    state: JobState, job: AdmittedJob, run: RunObservation, snap: Snapshot, deadline: float | None, now: float
) -> tuple[str, str] | None:
    """(reason, why) when the attempt must stop; a stop under way goes on with its own reason."""
    spec = job.spec
    stopping = find_condition(state.conditions, Condition.Terminating)
    if stopping is not None:
        return stopping["reason"], stopping["message"]
    if spec.cancelled:
        return StopReason.UserCancelled, "cancelled (spec.cancelled: true)"
    if spec.suspend:
        return StopReason.Suspended, "suspended (spec.suspend: true); returns to Pending"
    if deadline is not None and now >= deadline:
        return StopReason.DeadlineExceeded, f"ran longer than its time limit of {format_duration(spec.time_limit)}"
    over = _gpu_memory_overuse(state, job, snap)
    if over is not None:
        return StopReason.GPUMemoryExceeded, over
    drained = [(d, c) for d in state.devices if (c := snap.cordoned.get(d)) is not None and c.drain]
    if drained:
        device, cordon = drained[0]
        return StopReason.Preempted, f"GPU {device} {cordon.text()}; returns to Pending to run on another GPU"
    return idle_stop(state, job, run, snap, now)


def _spec_outdated(plan: PlanDraft, state: JobState, job: AdmittedJob, now_text: str) -> None:
    if not state.run_hash or state.run_hash == job.run_hash:
        state.conditions = remove_condition(state.conditions, Condition.SpecOutdated)
        return
    if find_condition(state.conditions, Condition.SpecOutdated) is None:
        plan.events.append(
            Event(
                EventType.Warning,
                Reason.SpecOutdated,
                state.name,
                "spec changed while running: the running attempt is unchanged; the job runs again with the new spec when it ends",
            )
        )
    state.conditions = set_condition(
        state.conditions,
        Condition.SpecOutdated,
        "True",
        "RunningAttemptUnchanged",
        "the spec changed while this attempt runs; the attempt keeps the old spec and the job runs "
        "again with the new one when it ends",
        now_text,
    )


def _gpu_memory_overuse(state: JobState, job: AdmittedJob, snap: Snapshot) -> str | None:
    """A Shared job promised ``gpuMemory`` per GPU; NVML's per-process accounting says if it keeps that."""
    budget = job.spec.resources.gpu_memory
    if job.spec.sharing != "Shared" or budget is None or not state.devices:
        return None
    pids = snap.job_pids.get(state.name)
    if not pids:
        return None
    for gpu in snap.gpus:
        if gpu.index not in state.devices:
            continue
        used = sum(p.used_memory for p in gpu.processes if p.pid in pids)
        if used > budget:
            return (
                f"used {format_quantity(used)} of GPU {gpu.index}'s memory, over its gpuMemory of "
                f"{format_quantity(budget)} (sharing: Shared)"
            )
    return None


def _gpu_health(plan: PlanDraft, state: JobState, snap: Snapshot, now_text: str) -> None:
    """A GPU lost under a running job: say so on the job (it may be unable to finish)."""
    sick = [g for g in snap.gpus if g.index in state.devices and not g.healthy]
    if sick:
        if find_condition(state.conditions, Condition.GPUUnhealthy) is None:
            text = "; ".join(f"GPU {g.index}: {g.error or 'unhealthy'}" for g in sick)
            plan.events.append(
                Event(EventType.Warning, Reason.GPUUnhealthy, state.name, f"a GPU of this running job failed: {text}")
            )
        state.conditions = set_condition(
            state.conditions,
            Condition.GPUUnhealthy,
            "True",
            "GPULost",
            "; ".join(f"GPU {g.index}: {g.error or 'unhealthy'}" for g in sick),
            now_text,
        )
    else:
        state.conditions = remove_condition(state.conditions, Condition.GPUUnhealthy)


# the stops a checkpoint precedes (docs/checkpoint.md): the supervisor's CHECKPOINT_STOPS (shim/checkpoint.py,
# which imports nothing of ours); tests/test_checkpoint_exits.py checks that the two agree
CHECKPOINT_STOPS = frozenset({StopReason.Preempted, StopReason.Suspended, StopReason.IdleTimeout})


def request_stop(
    plan: PlanDraft,
    state: JobState,
    run: RunObservation,
    reason: str,
    why: str,
    grace: float,
    now_text: str,
    checkpoint: Checkpoint | None = None,
) -> None:
    """Ask the runtime to stop the attempt; ``checkpoint``: the job's spec.checkpoint (the message
    says the stop waits for it; the supervisor does the waiting)."""
    state.phase = Phase.Running
    state.conditions = set_condition(state.conditions, Condition.Terminating, "True", reason, why, now_text)
    state.reason = Reason.Terminating
    target = f"pid {run.pid}" if run.pid else "the job"
    state.message = f"stopping: {why}; TERM sent to {target}, KILL after {format_duration(grace)}"
    if checkpoint is not None and reason in CHECKPOINT_STOPS:
        state.message = (
            f"stopping: {why}; SIG{checkpoint.signal} sent to {target} for a checkpoint, waiting up to "
            f"{format_duration(checkpoint.grace)} for it; then TERM, KILL after {format_duration(grace)}"
        )
    plan.stops.append(Stop(state.name, reason, grace))
