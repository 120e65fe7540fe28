"""The queue, each pass: pending jobs in policy order, past their gates, offered to the scheduler;
the bound ones start (as many as the pass may start), the others learn why they wait and where
they stand. Optional preemption stops lower-priority jobs for the first one that waits.

Pure; the steps are numbered as in Kueue's ``schedule()``: slots -> order -> gates -> bind ->
start or queue.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections import Counter
from collections.abc import Set as AbstractSet

from controller.api.units import format_cpu_list as format_cores
from controller.decide.gates import admissible
from controller.decide.lifecycle import Pending
from controller.decide.limits import Offer, Waiting, clamp, over_queue_limit, over_running_limits, user_class
from controller.decide.placement.counted import counted_pools
from controller.decide.policy import (
    QueueEntry,
    charge,
    decayed_gpu_seconds,
    effective_priority,
    order_queue,
    order_reasons,
    quota_keys,
    quota_table,
    user_of,
)
from controller.decide.reservations import fence_queue
from controller.decide.running import request_stop
from controller.decide.scheduler import build_slots, preemption_victims, schedule
from controller.model import lean_records as lean
from controller.model.conditions import find_condition, remove_condition, set_condition
from controller.model.documents import AdmittedJob
from controller.model.lean_records import Facts, records_where
from controller.model.plan import Event, Launch, PlanDraft, QueueMemo, Snapshot
from controller.model.policy import UserClass
from controller.model.reasons import Condition, EventType, Phase, Reason, StopReason
from controller.model.records import JobState
from controller.model.scheduling import (
    Binding,
    CorePool,
    CountPool,
    GpuSlot,
    Holder,
    QuotaUse,
    Request,
    Running,
    Wait,
)


@functools.lru_cache(maxsize=1 << 16)
def natural_key(name: str) -> tuple[int | str, ...]:
    """``job-2`` before ``job-10``: sweep children queue in index order. Kept per name: a flood's
    waiting jobs are ordered again in each of its passes (~15 a job), and the split was a third of that."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


_DIGITS = re.compile(r"(\d+)")


def schedule_pending(
    plan: PlanDraft, snap: Snapshot, pending: list[Pending], now: float, now_text: str, looked_at: set[str]
) -> None:
    policy = snap.policy
    quotas = quota_table(policy) if policy.user_quotas or policy.label_quotas else {}
    pending = _queue_limit(plan, snap, pending, now_text)  # 0. at most maxPendingJobsPerUser wait per user
    plan.slots = _slots(plan, snap, looked_at, quotas)  # 1. the GPUs, and who holds them
    plan.cores = _cores(plan, snap, looked_at)  # ... and the CPU cores
    counted = counted_pools(plan, snap, _holding(plan, snap, looked_at))  # ... and the counted kinds (shm)
    entries = _order(plan, snap, pending, now)  # 2. queue order: class, fair share, aging; priority within a user
    ready = admissible(plan, snap, pending, now)  # 3. the gates
    ready = _running_limits(plan, snap, ready, looked_at)  # ... and maxRunningJobsPerUser, maxRunningCpuJobs
    requests = [_request(job, snap, quotas) for _, job in ready]
    requests = fence_queue(requests, [job.owner_uid for _, job in ready], plan, snap, now)  # reservations
    decisions = _bind(plan, snap, ready, requests, quotas, now, now_text, counted)  # 4. bind (and preempt)
    started = _start_or_queue(plan, snap, ready, decisions, now, now_text, entries)  # 5. start or queue
    # a dependent's message names its parent's phase: one more pass shows "Running", not "Pending"
    if started and any(st.reason == Reason.Dependency for st, _ in pending):
        plan.again = True


# -- the queue's memo: waiting jobs whose inputs did not change are not decided again -------------------


def queue_inputs(snap: Snapshot) -> tuple[object, ...]:
    """The snapshot's settings the queue reads besides records and documents."""
    return (
        snap.policy,
        tuple(snap.gpus),
        snap.allowed_gpus,
        snap.strategy,
        snap.topology,
        snap.unmanaged_threshold,
        snap.ignore_processes,
        snap.bind_gpus,
        snap.host,
    )


def carried_waiting(snap: Snapshot, names: set[str], now: float) -> set[str]:
    """The waiting jobs the last pass's queue decided, when none of them can have moved by itself:
    each still has that very record, the very manifest document, no process; no time gate has
    opened; the settings are the same. Empty when any of that fails (the whole queue is decided
    again). What other jobs did is checked by :func:`queue_memo_holds` once they are decided.
    Set operations and identity tests only: 10,000 waiting jobs cost ~2 ms here."""
    memo = snap.queue_memo
    if memo is None or memo.tail or (memo.wake_at is not None and now >= memo.wake_at):
        return set()
    return set(memo.records) if _memo_unchanged(snap, names) else set()


def _memo_unchanged(snap: Snapshot, names: set[str]) -> bool:
    """Each job of the queue memo's records still has that very record and manifest document, no
    process, no second file; the settings and Sweeps are the same; no reservation (their windows
    open and close with the clock)."""
    memo, prev, adm = snap.queue_memo, snap.previous, snap.admitted
    if memo is None or prev is None or adm.reservations or prev.reservations:
        return False
    records = memo.records
    if memo.inputs != queue_inputs(snap) or not names.issuperset(records):
        return False
    if not snap.runs.keys().isdisjoint(records):
        return False
    if not adm.duplicates.keys().isdisjoint(records) or not prev.duplicates.keys().isdisjoint(records):
        return False  # a second file names it, or no longer does: its DuplicateName condition moves
    if not all(map(operator.is_, map(snap.states.get, records), records.values())):
        return False
    if adm is not prev:  # the manifest documents: the very objects the last pass saw
        if adm.sweeps.keys() != prev.sweeps.keys() or any(s is not prev.sweeps[n] for n, s in adm.sweeps.items()):
            return False  # a Sweep's parallelism gates its children
        if adm.base == prev.serial:
            if not adm.touched.isdisjoint(records):
                return False
        elif not all(adm.jobs.get(name) is prev.jobs.get(name) for name in records):
            return False
    return True


def queue_memo_holds(plan: PlanDraft, snap: Snapshot, pending: list[Pending], decided: set[str]) -> bool:
    """After the other jobs were decided: no new job waits, none of them changed its phase, reason
    or GPUs (a dependency's parent, a sweep's child, a holder), and the GPUs are as they were."""
    memo = snap.queue_memo
    if pending or memo is None:
        return False
    new, old = plan.states, snap.states
    for name in decided:
        now_, before = new.get(name), old.get(name)
        if (now_ is None) != (before is None):
            return False
        if (
            now_ is not before
            and now_ is not None
            and before is not None
            and (now_.phase, now_.reason, now_.devices, now_.cores)
            != (before.phase, before.reason, before.devices, before.cores)
        ):
            return False
    quotas = quota_table(snap.policy) if snap.policy.user_quotas or snap.policy.label_quotas else {}
    return _slots(plan, snap, decided, quotas) == memo.slots


def remember_queue(
    plan: PlanDraft,
    snap: Snapshot,
    pending: list[Pending],
    wake_at: float | None,
    now: float,
    carried: AbstractSet[str] = frozenset(),
) -> QueueMemo | None:
    """The memo the next pass may carry the waiting jobs over with; None when their records depend
    on more than the inputs it checks: something started or is about to, messages that count down
    (startAfter, a backfill hint against a running job's timeLimit), fair share that decays,
    reservations (their windows move with the clock)."""
    if not pending and not carried:
        return None
    if plan.starts or plan.again or snap.policy.fair_share_half_life or plan.reservations or carried:
        return _remember_tail(plan, snap, pending, carried, now)
    records = {}
    for state, _ in pending:
        record = plan.states.get(state.name)
        if record is None or record.phase != Phase.Pending or record.reason == Reason.StartAfter:
            return None
        records[record.name] = record
    if any(slot.jobs and slot.free_at != math.inf for slot in plan.slots):
        return None  # a backfill hint's "timeLimit of at most X" counts down
    if plan.cores is not None and any(end != math.inf for end in plan.cores.free_at.values()):
        return None  # the same for cores held by a job with a timeLimit
    return QueueMemo(records, plan.slots, queue_inputs(snap), wake_at)


# -- a flood's tail: the jobs only maxRunningCpuJobs holds back are not decided again each pass --------
#
# A flood of CPU jobs waits mostly as JobLimit, and every pass that starts a few of them used to step,
# copy, order and gate every waiting job again (~15 passes a job at 1,000 jobs, ~150 at 10,000). The
# tail memo keeps those jobs' queue entries in queue order; the next pass decides the first
# ``free + 1`` of them with every other changed job, and carries the rest over when the last one
# decided (the witness) comes out exactly as before. That is exact: within a user one effective
# priority (so a user's priority permutes nothing) and no fair share across users make each job's
# place a function of its own entry, so the carried jobs stand after the witness in the whole queue
# too; the witness waited with ``maxRunningCpuJobs`` full, and CPU jobs behind a full limit start
# nothing and change no count, so each carried job would wait with the very same record. Anything
# else (a user's priorities differ, a second user under fair share, maxPendingJobsPerUser reached,
# the witness moved) raises TailMoved, and the pass is decided whole.


class TailMoved(Exception):
    """The carried tail would not all wait as before: decide the pass without the memo."""


def _tail_policy(snap: Snapshot) -> bool:
    policy = snap.policy
    return policy.max_running_cpu_jobs is not None and policy.max_running_per_user is None and not policy.classes


def carried_tail(snap: Snapshot, names: set[str], now: float) -> tuple[set[str], str | None]:
    """The flood's tail this pass carries over, and the witness decided in its stead (see above);
    (empty, None) when the memo is none or anything it depends on moved."""
    memo = snap.queue_memo
    if memo is None or not memo.tail or now >= memo.tail_until or not _tail_policy(snap):
        return set(), None
    if not _memo_unchanged(snap, names):
        return set(), None
    jobs, cap = snap.admitted.jobs, snap.policy.max_running_cpu_jobs or 0
    live = sum(
        1 for name, run in snap.runs.items() if run.running and (job := jobs.get(name)) and not job.spec.resources.gpus
    )
    decided = max(0, cap - live) + 1  # at least as many as may start, and the witness
    if decided >= len(memo.tail):
        return set(), None
    return {entry.name for entry in memo.tail[decided:]}, memo.tail[decided - 1].name


def check_tail(
    plan: PlanDraft, snap: Snapshot, pending: list[Pending], carried: AbstractSet[str], witness: str
) -> None:
    """After the queue: the witness waits with its very record, and the pass's other waiting jobs
    stand where they would beside the tail; else TailMoved."""
    old, new = snap.states.get(witness), plan.states.get(witness)
    if old is None or new is None or new != old:
        raise TailMoved(witness)
    plan.states[witness] = old  # the very object: the status writer passes it by identity
    memo = snap.queue_memo
    assert memo is not None
    policy, priorities = snap.policy, memo.tail_priority
    counts = Counter(job.owner_uid for _, job in pending)
    for state, job in pending:
        want = priorities.get(job.owner_uid)
        if want is not None and state.effective_priority is not None and state.effective_priority != want:
            raise TailMoved(state.name)  # a user's jobs of two priorities: the user's order permutes
    if policy.fair_share_half_life and len(counts.keys() | priorities.keys()) > 1:
        raise TailMoved(witness)  # fair share orders users by their usage
    if policy.max_pending_per_user is not None:
        counts.update(entry.owner for entry in memo.tail if entry.name in carried)
        if any(n > policy.max_pending_per_user for n in counts.values()):
            raise TailMoved(witness)  # the queue limit counts the carried jobs too


def _remember_tail(
    plan: PlanDraft, snap: Snapshot, pending: list[Pending], carried: AbstractSet[str], now: float
) -> QueueMemo | None:
    """The tail memo: the waiting jobs held back only by maxRunningCpuJobs, every one plain (a CPU
    job with no dependency, startAfter or Sweep), with one record message, in queue order."""
    policy = snap.policy
    if not _tail_policy(snap) or plan.reservations or snap.admitted.reservations:
        return None
    memo = snap.queue_memo
    entries = [entry for entry in memo.tail if entry.name in carried] if memo is not None and carried else []
    names = snap.host.user_names
    classes: dict[int, UserClass] = {}
    for state, job in pending:
        record = plan.states.get(state.name)
        if record is None or record.phase != Phase.Pending or record.reason != Reason.JobLimit:
            continue
        spec = job.spec
        if spec.resources.gpus or spec.depends_on or spec.start_after or job.owner is not None:
            return None
        uid = job.owner_uid
        if uid not in classes:
            classes[uid] = user_class(policy, user_of(uid, names), uid)
        entries.append(_entry(state, job, classes[uid], 0.0))
    if len(entries) < 2:
        return None
    records = {entry.name: plan.states[entry.name] for entry in entries}
    message = records[entries[0].name].message
    priorities: dict[int, int] = {}
    until = math.inf
    for entry in entries:
        record = records[entry.name]
        if record.message != message or record.effective_priority is None:
            return None
        if priorities.setdefault(entry.owner, record.effective_priority) != record.effective_priority:
            return None  # two priorities in one user's tail
        if policy.aging_interval:
            waited = now - entry.created
            if waited >= policy.aging_max * policy.aging_interval:
                return None  # aged to the cap: ordered by how long it waited, which moves
            until = min(until, entry.created + (waited // policy.aging_interval + 1) * policy.aging_interval)
    if policy.fair_share_half_life and len(priorities) > 1:
        return None
    carried_only = memo is not None and len(entries) == len(carried)  # the last order, less the decided ones
    ordered = tuple(entries) if carried_only else tuple(order_queue(entries, policy, now))
    return QueueMemo(records, plan.slots, queue_inputs(snap), None, ordered, until, priorities)


def _slots(plan: PlanDraft, snap: Snapshot, looked_at: set[str], quotas: dict[str, QuotaUse]) -> list[GpuSlot]:
    holders = []
    for name in _holding(plan, snap, looked_at):  # records carried over unseen are settled: none holds a GPU
        st = plan.states[name]
        if st.devices:  # a held launch (Pending) keeps the GPUs it was bound to
            job = snap.admitted.jobs.get(name)
            shared = job is not None and job.spec.sharing == "Shared"
            mem = (job.spec.resources.gpu_memory or 0) if job is not None else 0
            limit = job.spec.time_limit if job is not None else None
            ends_at = st.start_time + limit if limit is not None and st.start_time is not None else math.inf
            holders.append(Holder(name, tuple(st.devices), shared, mem, ends_at))
            if quotas and job is not None:
                charge(quotas, _quota_keys(job, snap), len(st.devices))
    managed = set().union(*snap.job_pids.values()) if snap.job_pids else set()
    return build_slots(
        snap.gpus,
        holders,
        snap.allowed_gpus,
        managed,
        snap.unmanaged_threshold,
        snap.ignore_processes,
        snap.job_pids,
        snap.cordoned,
    )


def _holding(plan: PlanDraft, snap: Snapshot, looked_at: set[str]) -> list[str]:
    """The jobs of ``looked_at`` that may hold GPUs or cores (running, or with a live process),
    sorted; found without sorting the 50,000 finished ones a start looks at."""
    states, runs = plan.states, snap.runs
    return sorted(
        name
        for name in looked_at
        if (st := states.get(name)) is not None and (st.phase == Phase.Running or (name in runs and runs[name].running))
    )


def _cores(plan: PlanDraft, snap: Snapshot, looked_at: set[str]) -> CorePool | None:
    """The machine's cores and the running jobs pinned to them; None where cores are not booked
    (unknown, or a cluster backend, whose own scheduler books them)."""
    if not snap.host.cores or not snap.bind_gpus:
        return None
    pool = CorePool(snap.host.cores)
    for name in _holding(plan, snap, looked_at):
        st = plan.states[name]
        if not st.cores:
            continue
        job = snap.admitted.jobs.get(name)
        limit = job.spec.time_limit if job is not None else None
        ends_at = st.start_time + limit if limit is not None and st.start_time is not None else math.inf
        for core in st.cores:
            pool.taken[core] = name
            pool.free_at[core] = ends_at
    return pool


def _order(plan: PlanDraft, snap: Snapshot, pending: list[Pending], now: float) -> dict[str, QueueEntry]:
    """Sort ``pending`` in queue order (``controller.decide.policy.order_queue``); the entries by name."""
    policy = snap.policy
    usage: dict[int, float] = {}
    if policy.fair_share_half_life and len({job.owner_uid for _, job in pending}) > 1:
        usage = _fair_share_usage(plan, snap, now)
    names = snap.host.user_names
    classes = {uid: user_class(policy, user_of(uid, names), uid) for uid in {job.owner_uid for _, job in pending}}
    entries = {}
    for state, job in pending:
        state.effective_priority = effective_priority(job.spec.priority, now - state.created, policy)
        entries[state.name] = _entry(state, job, classes[job.owner_uid], usage.get(job.owner_uid, 0.0))
    rank = {e.name: i for i, e in enumerate(order_queue(list(entries.values()), policy, now))}
    pending.sort(key=lambda sj: rank[sj[0].name])
    if policy.aging_interval and pending:  # effective priorities step up on their own
        plan.wake(now + policy.aging_interval)
    return entries


def _entry(state: JobState, job: AdmittedJob, cls: UserClass, usage: float) -> QueueEntry:
    priority = job.spec.priority
    return QueueEntry(
        state.name,
        job.owner_uid,
        priority,
        state.created,
        usage,
        cls.rank,
        clamp(priority, cls),
        cls.name,
        natural_key(state.name),
    )


def _queue_limit(plan: PlanDraft, snap: Snapshot, pending: list[Pending], now_text: str) -> list[Pending]:
    """Jobs that arrive beyond their user's ``maxPendingJobsPerUser`` are Rejected/QueueLimit (a
    Sweep's child waits instead, offered to no one); the others go on to the queue."""
    policy = snap.policy
    if policy.max_pending_per_user is None and not any(c.max_pending is not None for c in policy.classes):
        return pending
    names, olds = snap.host.user_names, snap.states
    counts = Counter(job.owner_uid for _, job in pending)
    crowded = {uid for uid, n in counts.items() if n > (policy.max_pending_per_user or 0) or policy.classes}
    if not crowded:
        return pending  # the common case costs one count per waiting job
    waiting = []
    for state, job in pending:
        if job.owner_uid not in crowded:
            continue
        old = olds.get(state.name)
        # in the queue already, or back from a run (a retry, a preempted or suspended job): never refused
        established = (
            old is not None and old.phase in (Phase.Pending, Phase.Running) and old.reason != Reason.QueueLimit
        )
        waiting.append(
            Waiting(
                state.name,
                user_of(job.owner_uid, names),
                job.owner_uid,
                state.created,
                established,
                natural_key(state.name),
            )
        )
    over = over_queue_limit(waiting, policy)
    if not over:
        return pending
    kept = []
    refused: dict[int, list[str]] = {}  # owner uid -> the jobs refused this pass: one event per user, not per job
    for state, job in pending:
        why = over.get(state.name)
        if why is None:
            kept.append((state, job))
            continue
        state.queue_position = None
        if state.owner is not None:  # a Sweep's child waits, and joins the queue when fewer of the user's wait
            state.reason, state.message = (
                Reason.QueueLimit,
                why.split(";")[0] + "; it joins the queue when fewer of them wait",
            )
            continue
        if not (old := olds.get(state.name)) or old.reason != Reason.QueueLimit:
            refused.setdefault(job.owner_uid, []).append(state.name)
        state.reason, state.message = Reason.QueueLimit, why  # refused, as gflow's max_queued_jobs refuses a submit
        state.phase = Phase.Rejected
        state.conditions = set_condition(
            state.conditions, Condition.Admitted, "False", Reason.QueueLimit, why, now_text
        )
    for refused_names in refused.values():
        first = refused_names[0]
        more = f" and {len(refused_names) - 1} more (last {refused_names[-1]})" if len(refused_names) > 1 else ""
        plan.events.append(Event(EventType.Warning, Reason.QueueLimit, first, f"{first}{more}: {over[first]}"))
    return kept


def _running_limits(plan: PlanDraft, snap: Snapshot, ready: list[Pending], looked_at: set[str]) -> list[Pending]:
    """The ready jobs (in queue order) beyond ``maxRunningJobsPerUser`` or ``maxRunningCpuJobs``
    wait, reason JobLimit; the others are offered to the scheduler."""
    policy = snap.policy
    per_user = policy.max_running_per_user is not None or any(c.max_running is not None for c in policy.classes)
    if not ready or (not per_user and policy.max_running_cpu_jobs is None):
        return ready
    names, jobs = snap.host.user_names, snap.admitted.jobs
    by_user: Counter[tuple[str, int]] = Counter()
    cpu = 0
    for name in _holding(plan, snap, looked_at):
        job = jobs.get(name)
        if job is None:
            continue
        by_user[(user_of(job.owner_uid, names), job.owner_uid)] += 1
        cpu += job.spec.resources.gpus == 0
    offers = [
        Offer(state.name, user_of(job.owner_uid, names), job.owner_uid, job.spec.resources.gpus == 0)
        for state, job in ready
    ]
    over = over_running_limits(offers, by_user, cpu, policy)
    if not over:
        return ready
    for state, _job in ready:
        if state.name in over:
            state.reason, state.message = Reason.JobLimit, over[state.name]
            state.conditions = remove_condition(state.conditions, Condition.QueueOrder)
    return [(state, job) for state, job in ready if state.name not in over]


def _request(job: AdmittedJob, snap: Snapshot, quotas: dict[str, QuotaUse]) -> Request:
    return request_of(job, _quota_keys(job, snap) if quotas else ())


def request_of(job: AdmittedJob, quota_keys: tuple[str, ...] = ()) -> Request:
    """What the scheduler needs to know of a job: its shape and time limit."""
    resources = job.spec.resources
    return Request(
        job.name,
        resources.gpus,
        resources.gpu_type,
        resources.gpu_memory,
        job.spec.sharing == "Shared",
        job.spec.time_limit,
        quota_keys,
        resources.cpus or 0,
        amounts=resources.counted(),
    )


def _bind(
    plan: PlanDraft,
    snap: Snapshot,
    ready: list[Pending],
    requests: list[Request],
    quotas: dict[str, QuotaUse],
    now: float,
    now_text: str,
    counted: dict[str, CountPool],
) -> dict[str, Binding | Wait]:
    if not snap.bind_gpus:  # the cluster queues and places jobs; its reasons come back through the runtime
        return {r.name: Binding([], []) for r in requests}
    decisions = schedule(
        requests,
        plan.slots,
        snap.strategy,
        snap.topology,
        mode=snap.policy.mode,
        now=now,
        quotas=quotas,
        cores=plan.cores,
        counted=counted,
    )
    if snap.policy.preemption_threshold is not None:
        _preempt(plan, snap, ready, requests, decisions, now_text)
    return decisions


def _start_or_queue(
    plan: PlanDraft,
    snap: Snapshot,
    ready: list[Pending],
    decisions: dict[str, Binding | Wait],
    now: float,
    now_text: str,
    entries: dict[str, QueueEntry],
) -> bool:
    """Bound jobs start (up to ``max_starts``); the others wait, numbered, with the QueueOrder
    condition saying why they stand where they do. True if any started."""
    started = False
    position = 0
    waiting = [entries[job.name] for state, job in ready if not isinstance(decisions[job.name], Binding)]
    why = order_reasons(waiting)
    for state, job in ready:
        decision = decisions[job.name]
        if isinstance(decision, Binding) and len(plan.starts) >= snap.max_starts:
            state.reason = Reason.Queued
            state.message = "starts in a moment: a flood of jobs is started in batches, one per pass"
            plan.again = True
        elif isinstance(decision, Binding):
            _start(plan, snap, state, job, decision, now, now_text)
            started = True
        else:
            state.reason, state.message = decision.reason, decision.message
            if state.reason in (Reason.Resources, Reason.Priority) and find_condition(
                state.conditions, Condition.Preempted
            ):
                state.reason, state.message = (
                    Reason.Preempted,
                    f"preempted earlier, waiting to run again: {decision.message}",
                )
            position += 1
            state.queue_position = position
            if job.name in why:
                state.conditions = set_condition(
                    state.conditions, Condition.QueueOrder, "True", "Ordered", why[job.name], now_text
                )
            else:
                state.conditions = remove_condition(state.conditions, Condition.QueueOrder)
    return started


def _start(
    plan: PlanDraft, snap: Snapshot, state: JobState, job: AdmittedJob, decision: Binding, now: float, now_text: str
) -> None:
    if not (state.phase == Phase.Pending and state.reason == Reason.DiskFull):
        state.attempt += 1  # not for an attempt held by a full disk before a restart: it never began
    state.phase, state.reason = Phase.Running, Reason.Started
    state.message = (
        f"bound to GPU{'s' if len(decision.devices) != 1 else ''} {','.join(map(str, decision.devices))}"
        if decision.devices
        else "started (CPU job)"
        if snap.bind_gpus
        else "submitted to the cluster"
    )
    state.devices, state.device_uuids = list(decision.devices), list(decision.uuids)
    state.cores = list(decision.cpus)
    if decision.cpus:
        state.message += f", cores {format_cores(decision.cpus)}"
    state.run_hash = job.run_hash
    state.start_time = now
    state.completion_time = state.next_attempt_time = None
    state.exit_code = None
    state.pid = state.backend_id = state.node = None
    state.conditions = set_condition(state.conditions, Condition.Scheduled, "True", "Bound", state.message, now_text)
    state.conditions = remove_condition(state.conditions, Condition.Preempted)
    state.conditions = remove_condition(state.conditions, Condition.QueueOrder)
    minors = {slot.index: slot.gpu.device_minor for slot in plan.slots if slot.gpu.vendor == "nvidia"}
    amd = {slot.index: slot.gpu for slot in plan.slots if slot.gpu.vendor == "amd"}
    bound_amd = [amd[d] for d in decision.devices if d in amd]
    units = {slot.index: slot.gpu for slot in plan.slots}
    bound = [units[d] for d in decision.devices if d in units]
    plan.starts.append(
        Launch(
            job.name,
            state.attempt,
            state.generation,
            job,
            list(decision.devices),
            list(decision.uuids),
            tuple(decision.cpus),
            tuple(minors.get(d, d) for d in decision.devices if d not in amd),
            tuple(sorted(minors.values())),
            state.failed,
            "amd" if bound_amd else "nvidia",
            tuple(g.runtime_index for g in bound_amd),
            tuple(g.minor for g in bound_amd if g.minor is not None),
            tuple(sorted(g.minor for g in amd.values() if g.minor is not None)),
            job.spec.checkpoint is not None and find_condition(state.conditions, Condition.Checkpointed) is not None,
            mig_ids=tuple((g.device_minor, *g.mig_ids) for g in bound if g.mig_ids is not None),
            mig_known=tuple(sorted((g.device_minor, *g.mig_ids) for g in units.values() if g.mig_ids is not None)),
        )
    )


def _preempt(
    plan: PlanDraft,
    snap: Snapshot,
    ready: list[Pending],
    requests: list[Request],
    decisions: dict[str, Binding | Wait],
    now_text: str,
) -> None:
    """Optional preemption: the first job that waits for GPUs may stop running jobs at least
    ``preemptionThreshold`` below its priority (they return to Pending/Preempted; the stopped
    attempt does not count against their backoffLimit)."""
    threshold = snap.policy.preemption_threshold or 0
    for (_, job), request in zip(ready, requests):
        decision = decisions[job.name]
        if not isinstance(decision, Wait) or decision.reason not in (Reason.Resources, Reason.Priority):
            continue
        running = []
        for name, st in records_where(plan.states, _never):  # a finished job a start read is not running
            other = snap.admitted.jobs.get(name)
            if st.phase != Phase.Running or not st.devices or other is None or name not in snap.runs:
                continue
            if find_condition(st.conditions, Condition.Terminating) is not None:
                return  # a stop is already under way (maybe ours): let it land before choosing more
            rank = _preemption_rank(snap, job, other, threshold)
            if rank is not None:
                running.append(Running(name, rank, tuple(st.devices), st.start_time or 0.0))
        victims = preemption_victims(request, math.inf, plan.slots, running, 0)
        for victim in victims:
            st, other = plan.states[victim], snap.admitted.jobs[victim]
            grace = other.spec.termination_grace_period
            why = f"preempted by job {job.name} (priority {job.spec.priority} vs {other.spec.priority}); returns to Pending"
            request_stop(
                plan,
                st,
                snap.runs[victim],
                StopReason.Preempted,
                why,
                snap.default_grace if grace is None else grace,
                now_text,
                other.spec.checkpoint,
            )
            plan.events.append(Event(EventType.Normal, Reason.Preempted, victim, why))
        if victims:
            decisions[job.name] = Wait(decision.reason, f"{decision.message}; preempting {', '.join(victims)}")
        return  # only the first waiting job preempts


def _preemption_rank(snap: Snapshot, job: AdmittedJob, victim: AdmittedJob, threshold: int) -> int | None:
    """Where ``victim`` stands among the jobs ``job`` may preempt (lowest first), or None when it
    may not: a user's own jobs by their priority gap; another user's only from a lower class, or
    by the gap of the priorities their classes let count across users (a user's own priority
    never stops another user's job)."""
    names, policy = snap.host.user_names, snap.policy
    mine = user_class(policy, user_of(job.owner_uid, names), job.owner_uid)
    theirs = user_class(policy, user_of(victim.owner_uid, names), victim.owner_uid)
    if victim.owner_uid == job.owner_uid:
        if victim.spec.priority + threshold > job.spec.priority:
            return None
        return theirs.rank * 2**34 + victim.spec.priority
    if theirs.rank < mine.rank or (
        theirs.rank == mine.rank and clamp(victim.spec.priority, theirs) + threshold <= clamp(job.spec.priority, mine)
    ):
        return theirs.rank * 2**34 + clamp(victim.spec.priority, theirs)
    return None


def _quota_keys(job: AdmittedJob, snap: Snapshot) -> tuple[str, ...]:
    return quota_keys(user_of(job.owner_uid, snap.host.user_names), job.job.metadata.labels, snap.policy)


def _fair_share_usage(plan: PlanDraft, snap: Snapshot, now: float) -> dict[int, float]:
    """Decayed GPU-seconds per manifest owner (uid), from the latest attempt of every job the
    controller still has a record of: no separate ledger to keep crash-safe."""
    half_life = snap.policy.fair_share_half_life or 1.0
    usage: dict[int, float] = {}
    horizon = now - 20 * half_life - 1.0  # (see below) finished jobs kept lean are built only if they ended after

    def recent(facts: Facts) -> bool:
        return facts[lean.COMPLETION_TIME] is not None and facts[lean.COMPLETION_TIME] >= horizon

    for name, st in records_where(plan.states, recent):
        if st.start_time is None or not st.devices:
            continue
        end = now if st.phase == Phase.Running else st.completion_time
        job = snap.admitted.jobs.get(name)
        if end is None or job is None or now - end > 20 * half_life:  # < 1e-6 of its weight left
            continue
        usage[job.owner_uid] = usage.get(job.owner_uid, 0.0) + decayed_gpu_seconds(
            len(st.devices), st.start_time, end, now, half_life
        )
    return usage


def _never(_facts: Facts) -> bool:
    return False
