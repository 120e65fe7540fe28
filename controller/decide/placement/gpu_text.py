"""What GPU waits say: the messages of ``Unschedulable``, ``Resources``, ``Priority`` and ``GPUMemory``
for GPUs, with their numbers (``needs 4 GPUs, 1 free (GPUs 0,2 allocated to a, b)``). Pure text of
the GPU slots; ``controller.decide.placement.gpus`` decides, this says why. Users and tests read
these words: change them only on purpose.
"""

from __future__ import annotations

from collections import Counter

from controller.api.units import format_quantity
from controller.model.gpus import GpuProcess
from controller.model.mig import mig_profile_ok
from controller.model.reasons import Reason
from controller.model.resources import KINDS, count
from controller.model.scheduling import GpuSlot, GpuState, Request, Wait


def gpus_text(indices: list[int]) -> str:
    return f"GPU{'s' if len(indices) != 1 else ''} {','.join(str(i) for i in indices)}"


def gpu_count(n: int, what: str = KINDS["gpus"].noun) -> str:
    return count(n, what)


def describe_busy(slots: list[GpuSlot], held: dict[int, str] | None = None) -> str:
    """Why GPUs are not free, grouped: ``GPUs 0,2 allocated to a, b; GPU 3 unmanaged: pid 4242``."""
    held = held or {}
    allocated = [s for s in slots if s.state == GpuState.Allocated and s.jobs]
    shared = [s for s in slots if s.state == GpuState.Shared and s.jobs]
    parts = []
    if allocated:
        jobs = list(dict.fromkeys(j for s in allocated for j in s.jobs))
        parts.append(f"{gpus_text([s.index for s in allocated])} allocated to {', '.join(jobs)}")
    if shared:
        jobs = list(dict.fromkeys(j for s in shared for j in s.jobs))
        parts.append(f"{gpus_text([s.index for s in shared])} shared by {', '.join(jobs)}")
    for slot in slots:
        if slot.state == GpuState.Unmanaged:
            named = {p.pid: _who(p) for p in slot.occupants}
            pids = ", ".join(f"{p} ({named[p]})" if named.get(p) else str(p) for p in slot.foreign_pids[:3])
            pids += " ..." if len(slot.foreign_pids) > 3 else ""
            parts.append(
                f"GPU {slot.index} unmanaged: pid {pids} ({format_quantity(slot.foreign_memory)}) not started by gflow"
            )
    unhealthy = [s.index for s in slots if s.state == GpuState.Unhealthy]
    if unhealthy:
        parts.append(f"{gpus_text(unhealthy)} unhealthy")
    parts += [f"GPU {s.index} {s.cordon}" for s in slots if s.state == GpuState.Restricted and s.cordon]
    kept = [s for s in slots if s.index in held and s.state in (GpuState.Free, GpuState.Shared)]
    if kept:
        parts.append(f"{gpus_text([s.index for s in kept])} held for higher-priority job {held[kept[0].index]}")
    return "; ".join(parts)


def mig_text(slots: list[GpuSlot]) -> str:
    """What MIG instances there are, per parent: ``GPU 0 has 3g.20gb x2; GPU 1 has 1g.10gb x7``."""
    per_parent: dict[int, Counter[str]] = {}
    for slot in slots:
        if slot.gpu.profile:
            per_parent.setdefault(slot.gpu.parent or 0, Counter())[slot.gpu.profile] += 1
    return "; ".join(
        f"GPU {parent} has " + ", ".join(f"{profile} x{n}" for profile, n in sorted(profiles.items()))
        for parent, profiles in sorted(per_parent.items())
    )


def never_fits_text(req: Request, slots: list[GpuSlot], typed: list[GpuSlot]) -> str:
    what = gpu_count(req.gpus)
    sliced = mig_text(slots)
    if req.gpu_type and mig_profile_ok(req.gpu_type) and len(typed) < req.gpus:
        have = sliced or "no GPU here has MIG enabled"
        if not typed:
            return f"needs {what} of type {req.gpu_type}: no MIG {req.gpu_type.lower()} instance: {have}"
        return f"needs {what} of type {req.gpu_type}: only {len(typed)} MIG {req.gpu_type.lower()} instances: {have}"
    if sliced and len(typed) < req.gpus:  # whole GPUs asked for, some GPUs are sliced
        return (
            f"needs {what}{f' of type {req.gpu_type}' if req.gpu_type else ''}, this machine has "
            f"{len(typed)} whole (MIG-enabled GPUs take only MIG requests like gpuType: 1g.10gb: {sliced})"
        )
    if req.gpu_type and not typed:
        names = sorted({s.gpu.display_name for s in slots})
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
                f"{gpu_count(len(big))} this large (largest {format_quantity(largest)})"
            )
    kind = f" {req.gpu_type}" if req.gpu_type else ""
    usable = [s for s in typed if s.state not in (GpuState.Unhealthy, GpuState.Restricted)]
    if len(usable) == len(typed):
        return f"needs {what}{kind}, this machine has {len(typed)}"
    notes = []
    restricted = [s.index for s in typed if s.state == GpuState.Restricted and not s.cordon]
    unhealthy = [s.index for s in typed if s.state == GpuState.Unhealthy]
    if restricted:
        notes.append(f"{gpus_text(restricted)} restricted by the controller's gpus setting")
    notes += [f"GPU {s.index} {s.cordon}" for s in typed if s.state == GpuState.Restricted and s.cordon]
    if unhealthy:
        notes.append(f"{gpus_text(unhealthy)} unhealthy")
    return f"needs {what}{kind}, this machine has {len(usable)} usable of {len(typed)} ({'; '.join(notes)})"


def why_waiting(
    req: Request,
    usable: list[GpuSlot],
    visible: list[GpuSlot],
    room: list[GpuSlot],
    taken_by: dict[int, list[str]],
    held: dict[int, str],
) -> Wait:
    what = gpu_count(req.gpus)
    holders = list(dict.fromkeys(held[s.index] for s in room if s.index in held))
    if holders:
        return Wait(
            Reason.Priority,
            f"waiting behind higher-priority job {', '.join(holders)}: needs {what}, "
            f"{len(room)} free but held for it ({describe_busy(visible, held)})",
        )
    before = list(dict.fromkeys(name for s in usable for name in taken_by.get(s.index, ())))
    if before:
        return Wait(
            Reason.Priority,
            f"waiting behind higher-priority job {', '.join(before)}: needs {what}, {len(room)} free after it took GPUs",
        )
    if req.gpu_memory is not None:
        states = (GpuState.Free, GpuState.Shared) if req.shared else (GpuState.Free,)
        short = [s for s in usable if s.state in states and s.memory_room() < req.gpu_memory]
        if short:
            best = max(short, key=lambda s: (s.memory_room(), -s.index))
            busy = describe_busy([s for s in visible if s is not best])  # best's holders are named already
            return Wait(
                Reason.GPUMemory,
                f"needs {format_quantity(req.gpu_memory)} GPU memory on {what}, at most "
                f"{format_quantity(max(best.memory_room(), 0)) or '0'} free on GPU {best.index}: {memory_holders(best)}"
                + (f" ({busy})" if busy else ""),
            )
    busy = describe_busy(visible, held)
    return Wait(Reason.Resources, f"needs {what}, {len(room)} free" + (f" ({busy})" if busy else ""))


def memory_holders(slot: GpuSlot, most: int = 3) -> str:
    """Who holds a GPU's memory, largest first: ``pid 4242 (bob, vllm) holds 21.3Gi; 20Gi promised
    to Shared job a; 2Gi held by no process NVML lists`` (a leak, or another PID namespace)."""
    parts = []
    for proc in sorted(slot.occupants, key=lambda p: (-p.used_memory, p.pid))[:most]:
        who = _who(proc)
        parts.append(f"pid {proc.pid}{f' ({who})' if who else ''} holds {format_quantity(proc.used_memory) or '0'}")
    if len(slot.occupants) > most:
        parts.append(f"{len(slot.occupants) - most} more processes")
    if slot.shared_reserved:
        jobs = ", ".join(slot.jobs)
        parts.append(
            f"{format_quantity(slot.shared_reserved)} promised to Shared job{'s' if len(slot.jobs) > 1 else ''} {jobs}"
        )
    listed = sum(p.used_memory for p in slot.gpu.processes)
    if slot.used_memory > listed:
        library = "amdsmi" if slot.gpu.vendor == "amd" else "NVML"
        parts.append(f"{format_quantity(slot.used_memory - listed)} held by no process {library} lists")
    return "; ".join(parts) or f"{format_quantity(slot.gpu.memory_total)} in all"


def _who(proc: GpuProcess) -> str:
    """``bob, vllm``: a process's user and command, as far as /proc shows them."""
    return ", ".join(x for x in (proc.user, proc.name) if x)
