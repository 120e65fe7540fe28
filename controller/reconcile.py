"""Decide: desired state (admitted manifests) vs observed state (records, processes, GPUs) -> a plan.

``reconcile`` is a pure function of a :class:`Snapshot` and the clock. It returns new job states,
processes to start and stop, status files to remove and events to log; the daemon acts on the
plan and records it. Level-triggered: running it twice on the same snapshot plans the same thing,
so any pass may be repeated or skipped without harm.
"""

from __future__ import annotations

import math
import re
import signal as signal_mod
from collections import ChainMap
from dataclasses import dataclass, field
from datetime import datetime

from controller.admission import AdmissionResult, AdmittedJob
from controller.api.status import TERMINAL_PHASES, find_condition, remove_condition, set_condition
from controller.api.units import format_duration, format_quantity
from controller.gpus.inventory import Gpu
from controller.policy import Policy, charge, decayed_gpu_seconds, effective_priority, queue_key, quota_keys, quota_table, user_name
from controller.scheduler import Binding, GpuSlot, Holder, Request, Running, Wait, build_slots, preemption_victims, schedule
from controller.state import JobState, SweepState, rfc3339

DEFAULT_GRACE = 10.0
BACKOFF_BASE = 1.0
BACKOFF_MAX = 300.0
GIB = 2**30
# the reasons a stop request carries (the Terminating condition and stop-N.json)
STOP_REASONS = frozenset({"UserCancelled", "Suspended", "Deleted", "DeadlineExceeded", "GPUMemoryExceeded"})
# reasons reported as Warning events (besides any Failed or Rejected phase)
WARNING_REASONS = frozenset({"DependencyFailed", "Unschedulable", "Lost", "DiskFull", "DiskError"})


@dataclass(frozen=True)
class RunObservation:
    """What the runtime knows about a job's current process (one attempt)."""

    name: str
    attempt: int
    pid: int | None
    started_at: float
    running: bool
    exit_code: int | None = None  # 128+N when killed by signal N
    signal: int | None = None
    finished_at: float | None = None
    error: str = ""  # the process could not be started at all (e.g. command not found)
    lost: bool = False  # it ended unobserved: its exit code is unknown
    reason: str = ""  # the runtime's own enforcement: DeadlineExceeded | OOMKilled
    devices: tuple[int, ...] = ()  # as bound at the decision: survives a controller crash
    device_uuids: tuple[str, ...] = ()
    run_hash: str = ""  # the spec this attempt runs, as admission hashed it
    # A cluster backend (Slurm) only: the attempt is handed over but waits in the cluster's queue
    # (``queued``: why, e.g. Resources, Priority; ``message``: the cluster's words), or runs on ``node``.
    queued: str = ""
    message: str = ""
    node: str = ""
    external_id: str = ""  # the cluster's id of the attempt (a Slurm job id)
    stop_reason: str = ""  # the stop request the supervisor acted on (UserCancelled, Suspended, ...)
    # The local runtime could not record the launch (a full disk: ``queued`` says DiskFull) and
    # retries it: nothing runs yet. Shown Pending, like a cluster's queue, keeping its GPUs.
    held: bool = False


@dataclass(frozen=True)
class Launch:
    name: str
    attempt: int
    generation: int
    job: AdmittedJob
    devices: list[int]
    device_uuids: list[str]


@dataclass(frozen=True)
class Stop:
    name: str
    reason: str  # UserCancelled | Suspended | Deleted | DeadlineExceeded
    grace: float


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    object: str
    message: str
    kind: str = "job"


@dataclass
class Snapshot:
    admission: AdmissionResult
    states: dict[str, JobState]
    runs: dict[str, RunObservation]
    gpus: list[Gpu] = field(default_factory=list)
    allowed_gpus: set[int] | None = None
    job_pids: dict[str, set[int]] = field(default_factory=dict)  # running job -> its process tree
    strategy: str = "sequential"
    topology: dict[tuple[int, int], int] = field(default_factory=dict)
    unmanaged_threshold: int = GIB
    ignore_processes: frozenset[str] = frozenset()
    default_grace: float = DEFAULT_GRACE
    sweep_states: dict[str, SweepState] = field(default_factory=dict)
    previous: AdmissionResult | None = None  # the last pass's admission: unchanged finished jobs are skipped
    unsettled: set[str] | None = None  # the last plan's ``unsettled`` for these states; None: find them
    max_starts: int = 32  # per pass: a flood of jobs starts over several passes, each recorded and interruptible
    default_ttl: float | None = None  # seconds a finished job is kept, when its spec does not say
    finished_history: int | None = None  # at most this many finished jobs are kept
    bind_gpus: bool = True  # False: a cluster backend (Slurm) allocates GPUs; admitted jobs go to it unbound
    policy: Policy = field(default_factory=Policy)  # backfill, aging, fair share, quotas (controller/policy.py)


@dataclass
class Plan:
    states: dict[str, JobState] = field(default_factory=dict)  # every job that still exists
    starts: list[Launch] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)  # exited runs now recorded: runtime may forget them
    time_limits: dict[str, float | None] = field(default_factory=dict)  # running job -> current timeLimit
    removed: list[str] = field(default_factory=list)  # jobs whose manifest is gone: drop their status
    events: list[Event] = field(default_factory=list)
    slots: list[GpuSlot] = field(default_factory=list)  # GPUs as this pass leaves them (node.yaml)
    sweeps: dict[str, SweepState] = field(default_factory=dict)  # every sweep that still exists
    removed_sweeps: list[str] = field(default_factory=list)
    expired: list[AdmittedJob] = field(default_factory=list)  # finished jobs whose manifests to delete
    wake_at: float | None = None  # the next time a pass is due even if nothing changes
    again: bool = False  # a decision here unblocks others (e.g. a dependency ended): pass again now
    unsettled: set[str] = field(default_factory=set)  # jobs not finished or rejected: the next Snapshot's
    looked_at: set[str] = field(default_factory=set)  # every other record is carried over unchanged

    def wake(self, when: float) -> None:
        self.wake_at = when if self.wake_at is None else min(self.wake_at, when)


def natural_key(name: str) -> tuple:
    """``job-2`` before ``job-10``: sweep children queue in index order."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def signal_name(number: int) -> str:
    try:
        return signal_mod.Signals(number).name
    except ValueError:
        return f"signal {number}"


def backoff_delay(failures: int) -> float:
    """1 s after the first failure, doubling, at most 5 min."""
    return min(BACKOFF_BASE * 2 ** max(failures - 1, 0), BACKOFF_MAX)


def start_after_time(value: str | None, created: float) -> float | None:
    if not value:
        return None
    if value.startswith("+"):
        from controller.api.units import parse_duration

        return created + parse_duration(value[1:])
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is the machine's local time, as users write it
    return moment.timestamp()


SETTLED_PHASES = TERMINAL_PHASES | {"Rejected"}


def changed_names(snap: Snapshot) -> set[str] | None:
    """The names a pass must look at; None: every name (there is no previous pass to compare to).

    Every other name is a finished (or rejected) job whose manifest document is the very object
    the previous pass saw, with no process: nothing about it can change, so its record is carried
    over untouched. This makes a pass cost what changed, not what exists. The loop in
    :func:`reconcile` applies the same test per name; this finds the complement with set
    operations instead of visiting 10,000 unchanged jobs one by one.
    """
    prev = snap.previous
    if prev is None:
        return None
    adm, states = snap.admission, snap.states
    jobs, old_jobs, rejected, old_rejected = adm.jobs, prev.jobs, adm.rejected, prev.rejected
    if snap.unsettled is not None:
        names = set(snap.unsettled)
    else:
        names = {n for n, st in states.items() if st.phase not in SETTLED_PHASES}
    names.update(snap.runs)
    names.update(adm.duplicates)
    names.update(prev.duplicates)
    if adm is prev:  # the previous pass gave every admitted name a record, and looked at the rest
        return names
    if adm.base == prev.serial:  # patched from the previous result: it says what it touched
        names.update(adm.touched)
        return names
    names.update([n for n, job in jobs.items() if old_jobs.get(n) is not job])
    names.update(old_jobs.keys() - jobs.keys())
    names.update([n for n, r in rejected.items() if old_rejected.get(n) is not r])
    names.update(old_rejected.keys() - rejected.keys())
    names.update(jobs.keys() - states.keys())
    names.update(rejected.keys() - states.keys())
    names.update(states.keys() - jobs.keys() - rejected.keys())
    return names


def reconcile(snap: Snapshot, now: float) -> Plan:
    plan = Plan()
    adm = snap.admission
    now_text = rfc3339(now) or ""
    names = changed_names(snap)
    if names is None:
        names = set(adm.jobs) | set(adm.rejected) | set(snap.states) | set(snap.runs)
    else:  # carry every other record over as is (see changed_names)
        plan.states = dict(snap.states)
        for name in names:
            plan.states.pop(name, None)
    pending: list[tuple[JobState, AdmittedJob]] = []
    prev = snap.previous
    settled = SETTLED_PHASES

    for name in sorted(names):
        old = snap.states.get(name)
        job = adm.jobs.get(name)
        rejection = adm.rejected.get(name)
        run = snap.runs.get(name)
        # Fast path: a finished (or rejected) job whose manifest document is the very object the
        # last pass saw, with no process, cannot change: keep its record as is. This makes a pass
        # cost what changed, not what exists (10,000 finished jobs cost ~10 ms, not ~500).
        if (
            prev is not None
            and old is not None
            and run is None
            and old.phase in settled
            and (job is not None or rejection is not None)
            and job is prev.jobs.get(name)
            and rejection is prev.rejected.get(name)
            and name not in adm.duplicates
            and name not in prev.duplicates
        ):
            plan.states[name] = old
            continue
        if run is None and job is not None and rejection is None and name not in adm.duplicates and _finished_and_current(old, job):
            plan.states[name] = old  # the same verdict as the full path below, without copying
            continue
        alive = run is not None and run.running
        if run is not None and _already_recorded(old, run):
            # this attempt's end is already recorded; a crash before the runtime dropped its records
            # shows it again after a restart: drop them, never count the same exit twice
            plan.consumed.append(name)
            run = None
        if job is None and rejection is None and old is not None and old.owner in adm.rejected:
            # its Sweep's manifest turned invalid: that is not a delete; report, keep what runs
            rejection = adm.rejected[old.owner]

        # 1. Deleted manifest: stop the process, then forget the job (logs stay).
        if job is None and rejection is None:
            if alive:
                state = (old or JobState(name=name, created=now)).copy()
                _request_stop(plan, state, run, "Deleted", "manifest deleted", snap.default_grace, now_text)
                plan.states[name] = state
            else:
                if run is not None:
                    plan.consumed.append(name)
                if old is not None:
                    plan.removed.append(name)
                    plan.events.append(Event("Normal", "Deleted", name, "manifest deleted; status removed"))
            continue

        state = old.copy() if old is not None else JobState(name=name, created=now)

        # 2. Rejected manifest: report it. An invalid edit is not a delete: a running attempt runs
        # on, and a finished job keeps its outcome (fixing the file does not run it again).
        if job is None:
            assert rejection is not None
            state.manifest = rejection.source
            newly = find_condition(state.conditions, "Admitted") is None or find_condition(state.conditions, "Admitted")["status"] == "True"
            state.conditions = set_condition(
                state.conditions, "Admitted", "False", rejection.reason, rejection.message, now_text
            )
            if alive:
                state.phase = "Running"
            else:
                if run is not None:
                    _record_exit(state, run, None, 0)
                    plan.consumed.append(name)
                if state.phase not in TERMINAL_PHASES or state.generation == 0:
                    state.phase, state.reason, state.message = "Rejected", rejection.reason, rejection.message
                    state.queue_position = None
            if newly and state.phase != "Rejected":
                plan.events.append(Event("Warning", rejection.reason, name, f"manifest is invalid, last valid spec kept: {rejection.message}"))
            _finish(plan, old, state)
            continue

        # 3. Admitted.
        spec = job.spec
        if state.spec_hash != job.spec_hash:
            state.generation += 1
            state.spec_hash = job.spec_hash
        state.manifest = job.source
        state.owner = job.owner
        state.labels = dict(job.job.metadata.labels)
        state.priority = spec.priority
        state.gpus = spec.resources.gpus
        state.conditions = set_condition(state.conditions, "Admitted", "True", "Valid", "manifest is valid", now_text)
        if old is not None and old.phase == "Rejected":
            state.phase, state.reason, state.message = "Pending", "Admitted", "manifest fixed and admitted"
        if name in adm.duplicates:
            others = ", ".join(adm.duplicates[name])
            state.conditions = set_condition(
                state.conditions, "DuplicateName", "True", "DuplicateName",
                f"{others} also define{'s' if len(adm.duplicates[name]) == 1 else ''} job/{name}; ignored", now_text,
            )
        else:
            state.conditions = remove_condition(state.conditions, "DuplicateName")

        if alive:
            assert run is not None
            _running(plan, state, job, run, snap, now, now_text)
            _finish(plan, old, state)
            continue

        if run is not None:  # the attempt ended: record it once
            if run.external_id:  # a cluster backend: where it ran, even if it ended between two looks
                state.backend_id, state.node = run.external_id, run.node or state.node
                state.devices = list(run.devices) or state.devices
            if run.run_hash and not state.run_hash:  # it ended before its start was ever recorded
                state.run_hash, state.attempt = run.run_hash, max(state.attempt, run.attempt)
            if run.attempt > state.attempt:  # a retry began and ended while its start went unrecorded (a crash)
                state.attempt, state.pid, state.start_time = run.attempt, run.pid, run.started_at
                state.next_attempt_time = None
                if run.devices:
                    state.devices, state.device_uuids = list(run.devices), list(run.device_uuids)
            stop = find_condition(state.conditions, "Terminating")
            if stop is None and run.stop_reason in STOP_REASONS:
                # we asked it to stop, then crashed before recording that: the supervisor remembers why
                stop = {"reason": run.stop_reason, "message": "stopped by gflowd"}
            _record_exit(state, run, stop, spec.backoff_limit)
            plan.consumed.append(name)
            if state.phase == "Pending":  # a retry or a suspend: it will be bound anew
                state.devices, state.device_uuids = [], []
            if state.phase == "Pending" and state.next_attempt_time is not None:
                plan.wake(state.next_attempt_time)
        elif state.phase == "Running":
            # Recorded as running, yet no process is known: it vanished while the controller was away.
            state.phase, state.reason = "Failed", "Lost"
            state.ended_attempt = state.attempt
            pid = f" (pid {state.pid})" if state.pid else ""
            state.message = f"attempt {state.attempt} was running{pid} but its process is gone; exit code unknown"
            state.completion_time = now

        if state.phase in TERMINAL_PHASES:
            if state.phase == "Cancelled" and state.reason == "UserCancelled" and not spec.cancelled:
                _reset_for_rerun(plan, state, "cancel withdrawn (spec.cancelled: false): running again")
            elif state.run_hash != job.run_hash and not spec.cancelled:
                _reset_for_rerun(plan, state, f"spec changed (generation {state.generation}): running again")
            else:
                _finish(plan, old, state)
                continue

        if spec.cancelled:
            state.phase, state.reason = "Cancelled", "UserCancelled"
            state.message = "cancelled before it started (spec.cancelled: true)"
            state.completion_time = now
            state.run_hash = job.run_hash  # the outcome belongs to this spec: a changed one runs again
            state.queue_position = None
            _finish(plan, old, state)
            continue
        state.phase = "Pending"
        pending.append((state, job))

    _schedule_pending(plan, snap, pending, now, now_text, names)
    for state, _job in pending:
        _finish(plan, snap.states.get(state.name), state)
    _sweeps(plan, snap, now)
    _expire(plan, snap, now)
    states = plan.states
    plan.unsettled = {n for n in names if n in states and states[n].phase not in SETTLED_PHASES}
    plan.looked_at = names
    return plan


def _expire(plan: Plan, snap: Snapshot, now: float) -> None:
    """Finished jobs past their TTL, and the oldest beyond the history limit, are to be removed.
    Sweep children live and go with their sweep."""
    if snap.default_ttl is None and snap.finished_history is None and not snap.admission.ttl_jobs:
        return
    finished = []
    for name, state in plan.states.items():
        job = snap.admission.jobs.get(name)
        if job is None or job.owner is not None or state.phase not in TERMINAL_PHASES:
            continue
        done_at = state.completion_time or now
        finished.append((done_at, name, job))
        ttl = job.spec.ttl_seconds_after_finished
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
    for job in plan.expired:
        plan.events.append(Event("Normal", "Expired", job.name, f"finished job removed: its manifest {job.source} is deleted"))


def _sweeps(plan: Plan, snap: Snapshot, now: float) -> None:
    """Each Sweep's status: its children counted by phase."""
    for name, sweep in snap.admission.sweeps.items():
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
        state.counts = {p: phases.count(p) for p in ("Pending", "Running", "Succeeded", "Failed", "Cancelled", "Rejected") if p in phases}
        state.phase, state.reason = _sweep_phase(phases, len(sweep.children))
        parts = ", ".join(f"{n} {p}" for p, n in state.counts.items())
        state.message = f"{len(sweep.children)} children" + (f": {parts}" if parts else "")
        failed = [c for c in sweep.children if c in plan.states and plan.states[c].phase == "Failed"]
        if failed:
            state.message += f" (failed: {', '.join(failed[:5])}{' ...' if len(failed) > 5 else ''})"
        plan.sweeps[name] = state
        if old is None or (old.phase, old.reason) != (state.phase, state.reason):
            warning = state.phase == "Failed"
            plan.events.append(Event("Warning" if warning else "Normal", state.reason, name, state.message, kind="sweep"))
    for name in snap.sweep_states:
        if name not in snap.admission.sweeps:
            plan.removed_sweeps.append(name)
            plan.events.append(Event("Normal", "Deleted", name, "manifest deleted; children stopped and removed", kind="sweep"))


def _sweep_phase(phases: list[str], total: int) -> tuple[str, str]:
    if total == 0:
        return "Succeeded", "NoChildren"
    if len(phases) == total and all(p == "Succeeded" for p in phases):
        return "Succeeded", "AllSucceeded"
    if len(phases) == total and all(p in TERMINAL_PHASES for p in phases):
        if "Failed" in phases:
            return "Failed", "ChildFailed"
        return "Cancelled", "ChildCancelled"
    if "Running" in phases:
        return "Running", "ChildrenRunning"
    if any(p in TERMINAL_PHASES for p in phases):
        return "Running", "InProgress"
    return "Pending", "ChildrenPending"


def sweep_outcome(plan_states: dict[str, JobState], children: tuple[str, ...] | list[str]) -> str:
    """A Sweep as a dependency: Succeeded / Failed / Cancelled once all children ended, else Running."""
    phases = [plan_states[c].phase if c in plan_states else "Pending" for c in children]
    phase, _ = _sweep_phase(phases, len(children))
    return phase


def _running(plan: Plan, state: JobState, job: AdmittedJob, run: RunObservation, snap: Snapshot, now: float, now_text: str) -> None:
    spec = job.spec
    # a cluster's queue, or a disk that refused the launch record, held it until now
    was_queued = state.phase == "Pending" and (bool(run.external_id) or run.attempt == state.attempt)
    state.phase = "Running"
    state.pid = run.pid
    plan.time_limits[state.name] = spec.time_limit
    if run.external_id:
        state.backend_id, state.node = run.external_id, run.node or state.node
    # after a crash the status may predate the start: the runtime's records are the truth
    if run.attempt > state.attempt:
        state.attempt = run.attempt
        state.reason, state.message = "Started", "re-adopted after a controller restart"
    if run.run_hash and not state.run_hash:
        state.run_hash = run.run_hash
    if run.devices and list(run.devices) != state.devices:
        state.devices, state.device_uuids = list(run.devices), list(run.device_uuids)
    if run.queued:
        state.start_time = None  # the time limit counts from the cluster's start, as it does there
    elif state.start_time is None or run.external_id:
        state.start_time = run.started_at
    grace = spec.termination_grace_period if spec.termination_grace_period is not None else snap.default_grace
    stopping = find_condition(state.conditions, "Terminating")
    deadline = (state.start_time or run.started_at) + spec.time_limit if spec.time_limit is not None and not run.queued else None
    if stopping is not None:
        _request_stop(plan, state, run, stopping["reason"], stopping["message"], grace, now_text)
    elif spec.cancelled:
        _request_stop(plan, state, run, "UserCancelled", "cancelled (spec.cancelled: true)", grace, now_text)
    elif spec.suspend:
        _request_stop(plan, state, run, "Suspended", "suspended (spec.suspend: true); returns to Pending", grace, now_text)
    elif deadline is not None and now >= deadline:
        _request_stop(
            plan, state, run, "DeadlineExceeded",
            f"ran longer than its time limit of {format_duration(spec.time_limit)}", grace, now_text,
        )
    elif (over := _gpu_memory_overuse(state, job, snap)) is not None:
        _request_stop(plan, state, run, "GPUMemoryExceeded", over, grace, now_text)
    elif deadline is not None:
        plan.wake(deadline)
    _gpu_health(plan, state, snap, now_text)
    if find_condition(state.conditions, "Terminating") is None:
        if run.queued:
            state.phase, state.reason, state.message = "Pending", run.queued, run.message
        elif was_queued:
            state.reason, state.message = "Started", run.message or ("started by the cluster" if run.external_id else "started")
    if state.run_hash and state.run_hash != job.run_hash:
        if find_condition(state.conditions, "SpecOutdated") is None:
            plan.events.append(Event(
                "Warning", "SpecOutdated", state.name,
                "spec changed while running: the running attempt is unchanged; the job runs again with the new spec when it ends",
            ))
        state.conditions = set_condition(
            state.conditions, "SpecOutdated", "True", "RunningAttemptUnchanged",
            "the spec changed while this attempt runs; the attempt keeps the old spec and the job runs "
            "again with the new one when it ends",
            now_text,
        )
    else:
        state.conditions = remove_condition(state.conditions, "SpecOutdated")


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


def _gpu_health(plan: Plan, state: JobState, snap: Snapshot, now_text: str) -> None:
    """A GPU lost under a running job: say so on the job (it may be unable to finish)."""
    sick = [g for g in snap.gpus if g.index in state.devices and not g.healthy]
    if sick:
        if find_condition(state.conditions, "GPUUnhealthy") is None:
            text = "; ".join(f"GPU {g.index}: {g.error or 'unhealthy'}" for g in sick)
            plan.events.append(Event("Warning", "GPUUnhealthy", state.name, f"a GPU of this running job failed: {text}"))
        state.conditions = set_condition(
            state.conditions, "GPUUnhealthy", "True", "GPULost",
            "; ".join(f"GPU {g.index}: {g.error or 'unhealthy'}" for g in sick), now_text,
        )
    else:
        state.conditions = remove_condition(state.conditions, "GPUUnhealthy")


def _request_stop(plan: Plan, state: JobState, run: RunObservation, reason: str, why: str, grace: float, now_text: str) -> None:
    state.phase = "Running"
    state.conditions = set_condition(state.conditions, "Terminating", "True", reason, why, now_text)
    state.reason = "Terminating"
    target = f"pid {run.pid}" if run.pid else "the job"
    state.message = f"stopping: {why}; TERM sent to {target}, KILL after {format_duration(grace)}"
    plan.stops.append(Stop(state.name, reason, grace))


def hold_start(plan: Plan, run: RunObservation) -> None:
    """A start this plan decided was held back by the runtime (``run.held``: its launch could not be
    recorded): the job was never launched, so it shows Pending with the runtime's reason, never
    Running, and the event says why instead of "Started". Called by the controller after acting."""
    state = plan.states[run.name]
    state.phase, state.reason, state.message = "Pending", run.queued, run.message
    state.start_time = state.pid = None
    plan.events = [e for e in plan.events if not (e.object == run.name and e.reason == "Started")]
    plan.events.append(Event("Warning", run.queued, run.name, run.message))


def _finished_and_current(old: JobState | None, job: AdmittedJob) -> bool:
    """A finished job whose record already says everything the admitted path below would set
    (same spec, manifest, labels, admitted, nothing to re-run): processing it changes nothing.
    This spares a restart from copying 10,000 finished records when it has no previous pass."""
    if old is None or old.phase not in TERMINAL_PHASES:
        return False
    spec = job.spec
    if (
        old.spec_hash != job.spec_hash
        or old.run_hash != job.run_hash
        or old.manifest != job.source
        or old.owner != job.owner
        or old.priority != spec.priority
        or old.gpus != spec.resources.gpus
        or old.labels != job.job.metadata.labels
        or (old.phase == "Cancelled" and old.reason == "UserCancelled" and not spec.cancelled)
    ):
        return False
    admitted = [c for c in old.conditions if c["type"] in ("Admitted", "DuplicateName")]
    return len(admitted) == 1 and (admitted[0]["status"], admitted[0]["reason"], admitted[0]["message"]) == (
        "True", "Valid", "manifest is valid",
    )


def _already_recorded(old: JobState | None, run: RunObservation) -> bool:
    """An ended attempt whose end the status file already holds (``endedAttempt``)."""
    return old is not None and not run.running and 0 < run.attempt <= old.ended_attempt


def _record_exit(state: JobState, run: RunObservation, stop: dict[str, str] | None, backoff_limit: int) -> None:
    """Turn an ended attempt into a phase. ``stop``: our Terminating condition, if we stopped it."""
    stop_reason = stop["reason"] if stop else None
    state.ended_attempt = max(state.ended_attempt, run.attempt)
    state.conditions = remove_condition(state.conditions, "Terminating")
    state.conditions = remove_condition(state.conditions, "SpecOutdated")
    state.exit_code = run.exit_code
    state.completion_time = run.finished_at
    if state.start_time is None and stop_reason is None:  # a cluster ran it between two passes that saw it queued
        state.start_time = run.started_at
    how = _exit_text(run)
    if stop_reason == "Suspended":
        state.phase, state.reason, state.message = "Pending", "Suspended", f"suspended; attempt {run.attempt} stopped ({how})"
        state.completion_time = None
        return
    if stop_reason == "UserCancelled":
        state.phase, state.reason, state.message = "Cancelled", "UserCancelled", f"cancelled; attempt {run.attempt} stopped ({how})"
        return
    if stop_reason == "Preempted":  # not the job's failure: not counted against its backoffLimit
        state.phase, state.reason = "Pending", "Preempted"
        state.message = f"{stop['message'] if stop else 'preempted'}; attempt {run.attempt} stopped ({how})"
        since = stop.get("lastTransitionTime", "") if stop else ""
        state.conditions = set_condition(state.conditions, "Preempted", "True", "Preempted", state.message, since)
        state.completion_time = None
        return
    if stop_reason == "DeadlineExceeded" or (stop_reason is None and run.reason == "DeadlineExceeded"):
        state.phase, state.reason = "Failed", "DeadlineExceeded"
        state.message = f"attempt {run.attempt} exceeded its time limit and was stopped ({how})"
        return
    if stop_reason == "GPUMemoryExceeded":
        state.phase, state.reason = "Failed", "GPUMemoryExceeded"
        state.message = f"attempt {run.attempt} stopped: {stop['message'] if stop else 'over its gpuMemory'} ({how})"
        return
    if stop_reason == "Deleted":
        state.phase, state.reason, state.message = "Cancelled", "Deleted", f"manifest deleted; stopped ({how})"
        return
    if run.lost:
        state.phase, state.reason, state.message = "Failed", "Lost", f"attempt {run.attempt}: {run.error}"
        return
    if run.exit_code == 0 and not run.error:
        state.phase, state.reason, state.message = "Succeeded", "Completed", f"attempt {run.attempt} exited with code 0"
        return
    state.failed += 1
    spec_limit = backoff_limit
    if run.reason == "OOMKilled":
        how = f"OOMKilled: the job's processes used more than its memory limit ({how})"
    if state.failed <= spec_limit:
        delay = backoff_delay(state.failed)
        state.phase, state.reason = "Pending", "BackOff"
        state.next_attempt_time = (run.finished_at or run.started_at) + delay
        state.message = f"attempt {run.attempt} failed ({how}); retry {state.failed} of {spec_limit} in {format_duration(delay)}"
        state.completion_time = None
        return
    state.phase = "Failed"
    if run.reason == "OOMKilled":
        state.reason = "OOMKilled"
        state.message = how + (f"; all {spec_limit} retries used" if spec_limit else "")
    elif spec_limit > 0:
        state.reason = "BackoffLimitExceeded"
        state.message = f"attempt {run.attempt} failed ({how}); all {spec_limit} retries used"
    else:
        state.reason = "Error"
        state.message = f"{how}"


def _exit_text(run: RunObservation) -> str:
    if run.error:
        return run.error
    if run.signal:
        return f"killed by {signal_name(run.signal)} (exit code {run.exit_code})"
    return f"exited with code {run.exit_code}"


def _reset_for_rerun(plan: Plan, state: JobState, why: str) -> None:
    plan.events.append(Event("Normal", "Rerun", state.name, why))
    state.phase, state.reason, state.message = "Pending", "Rerun", why
    state.failed = 0  # attempts keep counting across generations, so every attempt's log is kept
    state.exit_code = None
    state.start_time = state.completion_time = state.next_attempt_time = None
    state.pid = None


def _schedule_pending(
    plan: Plan, snap: Snapshot, pending: list[tuple[JobState, AdmittedJob]], now: float, now_text: str, looked_at: set[str]
) -> None:
    policy = snap.policy
    quotas = quota_table(policy) if policy.user_quotas or policy.label_quotas else {}
    holders = []
    for name in sorted(looked_at):  # records carried over unseen are settled: none holds a GPU
        st = plan.states.get(name)
        alive = st is not None and (st.phase == "Running" or (name in snap.runs and snap.runs[name].running))
        if alive and st.devices:  # a held launch (Pending) keeps the GPUs it was bound to
            job = snap.admission.jobs.get(name)
            shared = job is not None and job.spec.sharing == "Shared"
            mem = (job.spec.resources.gpu_memory or 0) if job is not None else 0
            limit = job.spec.time_limit if job is not None else None
            ends_at = st.start_time + limit if limit is not None and st.start_time is not None else math.inf
            holders.append(Holder(name, tuple(st.devices), shared, mem, ends_at))
            if quotas and job is not None:
                charge(quotas, _quota_keys(job, policy), len(st.devices))
    managed = set().union(*snap.job_pids.values()) if snap.job_pids else set()
    slots = build_slots(snap.gpus, holders, snap.allowed_gpus, managed, snap.unmanaged_threshold, snap.ignore_processes)
    plan.slots = slots
    # -- policy: queue order (controller/policy.py) ----------------------------------------------
    usage: dict[int, float] = {}
    if policy.fair_share_half_life and len({job.owner_uid for _, job in pending}) > 1:
        usage = _fair_share_usage(plan, snap, now)
    for state, job in pending:
        state.effective_priority = effective_priority(job.spec.priority, now - state.created, policy)
    pending.sort(key=lambda sj: (
        *queue_key(sj[1].spec.priority, now - sj[0].created, usage.get(sj[1].owner_uid, 0.0), policy),
        sj[0].created, natural_key(sj[0].name),
    ))
    if policy.aging_interval and pending:  # effective priorities step up on their own
        plan.wake(now + policy.aging_interval)
    ready: list[tuple[JobState, AdmittedJob]] = []
    # parents' records, newest first; a ChainMap spares copying every record when few jobs wait
    all_states = ChainMap({s.name: s for s, _ in pending}, plan.states, snap.states)
    # sweeps with a parallelism cap: how many more children may start this pass
    budgets: dict[str, int] = {}
    for sweep_name, sweep in snap.admission.sweeps.items():
        if sweep.parallelism is not None:
            running = sum(
                1 for c in sweep.children
                if c in plan.states and (plan.states[c].phase == "Running" or (c in snap.runs and snap.runs[c].running))
            )  # a child queued in a cluster (Pending there) counts: it was handed over
            budgets[sweep_name] = sweep.parallelism - running
    for state, job in pending:
        spec = job.spec
        state.queue_position = None
        if spec.suspend:
            state.reason, state.message = "Suspended", "suspended (spec.suspend: true); set it to false or run gflowctl resume"
            continue
        if state.next_attempt_time is not None and now < state.next_attempt_time:
            state.reason = "BackOff"
            plan.wake(state.next_attempt_time)
            continue
        not_before = start_after_time(spec.start_after, state.created)
        if not_before is not None and now < not_before:
            state.reason = "StartAfter"
            state.message = f"starts after {rfc3339(not_before)} (in {format_duration(not_before - now)})"
            plan.wake(not_before)
            continue
        blocked = _dependency_block(state, job, all_states, now, snap.admission.sweeps)
        if blocked is not None:
            if blocked == "failed":
                plan.again = True
            continue
        if job.owner is not None and job.owner in budgets:
            if budgets[job.owner] <= 0:
                cap = snap.admission.sweeps[job.owner].parallelism
                state.reason = "Parallelism"
                state.message = f"sweep {job.owner} runs at most {cap} children at once; {cap} are running or starting"
                continue
            budgets[job.owner] -= 1
        ready.append((state, job))

    requests = [
        Request(
            job.name,
            job.spec.resources.gpus,
            job.spec.resources.gpu_type,
            job.spec.resources.gpu_memory,
            job.spec.sharing == "Shared",
            job.spec.time_limit,
            _quota_keys(job, policy) if quotas else (),
        )
        for _, job in ready
    ]
    if snap.bind_gpus:
        decisions = schedule(requests, slots, snap.strategy, snap.topology, mode=policy.mode, now=now, quotas=quotas)
        if policy.preemption_threshold is not None:
            _preempt(plan, snap, ready, requests, decisions, now_text)
    else:  # the cluster queues and places jobs; its reasons come back through the runtime
        decisions = {r.name: Binding([], []) for r in requests}
    started: set[str] = set()
    position = 0
    for state, job in ready:
        decision = decisions[job.name]
        if isinstance(decision, Binding) and len(plan.starts) >= snap.max_starts:
            state.reason = "Queued"
            state.message = "starts in a moment: a flood of jobs is started in batches, one per pass"
            plan.again = True
            continue
        if isinstance(decision, Binding):
            state.attempt += 1
            state.phase, state.reason = "Running", "Started"
            state.message = (
                f"bound to GPU{'s' if len(decision.devices) != 1 else ''} {','.join(map(str, decision.devices))}"
                if decision.devices else "started (CPU job)" if snap.bind_gpus else "submitted to the cluster"
            )
            state.devices, state.device_uuids = list(decision.devices), list(decision.uuids)
            state.run_hash = job.run_hash
            state.start_time = now
            state.completion_time = state.next_attempt_time = None
            state.exit_code = None
            state.pid = state.backend_id = state.node = None
            state.conditions = set_condition(state.conditions, "Scheduled", "True", "Bound", state.message, now_text)
            state.conditions = remove_condition(state.conditions, "Preempted")
            plan.starts.append(Launch(job.name, state.attempt, state.generation, job, list(decision.devices), list(decision.uuids)))
            started.add(job.name)
        else:
            state.reason, state.message = decision.reason, decision.message
            if state.reason in ("Resources", "Priority") and find_condition(state.conditions, "Preempted"):
                state.reason, state.message = "Preempted", f"preempted earlier, waiting to run again: {decision.message}"
            position += 1
            state.queue_position = position
    # a dependent's message names its parent's phase: one more pass shows "Running", not "Pending"
    if started and any(st.reason == "Dependency" for st, _ in pending):
        plan.again = True


def _preempt(
    plan: Plan, snap: Snapshot, ready: list[tuple[JobState, AdmittedJob]], requests: list[Request],
    decisions: dict, now_text: str,
) -> None:
    """Optional preemption: the first job that waits for GPUs may stop running jobs at least
    ``preemptionThreshold`` below its priority (they return to Pending/Preempted; the stopped
    attempt does not count against their backoffLimit)."""
    threshold = snap.policy.preemption_threshold or 0
    for (state, job), request in zip(ready, requests):
        decision = decisions[job.name]
        if not isinstance(decision, Wait):
            continue
        if decision.reason not in ("Resources", "Priority"):
            continue
        running = []
        for name, st in plan.states.items():
            other = snap.admission.jobs.get(name)
            if st.phase != "Running" or not st.devices or other is None or name not in snap.runs:
                continue
            if find_condition(st.conditions, "Terminating") is not None:
                return  # a stop is already under way (maybe ours): let it land before choosing more
            running.append(Running(name, other.spec.priority, tuple(st.devices), st.start_time or 0.0))
        victims = preemption_victims(request, job.spec.priority, plan.slots, running, threshold)
        for victim in victims:
            st, other = plan.states[victim], snap.admission.jobs[victim]
            grace = other.spec.termination_grace_period
            why = f"preempted by job {job.name} (priority {job.spec.priority} vs {other.spec.priority}); returns to Pending"
            _request_stop(plan, st, snap.runs[victim], "Preempted", why, snap.default_grace if grace is None else grace, now_text)
            plan.events.append(Event("Normal", "Preempted", victim, why))
        if victims:
            decisions[job.name] = Wait(decision.reason, f"{decision.message}; preempting {', '.join(victims)}")
        return  # only the first waiting job preempts


def _quota_keys(job: AdmittedJob, policy: Policy) -> tuple[str, ...]:
    return quota_keys(user_name(job.owner_uid), job.job.metadata.labels, policy)


def _fair_share_usage(plan: Plan, snap: Snapshot, now: float) -> dict[int, float]:
    """Decayed GPU-seconds per manifest owner (uid), from the latest attempt of every job the
    controller still has a record of: no separate ledger to keep crash-safe."""
    half_life = snap.policy.fair_share_half_life or 1.0
    usage: dict[int, float] = {}
    for name, st in plan.states.items():
        if st.start_time is None or not st.devices:
            continue
        end = now if st.phase == "Running" else st.completion_time
        job = snap.admission.jobs.get(name)
        if end is None or job is None or now - end > 20 * half_life:  # < 1e-6 of its weight left
            continue
        usage[job.owner_uid] = usage.get(job.owner_uid, 0.0) + decayed_gpu_seconds(len(st.devices), st.start_time, end, now, half_life)
    return usage


def _dependency_block(
    state: JobState, job: AdmittedJob, states: dict[str, JobState], now: float, sweeps: dict | None = None
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
            (dep.condition == "Succeeded" and parent_phase == "Succeeded")
            or (dep.condition == "Failed" and parent_phase == "Failed")
            or (dep.condition == "Finished" and done)
        )
        if ok:
            continue
        if done:
            state.phase, state.reason = "Cancelled", "DependencyFailed"
            state.message = f"{what} {dep.job} ended {parent_phase}; this job needed it to be {dep.condition}"
            state.completion_time = now
            state.run_hash = job.run_hash
            return "failed"
        waiting.append(f"{what} {dep.job} ({parent_phase})")
    if waiting:
        state.reason = "Dependency"
        state.message = "waits for " + ", ".join(waiting)
        return "waiting"
    return None


def _finish(plan: Plan, old: JobState | None, state: JobState) -> None:
    plan.states[state.name] = state
    if old is None or (old.phase, old.reason) != (state.phase, state.reason):
        warning = state.phase in ("Failed", "Rejected") or state.reason in WARNING_REASONS
        plan.events.append(Event("Warning" if warning else "Normal", state.reason or state.phase, state.name, state.message))
