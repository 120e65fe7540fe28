"""``gflowctl top [--once] [--interval 2s] [-l k=v]``: running jobs live, like nvidia-smi but by job --
each job's GPUs with their utilization and memory (the job's own processes), its CPU and RSS,
and its elapsed time against its timeLimit.

Reads only files and /proc: ``run/index.json`` (which jobs run, where), the status files (pid,
manifest), ``run/gpu-usage.json`` (gflowd's latest GPU sample per job; top never asks NVML
itself), ``node.yaml`` (how many GPUs), the manifests (timeLimit) and ``/proc/*/stat`` (CPU and
RSS of each job's process tree). On a terminal it redraws in place (plain ANSI, see
``cli/live.py``) until Ctrl-C; with ``--once`` or when stdout is not a terminal it prints once.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from controller.api.labels import selector_matches
from controller.api.units import format_duration, format_quantity, parse_duration
from controller.cli.common import CliError, parse_selector_args, printable
from controller.cli.live import LiveTable, clock_footer
from controller.client.read.state import document_position, find_manifest, manifest_owners, read_index, read_status
from controller.client.read.usage import job_series, read_usage
from controller.paths import Home

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20


def read_processes() -> dict[int, tuple[int, int, int]]:
    """Every visible process: pid -> (parent pid, CPU ticks used, RSS bytes), from /proc/*/stat."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                text = handle.read().decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rfind(")") + 2 :].split()  # after "(comm)", which may hold spaces
        table[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[21]) * PAGE)
    return table


def tree_totals(root: int, table: dict[int, tuple[int, int, int]]) -> tuple[int, int]:
    """(CPU ticks, RSS bytes) of ``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    ticks = rss = 0
    stack, seen = [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        ticks += table[pid][1]
        rss += table[pid][2]
        stack.extend(children.get(pid, ()))
    return ticks, rss


class TopView:
    """Builds one frame; remembers CPU ticks between frames for CPU %."""

    def __init__(self, home: Home, selector: list) -> None:
        self.home = home
        self.selector = selector
        self._ticks: dict[str, tuple[float, int]] = {}  # job -> (monotonic time, ticks) at the last frame
        self._limits: dict[str, tuple[tuple, float | None]] = {}  # job -> (manifest key, timeLimit)
        self._owner = manifest_owners(home)  # uids named once for the life of top

    def frame(self) -> list[str]:
        rows = (read_index(self.home) or {}).get("jobs") or {}
        running = sorted(
            (name, row)
            for name, row in rows.items()
            if row.get("phase") == "Running" and selector_matches(self.selector, row.get("labels") or {})
        )
        usage = read_usage(self.home)
        processes = read_processes()
        now, mono = time.time(), time.monotonic()
        table = [["JOB", "USER", "GPU", "UTIL", "GPU-MEM", "CPU", "RSS", "ELAPSED", "LIMIT"]]
        for name, row in running:
            status = (read_status(self.home, name) or {}).get("status") or {}
            pid = status.get("pid")
            ticks, rss = tree_totals(int(pid), processes) if pid else (0, 0)
            cpu = self._cpu_percent(name, mono, ticks) if pid else None
            start = row.get("startTime")
            limit = self._time_limit(name)
            first = [
                name,
                self._owner(row.get("manifest")),
                "-",
                "-",
                "-",
                "-" if cpu is None else f"{cpu:.0f}%",
                format_quantity(rss) or "0" if pid else "-",
                format_duration(now - start) if start else "-",
                format_duration(limit) if limit else "-",
            ]
            series = job_series(usage, name, row.get("attempt"))
            latest = series[-1][1] if series else []
            devices = row.get("devices") or []
            for position, device in enumerate(devices):
                util, mib = latest[position] if position < len(latest) else (None, None)
                cells = [
                    str(device),
                    "-" if util is None else f"{util}%",
                    "-" if mib is None else format_quantity(mib * MIB) or "0",
                ]
                table.append(first[:2] + cells + first[5:] if position == 0 else ["", "", *cells, "", "", "", ""])
            if not devices:
                table.append(first)
        head = self._headline(len(running), rows)
        if len(table) == 1:
            return [head, "no running jobs"]
        widths = [max(len(printable(r[i])) for r in table) for i in range(len(table[0]))]
        return [head] + ["  ".join(printable(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in table]

    def _headline(self, n_running: int, rows: dict[str, Any]) -> str:
        from controller.util.yamlio import YAMLSyntaxError, load_one, load_own  # lazy: only top reads node.yaml

        try:
            text = self.home.node_file.read_text()
            try:
                node = load_own(text)
            except ValueError:
                node = load_one(text)
            gpus = (node or {}).get("gpus") or []
        except (OSError, YAMLSyntaxError, AttributeError):
            gpus = []
        busy = sum(1 for g in gpus if g.get("jobs"))
        pending = sum(1 for r in rows.values() if r.get("phase") == "Pending")
        return f"gflow top: {n_running} running, {pending} pending; GPUs: {busy} of {len(gpus)} in use by jobs"

    def _cpu_percent(self, name: str, mono: float, ticks: int) -> float | None:
        before = self._ticks.get(name)
        self._ticks[name] = (mono, ticks)
        if before is None or mono <= before[0]:
            return None
        return max(0.0, (ticks - before[1]) / TICK / (mono - before[0]) * 100)

    def _time_limit(self, name: str) -> float | None:
        """spec.timeLimit from the job's manifest, re-read only when the file changes."""
        from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one  # lazy: manifests only here

        path = find_manifest(self.home, name)
        try:
            st = path.stat() if path is not None else None
        except OSError:
            st = None
        key = (str(path), st.st_mtime_ns, st.st_size) if st is not None else ()
        cached = self._limits.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        limit = None
        try:
            parts = list(iter_documents_text(Path(str(path)).read_text())) if st is not None else []
            position = document_position(parts, name, Path(str(path))) if parts else None
            spec = (load_one(parts[position]) or {}).get("spec") if position is not None else None
            if isinstance(spec, dict) and spec.get("timeLimit") is not None:
                limit = parse_duration(spec["timeLimit"])
        except (OSError, YAMLSyntaxError, ValueError, AttributeError):
            limit = None
        self._limits[name] = (key, limit)
        return limit


def top(home: Home, once: bool, interval_text: str, selector_items: list[str]) -> int:
    try:
        interval = parse_duration(interval_text)
    except ValueError as exc:
        raise CliError(f"--interval: {exc}") from None
    if interval <= 0:
        raise CliError("--interval: must be more than 0")
    view = TopView(home, parse_selector_args(selector_items))
    live = sys.stdout.isatty() and not once and os.environ.get("TERM") != "dumb"
    if not live:
        view.frame()  # a first look at the CPU counters, so the printed frame has CPU %
        time.sleep(min(interval, 0.5))
        sys.stdout.write("\n".join(view.frame()) + "\n")
        return 0
    table = LiveTable()
    try:
        while True:
            table.draw(view.frame(), clock_footer())
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
