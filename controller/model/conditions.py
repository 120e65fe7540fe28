"""Conditions as Kubernetes keeps them: a list of dicts keyed by ``type``.

``set_condition`` copies apimachinery's ``SetStatusCondition``: ``lastTransitionTime`` moves only
when ``status`` flips.
"""

from __future__ import annotations


def set_condition(
    conditions: list[dict[str, str]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, str]]:
    """Return conditions with ``type_`` set; ``lastTransitionTime`` changes only when status flips."""
    result = []
    found = False
    for cond in conditions:
        if cond["type"] != type_:
            result.append(cond)
            continue
        found = True
        when = cond["lastTransitionTime"] if cond["status"] == status else now
        result.append(
            {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": when}
        )
    if not found:
        result.append(
            {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now}
        )
    return result


def remove_condition(conditions: list[dict[str, str]], type_: str) -> list[dict[str, str]]:
    return [c for c in conditions if c["type"] != type_]


def find_condition(conditions: list[dict[str, str]], type_: str) -> dict[str, str] | None:
    for cond in conditions:
        if cond["type"] == type_:
            return cond
    return None
