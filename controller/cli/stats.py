"""``gflowctl stats [--since 7d] [-l selector] [-o json]``: what the machine did for whom.

Sources, read-only:

* ``run/history.jsonl`` (+ ``.1``): one line per ended attempt, appended by gflowd
  (``controller.sinks.history``). It outlives status files, so jobs removed by TTL still count.
* ``run/index.json``: the jobs that exist now -- running attempts (GPU-hours so far), pending jobs,
  and finished jobs that have no history line (they ended before the history existed).

Definitions (docs/operations.md): a *job* is an outcome -- a job reaching Succeeded, Failed or
Cancelled (a rerun is another outcome); *success rate* = Succeeded / (Succeeded + Failed);
*wait* = queueing (or becoming eligible again after a back-off) to start, per attempt;
*runtime* = start to end, per finished attempt; *GPU-hours* (allocated) = GPUs x hours of every
attempt, running ones up to now, counted inside the window; *GPU-hours used* = the attempts'
utilization-weighted GPU-hours (``gpuUsage``, sampled from NVML), the part inside the window in
proportion; attempts whose GPUs were never sampled count as *unmeasured*, so ``used`` is compared
with the allocated hours of measured attempts only. Pure computation in :func:`compute`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

from controller.api.labels import selector_matches
from controller.api.units import format_duration, format_quantity, parse_duration
from controller.cli.common import CliError, parse_selector_args, printable, warn_if_not_running
from controller.client.read.state import manifest_owners, read_index
from controller.model.records import rfc3339
from controller.paths import Home
from controller.util.jsonlog import read_records

FINISHED = ("Succeeded", "Failed", "Cancelled")


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _from_index(
    rows: dict[str, dict], known: dict[tuple, list[float]], users, now: float
) -> tuple[list[dict], dict[str, int]]:
    """Attempt records for running jobs (up to now) and finished jobs without a history line;
    plus the count of jobs in each live phase."""
    records, live = [], {"Running": 0, "Pending": 0}
    for name, row in rows.items():
        phase = row.get("phase")
        start, end = row.get("startTime"), row.get("completionTime")
        if phase in live:
            live[phase] += 1
        if phase == "Running" and start:
            end, final = now, False
        elif phase in FINISHED and end:
            final = True
        else:
            continue
        ends = known.get((name, int(row.get("attempt") or 0)), ())
        if final and any(abs(float(end) - e) < 1.0 for e in ends):
            continue  # the history has this attempt already
        records.append(
            {
                "job": name,
                "attempt": row.get("attempt") or 0,
                "phase": phase if final else "Running",
                "final": final,
                "start": start,
                "end": end,
                "created": row.get("created"),
                "wait": (start - row["created"])
                if start and row.get("created") and (row.get("attempt") or 0) <= 1
                else None,
                "gpus": row.get("gpus") or 0,
                "labels": row.get("labels") or {},
                "user": users(row.get("manifest")),
                "running": not final,
                "gpuUsed": row.get("gpuHoursUsed"),
            }
        )
    return records, live


def compute(
    history: list[dict], rows: dict[str, dict], since: float, now: float, selector=(), users=lambda m: "?"
) -> dict[str, Any]:
    """The statistics of every attempt that ended (or runs) after ``since``."""
    known: dict[tuple, list[float]] = {}
    for r in history:
        known.setdefault((r.get("job"), int(r.get("attempt") or 0)), []).append(float(r.get("end") or 0))
    extra, live = _from_index(rows, known, users, now)
    attempts = [
        r
        for r in history + extra
        if float(r.get("end") or 0) >= since and selector_matches(selector, r.get("labels") or {})
    ]
    outcomes = {p: 0 for p in FINISHED}
    waits, runtimes = [], []
    total_hours = total_cpu = 0.0
    peaks = []
    by_user: dict[str, dict[str, float]] = {}
    by_label: dict[str, dict[str, float]] = {}
    total_used = total_measured = 0.0
    for r in attempts:
        start = r.get("start")
        hours = used = measured = 0.0
        if start is not None:
            hours = (r.get("gpus") or 0) * max(0.0, float(r["end"]) - max(float(start), since)) / 3600
            used, measured = _used_in_window(r, hours)
            if not r.get("running"):
                runtimes.append(float(r["end"]) - float(start))
            if r.get("wait") is not None and float(start) >= since:
                waits.append(float(r["wait"]))
        final = r.get("final") and r.get("phase") in FINISHED
        if final:
            outcomes[r["phase"]] += 1
        total_hours += hours
        cpu_hours = float(r.get("cpuSeconds") or 0) / 3600  # from the attempt's cgroup, when it had one
        total_cpu += cpu_hours
        if r.get("peakMemoryBytes"):
            peaks.append(float(r["peakMemoryBytes"]))
        total_used += used
        total_measured += measured
        groups = [(by_user, str(r.get("user") or "?"))]
        groups += [(by_label, f"{k}={v}") for k, v in sorted((r.get("labels") or {}).items())]
        for table, key in groups:
            entry = table.setdefault(
                key,
                {
                    "jobs": 0,
                    "succeeded": 0,
                    "failed": 0,
                    "gpuHours": 0.0,
                    "gpuHoursUsed": 0.0,
                    "gpuHoursMeasured": 0.0,
                    "cpuHours": 0.0,
                },
            )
            entry["gpuHours"] += hours
            entry["gpuHoursUsed"] += used
            entry["gpuHoursMeasured"] += measured
            entry["cpuHours"] += cpu_hours
            if final:
                entry["jobs"] += 1
                entry["succeeded"] += r["phase"] == "Succeeded"
                entry["failed"] += r["phase"] == "Failed"
    decided = outcomes["Succeeded"] + outcomes["Failed"]
    return {
        "since": since,
        "jobs": sum(outcomes.values()),
        "outcomes": outcomes,
        "running": live["Running"],
        "pending": live["Pending"],
        "successRate": outcomes["Succeeded"] / decided if decided else None,
        "wait": {"mean": _mean(waits), "p95": _p95(waits), "count": len(waits)},
        "runtime": {"mean": _mean(runtimes), "p95": _p95(runtimes), "count": len(runtimes)},
        "gpuHours": total_hours,
        "gpuHoursUsed": round(total_used, 3),
        "gpuHoursMeasured": round(total_measured, 3),
        "cpuHours": round(total_cpu, 4),
        "peakMemory": {"mean": _mean(peaks), "max": max(peaks) if peaks else None, "count": len(peaks)},
        "byUser": {k: _rounded(v) for k, v in sorted(by_user.items())},
        "byLabel": {k: _rounded(v) for k, v in sorted(by_label.items())},
    }


def _used_in_window(record: dict, hours: float) -> tuple[float, float]:
    """(GPU-hours used, GPU-hours allocated that were measured) of one attempt inside the window:
    its used hours in proportion to the share of its allocation that falls inside."""
    used = record.get("gpuUsed")
    if used is None or not hours:
        return 0.0, 0.0
    whole = (record.get("gpus") or 0) * max(0.0, float(record["end"]) - float(record["start"])) / 3600
    return float(used) * (hours / whole if whole else 1.0), hours


def _rounded(entry: dict[str, float]) -> dict[str, float]:
    rounded = {k: round(entry[k], 3) for k in ("gpuHours", "gpuHoursUsed", "gpuHoursMeasured")}
    return {**entry, **rounded, "cpuHours": round(entry["cpuHours"], 4)}


def _used_text(used: float, measured: float) -> str:
    return f"{used:.2f} ({100 * used / measured:.0f}%)" if measured else "-"


def stats(home: Home, since_text: str, selector_items: list[str], output: str | None) -> int:
    if output not in (None, "json"):
        raise CliError(f"stats prints a summary or -o json, not -o {output}")
    now = time.time()
    if since_text == "all":
        since = 0.0
    else:
        try:
            since = now - parse_duration(since_text)
        except ValueError as exc:
            raise CliError(f"--since: {exc}") from None
    selector = parse_selector_args(selector_items)
    warn_if_not_running(home)  # the counts of jobs still running are as of the last pass
    history = list(read_records(home.history_file))
    rows = (read_index(home) or {}).get("jobs") or {}
    result = compute(history, rows, since, now, selector, manifest_owners(home))
    if output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "Stats", "now": now, **result}, indent=2))
        return 0
    _print_summary(result, since_text)
    return 0


def _gpu_used_line(r: dict[str, Any]) -> str:
    if not r["gpuHoursMeasured"]:
        return "used: not measured (no GPU usage samples)"
    return (
        f"{r['gpuHoursUsed']:.2f} used ({100 * r['gpuHoursUsed'] / r['gpuHoursMeasured']:.0f}% of the "
        f"{r['gpuHoursMeasured']:.2f} measured; utilization-weighted)"
    )


def _print_summary(r: dict[str, Any], since_text: str) -> None:
    def dur(value):
        return "-" if value is None else format_duration(value)

    window = (
        "all recorded history"
        if since_text == "all"
        else f"the last {since_text} (since {(rfc3339(r['since']) or '')[:16].replace('T', ' ')} UTC)"
    )
    o = r["outcomes"]
    rate = "-" if r["successRate"] is None else f"{100 * r['successRate']:.1f}%"
    lines = [
        f"Window:        {window}",
        f"Jobs:          {r['jobs']} finished ({o['Succeeded']} succeeded, {o['Failed']} failed, {o['Cancelled']} cancelled); "
        f"now {r['running']} running, {r['pending']} pending",
        f"Success rate:  {rate}  (succeeded / (succeeded + failed))",
        f"Queue wait:    mean {dur(r['wait']['mean'])}, p95 {dur(r['wait']['p95'])}  ({r['wait']['count']} starts)",
        f"Runtime:       mean {dur(r['runtime']['mean'])}, p95 {dur(r['runtime']['p95'])}  ({r['runtime']['count']} attempts)",
        f"GPU-hours:     {r['gpuHours']:.2f} allocated, {_gpu_used_line(r)}",
        f"CPU-hours:     {r['cpuHours']:.2f}  (CPU time measured by the attempts' cgroups)",
    ]
    if r["peakMemory"]["count"]:
        peak = r["peakMemory"]
        lines.append(
            f"Peak memory:   mean {format_quantity(int(peak['mean']))}, max {format_quantity(int(peak['max']))}  "
            f"({peak['count']} attempts)"
        )
    for title, table in (("USER", r["byUser"]), ("LABEL", r["byLabel"])):
        if not table:
            continue
        rows = [[title, "JOBS", "SUCCEEDED", "FAILED", "CPU-HOURS", "GPU-HOURS", "USED"]]
        for key, e in sorted(table.items(), key=lambda kv: (-kv[1]["gpuHours"], kv[0])):
            rows.append(
                [
                    printable(key),
                    str(e["jobs"]),
                    str(e["succeeded"]),
                    str(e["failed"]),
                    f"{e.get('cpuHours', 0.0):.2f}",
                    f"{e['gpuHours']:.2f}",
                    _used_text(e["gpuHoursUsed"], e["gpuHoursMeasured"]),
                ]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines.append("")
        lines.extend("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)
    sys.stdout.write("\n".join(lines) + "\n")
