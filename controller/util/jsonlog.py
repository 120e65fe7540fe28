"""Append-only JSON-lines files (``events.jsonl``, ``run/history.jsonl``), rotated by size.

One record per line, appended with ``O_APPEND`` in a single ``write``: a reader never sees a torn
line from a writer that is alive, and a crash can at worst cut the last line short (readers skip a
line that does not parse). When a file grows past its limit it is renamed to ``NAME.1`` (the one
previous file kept) and a new one begins; readers read ``NAME.1`` then ``NAME``. Standard library
only: ``gflowctl`` imports this for ``get events`` and ``stats``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def previous_of(path: Path) -> Path:
    """``events.jsonl`` -> ``events.jsonl.1``: the file kept from before the last rotation."""
    return path.with_name(path.name + ".1")


def append_lines(path: Path, lines: list[str], max_bytes: int) -> None:
    """Append ``lines`` (each ending in a newline) in one write; rotate first when over ``max_bytes``."""
    if not lines:
        return
    try:
        if path.stat().st_size > max_bytes:
            os.replace(path, previous_of(path))
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(lines).encode())
    finally:
        os.close(fd)


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of ``NAME.1`` then ``NAME``, oldest first; lines that do not parse are skipped."""
    for candidate in (previous_of(path), path):
        try:
            handle = open(candidate, encoding="utf-8", errors="replace")
        except OSError:
            continue
        with handle:
            yield from parse_lines(handle)


def parse_lines(lines) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.endswith("\n"):
            continue  # a line still being written, or cut short by a crash
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
