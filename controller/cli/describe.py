"""``gflowctl describe job NAME``: spec summary, status, conditions and recent events."""

from __future__ import annotations

import time

from controller.api.units import format_age, format_duration
from controller.cli.common import CliError, find_manifest, printable, read_status
from controller.paths import Home
from controller.state import from_rfc3339


def describe(home: Home, name: str) -> int:
    status_doc = read_status(home, name)
    manifest = find_manifest(home, name)
    if status_doc is None and manifest is None:
        raise CliError(f"job/{name} not found")
    status = (status_doc or {}).get("status") or {}
    meta = (status_doc or {}).get("metadata") or {}
    now = time.time()
    lines: list[tuple[str, str]] = [("Name", name)]
    if meta.get("labels"):
        lines.append(("Labels", ", ".join(f"{k}={v}" for k, v in meta["labels"].items())))
    lines.append(("Manifest", str(status.get("manifest") or manifest or "-")))
    created = from_rfc3339(meta.get("creationTimestamp"))
    if created:
        lines.append(("Created", f"{meta['creationTimestamp']} ({format_age(now - created)} ago)"))
    lines.append(("Phase", str(status.get("phase", "Unknown (gflowd has not seen it yet)"))))
    if status.get("reason"):
        lines.append(("Reason", str(status["reason"])))
    if status.get("message"):
        lines.append(("Message", str(status["message"])))
    for key, label in (("attempt", "Attempt"), ("exitCode", "Exit Code"), ("pid", "PID"),
                       ("slurmJobId", "Slurm Job"), ("node", "Node"), ("queuePosition", "Queue Position"),
                       ("effectivePriority", "Effective Priority"), ("observedGeneration", "Generation")):
        if status.get(key) is not None:
            lines.append((label, str(status[key])))
    if status.get("devices"):
        lines.append(("Devices", ",".join(str(d) for d in status["devices"])))
    start, end = from_rfc3339(status.get("startTime")), from_rfc3339(status.get("completionTime"))
    if start:
        lines.append(("Started", str(status["startTime"])))
    if end:
        lines.append(("Finished", str(status["completionTime"])))
    if start:
        lines.append(("Duration", format_duration((end or now) - start)))
    lines.extend(_spec_lines(home, name, manifest))
    width = max(len(k) for k, _ in lines) + 2
    # every value escaped for the terminal: file names, messages, commands and labels are users' text
    out = [f"{k + ':':<{width}}{printable(v)}" for k, v in lines]
    conditions = status.get("conditions") or []
    if conditions:
        out.append("Conditions:")
        out.append(f"  {'TYPE':<14}{'STATUS':<8}{'REASON':<26}MESSAGE")
        for c in conditions:
            kind, state, reason, message = (printable(c.get(k, "")) for k in ("type", "status", "reason", "message"))
            out.append(f"  {kind:<14}{state:<8}{reason:<26}{message}")
    events = _recent_events(home, name)
    out.append("Events:" + ("" if events else " <none>"))
    if events:
        from controller.cli.events import age_text

        ages = [age_text(ev, now) for ev in events]
        width_age = max(len(a) for a in ages + ["AGE"]) + 2
        out.append(f"  {'TYPE':<8}{'REASON':<20}{'AGE':<{width_age}}MESSAGE")
        for ev, age in zip(events, ages):
            kind, reason, message = (printable(ev.get(k, "")) for k in ("type", "reason", "message"))
            out.append(f"  {kind:<8}{reason:<20}{age:<{width_age}}{message}")
    log = home.log_file(name)
    out.append(f"Log:{' ' * (width - 4)}{printable(log)}" + ("" if log.exists() else " (none yet)"))
    print("\n".join(out))
    return 0


def _spec_lines(home: Home, name: str, manifest) -> list[tuple[str, str]]:
    if manifest is None:
        return []
    from controller.cli.apply import _position_of
    from controller.yamlio import YAMLSyntaxError, iter_documents_text, load_one

    try:
        parts = list(iter_documents_text(manifest.read_text()))
        position = _position_of(parts, name, manifest)
        spec = (load_one(parts[position]) or {}).get("spec") if position is not None else None
    except (OSError, YAMLSyntaxError, AttributeError):
        return []
    if not isinstance(spec, dict):
        return []
    lines = []
    if spec.get("command") is not None:
        lines.append(("Command", " ".join(str(a) for a in spec["command"])))
    if spec.get("script") is not None:
        first = str(spec["script"]).strip().splitlines()
        lines.append(("Script", (first[0] + (" ..." if len(first) > 1 else "")) if first else ""))
    res = spec.get("resources") or {}
    if isinstance(res, dict) and res:
        parts = [f"{k}={v}" for k, v in res.items()]
        lines.append(("Resources", ", ".join(parts)))
    for key, label in (("sharing", "Sharing"), ("priority", "Priority"), ("timeLimit", "Time Limit"),
                       ("backoffLimit", "Backoff Limit"), ("startAfter", "Start After"),
                       ("suspend", "Suspend"), ("cancelled", "Cancelled")):
        if key in spec:
            lines.append((label, str(spec[key])))
    if spec.get("dependsOn"):
        deps = [d if isinstance(d, str) else f"{d.get('job')} ({d.get('condition', 'Succeeded')})" for d in spec["dependsOn"]]
        lines.append(("Depends On", ", ".join(deps)))
    return lines


def _recent_events(home: Home, name: str, limit: int = 10) -> list[dict]:
    """The job's events with repeats folded (``x3 over 5m``), the ``limit`` most recent."""
    from controller.cli.events import aggregate, read_events

    return aggregate(read_events(home, f"job/{name}"))[-limit:]
