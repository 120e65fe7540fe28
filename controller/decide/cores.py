"""CPU cores as a resource (``resources.cpus``): booked like GPUs, pinned near the job's GPUs.

Pure. One :class:`CoreBooking` per scheduling pass, over the :class:`CorePool` the caller built from
the running jobs. The scheduler asks it, for each job in queue order: can it never fit
(``never``), may it take its cores now (``allows``), which ones (``take``: on the bound GPUs'
NUMA node first, else any free), and why not (``wait``: ``needs 8 CPUs, 2 free``).

Backfill, as for GPUs: the first job that waits for cores gets a reservation, the earliest time
enough cores are free by the running jobs' timeLimits. A job behind it may take cores only if
its own timeLimit ends it by then, or if the cores it takes are spare even at that time (those
the reservation will not need). ``firstfit`` holds nothing.
"""

from __future__ import annotations

import math

from controller.api.units import format_cpu_list as format_cores
from controller.model.reasons import Reason
from controller.model.scheduling import Binding, CorePool, Request, Wait


def _count(n: int) -> str:
    return f"{n} CPU{'s' if n != 1 else ''}"


class CoreBooking:
    """The cores during one pass: what is taken, and the reservation of the first blocked job."""

    def __init__(self, pool: CorePool, mode: str, now: float) -> None:
        self.pool, self.mode, self.now = pool, mode, now
        self.held_for: str | None = None
        self.reserved_at = math.inf  # when the reservation's cores are all free (inf: unknown)
        self.spare = len(pool.cores)  # cores a job running past ``reserved_at`` may still take

    def never(self, req: Request) -> str | None:
        """The Unschedulable message when the machine has fewer cores than asked."""
        if req.cpus > len(self.pool.cores):
            return f"needs {_count(req.cpus)}, this machine has {len(self.pool.cores)}"
        return None

    def allows(self, req: Request) -> bool:
        """Enough free cores, and taking them does not delay the reserved job."""
        if req.cpus == 0:
            return True
        if len(self.pool.free()) < req.cpus:
            return False
        if self.held_for is None:
            return True
        return self._ends_in_time(req.time_limit) or req.cpus <= self.spare

    def _ends_in_time(self, time_limit: float | None) -> bool:
        return self.reserved_at < math.inf and time_limit is not None and self.now + time_limit <= self.reserved_at

    def take(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        """Bind ``req.cpus`` free cores: those near its GPUs first (lowest numbers first)."""
        if req.cpus == 0:
            return ()
        chosen = sorted(self.pool.free(), key=lambda core: (core not in near, core))[: req.cpus]
        ends = self.now + req.time_limit if req.time_limit is not None else math.inf
        for core in chosen:
            self.pool.taken[core] = req.name
            self.pool.free_at[core] = ends
        if self.held_for is not None and not self._ends_in_time(req.time_limit):
            self.spare -= len(chosen)
        return tuple(sorted(chosen))

    def wait(self, req: Request) -> Wait:
        """Why ``req`` waits for cores; the first such job gets the reservation."""
        free = self.pool.free()
        holders = list(dict.fromkeys(self.pool.taken[c] for c in sorted(self.pool.taken)))
        busy = f" (cores {format_cores(sorted(self.pool.taken))} bound to {', '.join(holders[:5])})" if holders else ""
        if self.held_for is not None and self.held_for != req.name and len(free) >= req.cpus:
            wait = Wait(Reason.Priority, f"waiting behind higher-priority job {self.held_for}: needs "
                                         f"{_count(req.cpus)}, {len(free)} free but held for it")
        else:
            wait = Wait(Reason.Resources, f"needs {_count(req.cpus)}, {len(free)} free{busy}")
        if self.held_for is None and self.mode != "firstfit":
            self._reserve(req, len(free))
        return wait

    def _reserve(self, req: Request, free: int) -> None:
        """EASY backfill: when will enough cores be free, and how many are spare even then."""
        ends = sorted(self.pool.free_at.get(core, math.inf) for core in self.pool.taken)
        short = req.cpus - free
        at = ends[short - 1] if 0 < short <= len(ends) else (self.now if short <= 0 else math.inf)
        self.held_for = req.name
        self.reserved_at = at if self.mode == "backfill" else math.inf
        freed = sum(1 for end in ends if end <= self.reserved_at)
        self.spare = max(0, free + freed - req.cpus)


def cpu_only(booking: CoreBooking, req: Request) -> Binding | Wait:
    """A job with cores and no GPUs: bound to any free cores, or told why not."""
    never = booking.never(req)
    if never is not None:
        return Wait(Reason.Unschedulable, never)
    if booking.allows(req):
        return Binding([], [], booking.take(req, frozenset()))
    return booking.wait(req)
