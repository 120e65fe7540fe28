"""GPUs as a resource (``resources.gpus``, ``gpuType``, ``gpuMemory``, ``sharing``): which devices.

Pure. Which GPUs a request may ever use (its type, healthy, allowed, large enough), which have room
now (Exclusive: free; Shared: free or shared with enough gpuMemory left), and which of those it gets:
ordered by the allocation strategy (``sequential``, ``random`` seeded by the job's name, ``packed``,
``spread``), then, for several GPUs, the set whose farthest pair is closest in the topology. The
scheduler (``controller.decide.scheduler``) drives gang binding, quotas and reservations with them.
"""

from __future__ import annotations

import random

from controller.model.scheduling import GpuSlot, Request


def matches(slot: GpuSlot, request: Request) -> bool:
    return request.gpu_type is None or request.gpu_type.lower() in slot.gpu.name.lower()


def has_room(slot: GpuSlot, req: Request) -> bool:
    if req.shared:
        return slot.state in ("Free", "Shared") and slot.shared_room() >= (req.gpu_memory or 0)
    return slot.state == "Free"


def order(room: list[GpuSlot], req: Request, strategy: str) -> list[GpuSlot]:
    if strategy == "random":
        shuffled = sorted(room, key=lambda s: s.index)
        random.Random(req.name).shuffle(shuffled)
        return shuffled
    if strategy == "packed":  # fill partly used shared GPUs first: least room left that still fits
        return sorted(room, key=lambda s: (s.state != "Shared", s.shared_room(), s.index))
    if strategy == "spread":  # the emptiest GPUs first
        return sorted(room, key=lambda s: (len(s.jobs), -s.shared_room(), s.index))
    return sorted(room, key=lambda s: s.index)


def choose(room: list[GpuSlot], req: Request, strategy: str, topology: dict[tuple[int, int], int] | None) -> list[GpuSlot]:
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


def distance(topology: dict[tuple[int, int], int], a: int, b: int) -> int:
    return topology.get((a, b), topology.get((b, a), 1000))


def usable_ever(typed: list[GpuSlot], req: Request) -> list[GpuSlot]:
    """The GPUs of the request's type it could ever use: healthy, allowed, big enough."""
    usable = [s for s in typed if s.state not in ("Unhealthy", "Restricted")]
    if req.gpu_memory is not None:
        usable = [s for s in usable if s.gpu.memory_total >= req.gpu_memory]
    return usable
