"""A user's backlog beyond the head of their queue waits without being decided again each pass.

With 20,000 of one user's jobs waiting, every GPU turnover decided all 20,000 again (a record
copied, a request built, sorted, tried against the GPUs), and a pass took seconds: everyone's new
job waited behind it. Yet only the first few of one user's waiting jobs can start at a turnover.
So each pass decides, per owner, the ``QUEUE_DEPTH`` waiting jobs first in that owner's own order
(priority, then age, then name; aging and fair share move an owner's jobs together), and carries
the rest over as they are: Pending, with the record of the pass that last decided them. As the
head starts, the next ones move up. Slurm's backfill does the same (``bf_max_job_user``).

Only jobs nothing can have moved are carried: queued by the scheduler (not held by a gate that
opens by itself), no process, the very manifest document the last pass saw. The price: a small job
deep in one user's backlog is not backfilled ahead of that user's first QUEUE_DEPTH.
Pure: set operations over the snapshot.
"""

from __future__ import annotations

import heapq

from controller.model.documents import AdmissionResult
from controller.model.plan import PlanDraft, Snapshot
from controller.model.reasons import Phase, Reason

QUEUE_DEPTH = 256  # waiting jobs per owner each pass decides
REFILL = QUEUE_DEPTH // 2  # an owner's head this short is refilled from their parked jobs
PARKABLE = frozenset({Reason.Resources, Reason.Priority, Reason.GPUMemory, Reason.Quota})

Key = tuple[int, float, str]


def parked_backlog(plan: PlanDraft, snap: Snapshot, names: set[str]) -> set[str]:
    """The waiting jobs of ``names`` beyond their owner's queue head: carried over as is. Also
    sets ``plan.parked`` (owner -> those jobs) for the next pass.

    Incremental, so a pass does not cost per parked job: what the last pass parked stays parked
    unless its document, process or name changed (set operations); only the rest is looked at one
    by one. An owner's head is refilled from the parked jobs (the one step that reads them all)
    when it has fewer than REFILL left, i.e. once per ~128 of their jobs started."""
    prev = snap.previous
    if prev is None or len(names) <= QUEUE_DEPTH:
        return set()
    before = snap.parked or {}
    moved = _moved(snap, prev, names) if before else set()
    kept: dict[int, frozenset[str] | set[str]] = {}
    for owner, jobs in before.items():
        still = (jobs & names) - moved
        if still:
            kept[owner] = still
    looked = set().union(*kept.values()) if kept else set()
    heads = _heads(snap, prev, names - looked if looked else names)
    parked: set[str] = set()
    for owner in heads.keys() | kept.keys():
        head, waiting = heads.get(owner, []), kept.get(owner, set())
        if len(head) < REFILL and waiting:  # refill the head from the parked jobs, in order
            head = head + [_key(snap, name) for name in waiting]
            waiting = set()
        if len(head) > QUEUE_DEPTH:
            first = {name for _, _, name in heapq.nsmallest(QUEUE_DEPTH, head)}
            waiting = waiting | {name for _, _, name in head if name not in first}
        if waiting:
            plan.parked[owner] = frozenset(waiting)
            parked |= waiting
    return parked


def _moved(snap: Snapshot, prev: AdmissionResult, names: set[str]) -> set[str]:
    """The names of ``names`` whose document, process or duplicate status may have changed since
    the last pass. A full admission (a resync) keeps the documents of unchanged files: identity."""
    adm = snap.admitted
    if adm is prev:
        touched: set[str] = set()
    elif adm.base == prev.serial:
        touched = set(adm.touched)
    else:
        jobs, old = adm.jobs, prev.jobs
        touched = {name for name in names if jobs.get(name) is not old.get(name)}
    return touched.union(snap.runs, adm.duplicates, prev.duplicates)


def _heads(snap: Snapshot, prev: AdmissionResult, names: set[str]) -> dict[int, list[Key]]:
    """Per owner, the queue keys of the jobs of ``names`` that may be parked."""
    adm, states, runs = snap.admitted, snap.states, snap.runs
    patched = adm.base == prev.serial
    by_owner: dict[int, list[Key]] = {}
    for name in names:
        old = states.get(name)
        if old is None or old.phase != Phase.Pending or old.reason not in PARKABLE or name in runs:
            continue
        job = adm.jobs.get(name)
        if job is None or (name in adm.touched if patched else job is not prev.jobs.get(name)):
            continue
        if name in adm.duplicates or name in prev.duplicates:
            continue
        by_owner.setdefault(job.owner_uid, []).append((-job.priority, old.created, name))
    return by_owner


def _key(snap: Snapshot, name: str) -> Key:
    """A parked job's place in its owner's queue: priority, then age, then name."""
    return -snap.admitted.jobs[name].priority, snap.states[name].created, name
