"""Verbs that act by editing a manifest in place: cancel, suspend, resume, rerun, set priority.

Each changes one field and keeps the rest of the file as the user wrote it (``manifest_edit``).
"""

from __future__ import annotations

import sys
import time

from controller.cli.common import CliError, find_manifest
from controller.fsutil import atomic_write
from controller.paths import Home

_FIELDS = {
    "cancel": (("spec", "cancelled"), True, "cancelled"),
    "suspend": (("spec", "suspend"), True, "suspended"),
    "resume": (("spec", "suspend"), False, "resumed"),
}


def _edit(home: Home, name: str, path: tuple[str, ...], value) -> bool:
    """Set ``path`` in job ``name``'s manifest. False (and a message) when the job is unknown."""
    from controller.cli.apply import _position_of
    from controller.manifest_edit import EditError, set_field
    from controller.yamlio import iter_documents_text

    manifest = find_manifest(home, name)
    if manifest is None:
        sys.stderr.write(f"error: job/{name} not found\n")
        return False
    text = manifest.read_text()
    parts = list(iter_documents_text(text))
    position = _position_of(parts, name, manifest)
    if position is None:
        sys.stderr.write(f"error: job/{name} not found in {manifest}\n")
        return False
    try:
        new_text = set_field(text, position, path, value)
    except EditError as exc:
        raise CliError(f"job/{name}: cannot edit {manifest}: {exc}") from None
    if new_text != text:
        atomic_write(manifest, new_text, mode=manifest.stat().st_mode & 0o755)
    return True


def control(home: Home, verb: str, names: list[str]) -> int:
    ok = True
    for name in names:
        if verb == "rerun":
            done = _edit(home, name, ("metadata", "annotations", "gflow.dev/rerun"), str(time.time_ns()))
            what = "rerun requested"
        else:
            path, value, what = _FIELDS[verb]
            done = _edit(home, name, path, value)
        if done:
            print(f"job/{name} {what}")
        ok = ok and done
    return 0 if ok else 1


def set_priority(home: Home, name: str, value: str) -> int:
    try:
        priority = int(value)
    except ValueError:
        raise CliError(f"priority must be an integer, not {value!r}") from None
    if not _edit(home, name, ("spec", "priority"), priority):
        return 1
    print(f"job/{name} priority set to {priority}")
    return 0
