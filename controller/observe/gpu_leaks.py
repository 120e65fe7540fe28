"""What finding GPU memory nobody owns needs to know (``controller.decide.gpu_leaks``): the
attempts that ended lately, as they were while they ran (marker, pids), and what /proc says of
each process NVML lists. Observes only; remembers attempts for ``KEEP`` seconds after they end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from controller.model.gpu_leaks import EndedAttempt, GpuProcessFacts
from controller.model.gpus import Gpu
from controller.observe.gpus.procs import process_alive, process_marker, process_ticks

KEEP = 24 * 3600.0  # an ended attempt's leftovers are looked for this long...
MAX_ENDED = 512  # ...and for at most this many attempts


class LeakWatch:
    def __init__(self) -> None:
        self.running: dict[tuple[str, int], EndedAttempt] = {}  # as last seen running
        self.ended: dict[tuple[str, int], tuple[EndedAttempt, float]] = {}  # -> (attempt, when it ended)
        self.held_since: dict[tuple[int, int], float] = {}  # (gpu, pid) of a dead pid's memory -> first seen

    def attempts(self, runtime: Any, job_pids: Mapping[str, AbstractSet[int]], now: float) -> None:
        """Track the runtime's attempts (the local backend's; others have none to find)."""
        live = getattr(runtime, "attempts", None) or {}
        seen: set[tuple[str, int]] = set()
        for name, attempt in live.items():
            if attempt.result is not None or attempt.held:
                continue
            key = (name, attempt.attempt)
            seen.add(key)
            before = self.running.get(key)
            pids = dict(before.pids) if before else {}
            for pid in job_pids.get(name, ()):
                if pid in pids:
                    continue  # its identity was read when first seen: one /proc read per new pid
                ticks = process_ticks(pid)
                if ticks is not None:
                    pids[pid] = ticks
            self.running[key] = EndedAttempt(name, attempt.attempt, attempt.marker or "", pids, attempt.grace)
        for key in [k for k in self.running if k not in seen]:
            self.ended[key] = (self.running.pop(key), now)
        for key in [k for k, (_, at) in self.ended.items() if now - at > KEEP]:
            del self.ended[key]
        while len(self.ended) > MAX_ENDED:
            del self.ended[min(self.ended, key=lambda k: self.ended[k][1])]

    def ended_attempts(self) -> list[EndedAttempt]:
        return [attempt for attempt, _ in self.ended.values()]

    def running_markers(self) -> frozenset[str]:
        return frozenset(a.marker for a in self.running.values() if a.marker)

    def note_held(self, held: Sequence[Any]) -> None:
        self.held_since = {(h.gpu, h.pid): h.since for h in held}


def process_facts(gpus: Sequence[Gpu], looking: bool, marker: str) -> list[GpuProcessFacts]:
    """Each process NVML lists, with /proc's word on it (``marker``: the environment variable that
    names an attempt). ``looking`` False (no attempt to look for): only whether it exists, for the
    held memory of dead pids."""
    facts = []
    for gpu in gpus:
        for proc in gpu.processes:
            alive = not proc.gone and process_alive(proc.pid)
            facts.append(
                GpuProcessFacts(
                    gpu.index,
                    proc.pid,
                    proc.used_memory,
                    alive,
                    proc.name,
                    process_ticks(proc.pid) if alive and looking else None,
                    process_marker(proc.pid, marker) if alive and looking else "",
                )
            )
    return facts
