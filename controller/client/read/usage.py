"""Reading GPU usage as gflowd left it: ``run/gpu-usage.json`` (each running attempt's recent samples,
written by gflowd after every sample) and the status's ``gpuUsage`` summary; and drawing it (a
sparkline, the lines ``describe`` prints). Standard library only: ``gflowctl top`` redraws with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from controller.api.units import format_quantity
from controller.paths import Home
from controller.util.packed import pack, unpack

BARS = "▁▂▃▄▅▆▇█"
MIB = 1 << 20


def read_usage(home: Home) -> dict[str, Any]:
    """``run/gpu-usage.json`` parsed: {"interval": s, "jobs": {name: {...}}}; {} when absent or torn."""
    try:
        data = json.loads(home.gpu_usage_file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def job_series(
    usage: dict[str, Any], name: str, attempt: int | None = None
) -> list[tuple[float, list[tuple[int, int]]]]:
    """One attempt's recent samples: [(time, [(util %, memory MiB) per bound GPU])]; [] if none
    (or the file holds another attempt's, or something unreadable)."""
    job = (usage.get("jobs") or {}).get(name)
    if not isinstance(job, dict) or (attempt is not None and job.get("attempt") != attempt):
        return []
    try:
        series, since = job["series"], float(job["since"])
        times = unpack(series["t"], "I")
        utils = [unpack(u, "B") for u in series["util"]]
        mems = [unpack(m, "I") for m in series["mem"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
    if any(len(u) != len(times) for u in utils) or any(len(m) != len(times) for m in mems):
        return []
    return [(since + tenth / 10, [(u[k], m[k]) for u, m in zip(utils, mems)]) for k, tenth in enumerate(times)]


def series_json(
    points: list[tuple[float, list[tuple[int, int]]]], devices: list[int], since: float, attempt: int = 1
) -> dict:
    """The ``run/gpu-usage.json`` entry of one attempt with these samples, as gflowd packs it
    (for tests and tools that write one)."""
    return {
        "attempt": attempt,
        "devices": list(devices),
        "since": since,
        "samples": len(points),
        "series": {
            "t": pack((round((when - since) * 10) for when, _ in points), "I"),
            "util": [pack((point[i][0] for _, point in points), "B") for i in range(len(devices))],
            "mem": [pack((point[i][1] for _, point in points), "I") for i in range(len(devices))],
        },
    }


def live_summary(usage: dict[str, Any], name: str, attempt: int | None) -> dict[str, Any] | None:
    """A running attempt's ``gpuUsage`` as of gflowd's latest sample (the status's copy is refreshed
    about once a minute); None when the file has none for that attempt."""
    job = (usage.get("jobs") or {}).get(name)
    if not isinstance(job, dict) or job.get("attempt") != attempt or not isinstance(job.get("summary"), dict):
        return None
    return job["summary"]


def sparkline(values: Sequence[float], width: int = 20, top: float = 100.0) -> str:
    """The last ``width`` values as bars from 0 to ``top``."""
    shown = values[-width:]
    return "".join(BARS[min(len(BARS) - 1, max(0, round(v / top * (len(BARS) - 1))))] for v in shown) if top > 0 else ""


def summary_lines(summary: dict[str, Any] | None, series: list[tuple[float, list[tuple[int, int]]]]) -> list[str]:
    """``describe``'s GPU usage block: GPU-hours, then per bound GPU mean/peak util and memory and a
    sparkline of the recent utilization (a running attempt's samples)."""
    if not summary:
        return []
    allocated, used = summary.get("gpuHoursAllocated") or 0.0, summary.get("gpuHoursUsed") or 0.0
    share = f" ({100 * used / allocated:.0f}%)" if allocated else ""
    out = [
        f"GPU Usage:  attempt {summary.get('attempt')}, {summary.get('samples', 0)} samples, "
        f"{used:.2f} of {allocated:.2f} GPU-hours used{share}, as of {summary.get('sampledAt', '-')}"
    ]
    out.append(f"  {'GPU':<5}{'UTIL MEAN':<11}{'PEAK':<7}{'MEM MEAN':<10}{'PEAK':<9}RECENT UTIL")
    for position, gpu in enumerate(summary.get("gpus") or []):
        recent = [point[position][0] for _, point in series if position < len(point)]
        out.append(
            f"  {gpu.get('index', '?')!s:<5}{str(round(gpu.get('utilMean', 0))) + '%':<11}{str(gpu.get('utilPeak', 0)) + '%':<7}"
            f"{format_quantity(gpu.get('memoryMean') or 0) or '0':<10}{format_quantity(gpu.get('memoryPeak') or 0) or '0':<9}"
            f"{sparkline(recent)}"
        )
    return out
