"""The scheduler: which pending jobs get which GPUs this pass, and why the others wait.

A pure function of (requests in queue order, GPU slots, strategy, topology). It never starts
anything and never reads files; the same inputs give the same bindings (``random`` included: it
is seeded by the job's name).

Rules, in order:
- Gang binding: a job gets all of its GPUs in one pass or none.
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
- Reservations (``kind: Reservation``): a request's ``fenced`` GPUs are not for it this pass
  (``controller.decide.reservations`` says which); when they are all that keeps it from fitting,
  it waits with reason ``Reserved`` and holds nothing.

The queue order (priority, aging, fair share) is the caller's: see ``controller.decide.policy``.
"""

from __future__ import annotations

import math

from controller.api.units import format_duration, format_quantity
from controller.decide.placement import Placer
from controller.decide.placement.counted import CountBooking
from controller.decide.placement.cpus import CoreBooking
from controller.decide.placement.gpus import choose, has_room, matches, usable_ever as usable_gpus
from controller.model.gpus import Gpu
from controller.model.reasons import Reason
from controller.model.resources import EMPTY, KINDS, count
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

STRATEGIES = ("sequential", "random", "packed", "spread")
MODES = ("strict", "backfill", "firstfit")


def build_slots(
    gpus: list[Gpu],
    holders: list[Holder],
    allowed: set[int] | None,
    managed_pids: set[int],
    unmanaged_threshold: int,
    ignore_processes: frozenset[str] = frozenset(),
) -> list[GpuSlot]:
    """GPU states from inventory and current holders (SPEC.md section 5)."""
    slots = []
    for gpu in gpus:
        foreign = [
            p for p in gpu.processes
            if p.pid not in managed_pids and str(p.pid) not in ignore_processes and p.name not in ignore_processes
        ]
        foreign_memory = sum(p.used_memory for p in foreign)
        if not gpu.healthy:
            state = "Unhealthy"
        elif allowed is not None and gpu.index not in allowed:
            state = "Restricted"
        elif foreign and foreign_memory >= unmanaged_threshold:
            state = "Unmanaged"
        else:
            state = "Free"
        slots.append(GpuSlot(gpu, state, foreign_memory=foreign_memory, foreign_pids=tuple(p.pid for p in foreign)))
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
                if slot.state == "Free":
                    slot.state = "Shared"
            elif slot.state in ("Free", "Shared"):
                slot.state = "Allocated"
    return slots


def schedule(
    requests: list[Request],
    slots: list[GpuSlot],
    strategy: str = "sequential",
    topology: dict[tuple[int, int], int] | None = None,
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
    run = _Pass(slots, strategy, topology, mode, now, quotas if quotas is not None else {}, reasons)
    run.placers = [CoreBooking(cores, mode, now)] if cores is not None else []
    run.placers += [CountBooking(pool, mode, now) for pool in (counted or {}).values()]
    result, waits, quota_checks, empty = run.result, run.waits, bool(run.quotas), EMPTY
    for req in requests:
        if req.gpus == 0:
            result[req.name] = _without_gpus(run.placers, req)
            continue
        if not reasons and run.exhausted_at == run.version:
            break
        # inline, the common case of a deep queue: shaped like a job that already waits, with the
        # GPUs as they were then (a quota is checked first, in offer)
        reserved_at = run.reserved_at
        ends_in_time = reserved_at < math.inf and req.time_limit is not None and now + req.time_limit <= reserved_at
        key = (req.gpus, req.gpu_type, req.gpu_memory, req.shared, run.version, ends_in_time, req.cpus)
        if req.fenced or req.preferred:  # reserved GPUs kept from it or for it: its own shape
            key += (req.fenced, req.fenced_why, req.preferred)
        if req.amounts is not empty:  # counted kinds (shm): part of its shape (most jobs ask none)
            key += (req.amounts,)
        if key in waits and not (quota_checks and req.quota_keys):
            result[req.name] = waits[key]
        else:
            run.offer(req, key, ends_in_time)
    return result


class _Pass:
    """One scheduling pass: its bindings so far, the GPUs held for a blocked job, and caches.

    Thousands of pending jobs come in a few shapes; GPUs change only when a job binds or holds.
    So candidates are computed once per shape, and a waiting job's reason once per shape and
    GPU state (``version``): a pass over 10,000 pending jobs costs little more than over 10."""

    def __init__(
        self, slots: list[GpuSlot], strategy: str, topology: dict[tuple[int, int], int] | None, mode: str,
        now: float, quotas: dict[str, QuotaUse], reasons: bool,
    ) -> None:
        self.slots, self.strategy, self.topology, self.mode = slots, strategy, topology, mode
        self.now, self.quotas, self.reasons = now, quotas, reasons
        self.result: dict[str, Binding | Wait] = {}
        self.taken_by: dict[int, list[str]] = {}  # GPU index -> jobs bound to it earlier in this pass
        self.held: dict[int, str] = {}  # GPU index -> blocked higher-priority job it is kept for
        self.reserved_at = math.inf  # backfill: when the held GPUs are needed; inf: strict hold
        self.candidates: dict[tuple, tuple[list[GpuSlot], list[GpuSlot]]] = {}
        self.waits: dict[tuple, Wait] = {}
        self.version = 0
        self.exhausted_at = -1  # the version at which no GPU was left for anyone (reasons=False only)
        self.placers: list[Placer] = []  # the kinds booked besides GPUs: cores, counted kinds (decide/placement)

    def offer(self, req: Request, key: tuple, ends_in_time: bool) -> None:
        """Bind ``req`` or say why it waits. ``key``: its shape and the GPUs' ``version``, with
        ``ends_in_time``: whether its timeLimit ends it before held GPUs are needed (backfill)."""
        if req.quota_keys and self.quotas:
            over = _over_quota(req, self.quotas)
            if over is not None:
                self.result[req.name] = over
                return
        typed, usable_ever = self._candidates(req)
        if len(usable_ever) < req.gpus:
            self.result[req.name] = Wait(Reason.Unschedulable, _never_fits(req, self.slots, typed)) if self.reasons else _NO_REASON
            return
        never = _never(self.placers, req)
        if never is not None:
            self.result[req.name] = never
            return
        if key in self.waits:
            self.result[req.name] = self.waits[key]
            return
        room = [s for s in usable_ever if has_room(s, req)]
        if req.fenced:
            room, unfenced_room = [s for s in room if s.index not in req.fenced], room
            usable_ever = [s for s in usable_ever if s.index not in req.fenced]  # what it may hold
        open_room = room if ends_in_time else [s for s in room if s.index not in self.held]
        blocked = _blocked(self.placers, req) if len(open_room) >= req.gpus else None
        if blocked is not None:
            self.version += 1  # a reservation of that kind may be placed: later shapes see it
            self.result[req.name] = self.waits[key] = blocked.wait(req)
        elif len(open_room) >= req.gpus:
            self._bind(req, open_room, ends_in_time)
        elif req.fenced and len(unfenced_room) >= req.gpus:
            # it would fit but for a Reservation: say so, and hold nothing for it
            free = f"{len(room)} free for it" if room else "none free for it"
            wait = Wait(Reason.Reserved, f"needs {_count(req.gpus)}, {free}: {req.fenced_why}") if self.reasons else _NO_REASON
            self.result[req.name] = self.waits[key] = wait
        else:
            self._wait(req, key, typed, usable_ever, room)

    def _candidates(self, req: Request) -> tuple[list[GpuSlot], list[GpuSlot]]:
        """The GPUs of the request's type, and those it could ever use (healthy, allowed, big enough)."""
        shape = (req.gpu_type, req.gpu_memory)
        if shape not in self.candidates:
            typed = [s for s in self.slots if matches(s, req)]
            self.candidates[shape] = (typed, usable_gpus(typed, req))
        return self.candidates[shape]

    def _bind(self, req: Request, open_room: list[GpuSlot], ends_in_time: bool) -> None:
        self.version += 1
        if ends_in_time:  # take held GPUs first: the free ones stay for jobs that run longer
            in_held = [s for s in open_room if s.index in self.held]
            if len(in_held) >= req.gpus:
                open_room = in_held
        if req.preferred:  # reserved GPUs it may use first: the others stay open for everyone
            in_reserved = [s for s in open_room if s.index in req.preferred]
            if len(in_reserved) >= req.gpus:
                open_room = in_reserved
        chosen = choose(open_room, req, self.strategy, self.topology)
        ends = self.now + req.time_limit if req.time_limit is not None else math.inf
        for slot in chosen:
            slot.jobs.append(req.name)
            slot.free_at = max(slot.free_at, ends)
            self.taken_by.setdefault(slot.index, []).append(req.name)
            if req.shared:
                slot.shared_reserved += req.gpu_memory or 0
                slot.state = "Shared"
            else:
                slot.state = "Allocated"
        for quota_key in req.quota_keys:
            if quota_key in self.quotas:
                self.quotas[quota_key].used += req.gpus
        near = frozenset().union(*(s.gpu.cpus for s in chosen))  # the GPUs' NUMA node
        cores = tuple(core for placer in self.placers for core in placer.take(req, near))
        self.result[req.name] = Binding([s.index for s in chosen], [s.gpu.uuid for s in chosen], cores)
        self._note_exhausted()

    def _wait(self, req: Request, key: tuple, typed: list[GpuSlot], usable_ever: list[GpuSlot], room: list[GpuSlot]) -> None:
        if self.reasons:
            visible = [s for s in typed if s.state != "Restricted"]  # what the message explains
            wait = _why_waiting(req, usable_ever, visible, room, self.taken_by, self.held)
            reserved_at = self.reserved_at
            if reserved_at < math.inf and len(room) >= req.gpus and reserved_at > self.now:
                # it fits on held GPUs now: say how short a timeLimit would let it backfill
                hint = f"; with a timeLimit of at most {format_duration(reserved_at - self.now)} it could start now"
                wait = Wait(wait.reason, wait.message + hint)
            self.result[req.name] = self.waits[key] = wait
        else:
            self.result[req.name] = self.waits[key] = _NO_REASON
        # Reserve GPUs for the first blocked job that our own jobs' ends will let fit, so a stream
        # of smaller jobs behind it cannot take them forever.
        if not self.held and self.mode != "firstfit" and _fits_once_ours_end(req, usable_ever):
            if self.mode == "backfill":
                needed, self.reserved_at = _reservation(req, usable_ever, room, self.now)
            else:
                needed, self.reserved_at = room, math.inf
            for slot in needed:
                self.held[slot.index] = req.name
            if needed:
                self.version += 1
                self._note_exhausted()

    def _note_exhausted(self) -> None:
        if not self.reasons and not _any_room(self.slots, self.held, self.mode):
            self.exhausted_at = self.version


_NO_REASON = Wait(Reason.Resources, "")


def _never(placers: list[Placer], req: Request) -> Wait | None:
    """Unschedulable when some kind besides GPUs can never give ``req`` enough on this machine."""
    for placer in placers:
        message = placer.never(req) if placer.needs(req) else None
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
        what, limit = _count(req.gpus), _count(use.limit)
        if req.gpus > use.limit:
            return Wait(Reason.Quota, f"needs {what}, more than the quota of {quota_key} ({limit} at once): it can never start")
        return Wait(Reason.Quota, f"needs {what}; {quota_key} may use {limit} at once and {use.used} are in use")
    return None


def _reservation(req: Request, usable: list[GpuSlot], room: list[GpuSlot], now: float) -> tuple[list[GpuSlot], float]:
    """EASY backfill: the GPUs ``req`` will start on and when. It takes the GPUs that free up
    earliest; of those free at that moment, it prefers ones busy now, so GPUs free now that it
    does not need stay open for jobs behind it, whatever their length."""
    free_now = {s.index for s in room}
    when: list[tuple[float, int, GpuSlot]] = []
    for slot in usable:
        if slot.index in free_now:
            when.append((now, 1, slot))
        elif slot.state in ("Allocated", "Shared") and (
            not req.shared or slot.gpu.memory_total - slot.foreign_memory >= (req.gpu_memory or 0)
        ):
            when.append((slot.free_at, 0, slot))
    when.sort(key=lambda w: (w[0], w[2].index))
    if len(when) < req.gpus:
        return room, math.inf
    at = max(now, when[req.gpus - 1][0])
    if at == math.inf:
        return room, math.inf
    ready = sorted((w for w in when if w[0] <= at), key=lambda w: (w[1], w[0], w[2].index))
    needed = [w[2] for w in ready[: req.gpus]]
    return needed, at


def _any_room(slots: list[GpuSlot], held: dict[int, str], mode: str) -> bool:
    """Could any job still be placed somewhere (ignoring its shape)?"""
    for slot in slots:
        if slot.state in ("Free", "Shared") and (mode == "backfill" or slot.index not in held):
            return True
    return False


# -- GPUs (which ones: decide/placement/gpus.py) ---------------------------------------------------------


def _fits_once_ours_end(req: Request, usable: list[GpuSlot]) -> bool:
    """Will this request fit when the jobs gflow runs on these GPUs end (not foreign processes)?"""
    if req.shared:
        candidates = [s for s in usable if s.state in ("Free", "Shared", "Allocated") and s.gpu.memory_total - s.foreign_memory >= (req.gpu_memory or 0)]
    else:
        candidates = [s for s in usable if s.state in ("Free", "Shared", "Allocated")]
    return len(candidates) >= req.gpus


# -- messages ------------------------------------------------------------------------------------------


def _gpus_text(indices: list[int]) -> str:
    return f"GPU{'s' if len(indices) != 1 else ''} {','.join(str(i) for i in indices)}"


def _count(n: int, what: str = KINDS["gpus"].noun) -> str:
    return count(n, what)


def describe_busy(slots: list[GpuSlot], held: dict[int, str] | None = None) -> str:
    """Why GPUs are not free, grouped: ``GPUs 0,2 allocated to a, b; GPU 3 unmanaged: pid 4242``."""
    held = held or {}
    allocated = [s for s in slots if s.state == "Allocated" and s.jobs]
    shared = [s for s in slots if s.state == "Shared" and s.jobs]
    parts = []
    if allocated:
        jobs = list(dict.fromkeys(j for s in allocated for j in s.jobs))
        parts.append(f"{_gpus_text([s.index for s in allocated])} allocated to {', '.join(jobs)}")
    if shared:
        jobs = list(dict.fromkeys(j for s in shared for j in s.jobs))
        parts.append(f"{_gpus_text([s.index for s in shared])} shared by {', '.join(jobs)}")
    for slot in slots:
        if slot.state == "Unmanaged":
            pids = ", ".join(str(p) for p in slot.foreign_pids[:3]) + (" ..." if len(slot.foreign_pids) > 3 else "")
            parts.append(
                f"GPU {slot.index} unmanaged: pid {pids} ({format_quantity(slot.foreign_memory)}) not started by gflow"
            )
    unhealthy = [s.index for s in slots if s.state == "Unhealthy"]
    if unhealthy:
        parts.append(f"{_gpus_text(unhealthy)} unhealthy")
    kept = [s for s in slots if s.index in held and s.state in ("Free", "Shared")]
    if kept:
        parts.append(f"{_gpus_text([s.index for s in kept])} held for higher-priority job {held[kept[0].index]}")
    return "; ".join(parts)


def never_fits(req: Request, slots: list[GpuSlot], cores: frozenset[int] | None = None) -> str | None:
    """Why ``req`` can never start on these GPUs (and ``cores``, when booked): the Unschedulable
    message, with its numbers, or None when some day it could. What ``gflowctl apply`` is warned
    of by gflowd's review."""
    if cores is not None and req.cpus:
        too_many = CoreBooking(CorePool(cores), "backfill", 0.0).never(req)
        if too_many is not None:
            return too_many
    typed = [s for s in slots if matches(s, req)]
    return _never_fits(req, slots, typed) if len(usable_gpus(typed, req)) < req.gpus else None


def _never_fits(req: Request, slots: list[GpuSlot], typed: list[GpuSlot]) -> str:
    what = _count(req.gpus)
    if req.gpu_type and not typed:
        names = sorted({s.gpu.name for s in slots})
        have = ", ".join(names) if names else "no GPUs"
        return f"needs {what} of type {req.gpu_type}, no GPU on this machine matches (it has: {have})"
    if not slots:
        return f"needs {what}, this machine has no GPUs"
    if req.gpu_memory is not None:
        big = [s for s in typed if s.gpu.memory_total >= req.gpu_memory]
        if len(big) < req.gpus:
            largest = max((s.gpu.memory_total for s in typed), default=0)
            return (
                f"needs {what} with {format_quantity(req.gpu_memory)} memory each, "
                f"{_count(len(big))} this large (largest {format_quantity(largest)})"
            )
    kind = f" {req.gpu_type}" if req.gpu_type else ""
    usable = [s for s in typed if s.state not in ("Unhealthy", "Restricted")]
    if len(usable) == len(typed):
        return f"needs {what}{kind}, this machine has {len(typed)}"
    notes = []
    restricted = [s.index for s in typed if s.state == "Restricted"]
    unhealthy = [s.index for s in typed if s.state == "Unhealthy"]
    if restricted:
        notes.append(f"{_gpus_text(restricted)} restricted by the controller's gpus setting")
    if unhealthy:
        notes.append(f"{_gpus_text(unhealthy)} unhealthy")
    return f"needs {what}{kind}, this machine has {len(usable)} usable of {len(typed)} ({'; '.join(notes)})"


def _why_waiting(
    req: Request,
    usable: list[GpuSlot],
    visible: list[GpuSlot],
    room: list[GpuSlot],
    taken_by: dict[int, list[str]],
    held: dict[int, str],
) -> Wait:
    what = _count(req.gpus)
    holders = list(dict.fromkeys(held[s.index] for s in room if s.index in held))
    if holders:
        return Wait(
            Reason.Priority,
            f"waiting behind higher-priority job {', '.join(holders)}: needs {what}, "
            f"{len(room)} free but held for it ({describe_busy(visible, held)})",
        )
    before = list(dict.fromkeys(name for s in usable for name in taken_by.get(s.index, ())))
    if before:
        return Wait(Reason.Priority, f"waiting behind higher-priority job {', '.join(before)}: needs {what}, {len(room)} free after it took GPUs")
    if req.shared:
        short = [s for s in usable if s.state in ("Free", "Shared") and s.shared_room() < (req.gpu_memory or 0)]
        if short:
            best = max(s.shared_room() for s in short)
            return Wait(
                Reason.GPUMemory,
                f"needs {format_quantity(req.gpu_memory)} GPU memory on {what}, at most "
                f"{format_quantity(max(best, 0)) or '0'} left on a shared GPU ({describe_busy(visible)})",
            )
    busy = describe_busy(visible, held)
    return Wait(Reason.Resources, f"needs {what}, {len(room)} free" + (f" ({busy})" if busy else ""))


# -- preemption -------------------------------------------------------------------------------------


def preemption_victims(
    req: Request, priority: int, slots: list[GpuSlot], running: list[Running], threshold: int
) -> list[str]:
    """The running jobs to stop so that ``req`` (priority ``priority``) fits, or none.

    Only jobs at least ``threshold`` below it are candidates, lowest priority first, then the
    most recently started (the least work lost). All or nothing: if stopping every candidate
    would not make room, nobody is stopped. Exclusive requests only."""
    if req.shared or req.gpus == 0:
        return []
    usable = {s.index: s for s in slots if matches(s, req) and s.state not in ("Unhealthy", "Restricted", "Unmanaged")}
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
