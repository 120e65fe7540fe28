"""A kind booked by amount during one pass, with EASY backfill: the base of cores and counted kinds.

The first job that waits for the kind gets a reservation: the earliest time enough of it is free
by the running jobs' timeLimits. A job behind it may take some only if its own timeLimit ends it
by then, or if what it takes is spare even at that time (what the reservation will not need).
``firstfit`` holds nothing. A subclass says how much a job needs, what is free, when what is held
frees up, how a booking is made, and how it reads in messages.
"""

from __future__ import annotations

import math

from controller.model.reasons import Reason
from controller.model.scheduling import Request, Wait


class Booking:
    """One kind during one pass: what is taken, and the reservation of the first blocked job."""

    def __init__(self, mode: str, now: float, total: int) -> None:
        self.mode, self.now = mode, now
        self.held_for: str | None = None
        self.reserved_at = math.inf  # when the reservation's share is all free (inf: unknown)
        self.spare = total  # what a job running past ``reserved_at`` may still take
        self.total = total  # what the machine has of it (fixed during a pass)

    # -- what a kind says -----------------------------------------------------------------------------

    def need(self, req: Request) -> int:
        raise NotImplementedError

    def free(self) -> int:
        raise NotImplementedError

    def ends(self) -> list[tuple[float, int]]:
        """(when it frees up, how much) for each holding: a running job's or this pass's."""
        raise NotImplementedError

    def book(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        """Take ``need(req)`` of it for ``req`` until its timeLimit; the cores, if it places cores."""
        raise NotImplementedError

    def amount(self, n: int) -> str:
        """``8 CPUs``, ``2Gi of /dev/shm``."""
        raise NotImplementedError

    def number(self, n: int) -> str:
        """An amount without its noun: ``2``, ``1Gi``."""
        raise NotImplementedError

    def busy(self) -> str:
        """Who holds it, for a waiting job's message: `` (cores 0-2 bound to a)``; may be empty."""
        raise NotImplementedError

    # -- the questions the scheduler asks (``controller.decide.placement.Placer``) ---------------------

    def needs(self, req: Request) -> bool:
        return self.need(req) > 0

    def never(self, req: Request) -> str | None:
        """The Unschedulable message when the machine has less than asked."""
        need = self.need(req)
        return f"needs {self.amount(need)}, this machine has {self.number(self.total)}" if need > self.total else None

    def allows(self, req: Request) -> bool:
        """Enough is free, and taking it does not delay the reserved job."""
        need = self.need(req)
        if need == 0:
            return True
        if self.free() < need:
            return False
        if self.held_for is None:
            return True
        return self._ends_in_time(req.time_limit) or need <= self.spare

    def _ends_in_time(self, time_limit: float | None) -> bool:
        return self.reserved_at < math.inf and time_limit is not None and self.now + time_limit <= self.reserved_at

    def take(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        need = self.need(req)
        if need == 0:
            return ()
        placed = self.book(req, near)
        if self.held_for is not None and not self._ends_in_time(req.time_limit):
            self.spare -= need
        return placed

    def wait(self, req: Request) -> Wait:
        """Why ``req`` waits; the first such job gets the reservation."""
        free, need = self.free(), self.need(req)
        if self.held_for is not None and self.held_for != req.name and free >= need:
            wait = Wait(
                Reason.Priority,
                f"waiting behind higher-priority job {self.held_for}: needs "
                f"{self.amount(need)}, {self.number(free)} free but held for it",
            )
        else:
            wait = Wait(Reason.Resources, f"needs {self.amount(need)}, {self.number(free)} free{self.busy()}")
        if self.held_for is None and self.mode != "firstfit":
            self._reserve(req, free)
        return wait

    def _reserve(self, req: Request, free: int) -> None:
        """EASY backfill: when will enough be free, and how much is spare even then."""
        ends = sorted(self.ends())
        short = self.need(req) - free
        at = self.now if short <= 0 else math.inf
        freeing = 0
        for end, amount in ends if short > 0 else ():
            freeing += amount
            if freeing >= short:
                at = end
                break
        self.held_for = req.name
        self.reserved_at = at if self.mode == "backfill" else math.inf
        freed = sum(amount for end, amount in ends if end <= self.reserved_at)
        self.spare = max(0, free + freed - self.need(req))
