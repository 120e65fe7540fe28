"""When a pending job is expected to start (``squeue --start``): a pure plan from the GPUs, the
running jobs' ends (start + timeLimit) and the pending jobs in queue order, each taking the GPUs
that free up first and holding them for its own timeLimit. Reads nothing; ``describe`` and
``get jobs -o wide`` hand it what they read.

It is an estimate, and says its basis: jobs may end sooner, a job submitted later with a higher
priority may go first, and gflowd's backfill may start a short job behind earlier than this plan."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Start:
    at: float | None  # epoch seconds; None: not known (a job in the way has no timeLimit) or never
    basis: str  # why then: whose timeLimit frees the GPUs


def plan_starts(
    now: float,
    gpus: list[int],
    running: list[tuple[str, list[int], float | None]],
    pending: list[tuple[str, int, float | None]],
) -> dict[str, Start]:
    """``running``: (name, its GPUs, when its timeLimit ends it or None); ``pending``: (name, GPUs
    it needs, its timeLimit in seconds or None), in queue order. Each pending job's expected start."""
    free_at = {index: now for index in gpus}
    freed_by: dict[int, str] = {}  # GPU -> the job whose end frees it
    for name, devices, ends in running:
        for index in devices:
            if index in free_at:
                free_at[index] = math.inf if ends is None else max(now, ends)
                freed_by[index] = name
    out: dict[str, Start] = {}
    for name, count, limit in pending:
        if count <= 0:
            out[name] = Start(now, "needs no GPU")
            continue
        if count > len(free_at):
            out[name] = Start(None, f"needs {count} GPUs; this machine has {len(free_at)}")
            continue
        chosen = sorted(free_at, key=lambda i: (free_at[i], i))[:count]
        at = max(free_at[i] for i in chosen)
        blockers = sorted({freed_by[i] for i in chosen if free_at[i] > now and i in freed_by})
        if at == math.inf:
            unlimited = sorted({freed_by[i] for i in chosen if free_at[i] == math.inf and i in freed_by})
            out[name] = Start(None, f"unknown: {', '.join(f'job/{b}' for b in unlimited)} has no timeLimit")
        elif not blockers:
            out[name] = Start(now, "its GPUs are free now; it waits for its reason")
        else:
            verb = "reaches its" if len(blockers) == 1 else "reach their"
            out[name] = Start(at, f"when {', '.join(f'job/{b}' for b in blockers)} {verb} timeLimit")
        ends = math.inf if limit is None or at == math.inf else at + limit
        for index in chosen:
            free_at[index], freed_by[index] = ends, name
    return out
