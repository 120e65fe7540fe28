"""One job, one pass: what its manifest (deleted, rejected, admitted) and its process (running,
ended, gone) make of its record. A job left waiting to start is handed to the queue.

Pure. Records are copied before they change: the previous pass's objects are never mutated, so an
unchanged job can be carried over as the very same object (see ``reconcile.changed_names``).
"""

from __future__ import annotations

from controller.decide.exits import already_recorded, attempt_xids, record_checkpoint, record_exit
from controller.decide.gpu_usage import final_usage
from controller.decide.running import request_stop, running
from controller.model import lean_records as lean
from controller.model.conditions import find_condition, remove_condition, set_condition
from controller.model.documents import AdmittedJob, Rejection
from controller.model.lean_records import Facts, loaded_facts_items
from controller.model.plan import Event, PlanDraft, RunObservation, Snapshot
from controller.model.reasons import (
    SETTLED_PHASES,
    STOP_REASONS,
    TERMINAL_PHASES,
    WARNING_REASONS,
    Condition,
    EventType,
    Phase,
    Reason,
    StopReason,
)
from controller.model.records import JobState

Pending = tuple[JobState, AdmittedJob]  # a job that waits to start: its new record and its manifest


def step(plan: PlanDraft, snap: Snapshot, name: str, now: float, now_text: str) -> Pending | None:
    """Decide job ``name``'s record for this pass (into ``plan``); a job that should start, if it
    may, comes back for the queue."""
    adm = snap.admitted
    old, run = snap.states.get(name), snap.runs.get(name)
    job, rejection = adm.jobs.get(name), adm.rejected.get(name)
    if old is not None and _unchanged(snap, name, old, job, rejection, run):
        plan.states[name] = old
        return None
    if old is not None and _refused_by_queue_limit(snap, name, old, job, rejection, run):
        plan.states[name] = old  # a QueueLimit refusal stands until the manifest changes (decide/limits.py)
        return None
    if run is not None and already_recorded(old, run):
        # this attempt's end is already recorded; a crash before the runtime dropped its records
        # shows it again after a restart: drop them, never count the same exit twice
        plan.consumed.append(name)
        run = None
    if job is None and rejection is None and old is not None and old.owner is not None and old.owner in adm.rejected:
        # its Sweep's manifest turned invalid: that is not a delete; report, keep what runs
        rejection = adm.rejected[old.owner]
    if job is None and rejection is None:
        _deleted(plan, snap, name, old, run, now, now_text)
        return None
    state = old.copy() if old is not None else JobState(name=name, created=now)
    if job is None:
        if rejection is not None:  # (both None returned above)
            _rejected(plan, state, old, rejection, run, now_text)
        return None
    _admitted(state, old, job, adm.duplicates, now_text)
    if run is not None and run.running:
        running(plan, state, job, run, snap, now, now_text)
        finish(plan, old, state)
        return None
    if run is not None:
        _ended(plan, state, job, run, attempt_xids(snap.gpus, run))
        final_usage(state, snap, run, now)
    elif state.phase == Phase.Running:
        _lost(state, now)
    if state.phase in TERMINAL_PHASES and not _rerun(plan, state, job):
        finish(plan, old, state)
        return None
    if job.spec.cancelled:
        _cancelled_before_start(state, job, now)
        finish(plan, old, state)
        return None
    state.phase = Phase.Pending
    return state, job


def finish(plan: PlanDraft, old: JobState | None, state: JobState) -> None:
    """The job's record for this pass; a changed (phase, reason) is announced as an event."""
    plan.states[state.name] = state
    if (old is None or (old.phase, old.reason) != (state.phase, state.reason)) and state.reason != Reason.QueueLimit:
        # (QueueLimit: the queue announces a flood's refusals in one event per user, decide/queue.py)
        warning = state.phase in (Phase.Failed, Phase.Rejected) or state.reason in WARNING_REASONS
        plan.events.append(
            Event(
                EventType.Warning if warning else EventType.Normal,
                state.reason or state.phase,
                state.name,
                state.message,
            )
        )


def _unchanged(
    snap: Snapshot,
    name: str,
    old: JobState | None,
    job: AdmittedJob | None,
    rejection: Rejection | None,
    run: RunObservation | None,
) -> bool:
    """Nothing about this job can change: its record is carried over as is."""
    if run is not None or old is None:
        return False
    adm, prev = snap.admitted, snap.previous
    # A finished (or rejected) job whose manifest document is the very object the last pass saw,
    # with no process, cannot change. This makes a pass cost what changed, not what exists
    # (10,000 finished jobs cost ~10 ms, not ~500).
    if (
        prev is not None
        and old.phase in SETTLED_PHASES
        and (job is not None or rejection is not None)
        and job is prev.jobs.get(name)
        and rejection is prev.rejected.get(name)
        and name not in adm.duplicates
        and name not in prev.duplicates
    ):
        return True
    # the same verdict as the full path, without copying
    return job is not None and rejection is None and name not in adm.duplicates and _finished_and_current(old, job)


def _refused_by_queue_limit(
    snap: Snapshot,
    name: str,
    old: JobState | None,
    job: AdmittedJob | None,
    rejection: Rejection | None,
    run: RunObservation | None,
) -> bool:
    return (
        old is not None
        and job is not None
        and rejection is None
        and run is None
        and old.phase == Phase.Rejected
        and old.reason == Reason.QueueLimit
        and old.spec_hash == job.spec_hash
        and name not in snap.admitted.duplicates
    )


def _finished_and_current(old: JobState | None, job: AdmittedJob) -> bool:
    """A finished job whose record already says everything the admitted path would set (same
    spec, manifest, labels, admitted, nothing to re-run): processing it changes nothing. This
    spares a restart from copying 10,000 finished records when it has no previous pass."""
    return old is not None and old.phase in TERMINAL_PHASES and _facts_finished_and_current(lean.facts_of(old), job)


def carried_as_loaded(snap: Snapshot, names: set[str]) -> set[str]:
    """The names of ``names`` whose record is still the one the start read, kept as its facts
    (``model/lean_records.py``), of a finished job that nothing about can change: its process gone,
    its manifest admitted, no other manifest of its name, and :func:`_finished_and_current` of the
    facts. ``step`` would carry each over as it is; found here without building a record per job."""
    adm, runs, reclaimed = snap.admitted, snap.runs, snap.reclaimed
    jobs, rejected, duplicates = adm.jobs, adm.rejected, adm.duplicates
    current = _facts_finished_and_current
    return {
        name
        for name, facts in loaded_facts_items(snap.states)
        if name in names
        and (job := jobs.get(name)) is not None
        and name not in runs
        and name not in rejected
        and name not in duplicates
        and name not in reclaimed
        and current(facts, job)
    }


def _facts_finished_and_current(facts: Facts | None, job: AdmittedJob) -> bool:
    """:func:`_finished_and_current` of a record, read off its facts (``lean_records.facts_of``)."""
    if facts is None:
        return False
    phase = facts[lean.PHASE]
    return (
        phase in TERMINAL_PHASES
        and facts[lean.SPEC_HASH] == job.spec_hash
        and facts[lean.RUN_HASH] == job.run_hash
        and facts[lean.MANIFEST] == job.source
        and facts[lean.OWNER] == job.owner
        and facts[lean.PRIORITY] == job.priority
        and facts[lean.GPUS] == job.gpus
        and facts[lean.LABELS] == job.labels
        and not (phase == Phase.Cancelled and facts[lean.REASON] == Reason.UserCancelled and not job.cancelled)
        and facts[lean.VALID]
    )


def _deleted(
    plan: PlanDraft,
    snap: Snapshot,
    name: str,
    old: JobState | None,
    run: RunObservation | None,
    now: float,
    now_text: str,
) -> None:
    """A deleted manifest: stop the process, then forget the job (its logs stay)."""
    if run is not None and run.running:
        state = (old or JobState(name=name, created=now)).copy()
        request_stop(plan, state, run, StopReason.Deleted, "manifest deleted", snap.default_grace, now_text)
        plan.states[name] = state
        return
    if run is not None:
        plan.consumed.append(name)
    if old is not None:
        plan.removed.append(name)
        plan.events.append(Event(EventType.Normal, Reason.Deleted, name, "manifest deleted; status removed"))


def _rejected(
    plan: PlanDraft,
    state: JobState,
    old: JobState | None,
    rejection: Rejection,
    run: RunObservation | None,
    now_text: str,
) -> None:
    """An invalid manifest is reported, and is not a delete: a running attempt runs on, and a
    finished job keeps its outcome (fixing the file does not run it again)."""
    state.manifest = rejection.source
    admitted = find_condition(state.conditions, Condition.Admitted)
    newly = admitted is None or admitted["status"] == "True"
    state.conditions = set_condition(
        state.conditions, Condition.Admitted, "False", rejection.reason, rejection.message, now_text
    )
    if run is not None and run.running:
        state.phase = Phase.Running
    else:
        if run is not None:
            record_exit(state, run, None, 0)
            plan.consumed.append(state.name)
        if state.phase not in TERMINAL_PHASES or state.generation == 0:
            state.phase, state.reason, state.message = Phase.Rejected, rejection.reason, rejection.message
            state.queue_position = None
    if newly and state.phase != Phase.Rejected:
        plan.events.append(
            Event(
                EventType.Warning,
                rejection.reason,
                state.name,
                f"manifest is invalid, last valid spec kept: {rejection.message}",
            )
        )
    finish(plan, old, state)


def _admitted(
    state: JobState, old: JobState | None, job: AdmittedJob, duplicates: dict[str, list[str]], now_text: str
) -> None:
    """What a valid manifest says about the job: generation, labels, priority, conditions."""
    spec = job.spec
    if state.spec_hash != job.spec_hash:
        state.generation += 1
        state.spec_hash = job.spec_hash
    state.manifest = job.source
    state.owner = job.owner
    state.labels = dict(job.job.metadata.labels)
    state.priority = spec.priority
    state.gpus = spec.resources.gpus
    state.cpus = spec.resources.cpus or 0
    state.depends_on = [d.job for d in spec.depends_on]
    state.conditions = set_condition(
        state.conditions, Condition.Admitted, "True", "Valid", "manifest is valid", now_text
    )
    if old is not None and old.phase == Phase.Rejected:
        state.phase, state.reason, state.message = Phase.Pending, Reason.Admitted, "manifest fixed and admitted"
    if job.name in duplicates:
        others = ", ".join(duplicates[job.name])
        state.conditions = set_condition(
            state.conditions,
            Condition.DuplicateName,
            "True",
            Reason.DuplicateName,
            f"{others} also define{'s' if len(duplicates[job.name]) == 1 else ''} job/{job.name}; ignored",
            now_text,
        )
    else:
        state.conditions = remove_condition(state.conditions, Condition.DuplicateName)


def _ended(
    plan: PlanDraft, state: JobState, job: AdmittedJob, run: RunObservation, xids: tuple[tuple[int, int], ...] = ()
) -> None:
    """The attempt ended: record it, once."""
    if run.external_id:  # a cluster backend: where it ran, even if it ended between two looks
        state.backend_id, state.node = run.external_id, run.node or state.node
        state.devices = list(run.devices) or state.devices
    if run.attempt > state.attempt:  # it began (a retry, or the first) and ended while its start went unrecorded
        state.failed = max(state.failed, run.failed_before)  # failures its unrecorded decision had counted
    if run.run_hash and not state.run_hash:  # it ended before its start was ever recorded
        state.run_hash, state.attempt = run.run_hash, max(state.attempt, run.attempt)
    if run.attempt > state.attempt:  # a retry began and ended while its start went unrecorded (a crash)
        state.attempt, state.pid, state.start_time = run.attempt, run.pid, run.started_at
        state.next_attempt_time = None
        if run.devices:
            state.devices, state.device_uuids = list(run.devices), list(run.device_uuids)
    elif run.attempt == state.attempt and state.pid is None:  # it ended before a pass saw its pid
        state.pid = run.pid
    stop = find_condition(state.conditions, Condition.Terminating)
    if stop is None and run.stop_reason in STOP_REASONS:
        # we asked it to stop, then crashed before recording that: the supervisor remembers why
        stop = {"reason": run.stop_reason, "message": "stopped by gflowd"}
    record_exit(state, run, stop, job.spec.backoff_limit, xids)
    checkpoint = job.spec.checkpoint
    plan.events.extend(record_checkpoint(state, run, bool(checkpoint and checkpoint.requeue)))
    plan.consumed.append(state.name)
    if state.phase == Phase.Pending:  # a retry or a suspend: it will be bound anew
        state.devices, state.device_uuids = [], []
    if state.phase == Phase.Pending and state.next_attempt_time is not None:
        plan.wake(state.next_attempt_time)


def _lost(state: JobState, now: float) -> None:
    """Recorded as running, yet no process is known: it vanished while the controller was away."""
    state.phase, state.reason = Phase.Failed, Reason.Lost
    state.ended_attempt = state.attempt
    pid = f" (pid {state.pid})" if state.pid else ""
    state.message = f"attempt {state.attempt} was running{pid} but its process is gone; exit code unknown"
    state.completion_time = now


def _rerun(plan: PlanDraft, state: JobState, job: AdmittedJob) -> bool:
    """A finished job runs again when its cancel is withdrawn or its spec changed; True if so."""
    spec = job.spec
    if state.phase == Phase.Cancelled and state.reason == Reason.UserCancelled and not spec.cancelled:
        why = "cancel withdrawn (spec.cancelled: false): running again"
    elif state.run_hash != job.run_hash and not spec.cancelled:
        why = f"spec changed (generation {state.generation}): running again"
    else:
        return False
    plan.events.append(Event(EventType.Normal, Reason.Rerun, state.name, why))
    state.phase, state.reason, state.message = Phase.Pending, Reason.Rerun, why
    state.failed = 0  # attempts keep counting across generations, so every attempt's log is kept
    state.conditions = remove_condition(state.conditions, Condition.Checkpointed)  # a new run: nothing to resume
    state.exit_code = None
    state.start_time = state.completion_time = state.next_attempt_time = None
    state.pid = None
    return True


def _cancelled_before_start(state: JobState, job: AdmittedJob, now: float) -> None:
    state.phase, state.reason = Phase.Cancelled, Reason.UserCancelled
    state.message = "cancelled before it started (spec.cancelled: true)"
    state.completion_time = now
    state.run_hash = job.run_hash  # the outcome belongs to this spec: a changed one runs again
    state.queue_position = None
