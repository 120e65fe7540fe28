"""A Sweep's children and the parameters each gets, from the plain manifest data: one fact shared
by gflowd (``api/sweep_children.py`` expands the validated Sweep with it) and by the readers that show
a child's values (``describe``, ``get jobs -o wide``, ``get sweeps``), which load no models."""

from __future__ import annotations

import itertools
from typing import Any

DEFAULT_NAME_TEMPLATE = "{sweep}-{index}"


def text_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def combinations_of(matrix: dict[str, list[Any]], exclude: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One ``{key: value}`` per child, in order (the last key varying fastest), after ``exclude``."""
    keys = list(matrix)
    excludes = [{k: text_of(v) for k, v in ex.items()} for ex in exclude]
    out = []
    for values in itertools.product(*(matrix[k] for k in keys)):
        combo = {k: text_of(v) for k, v in zip(keys, values)}
        if any(all(combo.get(k) == v for k, v in ex.items()) for ex in excludes):
            continue
        out.append(combo)
    return out


def substitute(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def child_params(sweep: str, spec: dict[str, Any]) -> dict[str, dict[str, str]]:
    """A matrix Sweep's ``spec`` (as written) -> child name -> its parameters; {} for an array or
    a spec that is not a well-formed matrix (gflowd rejects those; nothing to show)."""
    matrix, exclude = spec.get("matrix"), spec.get("exclude") or []
    if (
        not isinstance(matrix, dict)
        or not all(isinstance(v, list) for v in matrix.values())
        or not isinstance(exclude, list)
    ):
        return {}
    template = spec.get("nameTemplate") or DEFAULT_NAME_TEMPLATE
    try:
        combos = combinations_of(matrix, [ex for ex in exclude if isinstance(ex, dict)])
    except TypeError:
        return {}
    return {
        substitute(str(template), {"sweep": sweep, "index": str(i), **combo}): combo for i, combo in enumerate(combos)
    }


def params_text(params: dict[str, str]) -> str:
    """``lr=0.01 bs=64``: how a child's values are shown."""
    return " ".join(f"{k}={v}" for k, v in params.items())
