"""The dashboard's view: a pure function from what gflowd wrote to what the page shows.

Inputs are the already-parsed state files (``node.yaml``, the job rows of ``run/index.json`` or of
``status/*.yaml``, the tail of ``events.jsonl``) and the time; the output is plain JSON-able data.
No I/O and no clock here, so every rule (queue order, which jobs make a timeline bar, how bars that
share a GPU are stacked) is tested with literal inputs. The page escapes nothing because it never
parses these strings as HTML: it sets them as text.
"""

from __future__ import annotations

import heapq
from typing import Any

from controller.api.units import parse_quantity
from controller.client.read.events import aggregate
from controller.client.read.usage import job_series
from controller.model.records import from_rfc3339

QUEUE_LIMIT = 200  # rows sent for the queue; the total is sent too
RUNNING_LIMIT = 500
ATTENTION_LIMIT = 50
EVENTS_LIMIT = 40  # rows of events, each a group of identical ones (x1500)
SPANS_LIMIT = 5000  # timeline bars; the most recent are kept
SERIES_POINTS = 60  # utilization samples drawn in a running bar
FINISHED = ("Succeeded", "Failed", "Cancelled")
FIT_MIN = 5 * 60.0  # a fitted timeline spans at least 5 minutes...
FIT_MAX = 7 * 86400.0  # ...and at most 7 days
FIT_RECENT = 86400.0  # the finished jobs it fits: those that ended in the last day


def build_view(
    node: dict[str, Any] | None,
    jobs: dict[str, dict[str, Any]],
    events: list[dict[str, Any]],
    now: float,
    hours: float | None,
    updated: float | None = None,
    host: str = "",
    owners: dict[str, str] | None = None,
    usage: dict[str, Any] | None = None,
    reservations: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything the page renders, for a timeline window of the last ``hours`` before ``now``
    (None: the window that fits the jobs there are, :func:`fit_window`). ``owners``: job name ->
    the user its manifest belongs to; ``usage``: ``run/gpu-usage.json`` parsed (running jobs' samples);
    ``reservations``: the index's reservation rows."""
    window_start = fit_window(jobs, now) if hours is None else now - hours * 3600.0
    owners = owners or {}
    gpus = [_gpu(g) for g in (node or {}).get("gpus") or [] if isinstance(g, dict)]
    counts: dict[str, int] = {}
    for row in jobs.values():
        phase = str(row.get("phase") or "Pending")
        counts[phase] = counts.get(phase, 0) + 1
    queue = _queue(jobs)
    running = _running(jobs)
    attention = sorted(
        (
            {"name": n, "reason": _text(r.get("reason")), "message": _text(r.get("message"))}
            for n, r in jobs.items()
            if r.get("phase") == "Rejected"
        ),
        key=lambda r: r["name"],
    )
    for row in (*queue, *running, *attention):
        row["owner"] = owners.get(row["name"], "")
    return {
        "host": host,
        "now": now,
        "updated": updated,
        "inventory": _text((node or {}).get("inventory")),
        "counts": counts,
        "gpus": gpus,
        "queue": queue[:QUEUE_LIMIT],
        "queueTotal": len(queue),
        "running": running[:RUNNING_LIMIT],
        "runningTotal": len(running),
        "attention": attention[:ATTENTION_LIMIT],
        "attentionTotal": len(attention),
        "timeline": {
            **timeline(jobs, [g["index"] for g in gpus], window_start, now, usage, reservations or {}),
            "fitted": hours is None,
        },
        "events": [_event(e) for e in aggregate(events)[-EVENTS_LIMIT:]][::-1],
    }


def fit_window(jobs: dict[str, dict[str, Any]], now: float) -> float:
    """Where a timeline that fits what is there starts: a little before the earliest start among
    the running jobs and the jobs that ended in the last day, so recent jobs are not slivers in a
    fixed 6 hours; at least 5 minutes, at most 7 days; the last hour when there is nothing."""
    starts = []
    for row in jobs.values():
        start = _number(row.get("startTime"))
        if start is None or not row.get("devices"):
            continue
        end = _number(row.get("completionTime"))
        if row.get("phase") == "Running" or (
            row.get("phase") in FINISHED and end is not None and end >= now - FIT_RECENT
        ):
            starts.append(start)
    if not starts:
        return now - 3600.0
    span = (now - min(starts)) * 1.05  # a margin, so the first bar does not touch the edge
    return now - min(FIT_MAX, max(FIT_MIN, span))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _bytes(value: Any) -> int | None:
    try:
        return parse_quantity(value) if value not in (None, "") else None
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    """Epoch seconds from the index (a number) or from a status file (RFC 3339 text)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return from_rfc3339(value)


def _gpu(entry: dict[str, Any]) -> dict[str, Any]:
    processes = entry.get("processes") or []
    return {
        "index": entry.get("index"),
        "name": _text(entry.get("name")),
        "uuid": _text(entry.get("uuid")),
        "state": _text(entry.get("state")),
        "memory": _bytes(entry.get("memory")),
        "memoryUsed": _bytes(entry.get("memoryUsed")),
        "utilization": entry.get("utilization"),
        "jobs": [str(j) for j in jobs] if isinstance(jobs := entry.get("jobs"), list) else [],
        "foreignProcesses": len(processes) if isinstance(processes, list) else 0,
        "error": _text(entry.get("error")),
    }


def _queue(jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Pending jobs in the scheduler's order: by queue position, then those without one
    (held: dependencies, suspend, start-after) by age."""
    rows = []
    for name, row in jobs.items():
        if row.get("phase") != "Pending":
            continue
        position = row.get("queuePosition")
        rows.append(
            {
                "name": name,
                "position": position if isinstance(position, int) and not isinstance(position, bool) else None,
                "reason": _text(row.get("reason")),
                "message": _text(row.get("message")),
                "priority": row.get("priority") or 0,
                "gpus": row.get("gpus") or 0,
                "created": _number(row.get("created")),
            }
        )
    rows.sort(key=lambda r: (r["position"] is None, r["position"] or 0, r["created"] or 0.0, r["name"]))
    return rows


def _running(jobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [
        {
            "name": name,
            "devices": list(row.get("devices") or []),
            "gpus": row.get("gpus") or 0,
            "priority": row.get("priority") or 0,
            "attempt": row.get("attempt") or 0,
            "startTime": _number(row.get("startTime")),
            "message": _text(row.get("message")),
        }
        for name, row in jobs.items()
        if row.get("phase") == "Running"
    ]
    rows.sort(key=lambda r: (r["startTime"] or 0.0, r["name"]))
    return rows


def _event(group: dict[str, Any]) -> dict[str, Any]:
    """One row of the events list: the latest of a group of identical events, and how many."""
    return {
        **{key: _text(group.get(key)) for key in ("time", "type", "reason", "object", "message")},
        "count": group["count"],
    }


def _series(usage: dict[str, Any] | None, name: str, row: dict[str, Any], position: int) -> list[list[float]]:
    """A running job's recent utilization on its ``position``-th GPU: [[time, util %]], at most SERIES_POINTS."""
    points = [
        [when, float(point[position][0])]
        for when, point in job_series(usage or {}, name, row.get("attempt"))
        if position < len(point)
    ]
    step = max(1, -(-len(points) // SERIES_POINTS))
    return points[len(points) - 1 :: -step][::-1]  # thinned from the newest, which is always drawn


def timeline(
    jobs: dict[str, dict[str, Any]],
    gpu_indices: list[Any],
    window_start: float,
    now: float,
    usage: dict[str, Any] | None = None,
    reservations: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Per GPU, the bars of the jobs that held it during ``[window_start, now]``, and the windows
    of the reservations that hold it (``reserved``: those not over before ``window_start``, upcoming
    ones included, so the page can mark them at its right edge).

    A bar is a job's latest attempt: ``startTime`` to ``completionTime`` on each of its
    ``devices``; a running job's bar has no end (the page draws it to its own clock). Bars that
    overlap on one GPU (Shared jobs) go to separate lanes of that GPU's row. A bar carries the
    attempt's mean GPU utilization (``util``, from its status) and, while it runs, its recent
    samples on that GPU (``series``, from ``usage``), drawn inside the bar.
    """
    spans: list[dict[str, Any]] = []
    for name, row in jobs.items():
        phase = row.get("phase")
        start = _number(row.get("startTime"))
        devices = row.get("devices") or []
        if start is None or not devices or phase not in ("Running", *FINISHED):
            continue
        end = None if phase == "Running" else _number(row.get("completionTime"))
        if phase != "Running" and end is None:
            continue  # finished without a recorded end: nothing honest to draw
        if (end is not None and end < window_start) or start > now:
            continue
        util = _number(row.get("gpuUtil"))
        for position, device in enumerate(devices):
            span = {"job": name, "gpu": device, "start": start, "end": end, "phase": phase, "util": util}
            if phase == "Running":
                span["series"] = _series(usage, name, row, position)
            spans.append(span)
    spans.sort(key=lambda s: (s["end"] is None, s["end"] or 0.0), reverse=True)
    truncated = len(spans) > SPANS_LIMIT
    spans = spans[:SPANS_LIMIT]
    by_gpu: dict[Any, list[dict[str, Any]]] = {index: [] for index in gpu_indices}
    windows = reserved_windows(reservations or {}, window_start)
    for span in spans:
        by_gpu.setdefault(span["gpu"], []).append(span)
    rows = []
    for index in sorted(by_gpu, key=lambda i: (not isinstance(i, int), i if isinstance(i, int) else 0, str(i))):
        row_spans = sorted(by_gpu[index], key=lambda s: (s["start"], s["job"]))
        lanes = assign_lanes(row_spans)
        rows.append({"gpu": index, "lanes": lanes, "spans": row_spans, "reserved": windows.get(index, [])})
    return {"start": window_start, "end": now, "rows": rows, "truncated": truncated}


def reserved_windows(reservations: dict[str, dict[str, Any]], window_start: float) -> dict[Any, list[dict[str, Any]]]:
    """GPU index -> the windows of the accepted reservations holding it that end after ``window_start``."""
    out: dict[Any, list[dict[str, Any]]] = {}
    for name, row in sorted(reservations.items()):
        start, end = _number(row.get("start")), _number(row.get("end"))
        if (
            row.get("phase") not in ("Pending", "Active", "Expired")
            or start is None
            or end is None
            or end < window_start
        ):
            continue
        for device in row.get("devices") or []:
            out.setdefault(device, []).append(
                {
                    "name": name,
                    "users": [_text(u) for u in row.get("users") or []],
                    "start": start,
                    "end": end,
                    "phase": _text(row.get("phase")),
                }
            )
    return out


def assign_lanes(spans: list[dict[str, Any]]) -> int:
    """Give each span (sorted by start) a lane free at its start, reusing the one freed earliest;
    returns the lane count. An open span (``end`` None) holds its lane for good."""
    busy: list[tuple[float, int]] = []  # (busy until, lane): the earliest-freed lane on top
    lanes = 0
    for span in spans:
        if busy and busy[0][0] <= span["start"]:
            _, lane = heapq.heappop(busy)
        else:
            lane, lanes = lanes, lanes + 1
        span["lane"] = lane
        heapq.heappush(busy, (float("inf") if span["end"] is None else span["end"], lane))
    return max(1, lanes)
