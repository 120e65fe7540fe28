"""Why a job waits and what would let it start; whether a new request fits now. Pure: the job's
row, the other rows and the GPUs in, plain data out (``Client.explain_pending`` and
``Client.preview`` read the files; ``gflowctl mcp`` serves both to agents)."""

from __future__ import annotations

from typing import Any

from controller.client.read.objects import Gpu, Job
from controller.model.reasons import facts_of


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
        out["explanation"] = f"job/{job.name} is not waiting: it is {job.phase}" + (
            f" ({job.reason})" if job.reason else ""
        )
        return out
    available = free(gpus)
    holders = sorted({j for g in gpus if g.state in ("Allocated", "Shared") for j in g.jobs})
    ahead = waiting_ahead(rows, job.queue_position)
    out.update(
        {
            "queuePosition": job.queue_position,
            "jobsAhead": ahead,
            "gpusRequested": job.gpus,
            "gpusFree": len(available),
            "freeDevices": [g.index for g in available],
            "gpusTotal": len(gpus),
            "gpusHeldBy": holders,
        }
    )
    if job.depends_on:
        out["dependsOn"] = {d: (rows.get(d) or {}).get("phase", "not found") for d in job.depends_on}
    facts = facts_of(job.reason)  # its row in model/reasons.py: what would let the job start
    hint = facts.hint if facts is not None else "see its message"
    out["explanation"] = (
        f"job/{job.name} waits: {job.reason or 'Pending'}" + (f" ({job.message})" if job.message else "") + f"; {hint}"
    )
    return out


def fits_now(
    gpus_needed: int, gpu_type: str | None, gpus: list[Gpu], rows: dict[str, dict[str, Any]]
) -> dict[str, Any]:
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
        fits, why = (
            False,
            f"{len(now)} matching GPUs are free, but {len(ahead)} job(s) wait ahead: {', '.join(ahead[:5])}",
        )
    else:
        fits, why = True, f"starts now: needs {what}, {len(now)} free" if gpus_needed else "starts now: a CPU job"
    return {
        "fitsNow": fits,
        "why": why,
        "gpusFree": len(now),
        "freeDevices": [g.index for g in now],
        "jobsWaiting": ahead,
    }
