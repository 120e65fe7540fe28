"""An ended attempt becomes the job's phase: the one place exit codes, signals and stop requests
turn into Succeeded, Failed, a retry after back-off, or back to Pending.

Pure. A stop gflowd asked for is never the job's failure: it does not count against
``backoffLimit`` (Suspended, Preempted and UserCancelled return the job or cancel it; a time limit
GPU-memory overuse or an idleTimeout fails it with that reason, once).
"""

from __future__ import annotations

import signal as signal_mod
from collections.abc import Callable, Sequence

from controller.api.units import format_duration
from controller.model.conditions import find_condition, remove_condition, set_condition
from controller.model.failures import NOTHING, Finding, classify
from controller.model.gpus import Gpu
from controller.model.plan import Event, RunObservation
from controller.model.reasons import Condition, EventType, Phase, Reason, StopReason
from controller.model.records import JobState, rfc3339

BACKOFF_BASE = 1.0
BACKOFF_MAX = 300.0


def backoff_delay(failures: int) -> float:
    """1 s after the first failure, doubling, at most 5 min."""
    return min(BACKOFF_BASE * 2 ** max(failures - 1, 0), BACKOFF_MAX)


def signal_name(number: int) -> str:
    try:
        return signal_mod.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_text(run: RunObservation) -> str:
    if run.error:
        return run.error
    if run.signal:
        return f"killed by {signal_name(run.signal)} (exit code {run.exit_code})"
    return f"exited with code {run.exit_code}"


def already_recorded(old: JobState | None, run: RunObservation) -> bool:
    """An ended attempt whose end the status file already holds (``endedAttempt``)."""
    return old is not None and not run.running and 0 < run.attempt <= old.ended_attempt


def record_exit(
    state: JobState,
    run: RunObservation,
    stop: dict[str, str] | None,
    backoff_limit: int,
    xids: tuple[tuple[int, int], ...] = (),
) -> None:
    """Turn an ended attempt into a phase. ``stop``: our Terminating condition, if we stopped it;
    ``xids``: (GPU, Xid) events on its GPUs while it ran (``attempt_xids``)."""
    state.ended_attempt = max(state.ended_attempt, run.attempt)
    state.conditions = remove_condition(state.conditions, Condition.Terminating)
    state.conditions = remove_condition(state.conditions, Condition.SpecOutdated)
    for finding in (Condition.GPUsUnused, Condition.GPUIdle, Condition.GPUMemoryNearLimit):  # about a running attempt
        state.conditions = remove_condition(state.conditions, finding)
    state.exit_code = run.exit_code
    state.completion_time = run.finished_at
    state.usage = dict(run.usage or {})
    how = exit_text(run)
    stop_reason = stop["reason"] if stop else None
    if state.start_time is None and stop_reason is None:  # a cluster ran it between two passes that saw it queued
        state.start_time = run.started_at
    if stop_reason is None and run.reason == Reason.DeadlineExceeded:
        stop_reason = StopReason.DeadlineExceeded  # the supervisor enforced the limit itself
    if stop_reason in STOPPED:
        STOPPED[stop_reason](state, run, stop, how)
    elif run.lost:
        state.phase, state.reason, state.message = Phase.Failed, Reason.Lost, f"attempt {run.attempt}: {run.error}"
    elif run.exit_code == 0 and not run.error:
        state.phase, state.reason, state.message = (
            Phase.Succeeded,
            Reason.Completed,
            f"attempt {run.attempt} exited with code 0",
        )
    else:
        _failed(state, run, backoff_limit, how, failure_cause(run, xids))


def _suspended(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    state.phase, state.reason, state.message = (
        Phase.Pending,
        Reason.Suspended,
        f"suspended; attempt {run.attempt} stopped ({how})",
    )
    state.completion_time = None


def _cancelled(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    state.phase, state.reason, state.message = (
        Phase.Cancelled,
        Reason.UserCancelled,
        f"cancelled; attempt {run.attempt} stopped ({how})",
    )


def _preempted(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    # not the job's failure: not counted against its backoffLimit
    state.phase, state.reason = Phase.Pending, Reason.Preempted
    state.message = f"{stop['message'] if stop else 'preempted'}; attempt {run.attempt} stopped ({how})"
    since = stop.get("lastTransitionTime", "") if stop else ""
    state.conditions = set_condition(
        state.conditions, Condition.Preempted, "True", Reason.Preempted, state.message, since
    )
    state.completion_time = None


def _deadline(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    state.phase, state.reason = Phase.Failed, Reason.DeadlineExceeded
    state.message = f"attempt {run.attempt} exceeded its time limit and was stopped ({how})"


def _gpu_memory(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    state.phase, state.reason = Phase.Failed, Reason.GPUMemoryExceeded
    state.message = f"attempt {run.attempt} stopped: {stop['message'] if stop else 'over its gpuMemory'} ({how})"


def _idle(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    state.phase, state.reason = Phase.Failed, Reason.IdleTimeout
    state.message = f"attempt {run.attempt} stopped: {stop['message'] if stop else 'idle for its idleTimeout'} ({how})"


def _deleted(state: JobState, run: RunObservation, stop: dict[str, str] | None, how: str) -> None:
    state.phase, state.reason, state.message = Phase.Cancelled, Reason.Deleted, f"manifest deleted; stopped ({how})"


# every StopReason has its outcome here (tests/test_exits.py checks that none is missing)
STOPPED: dict[str, Callable[[JobState, RunObservation, dict[str, str] | None, str], None]] = {
    StopReason.Suspended: _suspended,
    StopReason.UserCancelled: _cancelled,
    StopReason.Preempted: _preempted,
    StopReason.DeadlineExceeded: _deadline,
    StopReason.GPUMemoryExceeded: _gpu_memory,
    StopReason.IdleTimeout: _idle,
    StopReason.Deleted: _deleted,
}


# -- checkpoints (spec.checkpoint, docs/checkpoint.md) --------------------------------------------------


def checkpoint_confirmed(state: JobState, run: RunObservation) -> list[Event]:
    """The attempt's latest confirmed checkpoint (``run.checkpoint``: its supervisor's record, or
    while it runs what the supervisor published) as the Checkpointed condition (attempt, time,
    path) and, once per confirmation, an event: a confirmation seen while the job ran is not
    announced again when its attempt ends."""
    done = run.checkpoint
    if not done or not done.get("confirmedAt"):
        return []
    when = rfc3339(done["confirmedAt"]) or ""
    path = f" at {done['path']}" if done.get("path") else ""
    message = f"attempt {run.attempt} confirmed a checkpoint{path} ({when})"
    shown = find_condition(state.conditions, Condition.Checkpointed)
    if shown is not None and shown.get("message") == message:
        return []
    state.conditions = remove_condition(state.conditions, Condition.Checkpointed)  # its time is the latest's
    state.conditions = set_condition(
        state.conditions, Condition.Checkpointed, "True", Reason.Checkpointed, message, when
    )
    return [Event(EventType.Normal, Reason.Checkpointed, state.name, message)]


def record_checkpoint(state: JobState, run: RunObservation, requeue: bool) -> list[Event]:
    """After ``record_exit``: what the attempt's checkpoint handshake says (the supervisor's record,
    ``run.checkpoint``). A confirmed checkpoint becomes the Checkpointed condition (the latest one:
    attempt, time, path) and an event; a signal left unconfirmed a CheckpointTimeout warning. An idle
    stop after a confirmed checkpoint, or a time-limit stop after one when ``requeue``, returns the
    job to Pending to resume, not Failed (preempted and suspended jobs return to Pending anyway)."""
    done = run.checkpoint
    if not done:
        return []
    events = checkpoint_confirmed(state, run)
    if done.get("signalledAt") and done.get("timedOut"):
        events.append(
            Event(
                EventType.Warning,
                Reason.CheckpointTimeout,
                state.name,
                f"attempt {run.attempt}: SIG{done.get('signal')} sent ({done.get('why')}) but no checkpoint was "
                "confirmed in time; it was stopped anyway",
            )
        )
    resumable = state.reason == Reason.IdleTimeout or (state.reason == Reason.DeadlineExceeded and requeue)
    if done.get("confirmed") and state.phase == Phase.Failed and resumable:
        state.phase, state.reason = Phase.Pending, Reason.Checkpointed
        state.message = f"{state.message}; its checkpoint was confirmed: it resumes when it starts again"
        state.completion_time = None
    return events


XID_LATE = 60.0  # an Xid gflowd read this long after the attempt's end may still be what ended it


def attempt_xids(gpus: Sequence[Gpu], run: RunObservation) -> tuple[tuple[int, int], ...]:
    """The Xid events gflowd saw on an ended attempt's GPUs while it ran: (GPU index, Xid)."""
    if not run.devices or run.running:
        return ()
    end = (run.finished_at or run.started_at) + XID_LATE
    return tuple(
        (gpu.index, xid)
        for gpu in gpus
        if gpu.index in run.devices
        for at, xid in gpu.xids
        if run.started_at <= at <= end
    )


def failure_cause(run: RunObservation, xids: tuple[tuple[int, int], ...]) -> Finding:
    """Why the job's own attempt failed, from its facts (``model/failures.py``); NOTHING when the
    runtime already named it (OOMKilled by the supervisor) or it never ran."""
    if run.error or run.reason == Reason.OOMKilled:
        return NOTHING
    return classify(run.exit_code, run.signal, run.oom_kills, xids, run.log_tail, run.log_first_line, run.python)


def _failed(state: JobState, run: RunObservation, backoff_limit: int, how: str, cause: Finding = NOTHING) -> None:
    """The job's own failure: a retry after back-off while ``backoffLimit`` allows, else Failed
    (with the cause's reason when ``cause`` names one)."""
    state.failed += 1
    ended = how
    if run.reason == Reason.OOMKilled:
        counted = (
            f"; its cgroup counted {run.oom_kills} OOM kill{'s' if run.oom_kills != 1 else ''}" if run.oom_kills else ""
        )
        how = f"OOMKilled: the job's processes used more than its memory limit ({how}{counted})"
    elif cause.reason:
        how = f"{cause.reason}, {how}: {cause.message}"
    if state.failed <= backoff_limit:
        delay = backoff_delay(state.failed)
        state.phase, state.reason = Phase.Pending, Reason.BackOff
        state.next_attempt_time = (run.finished_at or run.started_at) + delay
        state.message = (
            f"attempt {run.attempt} failed ({how}); retry {state.failed} of {backoff_limit} in {format_duration(delay)}"
        )
        state.completion_time = None
        return
    state.phase = Phase.Failed
    if run.reason == Reason.OOMKilled:
        state.reason = Reason.OOMKilled
        state.message = how + (f"; all {backoff_limit} retries used" if backoff_limit else "")
    elif cause.reason:
        state.reason = Reason[cause.reason]  # its name is its text
        state.message = f"attempt {run.attempt} {ended}: {cause.message}" + (
            f"; all {backoff_limit} retries used" if backoff_limit else ""
        )
    elif backoff_limit > 0:
        state.reason = Reason.BackoffLimitExceeded
        state.message = f"attempt {run.attempt} failed ({how}); all {backoff_limit} retries used"
    else:
        state.reason = Reason.Error
        state.message = f"{how}"
