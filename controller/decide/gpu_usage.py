"""What a running job does with its GPUs, judged: the conditions ``GPUsUnused``, ``GPUIdle`` and
``GPUMemoryNearLimit`` (each a Warning event when it appears, removed when it stops being true),
the ``idleTimeout`` warning and stop, and the status's ``gpuUsage`` summary.

Pure: everything comes from the snapshot's sampled usage (``model.usage.AttemptUsage``, sampled by
``observe.gpu_usage``), the record and ``now``. Only observed time counts: before an attempt's first
sample nothing is known, so nothing is claimed (after a gflowd restart without its usage file the
windows start again). A job without GPUs has no GPU findings; without a terminal (``tty``) it is
never stopped as idle either, since there is nothing to watch.
"""

from __future__ import annotations

from typing import Any

from controller.api.units import format_duration, format_quantity
from controller.model.conditions import find_condition, remove_condition, set_condition
from controller.model.documents import AdmittedJob
from controller.model.plan import Event, Notice, PlanDraft, RunObservation, Snapshot
from controller.model.reasons import Condition, EventType, StopReason
from controller.model.records import JobState, from_rfc3339
from controller.model.usage import AttemptUsage, GpuUse, summary

IDLE_WARN_AT = 0.9  # the idleTimeout warning comes at 90 % of the timeout (a 1h timeout: 6 minutes ahead)
STATUS_REFRESH = 60.0  # seconds between gpuUsage summaries in a running job's status (each one is a status write)
FINDINGS = (Condition.GPUsUnused, Condition.GPUIdle, Condition.GPUMemoryNearLimit)
UNUSED_HINT = (
    "usual causes: one process that does not use DataParallel/DistributedDataParallel (torchrun "
    "--nproc-per-node={n} starts one per GPU), or a launcher that ignores CUDA_VISIBLE_DEVICES"
)


def _gpu_list(indices: list[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ",".join(str(i) for i in indices)


def gpu_findings(
    plan: PlanDraft,
    state: JobState,
    job: AdmittedJob,
    run: RunObservation,
    snap: Snapshot,
    now: float,
    now_text: str,
) -> None:
    """Every pass of a running attempt: the usage conditions, the idle warning, the summary."""
    usage = _usage_of(snap, run)
    if usage is None or not state.devices:
        for condition in FINDINGS:
            state.conditions = remove_condition(state.conditions, condition)
    else:
        _unused(plan, state, usage, snap.usage_settings.unused_gpu_window, now, now_text)
        _idle(plan, state, usage, snap.usage_settings.idle_gpu_window, now, now_text)
        _memory_near(plan, state, job, usage, snap.usage_settings.memory_near, now_text)
        state.gpu_usage = usage_summary(state, usage, now, final=False)
    _idle_warning(plan, state, job, run, snap, now)


def _usage_of(snap: Snapshot, run: RunObservation) -> AttemptUsage | None:
    usage = snap.gpu_usage.get(run.name)
    return usage if usage is not None and usage.attempt == run.attempt and usage.samples else None


def _set_finding(
    plan: PlanDraft,
    state: JobState,
    condition: Condition,
    reason: str,
    message: str,
    event: str,
    now_text: str,
) -> None:
    if find_condition(state.conditions, condition) is None:
        plan.events.append(Event(EventType.Warning, condition, state.name, event))
    state.conditions = set_condition(state.conditions, condition, "True", reason, message, now_text)


def _quiet_since(usage: AttemptUsage, gpu: GpuUse) -> float:
    """Since when ``gpu`` has had neither a process of the job nor activity, as far as observed."""
    return max(usage.since, gpu.last_process or usage.since, gpu.last_busy or usage.since)


def _unused(plan: PlanDraft, state: JobState, usage: AttemptUsage, window: float, now: float, now_text: str) -> None:
    """GPUsUnused: some (not all: that is GPUIdle) bound GPUs without a process of the job for the window."""
    unused = []
    for gpu in usage.gpus:
        if gpu.has_process or gpu.util_last > 0:
            continue
        quiet = _quiet_since(usage, gpu)
        if now - quiet >= window:
            unused.append(gpu.index)
        else:
            plan.wake(quiet + window)
    n = len(usage.gpus)
    if not unused or len(unused) == n:
        state.conditions = remove_condition(state.conditions, Condition.GPUsUnused)
        return
    what = f"job {state.name} uses {n - len(unused)} of its {n} GPUs ({_gpu_list(unused)}: no process, 0% for {format_duration(window)})"
    hint = UNUSED_HINT.format(n=n)
    _set_finding(plan, state, Condition.GPUsUnused, "NoProcess", f"{what}; {hint}", f"{what}; {hint}", now_text)


def _idle(plan: PlanDraft, state: JobState, usage: AttemptUsage, window: float, now: float, now_text: str) -> None:
    """GPUIdle: no activity on any of the job's GPUs for the window."""
    busy_now = any(g.util_last > 0 for g in usage.gpus)
    quiet = max(usage.since, usage.last_busy or usage.since)
    if busy_now or now - quiet < window:
        if not busy_now:
            plan.wake(quiet + window)
        state.conditions = remove_condition(state.conditions, Condition.GPUIdle)
        return
    text = f"no GPU activity on {_gpu_list([g.index for g in usage.gpus])} for {format_duration(window)}"
    _set_finding(plan, state, Condition.GPUIdle, "NoActivity", text, f"job {state.name}: {text}", now_text)


def _memory_near(
    plan: PlanDraft, state: JobState, job: AdmittedJob, usage: AttemptUsage, share: float, now_text: str
) -> None:
    """GPUMemoryNearLimit: a Shared job past ``share`` of its gpuMemory on a GPU (at the limit it is stopped)."""
    budget = job.spec.resources.gpu_memory
    near = [g for g in usage.gpus if budget and g.memory_last > share * budget] if job.spec.sharing == "Shared" else []
    if not near:
        state.conditions = remove_condition(state.conditions, Condition.GPUMemoryNearLimit)
        return
    peaks = ", ".join(f"GPU {g.index} peak {format_quantity(g.memory_peak)}" for g in near)
    text = (
        f"uses over {round(share * 100)}% of its gpuMemory of {format_quantity(budget)} on {_gpu_list([g.index for g in near])} "
        f"({peaks}); at {format_quantity(budget)} it is stopped (GPUMemoryExceeded)"
    )
    _set_finding(plan, state, Condition.GPUMemoryNearLimit, "NearGPUMemory", text, f"job {state.name} {text}", now_text)


# -- idleTimeout --------------------------------------------------------------------------------------


def idle_timeout_of(job: AdmittedJob, snap: Snapshot) -> float | None:
    """The job's idleTimeout: its own, else the controller's default for tty jobs; None or 0: off."""
    spec = job.spec
    timeout = (
        spec.idle_timeout if spec.idle_timeout is not None else (snap.usage_settings.idle_timeout if spec.tty else None)
    )
    return timeout or None


def idle_since(state: JobState, job: AdmittedJob, run: RunObservation, snap: Snapshot) -> tuple[float, str] | None:
    """(since when the attempt is idle, what was watched), or None when it cannot be judged: a GPU job
    whose GPUs were never sampled (no NVML), or a job with neither GPUs nor a terminal."""
    tty = job.spec.tty
    marks = [state.start_time or run.started_at]
    watched = []
    if state.devices:
        usage = _usage_of(snap, run)
        if usage is None:
            return None
        marks += [usage.since, usage.last_busy or usage.since]
        watched.append(f"no GPU activity on {_gpu_list(list(state.devices))}")
    elif not tty:
        return None
    if tty:
        if run.last_input is not None:
            marks.append(run.last_input)
        watched.append("no terminal input")
    return max(marks), " and ".join(watched)


def idle_stop(
    state: JobState, job: AdmittedJob, run: RunObservation, snap: Snapshot, now: float
) -> tuple[str, str] | None:
    """(StopReason.IdleTimeout, why) once the attempt has been idle for its idleTimeout."""
    timeout = idle_timeout_of(job, snap)
    idle = idle_since(state, job, run, snap) if timeout else None
    if timeout is None or idle is None or now - idle[0] < timeout:
        return None
    return (
        StopReason.IdleTimeout,
        f"idle for {format_duration(now - idle[0])} ({idle[1]}), idleTimeout is {format_duration(timeout)}",
    )


def _idle_warning(
    plan: PlanDraft, state: JobState, job: AdmittedJob, run: RunObservation, snap: Snapshot, now: float
) -> None:
    """Warn once per idle spell at IDLE_WARN_AT of the timeout (an event; on a tty job's terminal too)."""
    timeout = idle_timeout_of(job, snap)
    idle = idle_since(state, job, run, snap) if timeout else None
    if timeout is None or idle is None:
        state.idle_warning = None
        return
    since, watched = idle
    if state.idle_warning is not None and state.idle_warning < since:
        state.idle_warning = None  # active again since the warning: the next idle spell is warned anew
    warn_at, stop_at = since + IDLE_WARN_AT * timeout, since + timeout
    if now < warn_at:
        plan.wake(warn_at)
        return
    plan.wake(stop_at)
    if state.idle_warning is not None:
        return
    state.idle_warning = now
    text = (
        f"idle for {format_duration(now - since)} ({watched}); it will be stopped in "
        f"{format_duration(max(0.0, stop_at - now))} (idleTimeout {format_duration(timeout)}) unless it becomes active"
    )
    plan.events.append(Event(EventType.Warning, "IdleWarning", state.name, text))
    if job.spec.tty:
        plan.notices.append(Notice(state.name, f"gflow: job {state.name} has been {text}"))


# -- the status summary -------------------------------------------------------------------------------


def usage_summary(state: JobState, usage: AttemptUsage, now: float, final: bool) -> dict[str, Any] | None:
    """The status's ``gpuUsage``: per bound GPU mean/peak utilization and memory, GPU-hours used
    (utilization-weighted) vs allocated (GPUs x time). Refreshed at most every STATUS_REFRESH
    seconds while running (a status write each time), and once more when the attempt ends."""
    previous = state.gpu_usage
    if (
        not final
        and previous
        and previous.get("attempt") == usage.attempt
        and usage.sampled_at - (from_rfc3339(previous.get("sampledAt")) or 0.0) < STATUS_REFRESH
    ):
        return previous
    end = (state.completion_time or now) if final else now
    return summary(usage, state.start_time or usage.since, end)


def final_usage(state: JobState, snap: Snapshot, run: RunObservation, now: float) -> None:
    """The attempt ended: its last summary (the sampler keeps an ended attempt until it is recorded)."""
    usage = _usage_of(snap, run)
    if usage is not None:
        state.gpu_usage = usage_summary(state, usage, now, final=True)
    state.idle_warning = None
