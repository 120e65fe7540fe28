"""Why a job waits and what would let it start; whether a new request fits now. Pure: the job's
row, the other rows and the GPUs in, plain data out (``Client.explain_pending`` and
``Client.preview`` read the files; ``gflowctl mcp`` serves both to agents)."""

from __future__ import annotations

from typing import Any

from controller.client.read.objects import Gpu, Job

# reason -> what would let the job start (the status message carries the numbers)
_HINTS = {
    "Resources": "it starts when enough GPUs free up: when the jobs holding them end, or sooner if you cancel "
                 "or suspend one of them",
    "Priority": "jobs of higher priority wait ahead of it; raise its priority (set_priority) to move it up",
    "Dependency": "it starts when the jobs it depends on reach their condition (see depends_on)",
    "DependencyFailed": "a job it depends on ended the wrong way; it will not start",
    "Suspended": "it is suspended: resume it",
    "StartAfter": "it has a startAfter time in the future; it starts then",
    "Unschedulable": "it can never start on this machine as written: ask for fewer GPUs or another gpuType",
    "GPUMemory": "no GPU has the gpuMemory it asks for free; it starts when a Shared job on a GPU ends",
    "Parallelism": "its sweep runs at most `parallelism` children at once; it starts when a sibling ends",
    "Reserved": "the GPUs it needs are held by a reservation; it starts when the reservation ends or "
                "when its timeLimit would end before the reservation starts",
    "BackOff": "it failed and waits before its next retry",
    "Quota": "its user or label group is at its quota of GPUs; it starts when one of their jobs ends",
    "Queued": "it was just queued; the scheduler looks at it in its next pass",
    "DiskFull": "the controller could not record its start (disk full); free space on the gflow home",
}


def usable(gpus: list[Gpu], gpu_type: str | None = None) -> list[Gpu]:
    """The GPUs a job of ``gpu_type`` may ever use (healthy, the type matching)."""
    wanted = (gpu_type or "").lower()
    return [g for g in gpus if g.state != "Unhealthy" and wanted in g.name.lower()]


def free(gpus: list[Gpu], gpu_type: str | None = None) -> list[Gpu]:
    return [g for g in usable(gpus, gpu_type) if g.state == "Free"]


def waiting_ahead(rows: dict[str, dict[str, Any]], position: int | None) -> list[str]:
    """Pending jobs ahead in the queue of one at ``position`` (all Pending ones when None)."""
    ahead = []
    for name, row in rows.items():
        if row.get("phase") != "Pending" or row.get("queuePosition") is None:
            continue
        if position is None or row["queuePosition"] < position:
            ahead.append((row["queuePosition"], name))
    return [name for _, name in sorted(ahead)]


def explain_pending(job: Job, rows: dict[str, dict[str, Any]], gpus: list[Gpu]) -> dict[str, Any]:
    """Why ``job`` waits (its status reason and message), where it stands in the queue, how many
    GPUs are free, and what would let it start."""
    out: dict[str, Any] = {"job": job.name, "phase": job.phase, "reason": job.reason, "message": job.message}
    if job.phase != "Pending":
        out["explanation"] = f"job/{job.name} is not waiting: it is {job.phase}" + (f" ({job.reason})" if job.reason else "")
        return out
    available = free(gpus)
    holders = sorted({j for g in gpus if g.state in ("Allocated", "Shared") for j in g.jobs})
    ahead = waiting_ahead(rows, job.queue_position)
    out.update({
        "queuePosition": job.queue_position,
        "jobsAhead": ahead,
        "gpusRequested": job.gpus,
        "gpusFree": len(available),
        "freeDevices": [g.index for g in available],
        "gpusTotal": len(gpus),
        "gpusHeldBy": holders,
    })
    if job.depends_on:
        out["dependsOn"] = {d: (rows.get(d) or {}).get("phase", "not found") for d in job.depends_on}
    hint = _HINTS.get(job.reason, "see its message")
    out["explanation"] = f"job/{job.name} waits: {job.reason or 'Pending'}" + (f" ({job.message})" if job.message else "") + f"; {hint}"
    return out


def fits_now(gpus_needed: int, gpu_type: str | None, gpus: list[Gpu], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Would a new request for ``gpus_needed`` GPUs start at once? Enough free matching GPUs and
    no job already waiting ahead of it (a new job queues behind them at equal priority)."""
    ever = usable(gpus, gpu_type)
    now = free(gpus, gpu_type)
    ahead = waiting_ahead(rows, None)
    what = f"{gpus_needed} GPU{'s' if gpus_needed != 1 else ''}" + (f" of type {gpu_type}" if gpu_type else "")
    if gpus_needed > len(ever):
        fits, why = False, f"can never start: needs {what}, this machine has {len(ever)}"
    elif gpus_needed > len(now):
        fits, why = False, f"waits: needs {what}, {len(now)} free"
    elif ahead and gpus_needed > 0:
        fits, why = False, f"{len(now)} matching GPUs are free, but {len(ahead)} job(s) wait ahead: {', '.join(ahead[:5])}"
    else:
        fits, why = True, f"starts now: needs {what}, {len(now)} free" if gpus_needed else "starts now: a CPU job"
    return {"fitsNow": fits, "why": why, "gpusFree": len(now), "freeDevices": [g.index for g in now], "jobsWaiting": ahead}
