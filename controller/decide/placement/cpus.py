"""CPU cores as a resource (``resources.cpus``): booked like GPUs, pinned near the job's GPUs.

Pure. One :class:`CoreBooking` per scheduling pass, over the :class:`CorePool` the caller built from
the running jobs. The scheduler asks it, for each job in queue order: can it never fit
(``never``), may it take its cores now (``allows``), which ones (``take``: on the bound GPUs'
NUMA node first, else any free), and why not (``wait``: ``needs 8 CPUs, 2 free``). Backfill as
for every booked kind (``booking.py``).
"""

from __future__ import annotations

import math

from controller.api.units import format_cpu_list as format_cores
from controller.decide.placement.booking import Booking
from controller.model.resources import KINDS, count
from controller.model.scheduling import CorePool, Request

_NOUN = KINDS["cpus"].noun


class CoreBooking(Booking):
    """The cores during one pass: what is taken, and the reservation of the first blocked job."""

    def __init__(self, pool: CorePool, mode: str, now: float) -> None:
        super().__init__(mode, now, len(pool.cores))
        self.pool = pool

    def need(self, req: Request) -> int:
        return req.cpus

    def free(self) -> int:
        return len(self.pool.free())

    def ends(self) -> list[tuple[float, int]]:
        return [(self.pool.free_at.get(core, math.inf), 1) for core in self.pool.taken]

    def book(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        """Bind ``req.cpus`` free cores: those near its GPUs first (lowest numbers first)."""
        chosen = sorted(self.pool.free(), key=lambda core: (core not in near, core))[: req.cpus]
        ends = self.now + req.time_limit if req.time_limit is not None else math.inf
        for core in chosen:
            self.pool.taken[core] = req.name
            self.pool.free_at[core] = ends
        return tuple(sorted(chosen))

    def amount(self, n: int) -> str:
        return count(n, _NOUN)

    def number(self, n: int) -> str:
        return str(n)

    def busy(self) -> str:
        holders = list(dict.fromkeys(self.pool.taken[c] for c in sorted(self.pool.taken)))
        return f" (cores {format_cores(sorted(self.pool.taken))} bound to {', '.join(holders[:5])})" if holders else ""
