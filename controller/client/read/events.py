"""Folding repeated events, as ``kubectl describe`` shows them (``x3 over 5m``): shared by
``gflowctl describe`` and the dashboard. Pure: event records in, groups out."""

from __future__ import annotations

from typing import Any

from controller.model.records import from_rfc3339


def aggregate(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Repeats of one (object, type, reason, message) folded into one group: the latest record
    with a ``count`` and ``first``/``last`` time (epoch seconds), ordered by last occurrence."""
    groups: dict[tuple, dict[str, Any]] = {}
    for event in events:
        key = (event.get("object"), event.get("type"), event.get("reason"), event.get("message"))
        when = from_rfc3339(event.get("time")) or 0.0
        group = groups.pop(key, None)  # popped and re-inserted: dict order = last occurrence
        if group is None:
            group = {"count": 0, "first": when, "last": when}
        group.update({k: v for k, v in event.items() if k not in ("count", "first", "last")})
        group["count"] += 1
        group["first"] = min(group["first"], when)
        group["last"] = max(group["last"], when)
        groups[key] = group
    return list(groups.values())
