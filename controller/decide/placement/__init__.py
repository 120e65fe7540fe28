"""Placement, one kind at a time: where (or whether) a job's resources fit during one pass.

The scheduler (``controller.decide.scheduler``) walks the queue; for each job it asks every kind
the job needs whether it can ever fit, whether it fits now, and commits only when all of them do
(then each kind books its share), else the first kind that does not fit says why. As in Kueue's
``flavorassigner``, each kind answers the same questions, so a new kind is a new :class:`Placer`
(or, for a plain amount, a row in ``controller.model.resources.KINDS``), not a new path through the
scheduler.

- GPUs (``gpus.py``, messages in ``gpu_text.py``): which devices, by strategy, topology, gpuType,
  sharing and gpuMemory; all of a job's or none; asked first (the scheduler checks quotas in GPUs,
  and a waiting job's reason is cached per GPU state);
- CPU cores (``cpus.py``): which cores, near the bound GPUs' NUMA node;
- counted kinds (``counted.py``): how much of the machine's capacity, no placement (``shm``).

Cores and counted kinds share one booking with EASY backfill (``booking.py``). Pure, like all of
``decide``.
"""

from __future__ import annotations

from typing import Protocol

from controller.model.scheduling import Request, Wait


class Placer(Protocol):
    """One kind of resource during one scheduling pass."""

    def needs(self, req: Request) -> bool:
        """Whether ``req`` asks for any of this kind."""

    def never(self, req: Request) -> str | None:
        """The Unschedulable message when this machine can never give ``req`` enough; else None."""

    def allows(self, req: Request) -> bool:
        """Whether ``req`` may take its share now (free, and no reserved job is delayed by it)."""

    def take(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        """Book ``req``'s share; the cores it is pinned to, if this kind places cores (else ``()``).
        ``near``: the cores of its GPUs' NUMA node."""

    def wait(self, req: Request) -> Wait:
        """Why ``req`` waits for this kind (the first such job gets a reservation)."""
