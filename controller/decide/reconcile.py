"""Decide: desired state (admitted manifests) vs observed state (records, processes, GPUs) -> a plan.

``decide`` is a pure function of a :class:`Snapshot` and the clock: it admits the manifests, then
``reconcile`` dispatches each job the pass must look at to its life cycle, the waiting ones to the
queue, then the Sweeps' statuses and expiry. It returns new records, processes to start and stop,
status files to remove and events to log, as a frozen :class:`Plan` (the steps build a mutable
``PlanDraft``); act carries the plan out and reports what it learned, ``decide/acted.py`` folds that
in, and record writes it down.
Level-triggered: deciding twice on the same snapshot plans the same thing, so any pass may be
repeated or skipped without harm.
"""

from __future__ import annotations

from dataclasses import replace

from controller.decide.admission import admit_observed
from controller.decide.backlog import parked_backlog
from controller.decide.expiry import expire
from controller.decide.gpu_leaks import note_reclaimed
from controller.decide.lifecycle import carried_as_loaded, finish, step
from controller.decide.queue import (
    TailMoved,
    carried_tail,
    carried_waiting,
    check_tail,
    queue_memo_holds,
    remember_queue,
    schedule_pending,
)
from controller.decide.reservations import reservation_statuses
from controller.decide.sweep_status import sweep_statuses
from controller.model.documents import AdmissionResult
from controller.model.overlay import Overlay
from controller.model.plan import Event, Plan, PlanDraft, Snapshot
from controller.model.reasons import SETTLED_PHASES, EventType
from controller.model.records import rfc3339


def decide(snap: Snapshot, now: float) -> Plan:
    """One pass's decisions: admission (unless the snapshot brings one), then :func:`reconcile`."""
    admission = snap.admission if snap.admission is not None else admit_observed(snap)
    plan = draft(replace(snap, admission=admission), now)
    plan.admission = admission
    plan.events.extend(_new_warnings(admission, snap.previous))
    return plan.freeze()


def reconcile(snap: Snapshot, now: float) -> Plan:
    """The plan of an admitted snapshot (:func:`draft`, frozen): what tests and benchmarks call."""
    return draft(snap, now).freeze()


def draft(snap: Snapshot, now: float) -> PlanDraft:
    """Every job the pass must look at through its life cycle; the waiting ones through the queue."""
    plan = PlanDraft()
    names, parked, carried, witness = _looked_at(plan, snap, now)
    now_text = rfc3339(now) or ""
    names.update(n for n in snap.reclaimed if n not in parked)  # a finished job too: it gains a condition (below)
    try:
        carried = _queue(plan, snap, names, carried, now, now_text, witness)
    except TailMoved:  # the tail would not all wait as it did: the pass decided whole
        return draft(replace(snap, queue_memo=None), now)
    for name, kills in snap.reclaimed.items():
        if name in plan.states:
            plan.states[name] = note_reclaimed(plan.states[name], kills, now_text)
    sweep_statuses(plan, snap, now)
    expire(plan, snap, now)
    states = plan.states
    decided = names.difference(carried) if carried else names
    plan.unsettled = {n for n in decided if n in states and states[n].phase not in SETTLED_PHASES}
    plan.unsettled.update(carried)
    plan.unsettled.update(parked)
    plan.looked_at = names
    return plan


def _looked_at(plan: PlanDraft, snap: Snapshot, now: float) -> tuple[set[str], set[str], set[str], str | None]:
    """The names the pass looks at, the parked backlog, the waiting jobs carried over and, with a
    flood's tail carried, the job of it decided in its stead (decide/queue.py); ``plan.states``
    starts as the records the pass keeps as they are."""
    adm = snap.admitted
    names = changed_names(snap)
    carried: set[str] = set()
    witness = None
    if names is None:
        names = set(adm.jobs) | set(adm.rejected) | set(snap.states) | set(snap.runs)
        parked = parked_backlog(plan, snap, names)
        names -= parked
        as_loaded = carried_as_loaded(snap, names)  # finished jobs a start read: carried unbuilt
        if as_loaded:
            names -= as_loaded
            plan.states = Overlay(snap.states)  # them and the parked ones as they are
            for name in names:
                plan.states.pop(name, None)
        else:
            plan.states.update((name, snap.states[name]) for name in parked)
        return names, parked, carried, witness
    # carry every other record over as is (see changed_names)
    parked = parked_backlog(plan, snap, names)  # a backlog beyond its owner's queue head, as is
    names -= parked
    carried = carried_waiting(snap, names, now)  # and the waiting jobs, if nothing moved them
    if not carried:
        carried, witness = carried_tail(snap, names, now)  # or a flood's tail, if nothing moved it
    plan.states = Overlay(snap.states)  # the previous records, unchanged and uncopied
    for name in names.difference(carried) if carried else names:
        plan.states.pop(name, None)
    return names, parked, carried, witness


def _queue(
    plan: PlanDraft,
    snap: Snapshot,
    names: set[str],
    carried: set[str],
    now: float,
    now_text: str,
    witness: str | None = None,
) -> set[str]:
    """Each job of ``names`` not ``carried`` through its life cycle, the waiting ones through the
    queue; the carried ones keep their records when the queue's memo still holds, else they are
    decided too (a flood's tail: when its ``witness`` waits as before, else TailMoved). Returns the
    names carried over."""
    decided = names.difference(carried) if carried else names
    pending = [waiting for name in sorted(decided) if (waiting := step(plan, snap, name, now, now_text)) is not None]
    if carried and witness is None and not queue_memo_holds(plan, snap, pending, decided):
        for name in carried:
            plan.states.pop(name, None)
        pending += [
            waiting for name in sorted(carried) if (waiting := step(plan, snap, name, now, now_text)) is not None
        ]
        carried, decided = set(), names
    reservation_statuses(plan, snap, now)  # before the queue: it fences jobs off reserved GPUs
    woken, plan.wake_at = plan.wake_at, None
    schedule_pending(plan, snap, pending, now, now_text, decided)
    queue_wake, plan.wake_at = plan.wake_at, woken  # the queue's own wake-up (time gates, aging)
    for state, _job in pending:
        finish(plan, snap.states.get(state.name), state)
    if witness is not None:
        check_tail(plan, snap, pending, carried, witness)
        plan.queue_memo = remember_queue(plan, snap, pending, queue_wake, now, carried)
    elif carried:  # nothing the queue reads moved: the same records (left in plan.states), the same wake-up
        assert snap.queue_memo is not None  # waiting jobs are carried only with the memo that says why
        plan.queue_memo = snap.queue_memo
        queue_wake = snap.queue_memo.wake_at
    else:
        plan.queue_memo = remember_queue(plan, snap, pending, queue_wake, now)
    if queue_wake is not None:
        plan.wake(queue_wake)
    return carried


def changed_names(snap: Snapshot) -> set[str] | None:
    """The names a pass must look at; None: every name (there is no previous pass to compare to).

    Every other name is a finished (or rejected) job whose manifest document is the very object
    the previous pass saw, with no process: nothing about it can change, so its record is carried
    over untouched. This makes a pass cost what changed, not what exists. ``lifecycle.step``
    applies the same test per name; this finds the complement with set operations instead of
    visiting 10,000 unchanged jobs one by one.
    """
    prev = snap.previous
    if prev is None:
        return None
    adm, states = snap.admitted, snap.states
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


def _new_warnings(admission: AdmissionResult, previous: AdmissionResult | None) -> list[Event]:
    """A Warning event per bad document, once: those the previous pass had are not repeated."""
    seen = {(w.source, w.reason, w.message) for w in previous.warnings} if previous is not None else set()
    warnings = {(w.source, w.reason, w.message): w for w in admission.warnings}
    return [
        Event(EventType.Warning, w.reason, w.name or "", w.message) for key, w in warnings.items() if key not in seen
    ]
