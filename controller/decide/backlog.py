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

from controller.model.plan import Snapshot
from controller.model.reasons import Phase, Reason

QUEUE_DEPTH = 256  # waiting jobs per owner each pass decides
PARKABLE = frozenset({Reason.Resources, Reason.Priority, Reason.GPUMemory, Reason.Quota})


def parked_backlog(snap: Snapshot, names: set[str]) -> set[str]:
    """The waiting jobs of ``names`` beyond their owner's first QUEUE_DEPTH: carried over as is."""
    adm, prev, states, runs = snap.admission, snap.previous, snap.states, snap.runs
    if prev is None or len(names) <= QUEUE_DEPTH:
        return set()
    patched = adm.base == prev.serial
    by_owner: dict[int, list[tuple[int, float, str]]] = {}
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
    parked: set[str] = set()
    for queue in by_owner.values():
        if len(queue) > QUEUE_DEPTH:
            head = {name for _, _, name in heapq.nsmallest(QUEUE_DEPTH, queue)}
            parked.update(name for _, _, name in queue if name not in head)
    return parked
