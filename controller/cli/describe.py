"""``gflowctl describe job NAME...`` (or ``job/NAME sweep/NAME reservation/NAME ...``): spec summary, status,
conditions and recent events of each; several are separated by a blank line, as kubectl does."""

from __future__ import annotations

import time

from controller.api.units import format_age, format_cpu_list, format_duration, format_quantity
from controller.cli.common import print_error, printable, warn_if_not_running
from controller.cli.events import age_text, read_events
from controller.client.read.events import aggregate
from controller.client.read.state import (
    document_position,
    expected_starts,
    find_manifest,
    job_rows,
    manifest_owners,
    read_index,
    read_status,
    sweep_params,
)
from controller.client.read.usage import job_series, live_summary, read_usage, summary_lines
from controller.model.records import from_rfc3339
from controller.paths import Home
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one


def describe(home: Home, refs: list[tuple[str, str]]) -> int:
    """Print each ``(kind, name)``; the ones not found are named on stderr (exit 1), the rest printed."""
    missing = False
    shown = 0
    for kind, name in refs:
        describer = {"sweep": _describe_sweep, "reservation": _describe_reservation}.get(kind, _describe_job)
        lines = describer(home, name)
        if lines is None:
            print_error(f"{kind}/{name} not found")
            missing = True
            continue
        print(("\n" if shown else "") + "\n".join(lines))
        shown += 1
    if shown:
        warn_if_not_running(home)  # once, after the output: the statuses shown may be stale
    return 1 if missing else 0


def _describe_job(home: Home, name: str) -> list[str] | None:
    status_doc = read_status(home, name)
    if status_doc is not None and status_doc.get("kind") in ("SweepStatus", "ReservationStatus"):
        status_doc = None
    manifest = find_manifest(home, name)
    if status_doc is None and manifest is None:
        return None
    status = (status_doc or {}).get("status") or {}
    meta = (status_doc or {}).get("metadata") or {}
    now = time.time()
    lines: list[tuple[str, str]] = [("Name", name)]
    if meta.get("labels"):
        lines.append(("Labels", ", ".join(f"{k}={v}" for k, v in meta["labels"].items())))
    lines.append(("Manifest", str(status.get("manifest") or manifest or "-")))
    lines.append(("User", manifest_owners(home)(str(status.get("manifest") or manifest or ""))))  # who it runs as
    sweep = next((r.get("name") for r in meta.get("ownerReferences") or [] if r.get("kind") == "Sweep"), None)
    if sweep and (params := sweep_params(home)(name, sweep)):
        why = f"sweep/{sweep}'s manifest is not readable by you" if params == "hidden" else f"sweep/{sweep}"
        lines.append(("Parameters", f"{params} ({why})"))
    created = from_rfc3339(meta.get("creationTimestamp"))
    if created:
        lines.append(("Created", f"{meta['creationTimestamp']} ({format_age(now - created)} ago)"))
    lines.append(("Phase", str(status.get("phase", "Unknown (gflowd has not seen it yet)"))))
    if status.get("reason"):
        lines.append(("Reason", str(status["reason"])))
    if status.get("message"):
        lines.append(("Message", str(status["message"])))
    for key, label in (
        ("attempt", "Attempt"),
        ("exitCode", "Exit Code"),
        ("pid", "PID"),
        ("backendJobId", "Backend Job"),
        ("node", "Node"),
        ("queuePosition", "Queue Position"),
        ("effectivePriority", "Effective Priority"),
        ("observedGeneration", "Generation"),
    ):
        if status.get(key) is not None:
            lines.append((label, yaml_text(status[key])))
    order = next((c for c in status.get("conditions") or [] if c.get("type") == "QueueOrder"), None)
    if order is not None and status.get("phase") == "Pending":  # why it stands where it does (docs/scheduling.md)
        where = f"#{status['queuePosition']}: " if status.get("queuePosition") is not None else ""
        lines.append(("Queue Order", where + str(order.get("message", ""))))
    if status.get("devices"):
        lines.append(("Devices", ",".join(str(d) for d in status["devices"])))
    if status.get("cores"):
        lines.append(("CPU Cores", format_cpu_list(status["cores"])))
    usage = status.get("usage") or {}
    if usage:
        parts = []
        if usage.get("cpuSeconds") is not None:
            parts.append(f"CPU time {format_duration(float(usage['cpuSeconds']))}")
        if usage.get("peakMemoryBytes") is not None:
            parts.append(f"peak memory {format_quantity(int(usage['peakMemoryBytes'])) or '0'}")
        lines.append(("Usage", ", ".join(parts) + " (last attempt)"))
    start, end = from_rfc3339(status.get("startTime")), from_rfc3339(status.get("completionTime"))
    if start:
        lines.append(("Started", str(status["startTime"])))
    if end:
        lines.append(("Finished", str(status["completionTime"])))
    if start:
        lines.append(("Duration", format_duration((end or now) - start)))
    if status.get("phase") == "Pending" and status.get("queuePosition") is not None:
        expected = expected_starts(home, job_rows(home), now).get(name)
        if expected is not None:
            lines.append(("Expected Start", _start_text(expected, now)))
    lines.extend(_spec_lines(home, name, manifest))
    if status.get("reason") == "Reserved":
        lines.extend(("Reserved By", text) for text in _live_reservations(home))
    width = max(len(k) for k, _ in lines) + 2
    # every value escaped for the terminal: file names, messages, commands and labels are users' text
    out = [f"{k + ':':<{width}}{printable(v)}" for k, v in lines]
    if status.get("gpuUsage"):
        summary, series = status["gpuUsage"], []
        if status.get("phase") == "Running":  # gflowd's latest sample, fresher than the status's copy
            usage = read_usage(home)
            summary = live_summary(usage, name, status.get("attempt")) or summary
            series = job_series(usage, name, status.get("attempt"))
        out.extend(printable(line) for line in summary_lines(summary, series))
    conditions = status.get("conditions") or []
    if conditions:
        out.append("Conditions:")
        wide = max(14, *(len(str(c.get("type", ""))) + 2 for c in conditions))  # ReclaimedGPUMemory: 18
        out.append(f"  {'TYPE':<{wide}}{'STATUS':<8}{'REASON':<26}MESSAGE")
        for c in conditions:
            kind, state, reason, message = (printable(c.get(k, "")) for k in ("type", "status", "reason", "message"))
            out.append(f"  {kind:<{wide}}{state:<8}{reason:<26}{message}")
    out.extend(_event_lines(_recent_events(home, name), now))
    log = home.log_file(name)
    out.append(f"Log:{' ' * (width - 4)}{printable(log)}" + ("" if log.exists() else " (none yet)"))
    return out


def _start_text(start, now: float) -> str:
    """``2026-12-01 14:05 (in 1h2m), when job/a reaches its timeLimit``, or why it is not known."""
    if start.at is None:
        return start.basis
    if start.at <= now:
        return f"now, {start.basis}"
    return f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(start.at))} (in {format_duration(start.at - now)}), {start.basis}"


def _describe_sweep(home: Home, name: str) -> list[str] | None:
    doc = read_status(home, name)
    if doc is None or doc.get("kind") != "SweepStatus":
        return None
    status = doc.get("status") or {}
    now = time.time()
    lines = _record_head(name, doc, now)
    for key, label in (
        ("phase", "Phase"),
        ("reason", "Reason"),
        ("message", "Message"),
        ("children", "Jobs"),
        ("parallelism", "Parallelism"),
    ):
        if status.get(key) not in (None, ""):
            lines.append((label, yaml_text(status[key])))
    counts = status.get("counts") or {}
    if counts:
        lines.append(("Counts", ", ".join(f"{phase}={n}" for phase, n in counts.items())))
    width = max(len(k) for k, _ in lines) + 2
    out = [f"{k + ':':<{width}}{printable(v)}" for k, v in lines]
    children = [str(c) for c in status.get("childNames") or []]
    if children:
        rows = job_rows(home)
        out.append("Children:")
        out.append(f"  {'NAME':<{max(len(c) for c in children) + 2}}PHASE")
        for child in children:
            phase = (rows.get(child) or {}).get("phase", "Unknown")
            out.append(f"  {printable(child):<{max(len(c) for c in children) + 2}}{printable(phase)}")
    out.extend(_event_lines(aggregate(read_events(home, f"sweep/{name}"))[-10:], now))
    return out


def _describe_reservation(home: Home, name: str) -> list[str] | None:
    doc = read_status(home, name)
    if doc is None or doc.get("kind") != "ReservationStatus":
        return None
    status = doc.get("status") or {}
    now = time.time()
    lines = _record_head(name, doc, now)
    for key, label in (("phase", "Phase"), ("reason", "Reason"), ("message", "Message")):
        if status.get(key) not in (None, ""):
            lines.append((label, yaml_text(status[key])))
    lines.append(("Users", ", ".join(status.get("users") or []) or "-"))
    lines.append(("GPUs", ",".join(str(d) for d in status.get("devices") or []) or "-"))
    for key, label in (("start", "Start"), ("end", "End")):
        moment = from_rfc3339(status.get(key))
        if moment is not None:
            lines.append((label, time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(moment))))
    width = max(len(k) for k, _ in lines) + 2
    out = [f"{k + ':':<{width}}{printable(v)}" for k, v in lines]
    out.extend(_event_lines(aggregate(read_events(home, f"reservation/{name}"))[-10:], now))
    return out


def _record_head(name: str, doc: dict, now: float) -> list[tuple[str, str]]:
    """Name, labels, manifest and age of a Sweep's or a Reservation's status document."""
    status, meta = doc.get("status") or {}, doc.get("metadata") or {}
    lines: list[tuple[str, str]] = [("Name", name)]
    if meta.get("labels"):
        lines.append(("Labels", ", ".join(f"{k}={v}" for k, v in meta["labels"].items())))
    lines.append(("Manifest", str(status.get("manifest") or "-")))
    created = from_rfc3339(meta.get("creationTimestamp"))
    if created:
        lines.append(("Created", f"{meta['creationTimestamp']} ({format_age(now - created)} ago)"))
    return lines


def _live_reservations(home: Home) -> list[str]:
    """The reservations that hold GPUs now or later: ``r1: GPUs 0,2 reserved for alice ...``."""
    rows = (read_index(home) or {}).get("reservations") or {}
    return [
        f"{name}: {row.get('message', '')}"
        for name, row in sorted(rows.items())
        if row.get("phase") in ("Pending", "Active")
    ]


def _event_lines(events: list[dict], now: float) -> list[str]:
    out = ["Events:" + ("" if events else " <none>")]
    if events:
        ages = [age_text(ev, now) for ev in events]
        width_age = max(len(a) for a in ages + ["AGE"]) + 2
        out.append(f"  {'TYPE':<8}{'REASON':<20}{'AGE':<{width_age}}MESSAGE")
        for ev, age in zip(events, ages):
            kind, reason, message = (printable(ev.get(k, "")) for k in ("type", "reason", "message"))
            out.append(f"  {kind:<8}{reason:<20}{age:<{width_age}}{message}")
    return out


def _spec_lines(home: Home, name: str, manifest) -> list[tuple[str, str]]:
    if manifest is None:
        return []

    try:
        parts = list(iter_documents_text(manifest.read_text()))
        position = document_position(parts, name, manifest)
        spec = (load_one(parts[position]) or {}).get("spec") if position is not None else None
    except (OSError, YAMLSyntaxError, AttributeError):
        return []
    if not isinstance(spec, dict):
        return []
    lines = []
    if spec.get("command") is not None:
        lines.append(("Command", " ".join(yaml_text(a) for a in spec["command"])))
    if spec.get("script") is not None:
        first = str(spec["script"]).strip().splitlines()
        lines.append(("Script", (first[0] + (" ..." if len(first) > 1 else "")) if first else ""))
    res = spec.get("resources") or {}
    if isinstance(res, dict) and res:
        parts = [f"{k}={yaml_text(v)}" for k, v in res.items()]
        lines.append(("Resources", ", ".join(parts)))
    for key, label in (
        ("sharing", "Sharing"),
        ("priority", "Priority"),
        ("timeLimit", "Time Limit"),
        ("backoffLimit", "Backoff Limit"),
        ("startAfter", "Start After"),
        ("idleTimeout", "Idle Timeout"),
        ("suspend", "Suspend"),
        ("cancelled", "Cancelled"),
    ):
        if key in spec:
            lines.append((label, yaml_text(spec[key])))
    if spec.get("tty") is True:
        lines.append(("TTY", "true (a terminal: gflowctl attach connects to it while it runs)"))
    if spec.get("dependsOn"):
        deps = [
            d if isinstance(d, str) else f"{d.get('job')} ({d.get('condition', 'Succeeded')})"
            for d in spec["dependsOn"]
        ]
        lines.append(("Depends On", ", ".join(deps)))
    return lines


def _recent_events(home: Home, name: str, limit: int = 10) -> list[dict]:
    """The job's events with repeats folded (``x3 over 5m``), the ``limit`` most recent."""
    return aggregate(read_events(home, f"job/{name}"))[-limit:]


def yaml_text(value: object) -> str:
    """A manifest's scalar as YAML wrote it: ``true``/``false``/``null``, not Python's ``True``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)
