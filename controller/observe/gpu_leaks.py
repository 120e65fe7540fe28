"""What finding GPU memory nobody owns needs to know (``controller.decide.gpu_leaks``): the
attempts that ended lately, as they were while they ran (marker, pids), and what /proc says of
each process NVML lists. Observes only; remembers attempts for ``KEEP`` seconds after they end.

Across a restart of gflowd. What gflowd saw of an attempt while it ran (the pids its tree held,
each with its start time) is known nowhere else: the supervisor records only the job's first
process, and an attempt's record goes once its end is in the status file. So the attempts bound
to GPUs, running and ended, are remembered in ``run/gpu-leftovers.json`` whenever that changes
(a new pid in a tree, an end, an expiry), and a new gflowd loads it before its first pass: a
leftover of an attempt that ended while gflowd was down, or before it was reclaimed, is still
reclaimed. Written atomically but not fsync'd: a crash of gflowd alone must not forget a leftover,
and the page cache outlives gflowd; a crash of the machine ends every leftover with it (a file
from another boot is ignored whole). Bounded: ``MAX_ENDED`` ended attempts, ``MAX_PIDS`` live pids
each; a pid no longer alive with its start time is dropped when the file is written. An attempt
bound to no GPU is remembered in memory only: its device cgroup keeps it off every GPU.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from controller.model.gpu_leaks import EndedAttempt, GpuProcessFacts
from controller.model.gpus import Gpu
from controller.observe.gpus.procs import process_alive, process_marker, process_ticks
from controller.util.fsutil import atomic_write

log = logging.getLogger("gflowd")
KEEP = 24 * 3600.0  # an ended attempt's leftovers are looked for this long...
MAX_ENDED = 512  # ...and for at most this many attempts
MAX_PIDS = 4096  # live pids remembered per attempt (a tree's dead pids are dropped, so rarely reached)


class LeakWatch:
    def __init__(self, path: Path | None = None, boot: str = "") -> None:
        """``path``: where the GPU attempts are remembered across a restart (None: in memory
        only); ``boot``: this boot's id (a file or a record of another boot names no live pid)."""
        self.path, self.boot = path, boot
        self.running: dict[tuple[str, int], EndedAttempt] = {}  # as last seen running
        self.ended: dict[tuple[str, int], tuple[EndedAttempt, float]] = {}  # -> (attempt, when it ended)
        self.held_since: dict[tuple[int, int], float] = {}  # (gpu, pid) of a dead pid's memory -> first seen
        self._changed = False  # a GPU attempt's pids, end or expiry, or the held memory: save() writes
        self._failing = False  # the last write failed (said once)

    def attempts(self, runtime: Any, job_pids: Mapping[str, AbstractSet[int]], now: float) -> None:
        """Track the runtime's attempts (the local backend's; others have none to find)."""
        live = getattr(runtime, "attempts", None) or {}
        seen: set[tuple[str, int]] = set()
        for name, attempt in live.items():
            if attempt.held:
                continue
            key = (name, attempt.attempt)
            if attempt.result is not None:
                known = self.ended.get(key)  # (a job deleted and made again numbers its attempts anew)
                if key not in self.running and (known is None or known[0].marker != (attempt.marker or "")):
                    self._ended_unseen(key, attempt, now)
                continue
            seen.add(key)
            before = self.running.get(key)
            pids = dict(before.pids) if before else {}
            for pid in job_pids.get(name, ()):
                if pid in pids:
                    continue  # its identity was read when first seen: one /proc read per new pid
                ticks = process_ticks(pid)
                if ticks is not None:
                    pids[pid] = ticks
            if before is None or len(pids) != len(before.pids):
                devices = tuple(attempt.devices or ())
                self.running[key] = EndedAttempt(
                    name, attempt.attempt, attempt.marker or "", pids, attempt.grace, devices
                )
                self._changed = self._changed or bool(devices)
        for key in [k for k in self.running if k not in seen]:
            ended = self.running.pop(key)
            if ended.devices:  # remembered across a restart: only what may still be alive (read once)
                ended = _alive_only(ended)
                self._changed = True
            self.ended[key] = (ended, now)
        gone = [k for k, (_, at) in self.ended.items() if now - at > KEEP]
        if len(self.ended) - len(gone) > MAX_ENDED:
            # the oldest beyond the cap too, found in one sort, not a min() per eviction (a burst
            # ends hundreds of attempts in a pass); stable: ties go in the order they were seen
            kept = [k for k in self.ended if now - self.ended[k][1] <= KEEP]
            gone += heapq.nsmallest(len(kept) - MAX_ENDED, kept, key=lambda k: self.ended[k][1])
        for key in gone:
            # popped first: `changed or bool(pop(...))` skipped the pop once anything had changed,
            # so an expired attempt stayed, and past the cap the loop that evicted never ended
            forgotten = self.ended.pop(key)[0]
            self._changed = self._changed or bool(forgotten.devices)

    def _ended_unseen(self, key: tuple[str, int], attempt: Any, now: float) -> None:
        """An attempt that ended before gflowd saw it run (it ended while gflowd was down, or
        between two passes): its marker, and its job's first process as its record names it."""
        pids = {}
        if attempt.job_pid and attempt.job_ticks is not None and (attempt.spec or {}).get("bootId") == self.boot:
            pids[attempt.job_pid] = attempt.job_ticks
        devices = tuple(attempt.devices or ())
        self.ended[key] = (EndedAttempt(key[0], key[1], attempt.marker or "", pids, attempt.grace, devices), now)
        self._changed = self._changed or bool(devices)

    def ended_attempts(self) -> list[EndedAttempt]:
        return [attempt for attempt, _ in self.ended.values()]

    def running_markers(self) -> frozenset[str]:
        return frozenset(a.marker for a in self.running.values() if a.marker)

    def note_held(self, held: Sequence[Any]) -> None:
        since = {(h.gpu, h.pid): h.since for h in held}
        self._changed = self._changed or since != self.held_since
        self.held_since = since

    # -- across a restart ------------------------------------------------------------------------

    def save(self) -> None:
        """Remember the GPU attempts and the held memory, if that changed since the last save.
        A pid no longer alive with its start time can be no leftover: dropped here (from an
        ended attempt, once, as it ends)."""
        if self.path is None or not self._changed:
            return
        for key, attempt in list(self.running.items()):  # (an ended one's were read as it ended)
            if attempt.devices:
                self.running[key] = _alive_only(attempt)
        try:
            atomic_write(self.path, self._text(), mode=0o600, durable=False)
        except OSError as exc:  # a full disk: remembered in memory; the next pass tries again (said once)
            log.log(logging.DEBUG if self._failing else logging.WARNING, "could not write %s: %s", self.path, exc)
            self._failing = True
            return
        self._changed = self._failing = False

    def _text(self) -> str:
        rows = [_row(a, None) for a in self.running.values() if a.devices]
        rows += [_row(a, at) for a, at in self.ended.values() if a.devices]
        held = [[gpu, pid, since] for (gpu, pid), since in sorted(self.held_since.items())]
        return json.dumps({"bootId": self.boot, "attempts": rows, "held": held}, separators=(",", ":"))

    def load(self, now: float) -> int:
        """What the last gflowd remembered (this boot's only). An attempt it saw running is running
        until the runtime says otherwise; returns how many attempts were loaded."""
        if self.path is None:
            return 0
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or data.get("bootId") != self.boot:
                return 0
            for row in data.get("attempts") or ():
                attempt, ended_at = _attempt(row)
                key = (attempt.name, attempt.attempt)
                if ended_at is None:
                    self.running[key] = attempt
                elif now - ended_at <= KEEP:
                    self.ended[key] = (attempt, ended_at)
            self.held_since = {(int(g), int(p)): float(s) for g, p, s in data.get("held") or ()}
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, TypeError, KeyError) as exc:  # torn by a machine crash: that boot is over
            log.warning("ignoring %s: %s", self.path, exc)
            return 0
        return len(self.running) + len(self.ended)


def _row(attempt: EndedAttempt, ended_at: float | None) -> dict[str, Any]:
    pids = dict(sorted(attempt.pids.items(), key=lambda item: item[1])[-MAX_PIDS:])  # the newest, if more
    return {
        "name": attempt.name,
        "attempt": attempt.attempt,
        "marker": attempt.marker,
        "pids": {str(pid): ticks for pid, ticks in pids.items()},
        "grace": attempt.grace,
        "devices": list(attempt.devices),
        "endedAt": ended_at,
    }


def _attempt(row: Mapping[str, Any]) -> tuple[EndedAttempt, float | None]:
    pids = {int(pid): int(ticks) for pid, ticks in (row.get("pids") or {}).items()}
    attempt = EndedAttempt(
        str(row["name"]),
        int(row["attempt"]),
        str(row.get("marker") or ""),
        pids,
        float(row.get("grace") or 10.0),
        tuple(int(d) for d in row.get("devices") or ()),
    )
    ended_at = row.get("endedAt")
    return attempt, None if ended_at is None else float(ended_at)


def _alive_only(attempt: EndedAttempt) -> EndedAttempt:
    """``attempt`` without the pids that no longer name the process it held (gone, or reused)."""
    live = {pid: ticks for pid, ticks in attempt.pids.items() if process_ticks(pid) == ticks}
    if len(live) == len(attempt.pids):
        return attempt
    return EndedAttempt(attempt.name, attempt.attempt, attempt.marker, live, attempt.grace, attempt.devices)


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
