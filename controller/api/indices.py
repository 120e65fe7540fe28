"""A Sweep's ``spec.indices`` (``"0-99"``, ``"0-9,20,30-39"``): parsed without pydantic, so
``gflowctl run --array`` checks it without loading the models (``api/sweep.py`` validates with it)."""

from __future__ import annotations

import re

MAX_CHILDREN = 10_000
_RANGE_RE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+))?\s*$")


def parse_indices(text: str) -> list[int]:
    """``"0-9,20"`` -> [0..9, 20]. Raises ValueError naming what to fix."""
    out: list[int] = []
    for part in text.split(","):
        match = _RANGE_RE.match(part)
        if not match:
            raise ValueError(f"{part.strip()!r} is not an index or range; use e.g. 0-99 or 0-9,20,30-39")
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) is not None else start
        if end < start:
            raise ValueError(f"range {part.strip()} runs backwards")
        if end - start + 1 + len(out) > MAX_CHILDREN:
            raise ValueError(f"more than {MAX_CHILDREN} children")
        out.extend(range(start, end + 1))
    if len(set(out)) != len(out):
        raise ValueError("an index is listed twice")
    return out
