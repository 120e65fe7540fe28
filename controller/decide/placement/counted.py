"""Counted kinds (``resources.shm``): an amount of the machine's capacity, no placement.

Pure. One :class:`CountBooking` per kind and pass, over the :class:`CountPool` built from the
machine's capacity (observed) and what the running jobs booked (their specs). Messages name the
kind as ``controller.model.resources.KINDS`` says: ``needs 8Gi of /dev/shm, 2Gi free (booked by a)``.
Backfill as for every booked kind (``booking.py``). A kind the machine reports no capacity of is
not booked.
"""

from __future__ import annotations

import math

from controller.api.units import format_quantity
from controller.decide.placement.booking import Booking
from controller.model.plan import PlanDraft, Snapshot
from controller.model.resources import COUNTED, KINDS, count
from controller.model.scheduling import CountPool, Request


class CountBooking(Booking):
    """One counted kind during one pass."""

    def __init__(self, pool: CountPool, mode: str, now: float) -> None:
        super().__init__(mode, now, pool.capacity)
        self.pool, self.kind = pool, KINDS[pool.kind]

    def need(self, req: Request) -> int:
        return req.amounts.get(self.pool.kind)

    def free(self) -> int:
        return self.pool.free()

    def ends(self) -> list[tuple[float, int]]:
        return [(self.pool.free_at.get(name, math.inf), amount) for name, amount in self.pool.used.items()]

    def book(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        self.pool.used[req.name] = self.pool.used.get(req.name, 0) + self.need(req)
        self.pool.free_at[req.name] = self.now + req.time_limit if req.time_limit is not None else math.inf
        return ()

    def amount(self, n: int) -> str:
        return f"{self.number(n)} of {self.kind.of}" if self.kind.in_bytes else count(n, self.kind.noun)

    def number(self, n: int) -> str:
        return (format_quantity(n) or "0") if self.kind.in_bytes else str(n)

    def busy(self) -> str:
        holders = sorted(name for name, amount in self.pool.used.items() if amount)
        more = f" and {len(holders) - 5} more" if len(holders) > 5 else ""
        return f" (booked by {', '.join(holders[:5])}{more})" if holders else ""


def counted_pools(plan: PlanDraft, snap: Snapshot, holding: list[str]) -> dict[str, CountPool]:
    """Each counted kind the machine has a capacity of, with what the ``holding`` jobs booked and
    until when (start + timeLimit). None where gflowd does not place jobs (a cluster backend)."""
    if not snap.bind_gpus:
        return {}
    pools = {kind: CountPool(kind, snap.host.capacity[kind]) for kind in COUNTED if kind in snap.host.capacity}
    if not pools:
        return pools
    jobs = snap.admission.jobs if snap.admission is not None else {}
    for name in holding:
        job, st = jobs.get(name), plan.states[name]
        if job is None:
            continue
        limit = job.spec.time_limit
        ends_at = st.start_time + limit if limit is not None and st.start_time is not None else math.inf
        for kind, amount in job.spec.resources.counted().items():
            if kind in pools:
                pools[kind].used[name] = amount
                pools[kind].free_at[name] = ends_at
    return pools
