"""What every verb shares: the instance (home + spec dir), user errors, reading state files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from controller.paths import Home


class CliError(Exception):
    """A user error: printed as one line on stderr, exit code 1."""


def printable(text: object) -> str:
    """``text`` as a terminal may show it: control characters, line breaks and other invisible
    characters (ESC, BEL, ``\\n``, U+202E) escaped the way Python's ``repr`` writes them (``\\x1b``,
    ``\\n``, ``\\u202e``), everything else unchanged. File names, job messages and event text come
    from users, and a raw escape sequence could repaint a terminal or forge a row. Used for every
    human-readable output; -o json and -o yaml keep the exact data."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def print_error(message: object) -> None:
    sys.stderr.write(f"error: {printable(message)}\n")


def resolve_home(home: str | None, spec_dir: str | None) -> Home:
    resolved = Home.resolve(home, spec_dir)
    if spec_dir is None:
        # follow the spec dir a running (or the last) gflowd watches, e.g. a git checkout
        try:
            recorded = resolved.spec_dir_file.read_text().strip()
        except OSError:
            recorded = ""
        if recorded:
            resolved = Home(resolved.root, Path(recorded))
    return resolved


_index_cache: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def read_index(home: Home) -> dict[str, Any] | None:
    """``run/index.json``, parsed once per version of the file (apply -f DIR asks per document)."""
    try:
        with open(home.index_file, "rb") as handle:
            st = os.fstat(handle.fileno())
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = _index_cache.get(str(home.index_file))
            if cached is not None and cached[0] == key:
                return cached[1]
            index = json.load(handle)
    except (OSError, ValueError):
        return None
    _index_cache[str(home.index_file)] = (key, index)
    return index


def read_status(home: Home, name: str) -> dict[str, Any] | None:
    from controller.yamlio import YAMLSyntaxError, load_one

    try:
        data = load_one(home.status_file(name).read_text())
    except (OSError, YAMLSyntaxError):
        return None
    return data if isinstance(data, dict) else None


def job_rows(home: Home) -> dict[str, dict[str, Any]]:
    """name -> summary row; from the index when present, else from the status files."""
    index = read_index(home)
    if index is not None:
        return index.get("jobs", {})
    rows: dict[str, dict[str, Any]] = {}
    if not home.status_dir.is_dir():
        return rows
    from controller.state import JobState

    for path in sorted(home.status_dir.glob("*.yaml")):
        data = read_status(home, path.stem)
        if data is None:
            continue
        try:
            rows[path.stem] = JobState.from_status(data).summary()
        except (KeyError, TypeError, ValueError):
            continue
    return rows


def warn_if_not_running(home: Home) -> None:
    from controller.daemon import is_running

    if not is_running(home):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; what you see may be stale\n")


def owner_of(home: Home, name: str) -> str | None:
    """The Sweep that owns job ``name``, if any."""
    row = job_rows(home).get(name) or {}
    return row.get("owner")


def find_manifest(home: Home, name: str, kind: str = "job") -> Path | None:
    """The manifest file that defines ``name``: from its status, else ``<spec-dir>/<name>.yaml``."""
    rows = job_rows(home) if kind == "job" else ((read_index(home) or {}).get("sweeps") or {})
    row = rows.get(name)
    if row and row.get("manifest"):
        candidate = Path(row["manifest"])
        path = candidate if candidate.is_absolute() else home.root / candidate
        if not path.exists():
            path = home.spec_dir.parent / candidate
        if path.exists():
            return path
    for suffix in (".yaml", ".yml"):
        path = home.spec_dir / f"{name}{suffix}"
        if path.exists():
            return path
    return None


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
