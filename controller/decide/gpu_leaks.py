"""GPU memory nobody owns after an attempt ends: what to kill, what to say (docs/gpu-memory.md).

A pure function of (the attempts that ended, with their marker, pids and time window; the GPU
processes NVML lists, with what /proc says of each; now). Observe reads /proc, act kills.

Two kinds of leftover:

- a live process that was the attempt's: it carries the attempt's marker (``GFLOW_ATTEMPT_ID``,
  an unguessable id every process of the attempt inherits, whatever it forks, ``setsid`` or
  cgroup it moves to), or it is a pid the attempt's tree held while it ran, with the same kernel
  start time. gflowd started it, so gflowd kills it (``ReclaimedGPUMemory`` on the job);
- a pid NVML still charges that no longer exists: the driver keeps its context (only a GPU reset
  or a reboot frees it). Nothing can be killed; the GPU says so (``GPUMemoryHeld``), and the
  memory keeps counting as in use, so a job that declares gpuMemory waits for it.

A process of the same user, started in the attempt's window, is not enough: a user's hand-started
server would match. gflowd never kills what it did not start.

What was killed also stays on the job, as its condition ``ReclaimedGPUMemory`` (``note_reclaimed``:
GPU, pid, command and MiB of each process the attempt left), so ``describe`` and ``get -o json``
say it after the event has scrolled away.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller.api.units import format_age, format_quantity
from controller.model.conditions import find_condition, set_condition
from controller.model.gpu_leaks import EndedAttempt, GpuProcessFacts, Held, LeakVerdict, Reclaim
from controller.model.plan import Event
from controller.model.reasons import Condition, Reason
from controller.model.records import JobState

__all__ = ["EndedAttempt", "GpuProcessFacts", "Held", "LeakVerdict", "Reclaim", "find_leaks", "note_reclaimed"]
MIB = 1 << 20


def find_leaks(
    ended: Iterable[EndedAttempt],
    processes: Iterable[GpuProcessFacts],
    now: float,
    *,
    running_markers: frozenset[str] = frozenset(),
    managed_pids: frozenset[int] = frozenset(),
    ignore: frozenset[str] = frozenset(),
    held_since: Mapping[tuple[int, int], float] | None = None,
    killing: frozenset[tuple[int, int]] = frozenset(),
) -> LeakVerdict:
    """What to kill and what to say. ``running_markers``/``managed_pids``: running attempts' (never
    touched); ``ignore``: ``ignoreProcesses`` (never killed); ``held_since``: (gpu, pid) -> when
    a dead pid's memory was first seen (said once, then only carried); ``killing``: (pid, ticks)
    already being stopped (not said again)."""
    by_marker = {a.marker: a for a in ended if a.marker and a.marker not in running_markers}
    by_pid = {(pid, ticks): a for a in ended for pid, ticks in a.pids.items()}
    seen = held_since or {}
    kills: list[Reclaim] = []
    held: list[Held] = []
    events: list[Event] = []
    said: dict[str, tuple[Reclaim, ...]] = {}
    for proc in sorted(processes, key=lambda p: (p.gpu, p.pid)):
        if proc.pid in managed_pids or str(proc.pid) in ignore or (proc.name and proc.name in ignore):
            continue
        if not proc.alive:
            since = seen.get((proc.gpu, proc.pid))
            held.append(Held(proc.gpu, proc.pid, proc.memory, now if since is None else since))
            if since is None:
                events.append(Event("Warning", "GPUMemoryHeld", str(proc.gpu), held_text(held[-1], now), kind="gpu"))
            continue
        if proc.ticks is None or proc.marker in running_markers:
            continue
        owner = by_marker.get(proc.marker) if proc.marker else None
        owner = owner or by_pid.get((proc.pid, proc.ticks))
        if owner is None:
            continue  # not started by gflowd, or not provably: never killed
        kill = Reclaim(owner.name, owner.attempt, proc.gpu, proc.pid, proc.ticks, proc.name, proc.memory, owner.grace)
        kills.append(kill)
        if (proc.pid, proc.ticks) not in killing:
            events.append(Event("Warning", "ReclaimedGPUMemory", owner.name, reclaimed_text(kill)))
            said[owner.name] = (*said.get(owner.name, ()), kill)
    return LeakVerdict(tuple(kills), tuple(held), tuple(events), said)


def note_reclaimed(state: JobState, kills: Iterable[Reclaim], now_text: str) -> JobState:
    """``state`` (a copy) with its ``ReclaimedGPUMemory`` condition naming what was killed: the
    processes of one attempt add up (a leftover may show on a GPU later than another); a later
    attempt's replace them."""
    kills = sorted(kills, key=lambda k: (k.attempt, k.gpu, k.pid))
    if not kills:
        return state
    attempt = kills[-1].attempt
    head = f"killed what attempt {attempt} left holding GPU memory: "
    before = find_condition(state.conditions, Condition.ReclaimedGPUMemory)
    items = before["message"][len(head) :].split(", ") if before and before["message"].startswith(head) else []
    for kill in kills:
        if kill.attempt != attempt:
            continue
        item = f"GPU {kill.gpu} pid {kill.pid}{f' ({kill.name})' if kill.name else ''} {round(kill.memory / MIB)} MiB"
        if item not in items:
            items.append(item)
    new = state.copy()
    new.conditions = set_condition(
        new.conditions,
        Condition.ReclaimedGPUMemory,
        "True",
        Reason.ReclaimedGPUMemory,
        head + ", ".join(items),
        now_text,
    )
    return new


def reclaimed_text(kill: Reclaim) -> str:
    """``GPU 1: killed pid 5511 (python) that held 3.2Gi after train attempt 3 ended``."""
    what = f" ({kill.name})" if kill.name else ""
    return (
        f"GPU {kill.gpu}: killed pid {kill.pid}{what} that held {format_quantity(kill.memory)} "
        f"after {kill.job} attempt {kill.attempt} ended"
    )


def held_text(held: Held, now: float) -> str:
    """What holds how much since when, and the fix."""
    return (
        f"GPU {held.gpu}: {format_quantity(held.memory)} held by pid {held.pid}, which no longer exists "
        f"(for {format_age(now - held.since)}); the driver keeps it until the GPU is reset: "
        f"nvidia-smi --gpu-reset -i {held.gpu} when the GPU is idle, or reboot"
    )
