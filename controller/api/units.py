"""Quantities (``16Gi``) and durations (``4h30m``): parsing and formatting, nothing else.

Pure functions with no dependencies, so the CLI can format without importing pydantic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

_QUANTITY = r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]i?|[kmgtp]i?)?[Bb]?\s*$"  # compiled on first use (re's cache): not at every gflowctl start
_FACTORS = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "KI": 2**10,
    "MI": 2**20,
    "GI": 2**30,
    "TI": 2**40,
    "PI": 2**50,
}


MAX_QUANTITY = 2**63 - 1  # bytes: what an int64 (kernel limits, JSON readers) holds
MAX_DURATION = 100 * 365 * 86400.0  # seconds: a century is "no limit" already


def parse_quantity(value: object) -> int:
    """``"16Gi"`` -> bytes. Accepts an integer byte count, ``K M G T P`` and their ``i`` forms."""
    n_bytes = _parse_quantity(value)
    if n_bytes > MAX_QUANTITY:
        raise ValueError(f"must be at most {MAX_QUANTITY} bytes (8Ei)")
    return n_bytes


def _parse_quantity(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("must be a quantity like 16Gi or 512Mi, not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if not isinstance(value, str):
        raise ValueError("must be a quantity like 16Gi or 512Mi")
    match = re.match(_QUANTITY, value)
    if not match:
        raise ValueError(f"{value!r} is not a quantity; use a number with a unit like 16Gi, 500M or 512Mi")
    number, unit = match.groups()
    amount = float(number) * _FACTORS[(unit or "").upper()]
    if not math.isfinite(amount):
        raise ValueError(f"must be at most {MAX_QUANTITY} bytes (8Ei)")
    return int(amount)


def format_quantity(n_bytes: int | None) -> str:
    """Bytes -> the shortest exact-ish binary form: ``17179869184`` -> ``16Gi``."""
    if n_bytes is None:
        return ""
    for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n_bytes >= factor:
            value = n_bytes / factor
            return f"{value:.0f}{unit}" if value == int(value) or value >= 100 else f"{value:.1f}{unit}"
    return str(n_bytes)


_DURATION_PART = r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s|d)"  # compiled on first use (re's cache)
_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: object) -> float:
    """Go-style ``"4h30m"``, ``"90s"``, ``"1.5h"`` or a number of seconds -> seconds."""
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_DURATION:
        raise ValueError("must be at most 100 years")  # before float(): a huge int overflows it
    seconds = _parse_duration(value)
    if not seconds <= MAX_DURATION:
        raise ValueError("must be at most 100 years")
    return seconds


def _parse_duration(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a duration like 4h30m or a number of seconds")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        if value < 0:
            raise ValueError("must not be negative")
        return float(value)
    if not isinstance(value, str):
        raise ValueError("must be a duration like 4h30m or a number of seconds")
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"{value!r} is not a duration; use e.g. 90s, 30m, 4h30m or a number of seconds")
        if seconds < 0:
            raise ValueError("must not be negative")
        return seconds
    pos, total = 0, 0.0
    for match in re.finditer(_DURATION_PART, text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{value!r} is not a duration; use e.g. 90s, 30m, 4h30m, 2d or a number of seconds")
    return total


def format_duration(seconds: float | None) -> str:
    """Seconds -> ``4h30m``, ``90s`` -> ``1m30s``; the inverse of :func:`parse_duration` for whole seconds."""
    if seconds is None:
        return ""
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f}ms" if seconds else "0s"
    rest = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


def format_age(seconds: float) -> str:
    """kubectl-style AGE: two most significant units (``3m12s``, ``2d4h``)."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 600:
        return f"{seconds // 60}m{seconds % 60}s"
    if seconds < 3 * 3600:
        return f"{seconds // 60}m"
    if seconds < 8 * 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m"
    if seconds < 2 * 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h" if seconds < 8 * 86400 else f"{seconds // 86400}d"


def format_cpu_list(cores: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> ``0-2,5`` (the kernel's CPU list format, as in cpuset.cpus)."""
    ranges: list[list[int]] = []
    for core in sorted(set(cores)):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def parse_cpu_list(text: str) -> frozenset[int]:
    """``0-2,5`` -> {0, 1, 2, 5}; ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)
