"""``gflowctl explain job|reservation[.spec.FIELD...]``: field docs generated from the models' JSON schemas."""

from __future__ import annotations

import textwrap
from typing import Any

from pydantic import BaseModel

from controller.api.job import Job
from controller.cli.common import CliError


def explain(path: str) -> int:
    parts = path.split(".")
    model: type[BaseModel]
    if parts[0].lower() in ("reservation", "reservations"):
        from controller.api.reservation import Reservation as model  # lazy: only explain reservation needs it
    elif parts[0].lower() in ("job", "jobs"):
        model = Job
    else:
        raise CliError(f"unknown resource type {parts[0]!r}; use job or reservation")
    schema = model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    node: dict[str, Any] = schema
    kind = model.__name__
    trail = [kind]
    for part in parts[1:]:
        node = _resolve(node, defs)
        props = node.get("properties", {})
        if part not in props:
            known = ", ".join(sorted(props)) or "none"
            raise CliError(f"field {'.'.join(trail + [part])} does not exist; fields here: {known}")
        node = props[part]
        trail.append(part)
    description = node.get("description", "")
    resolved = _resolve(node, defs)
    description = description or resolved.get("description", "")
    out = [f"KIND:     {kind}", "VERSION:  gflow.dev/v1alpha1", ""]
    if len(trail) > 1:
        out += [f"FIELD:    {'.'.join(trail[1:])} <{_type(node, defs)}>", ""]
    out += ["DESCRIPTION:"]
    out += ["  " + line for line in textwrap.wrap(description or "(no description)", 76)]
    props = resolved.get("properties")
    if props:
        required = set(resolved.get("required", []))
        out += ["", "FIELDS:"]
        for key, sub in props.items():
            mark = " -required-" if key in required else ""
            out.append(f"  {key}\t<{_type(sub, defs)}>{mark}")
            desc = sub.get("description") or _resolve(sub, defs).get("description", "")
            for line in textwrap.wrap(desc, 72):
                out.append("    " + line)
    print("\n".join(out))
    return 0


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return _resolve(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "allOf"):
        for option in node.get(key, []):
            if "$ref" in option or option.get("type") == "object":
                return _resolve(option, defs)
    return node


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in node:
        return "Object"
    if "anyOf" in node:
        kinds = [_type(o, defs) for o in node["anyOf"] if o.get("type") != "null"]
        return " | ".join(dict.fromkeys(kinds))
    kind = node.get("type")
    if kind == "array":
        return f"[]{_type(node.get('items', {}), defs)}"
    if kind == "object":
        return "map[string]string" if "additionalProperties" in node else "Object"
    if "enum" in node:
        return "string (" + " | ".join(str(v) for v in node["enum"]) + ")"
    if "const" in node:
        return f"string ({node['const']})"
    return {"integer": "integer", "string": "string", "boolean": "boolean", "number": "number"}.get(
        str(kind), str(kind or "any")
    )
