"""Reading tools about the machine: is gflowd up (health), the GPUs, what was used for whom
(usage stats), how crowded the queue is (queue pressure), and the GPU reservations."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import controller
from controller.client.api import Client
from controller.client.errors import GflowError


def tools(client: Client) -> list[Callable[..., dict[str, Any]]]:
    def health() -> dict[str, Any]:
        """Is gflowd running for this home, and how fresh is what it last wrote (the GPU inventory
        and the jobs index, seconds ago); gflow's version; the GPUs by state."""
        home = client.home
        now = time.time()
        gpus = client.gpus()
        return {
            "gflowdRunning": client.is_running(),
            "version": controller.__version__,
            "home": str(home.root),
            "specDir": str(home.spec_dir),
            "nodeAgeSeconds": _age(home.node_file, now),
            "indexAgeSeconds": _age(home.index_file, now),
            "gpus": len(gpus),
            "gpusByState": dict(Counter(g.state for g in gpus)),
        }

    def get_gpus() -> dict[str, Any]:
        """The machine's GPUs: index, name, memory, utilization, state (Free, Allocated, Shared,
        Unmanaged, Unhealthy) and the jobs on each."""
        return {"gpus": [dataclasses.asdict(g) for g in client.gpus()], "gflowdRunning": client.is_running()}

    def usage_stats(since: str = "7d", label_selector: str | None = None) -> dict[str, Any]:
        """What the machine did for whom since `since` (a duration like 24h or 7d, or all): jobs by
        outcome, success rate, mean and p95 wait and runtime, GPU-hours allocated and used, by user
        and by label; as gflowctl stats -o json."""
        from controller.api.labels import parse_selector
        from controller.api.units import parse_duration  # lazy: only usage_stats parse a window
        from controller.cli.stats import compute  # gflowctl stats' own computation
        from controller.client.read.state import manifest_owners, read_index
        from controller.util.jsonlog import read_records

        now = time.time()
        try:
            start = 0.0 if since == "all" else now - parse_duration(since)
        except ValueError as exc:
            raise GflowError(f"since: {exc}") from None
        history = list(read_records(client.home.history_file))
        rows = (read_index(client.home) or {}).get("jobs") or {}
        try:
            selector = parse_selector(label_selector) if label_selector else []
        except ValueError as exc:
            raise GflowError(f"label_selector: {exc}") from None
        return {"now": now, **compute(history, rows, start, now, selector, manifest_owners(client.home))}

    def queue_pressure() -> dict[str, Any]:
        """How crowded the queue is, for planning: jobs running and pending, pending ones by reason
        and by user, the GPUs they ask for against the GPUs free and usable, and the head of the
        queue."""
        from controller.client.explain import free, usable, waiting_ahead  # lazy: only agents ask
        from controller.client.read.state import job_rows, manifest_owners

        rows = job_rows(client.home)
        owner = manifest_owners(client.home)
        pending = {n: r for n, r in rows.items() if r.get("phase") == "Pending"}
        gpus = client.gpus()
        wanted = sum(int(r.get("gpus") or 0) for r in pending.values())
        ready = usable(gpus)
        return {
            "running": sum(1 for r in rows.values() if r.get("phase") == "Running"),
            "pending": len(pending),
            "pendingByReason": dict(Counter(str(r.get("reason") or "Pending") for r in pending.values())),
            "pendingByUser": dict(Counter(owner(r.get("manifest")) for r in pending.values())),
            "gpusRequestedByPending": wanted,
            "gpusTotal": len(gpus),
            "gpusUsable": len(ready),
            "gpusFree": len(free(gpus)),
            "gpusBusy": sum(1 for g in gpus if g.state in ("Allocated", "Shared")),
            "pressure": round(wanted / len(ready), 3) if ready else None,  # GPUs asked for per usable GPU
            "queueHead": waiting_ahead(rows, None)[:10],
            "gflowdRunning": client.is_running(),
        }

    def list_reservations(active_only: bool = False) -> dict[str, Any]:
        """GPU reservations: who they hold GPUs for, which GPUs, their window (start, end; UTC
        seconds and ISO) and phase; with `active_only`, only those holding GPUs now."""
        items = client.reservations()
        if active_only:
            items = [r for r in items if r.get("phase") == "Active"]
        return {"reservations": items}

    return [health, get_gpus, usage_stats, queue_pressure, list_reservations]


def _age(path, now: float) -> float | None:
    try:
        return round(max(0.0, now - path.stat().st_mtime), 3)
    except OSError:
        return None
