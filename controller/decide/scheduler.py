"""The scheduler: which pending jobs get which GPUs (and cores, and shm) this pass, and why the others wait.

A pure function of (requests in queue order, GPU slots, strategy, topology, the other kinds' pools).
It never starts anything and never reads files; the same inputs give the same bindings (``random``
included: it is seeded by the job's name). Each resource kind is placed behind one interface
(``controller.decide.placement``); this module walks the queue, checks quotas, caches a waiting
job's reason per shape, and binds a job only when every kind it needs fits.

Rules, in order:
- Gang binding: a job gets all of its GPUs in one pass or none, and all of its other kinds with them.
- ``Exclusive`` jobs take ``Free`` GPUs; ``Shared`` jobs co-locate on ``Free``/``Shared`` GPUs while
  the declared ``gpuMemory`` of every Shared job there plus what foreign processes use fits.
- Quotas: a job whose user or label group would go over its GPU quota waits with reason ``Quota``
  (and holds nothing).
- No starvation: the first job in queue order that cannot fit yet, but will once our own running
  jobs end, gets a *reservation*: the GPUs it will use are held for it; jobs behind it may not take
  them (they wait with reason ``Priority``). Per ``mode``:
  - ``strict``: held GPUs are taken by nobody (strict priority: the head blocks its GPU type);
  - ``backfill`` (EASY backfill): the reservation has a time, the earliest moment enough GPUs are
    free by the running jobs' start + timeLimit. A job behind may take held GPUs only if its own
    timeLimit ends it by then; GPUs the reservation does not need are free for anyone. A job
    without a timeLimit never takes held GPUs, and when a GPU the reservation needs is held by a
    job without a timeLimit, the reservation has no time and the hold is strict;
  - ``firstfit``: nothing is held; any job that fits starts (what greedy schedulers do; starves
    big jobs).
- A job that can never fit on this machine is ``Unschedulable``, with the numbers.
- Cores and counted kinds (``resources.cpus``, ``resources.shm``) are asked after GPUs, with the same
  backfill (``controller.decide.placement.booking``); the first that does not fit says why.
- Reservations (``kind: Reservation``): a request's ``fenced`` GPUs are not for it this pass
  (``controller.decide.reservations`` says which); when they are all that keeps it from fitting,
  it waits with reason ``Reserved`` and holds nothing.

The queue order (priority, aging, fair share) is the caller's: see ``controller.decide.policy``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

from controller.decide.placement import Placer
from controller.decide.placement.counted import CountBooking
from controller.decide.placement.cpus import CoreBooking
from controller.decide.placement.gpu_text import gpu_count, never_fits_text
from controller.decide.placement.gpus import NO_REASON, GpuPlacer, matches
from controller.decide.placement.gpus import usable_ever as usable_gpus
from controller.model.gpus import Cordon, Gpu
from controller.model.reasons import Reason
from controller.model.resources import EMPTY
from controller.model.scheduling import (
    UNSCHEDULABLE,
    Binding,
    CorePool,
    CountPool,
    GpuSlot,
    GpuState,
    Holder,
    QuotaUse,
    Request,
    Running,
    Wait,
)

STRATEGIES = ("sequential", "random", "packed", "spread")
# a slot's state is the plain text of its GpuState row: placement compares it per request, and a
# str subclass compares slower than a str
FREE, ALLOCATED, SHARED = GpuState.Free.value, GpuState.Allocated.value, GpuState.Shared.value
UNMANAGED, RESTRICTED, UNHEALTHY = GpuState.Unmanaged.value, GpuState.Restricted.value, GpuState.Unhealthy.value
Shape = tuple[object, ...]  # what a request asks, as far as the answer goes: one shape, one answer
MODES = ("strict", "backfill", "firstfit")


def build_slots(
    gpus: Sequence[Gpu],
    holders: list[Holder],
    allowed: AbstractSet[int] | None,
    managed_pids: AbstractSet[int],
    unmanaged_threshold: int,
    ignore_processes: frozenset[str] = frozenset(),
    job_pids: Mapping[str, AbstractSet[int]] | None = None,
    cordoned: Mapping[int, Cordon] | None = None,
) -> list[GpuSlot]:
    """GPU states from inventory and current holders (SPEC.md section 5), with the live memory
    a job that declares gpuMemory is placed by: in use, ours, and promised but not yet taken by
    each Shared holder (its processes' use, from ``job_pids``, against its gpuMemory)."""
    slots = []
    for gpu in gpus:
        occupants = tuple(p for p in gpu.processes if p.pid not in managed_pids)
        foreign = [p for p in occupants if str(p.pid) not in ignore_processes and p.name not in ignore_processes]
        foreign_memory = sum(p.used_memory for p in foreign)
        if not gpu.healthy:
            state = UNHEALTHY
        elif (allowed is not None and gpu.index not in allowed) or (cordoned and gpu.index in cordoned):
            state = RESTRICTED
        elif foreign and foreign_memory >= unmanaged_threshold:
            state = UNMANAGED
        else:
            state = FREE
        in_use = sum(p.used_memory for p in gpu.processes)
        slots.append(
            GpuSlot(
                gpu,
                state,
                foreign_memory=foreign_memory,
                foreign_pids=tuple(p.pid for p in foreign),
                used_memory=max(gpu.memory_used, in_use),
                our_memory=in_use - sum(p.used_memory for p in occupants),
                occupants=occupants,
                cordon=cordoned[gpu.index].text() if cordoned and gpu.index in cordoned else "",
            )
        )
    by_index = {s.index: s for s in slots}
    for holder in holders:
        for device in holder.devices:
            slot = by_index.get(device)
            if slot is None:
                continue
            slot.jobs.append(holder.name)
            slot.free_at = max(slot.free_at, holder.ends_at)
            if holder.shared:
                slot.shared_reserved += holder.gpu_memory
                pids = (job_pids or {}).get(holder.name, ())
                taken = sum(p.used_memory for p in slot.gpu.processes if p.pid in pids)
                slot.unclaimed += max(0, holder.gpu_memory - taken)
                if slot.state == FREE:
                    slot.state = SHARED
            elif slot.state in (FREE, SHARED):
                slot.state = ALLOCATED
    return slots


def schedule(
    requests: list[Request],
    slots: list[GpuSlot],
    strategy: str = "sequential",
    topology: Mapping[tuple[int, int], int] | None = None,
    *,
    mode: str = "backfill",
    now: float = 0.0,
    quotas: dict[str, QuotaUse] | None = None,
    reasons: bool = True,
    cores: CorePool | None = None,
    counted: dict[str, CountPool] | None = None,
) -> dict[str, Binding | Wait]:
    """Bind requests in the given (queue) order. ``slots`` are updated with this pass's bindings,
    so the caller sees the GPUs as the pass leaves them; so are ``quotas``' ``used``, ``cores``
    (None: CPU cores are not booked, ``resources.cpus`` is ignored) and the ``counted`` kinds'
    pools (a kind absent: not booked). A job binds only when every kind it needs fits.

    ``reasons=False`` (the simulator) stops once no GPU is left that anyone could take, and
    gives waiting jobs no message: the bindings are the same, the pass is cheaper."""
    run = _Pass(GpuPlacer(slots, strategy, topology, mode, now, reasons), quotas if quotas is not None else {}, reasons)
    run.placers = [CoreBooking(cores, mode, now)] if cores is not None else []
    run.placers += [CountBooking(pool, mode, now) for pool in (counted or {}).values()]
    gpus, result, waits, quota_checks, empty = run.gpus, run.result, run.waits, bool(run.quotas), EMPTY
    for req in requests:
        if req.gpus == 0:
            result[req.name] = _without_gpus(run.placers, req)
            continue
        if not reasons and gpus.exhausted_at == gpus.version:
            break
        # inline, the common case of a deep queue: shaped like a job that already waits, with the
        # GPUs as they were then (a quota is checked first, in offer)
        reserved_at = gpus.reserved_at
        ends_in_time = reserved_at < math.inf and req.time_limit is not None and now + req.time_limit <= reserved_at
        key: Shape = (req.gpus, req.gpu_type, req.gpu_memory, req.shared, gpus.version, ends_in_time, req.cpus)
        if req.fenced or req.preferred:  # reserved GPUs kept from it or for it: its own shape
            key += (req.fenced, req.fenced_why, req.preferred)
        if req.amounts is not empty:  # counted kinds (shm): part of its shape (most jobs ask none)
            key += (req.amounts,)
        if key in waits and not (quota_checks and req.quota_keys):
            result[req.name] = waits[key]
        else:
            run.offer(req, key)
    return result


class _Pass:
    """One scheduling pass: its bindings so far, the kinds it books, and the reasons it gave.

    Thousands of pending jobs come in a few shapes; GPUs change only when a job binds or holds.
    So candidates are computed once per shape, and a waiting job's reason once per shape and
    GPU state (``GpuPlacer.version``): a pass over 10,000 pending jobs costs little more than over 10."""

    def __init__(self, gpus: GpuPlacer, quotas: dict[str, QuotaUse], reasons: bool) -> None:
        self.gpus, self.quotas, self.reasons = gpus, quotas, reasons
        self.result: dict[str, Binding | Wait] = {}
        self.waits: dict[Shape, Wait] = {}
        self.placers: list[Placer] = []  # the kinds booked besides GPUs: cores, counted kinds (decide/placement)

    def offer(self, req: Request, key: Shape) -> None:
        """Bind ``req`` or say why it waits. ``key``: its shape and the GPUs' ``version``.
        GPUs are asked first: they are the gang, the quota and the reservation unit."""
        if req.quota_keys and self.quotas:
            over = _over_quota(req, self.quotas)
            if over is not None:
                self.result[req.name] = over
                return
        gpus = self.gpus
        never = gpus.never(req)
        if never is not None:
            self.result[req.name] = Wait(Reason.Unschedulable, never) if self.reasons else NO_REASON
            return
        for placer in self.placers:  # inline: every request that gets here asks it (10,000 a pass)
            never = placer.never(req)
            if never is not None:
                self.result[req.name] = Wait(Reason.Unschedulable, never)
                return
        if key in self.waits:
            self.result[req.name] = self.waits[key]
            return
        if not gpus.allows(req):
            self.result[req.name] = self.waits[key] = gpus.wait(req)
            return
        blocked = _blocked(self.placers, req)
        if blocked is not None:
            gpus.version += 1  # a reservation of that kind may be placed: later shapes see it
            self.result[req.name] = self.waits[key] = blocked.wait(req)
            return
        devices = gpus.take(req, frozenset())  # all fit: each kind books its share
        for quota_key in req.quota_keys:
            if quota_key in self.quotas:
                self.quotas[quota_key].used += req.gpus
        near = gpus.near(devices)  # the GPUs' NUMA node
        cores = tuple(core for placer in self.placers for core in placer.take(req, near))
        self.result[req.name] = Binding(list(devices), [gpus.uuid(d) for d in devices], cores)


def _never(placers: list[Placer], req: Request) -> Wait | None:
    """Unschedulable when some kind besides GPUs can never give ``req`` enough on this machine."""
    for placer in placers:
        message = placer.never(req)  # None when it asks none
        if message is not None:
            return Wait(Reason.Unschedulable, message)
    return None


def _blocked(placers: list[Placer], req: Request) -> Placer | None:
    """The first kind besides GPUs that ``req`` may not take its share of now."""
    return next((placer for placer in placers if placer.needs(req) and not placer.allows(req)), None)


def _without_gpus(placers: list[Placer], req: Request) -> Binding | Wait:
    """A job with no GPUs: bound when every other kind it needs fits (any free cores), else told why."""
    needed = [placer for placer in placers if placer.needs(req)]
    never = _never(needed, req)
    if never is not None:
        return never
    blocked = _blocked(needed, req)
    if blocked is not None:
        return blocked.wait(req)
    return Binding([], [], tuple(core for placer in needed for core in placer.take(req, frozenset())))


def _over_quota(req: Request, quotas: dict[str, QuotaUse]) -> Wait | None:
    for quota_key in req.quota_keys:
        use = quotas.get(quota_key)
        if use is None or use.used + req.gpus <= use.limit:
            continue
        what, limit = gpu_count(req.gpus), gpu_count(use.limit)
        if req.gpus > use.limit:
            return Wait(
                Reason.Quota, f"needs {what}, more than the quota of {quota_key} ({limit} at once): it can never start"
            )
        return Wait(Reason.Quota, f"needs {what}; {quota_key} may use {limit} at once and {use.used} are in use")
    return None


def never_fits(
    req: Request,
    slots: list[GpuSlot],
    cores: frozenset[int] | None = None,
    capacity: Mapping[str, int] | None = None,
) -> str | None:
    """Why ``req`` can never start on these GPUs (and ``cores``, when booked, and the counted kinds
    of ``capacity``): the Unschedulable message, with its numbers, or None when some day it could.
    What ``gflowctl apply`` is warned of by gflowd's review."""
    kinds: list[Placer] = [CoreBooking(CorePool(cores), "backfill", 0.0)] if cores is not None else []
    kinds += [CountBooking(CountPool(kind, amount), "backfill", 0.0) for kind, amount in (capacity or {}).items()]
    for placer in kinds:
        too_much = placer.never(req)
        if too_much is not None:
            return too_much
    typed = [s for s in slots if matches(s, req)]
    return never_fits_text(req, slots, typed) if len(usable_gpus(typed, req)) < req.gpus else None


# -- preemption -------------------------------------------------------------------------------------


def preemption_victims(
    req: Request, priority: float, slots: list[GpuSlot], running: list[Running], threshold: int
) -> list[str]:
    """The running jobs to stop so that ``req`` (priority ``priority``) fits, or none.

    Only jobs at least ``threshold`` below it are candidates, lowest priority first, then the
    most recently started (the least work lost). All or nothing: if stopping every candidate
    would not make room, nobody is stopped. Exclusive requests only."""
    if req.shared or req.gpus == 0:
        return []
    usable = {s.index: s for s in slots if matches(s, req) and s.state not in UNSCHEDULABLE}
    if req.gpu_memory is not None:
        usable = {i: s for i, s in usable.items() if s.gpu.memory_total >= req.gpu_memory}
    free = {i for i, s in usable.items() if s.state == "Free"}
    holders: dict[int, set[str]] = {}
    for job in running:
        for device in job.devices:
            holders.setdefault(device, set()).add(job.name)
    victims: list[str] = []
    candidates = sorted(
        (j for j in running if j.priority + threshold <= priority), key=lambda j: (j.priority, -j.started, j.name)
    )
    for job in candidates:
        if len(free) >= req.gpus:
            break
        if not any(d in usable for d in job.devices):
            continue
        victims.append(job.name)
        stopped = set(victims)
        for device in job.devices:
            if device in usable and holders.get(device, set()) <= stopped:
                free.add(device)
    return victims if len(free) >= req.gpus else []
