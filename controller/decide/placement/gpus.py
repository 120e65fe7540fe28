"""GPUs as a resource (``resources.gpus``, ``gpuType``, ``gpuMemory``, ``sharing``): which devices.

Pure. Which GPUs a request may ever use (its type, healthy, allowed, large enough), which have room
now (Exclusive: free; Shared: free or shared with enough gpuMemory left), and which of those it gets:
ordered by the allocation strategy (``sequential``, ``random`` seeded by the job's name, ``packed``,
``spread``), then, for several GPUs, the set whose farthest pair is closest in the topology.

:class:`GpuPlacer` is the GPUs during one pass, behind the same questions as every kind
(``controller.decide.placement.Placer``): gang binding (all of a job's GPUs or none), the GPUs held
for the first job that cannot fit yet (strict, or with a time under EASY backfill; none under
``firstfit``), and the GPUs a Reservation keeps from a job (``Request.fenced``: it waits with reason
``Reserved`` and holds nothing). ``version`` moves whenever GPUs are bound or held, so the scheduler
can reuse a waiting job's reason for the next job of the same shape.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from controller.api.units import format_duration
from controller.decide.placement.gpu_text import gpu_count, never_fits_text, why_waiting
from controller.model.mig import mig_profile_ok
from controller.model.reasons import Reason
from controller.model.scheduling import GpuSlot, GpuState, Request, Wait

NO_REASON = Wait(Reason.Resources, "")  # what a waiting job is told when the pass gives no reasons (the simulator)


VENDORS = ("nvidia", "amd")  # gpuType: amd / nvidia picks a vendor's GPUs


def matches(slot: GpuSlot, request: Request) -> bool:
    """A MIG profile (``1g.10gb``) picks the MIG instances of that profile; a vendor (``amd``,
    ``nvidia``) that vendor's whole GPUs; anything else whole GPUs by a part of their name. A whole-GPU
    job never lands on a MIG instance."""
    wanted = request.gpu_type
    if wanted is not None and mig_profile_ok(wanted):
        return slot.gpu.profile == wanted.strip().lower()
    if slot.gpu.profile:
        return False
    if wanted is None:
        return True
    wanted = wanted.lower()
    return slot.gpu.vendor == wanted if wanted in VENDORS else wanted in slot.gpu.name.lower()


def one_vendor(room: list[GpuSlot], count: int) -> list[GpuSlot]:
    """The GPUs of one vendor a job may take together (a job never mixes vendors: its runtime
    sees one kind): the first vendor's with ``count`` of them, else the largest vendor's."""
    if all(s.gpu.vendor == room[0].gpu.vendor for s in room):
        return room  # one vendor (every box but a mixed one): as it was
    groups: dict[str, list[GpuSlot]] = {}
    for slot in room:
        groups.setdefault(slot.gpu.vendor, []).append(slot)
    return next((g for g in groups.values() if len(g) >= count), max(groups.values(), key=len))


def has_room(slot: GpuSlot, req: Request) -> bool:
    """Room now: Exclusive on a free GPU, Shared on a free or shared one; a job that declares
    gpuMemory only where that much is free, by NVML's live reading as well as by the promises."""
    if req.shared:
        return slot.state in (GpuState.Free, GpuState.Shared) and slot.memory_room() >= (req.gpu_memory or 0)
    return slot.state == GpuState.Free and (req.gpu_memory is None or slot.memory_room() >= req.gpu_memory)


def fits_once_ours_end(slot: GpuSlot, req: Request) -> bool:
    """Whether the memory it declares fits beside what others hold (ours ends; theirs may not)."""
    return req.gpu_memory is None or slot.gpu.memory_total - slot.not_ours() >= req.gpu_memory


def order(room: list[GpuSlot], req: Request, strategy: str) -> list[GpuSlot]:
    if strategy == "random":
        shuffled = sorted(room, key=lambda s: s.index)
        random.Random(req.name).shuffle(shuffled)
        return shuffled
    if strategy == "packed":  # fill partly used shared GPUs first: least room left that still fits
        return sorted(room, key=lambda s: (s.state != GpuState.Shared, s.shared_room(), s.index))
    if strategy == "spread":  # the emptiest GPUs first
        return sorted(room, key=lambda s: (len(s.jobs), -s.shared_room(), s.index))
    return sorted(room, key=lambda s: s.index)


def choose(
    room: list[GpuSlot], req: Request, strategy: str, topology: Mapping[tuple[int, int], int] | None
) -> list[GpuSlot]:
    ordered = order(room, req, strategy)
    if req.gpus == 1 or not topology:
        return ordered[: req.gpus]
    # Multi-GPU: prefer a set whose farthest pair is closest (same NVLink / PCIe switch), ties by
    # the strategy's order. Greedy per anchor: cheap and good on real machines' trees.
    best: list[GpuSlot] | None = None
    best_cost: tuple[int, int] | None = None
    for rank, anchor in enumerate(ordered):
        rest = sorted(
            (s for s in ordered if s is not anchor),
            key=lambda s: (distance(topology, anchor.index, s.index), ordered.index(s)),
        )
        group = [anchor, *rest[: req.gpus - 1]]
        cost = (max(distance(topology, a.index, b.index) for a in group for b in group if a is not b), rank)
        if best_cost is None or cost < best_cost:
            best, best_cost = group, cost
    return sorted(best or ordered[: req.gpus], key=lambda s: s.index)


def distance(topology: Mapping[tuple[int, int], int], a: int, b: int) -> int:
    return topology.get((a, b), topology.get((b, a), 1000))


def usable_ever(typed: list[GpuSlot], req: Request) -> list[GpuSlot]:
    """The GPUs of the request's type it could ever use: healthy, allowed (an admin's cordon is
    for a while: a job waits it out), big enough."""
    usable = [s for s in typed if s.state not in (GpuState.Unhealthy, GpuState.Restricted) or s.cordon]
    if req.gpu_memory is not None:
        usable = [s for s in usable if s.gpu.memory_total >= req.gpu_memory]
    return usable


# -- the GPUs during one pass ----------------------------------------------------------------------------


@dataclass
class _Fit:
    """Where ``req`` stands on the GPUs, from ``allows`` for the ``take`` or ``wait`` that follows."""

    name: str
    typed: list[GpuSlot]  # the GPUs of its type
    usable: list[GpuSlot]  # those it could ever use (and may hold: not fenced)
    room: list[GpuSlot]  # those with room for it now (not fenced)
    unfenced_room: list[GpuSlot]  # ... counting the GPUs a Reservation keeps from it
    open_room: list[GpuSlot]  # ... and not held for another job (unless it ends in time)
    ends_in_time: bool


class GpuPlacer:
    """The GPUs during one pass: what is bound, what is held for a blocked job, and caches."""

    def __init__(
        self,
        slots: list[GpuSlot],
        strategy: str,
        topology: Mapping[tuple[int, int], int] | None,
        mode: str,
        now: float,
        reasons: bool,
    ) -> None:
        self.slots, self.strategy, self.topology, self.mode = slots, strategy, topology, mode
        self.now, self.reasons = now, reasons
        self.taken_by: dict[int, list[str]] = {}  # GPU index -> jobs bound to it earlier in this pass
        self.held: dict[int, str] = {}  # GPU index -> blocked higher-priority job it is kept for
        self.reserved_at = math.inf  # backfill: when the held GPUs are needed; inf: strict hold
        self.candidates: dict[tuple[object, ...], tuple[list[GpuSlot], list[GpuSlot]]] = {}
        self.version = 0
        self.exhausted_at = -1  # the version at which no GPU was left for anyone (reasons=False only)
        self._fit: _Fit | None = None
        self._by_index = {s.index: s for s in slots}

    def ends_in_time(self, req: Request) -> bool:
        """Whether its timeLimit ends it before the held GPUs are needed (backfill)."""
        reserved_at = self.reserved_at
        return reserved_at < math.inf and req.time_limit is not None and self.now + req.time_limit <= reserved_at

    def needs(self, req: Request) -> bool:
        return req.gpus > 0

    def never(self, req: Request) -> str | None:
        typed, usable = self._candidates(req)
        if len(usable) < req.gpus:
            return never_fits_text(req, self.slots, typed)
        most = len(one_vendor(usable, req.gpus)) if usable else 0
        if most < req.gpus:  # a mixed box: enough GPUs, but not of one vendor
            return f"needs {gpu_count(req.gpus)}, this machine has at most {most} of one vendor (a job never mixes vendors)"
        return None

    def _candidates(self, req: Request) -> tuple[list[GpuSlot], list[GpuSlot]]:
        """The GPUs of the request's type, and those it could ever use (healthy, allowed, big enough)."""
        shape = (req.gpu_type, req.gpu_memory)
        if shape not in self.candidates:
            typed = [s for s in self.slots if matches(s, req)]
            self.candidates[shape] = (typed, usable_ever(typed, req))
        return self.candidates[shape]

    def allows(self, req: Request) -> bool:
        """Enough GPUs with room, not fenced off by a Reservation, not held for another job."""
        typed, usable = self._candidates(req)
        room = unfenced_room = [s for s in usable if has_room(s, req)]
        if req.fenced:
            room = [s for s in room if s.index not in req.fenced]
            usable = [s for s in usable if s.index not in req.fenced]  # what it may hold
        ends_in_time = self.ends_in_time(req)
        open_room = room if ends_in_time else [s for s in room if s.index not in self.held]
        open_room = one_vendor(open_room, req.gpus) if open_room else open_room
        self._fit = _Fit(req.name, typed, usable, room, unfenced_room, open_room, ends_in_time)
        return len(open_room) >= req.gpus

    def take(self, req: Request, near: frozenset[int]) -> tuple[int, ...]:
        """Bind the GPUs ``allows`` found room on; their indices."""
        fit = self._fit
        assert fit is not None and fit.name == req.name, "take follows allows for the same request"
        self.version += 1
        open_room = fit.open_room
        if fit.ends_in_time:  # take held GPUs first: the free ones stay for jobs that run longer
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
                slot.unclaimed += req.gpu_memory or 0
                slot.state = GpuState.Shared.value
            else:
                slot.state = GpuState.Allocated.value
        self.note_exhausted()
        return tuple(s.index for s in chosen)

    def uuid(self, device: int) -> str:
        return self._by_index[device].gpu.uuid

    def near(self, devices: tuple[int, ...]) -> frozenset[int]:
        """The cores of these GPUs' NUMA node: where their job's cores go first."""
        return frozenset().union(*(self._by_index[d].gpu.cpus for d in devices))

    def wait(self, req: Request) -> Wait:
        """Why ``req`` waits for GPUs (``allows`` said no); the first such job gets GPUs held for it."""
        fit = self._fit
        assert fit is not None and fit.name == req.name, "wait follows allows for the same request"
        if req.fenced and len(fit.unfenced_room) >= req.gpus:
            # it would fit but for a Reservation: say so, and hold nothing for it
            room = fit.room
            free = f"{len(room)} free for it" if room else "none free for it"
            return (
                Wait(Reason.Reserved, f"needs {gpu_count(req.gpus)}, {free}: {req.fenced_why}")
                if self.reasons
                else NO_REASON
            )
        wait = self._why(req, fit) if self.reasons else NO_REASON
        self._hold(req, fit)
        return wait

    def _why(self, req: Request, fit: _Fit) -> Wait:
        # what the message explains: not GPUs outside gflowd's --gpus, but an admin's cordon, yes
        visible = [s for s in fit.typed if s.state != GpuState.Restricted or s.cordon]
        wait = why_waiting(req, fit.usable, visible, fit.room, self.taken_by, self.held)
        reserved_at = self.reserved_at
        if reserved_at < math.inf and len(fit.room) >= req.gpus and reserved_at > self.now:
            # it fits on held GPUs now: say how short a timeLimit would let it backfill
            hint = f"; with a timeLimit of at most {format_duration(reserved_at - self.now)} it could start now"
            wait = Wait(wait.reason, wait.message + hint)
        return wait

    def _hold(self, req: Request, fit: _Fit) -> None:
        """Reserve GPUs for the first blocked job that our own jobs' ends will let fit, so a stream
        of smaller jobs behind it cannot take them forever."""
        if self.held or self.mode == "firstfit" or not _fits_once_ours_end(req, fit.usable):
            return
        if self.mode == "backfill":
            needed, self.reserved_at = _reservation(req, fit.usable, fit.room, self.now)
        else:
            needed, self.reserved_at = fit.room, math.inf
        for slot in needed:
            self.held[slot.index] = req.name
        if needed:
            self.version += 1
            self.note_exhausted()

    def note_exhausted(self) -> None:
        if not self.reasons and not _any_room(self.slots, self.held, self.mode):
            self.exhausted_at = self.version


def _reservation(req: Request, usable: list[GpuSlot], room: list[GpuSlot], now: float) -> tuple[list[GpuSlot], float]:
    """EASY backfill: the GPUs ``req`` will start on and when. It takes the GPUs that free up
    earliest; of those free at that moment, it prefers ones busy now, so GPUs free now that it
    does not need stay open for jobs behind it, whatever their length."""
    free_now = {s.index for s in room}
    when: list[tuple[float, int, GpuSlot]] = []
    for slot in usable:
        if slot.index in free_now:
            when.append((now, 1, slot))
        elif slot.state in (GpuState.Allocated, GpuState.Shared) and fits_once_ours_end(slot, req):
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
    return any(
        slot.state in (GpuState.Free, GpuState.Shared) and (mode == "backfill" or slot.index not in held)
        for slot in slots
    )


def _fits_once_ours_end(req: Request, usable: list[GpuSlot]) -> bool:
    """Will this request fit when the jobs gflow runs on these GPUs end (not foreign processes)?"""
    candidates = [
        s
        for s in usable
        if s.state in (GpuState.Free, GpuState.Shared, GpuState.Allocated) and fits_once_ours_end(s, req)
    ]
    return len(candidates) >= req.gpus
