"""The scheduler: which pending jobs get which GPUs this pass, and why the others wait.

A pure function of (requests in queue order, GPUs, what running jobs hold). It never starts
anything and never reads files. Gang binding: a job gets all of its GPUs in one pass or none.
Exclusive jobs take Free GPUs; Shared jobs co-locate on Free/Shared GPUs within the memory left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.api.units import format_quantity
from controller.gpus.inventory import Gpu


@dataclass(frozen=True)
class Request:
    name: str
    gpus: int
    gpu_type: str | None = None
    gpu_memory: int | None = None
    shared: bool = False


@dataclass
class GpuSlot:
    """A GPU as the scheduler sees it: its hardware facts plus who holds it."""

    gpu: Gpu
    state: str  # Free | Allocated | Shared | Unmanaged | Restricted | Unhealthy
    jobs: list[str] = field(default_factory=list)
    shared_reserved: int = 0  # gpuMemory promised to Shared jobs here
    foreign_memory: int = 0  # memory used by processes we did not start

    @property
    def index(self) -> int:
        return self.gpu.index

    def shared_room(self) -> int:
        return self.gpu.memory_total - self.shared_reserved - self.foreign_memory


@dataclass(frozen=True)
class Binding:
    devices: list[int]
    uuids: list[str]


@dataclass(frozen=True)
class Wait:
    reason: str  # Resources | Priority | Unschedulable | GPUMemory
    message: str


@dataclass(frozen=True)
class Holder:
    """A running job's hold on GPUs."""

    name: str
    devices: tuple[int, ...]
    shared: bool
    gpu_memory: int = 0


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
        slots.append(GpuSlot(gpu, state, foreign_memory=foreign_memory))
    by_index = {s.index: s for s in slots}
    for holder in holders:
        for device in holder.devices:
            slot = by_index.get(device)
            if slot is None:
                continue
            slot.jobs.append(holder.name)
            if holder.shared:
                slot.shared_reserved += holder.gpu_memory
                if slot.state == "Free":
                    slot.state = "Shared"
            elif slot.state in ("Free", "Shared"):
                slot.state = "Allocated"
    return slots


def _matches(slot: GpuSlot, request: Request) -> bool:
    return request.gpu_type is None or request.gpu_type.lower() in slot.gpu.name.lower()


def _busy_text(slots: list[GpuSlot]) -> str:
    parts = []
    for slot in slots:
        if slot.state in ("Allocated", "Shared") and slot.jobs:
            parts.append(f"GPU {slot.index} busy with job {', '.join(slot.jobs)}")
        elif slot.state == "Unmanaged":
            parts.append(f"GPU {slot.index} used by a process gflow did not start")
        elif slot.state == "Unhealthy":
            parts.append(f"GPU {slot.index} unhealthy")
    return "; ".join(parts)


def schedule(requests: list[Request], slots: list[GpuSlot]) -> dict[str, Binding | Wait]:
    """Bind requests in the given (priority) order. Mutates nothing the caller passed in except
    ``slots``' holders, so the caller sees the GPUs as the pass left them."""
    result: dict[str, Binding | Wait] = {}
    taken_by: dict[int, list[str]] = {}  # GPU index -> jobs bound to it earlier in this pass
    for req in requests:
        if req.gpus == 0:
            result[req.name] = Binding([], [])
            continue
        typed = [s for s in slots if _matches(s, req)]
        usable_ever = [s for s in typed if s.state not in ("Unhealthy", "Restricted")]
        if req.gpu_memory is not None:
            usable_ever = [s for s in usable_ever if s.gpu.memory_total >= req.gpu_memory]
        if len(usable_ever) < req.gpus:
            result[req.name] = Wait("Unschedulable", _never_fits(req, slots, typed))
            continue
        if req.shared:
            room = [s for s in usable_ever if s.state in ("Free", "Shared") and s.shared_room() >= (req.gpu_memory or 0)]
        else:
            room = [s for s in usable_ever if s.state == "Free"]
        if len(room) >= req.gpus:
            chosen = room[: req.gpus]  # sequential: lowest indices first
            for slot in chosen:
                slot.jobs.append(req.name)
                taken_by.setdefault(slot.index, []).append(req.name)
                if req.shared:
                    slot.shared_reserved += req.gpu_memory or 0
                    slot.state = "Shared"
                else:
                    slot.state = "Allocated"
            result[req.name] = Binding([s.index for s in chosen], [s.gpu.uuid for s in chosen])
            continue
        result[req.name] = _why_waiting(req, usable_ever, room, taken_by)
    return result


def _never_fits(req: Request, slots: list[GpuSlot], typed: list[GpuSlot]) -> str:
    what = f"{req.gpus} GPU{'s' if req.gpus != 1 else ''}"
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
                f"{len(big)} GPU{'s' if len(big) != 1 else ''} this large (largest {format_quantity(largest)})"
            )
    usable = [s for s in typed if s.state not in ("Unhealthy", "Restricted")]
    kind = f" {req.gpu_type}" if req.gpu_type else ""
    extra = len(typed) - len(usable)
    note = f" ({extra} unhealthy or restricted)" if extra else ""
    return f"needs {what}{kind}, this machine has {len(usable)} usable{note}"


def _why_waiting(req: Request, usable: list[GpuSlot], room: list[GpuSlot], taken_by: dict[int, list[str]]) -> Wait:
    what = f"{req.gpus} GPU{'s' if req.gpus != 1 else ''}"
    before = [name for s in usable for name in taken_by.get(s.index, ())]
    if before:
        ahead = ", ".join(sorted(set(before)))
        return Wait("Priority", f"needs {what}, {len(room)} free after higher-priority job {ahead} took GPUs")
    if req.shared:
        mem_short = [s for s in usable if s.state in ("Free", "Shared") and s.shared_room() < (req.gpu_memory or 0)]
        if mem_short:
            best = max(s.shared_room() for s in mem_short)
            return Wait(
                "GPUMemory",
                f"needs {format_quantity(req.gpu_memory)} GPU memory on {what}, at most {format_quantity(max(best, 0))} "
                f"left on a shared GPU ({_busy_text(usable)})",
            )
    busy = _busy_text(usable)
    return Wait("Resources", f"needs {what}, {len(room)} free" + (f" ({busy})" if busy else ""))
