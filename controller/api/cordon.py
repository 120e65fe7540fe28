"""``HOME/cordon.yaml``, the GPUs an admin cordoned or drained: its format, read by gflowd
(``controller.observe.cordons``) and written by ``gflowctl cordon|drain|uncordon``."""

from __future__ import annotations

from controller.model.gpus import Cordon
from controller.util.yamlio import YAMLSyntaxError, load_one


def parse_cordons(text: str) -> dict[int, Cordon]:
    """``gpus: {2: {by: root, reason: fan, drain: true}}``; ValueError naming what is wrong."""
    try:
        data = load_one(text) or {}
    except YAMLSyntaxError as exc:
        raise ValueError(f"YAML syntax error: {exc} (line {exc.line})") from None
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(gpus, dict | None):
        raise ValueError("expected a mapping with a 'gpus' mapping (GPU index: {by, reason, drain})")
    cordons, errors = {}, []
    for key, entry in (gpus or {}).items():
        entry = entry or {}
        if not str(key).isdigit() or not isinstance(entry, dict):
            errors.append(f"gpus.{key}: expected a GPU index mapped to {{by, reason, drain}}")
            continue
        unknown = sorted(set(entry) - {"by", "reason", "drain", "since"})
        if unknown:
            errors.append(f"gpus.{key}: unknown field {unknown[0]}")
        if not isinstance(entry.get("drain", False), bool):
            errors.append(f"gpus.{key}.drain: must be true or false")
        cordons[int(key)] = Cordon(
            str(entry.get("by") or ""), str(entry.get("reason") or ""), entry.get("drain") is True
        )
    if errors:
        raise ValueError("; ".join(errors))
    return cordons
