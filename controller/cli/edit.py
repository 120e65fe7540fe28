"""Verbs that act by editing a manifest in place: cancel, suspend, resume, rerun, set priority,
patch. The edits are ``controller.client.write.edit`` (the Python client's too); this module prints
what each did, and an unknown name is one error line while the other names go on (exit 1).
"""

from __future__ import annotations

import json

from controller.cli.common import CliError, print_error
from controller.client.errors import NotFound
from controller.client.read.state import job_rows
from controller.client.write import edit
from controller.paths import Home


def control(home: Home, verb: str, refs: list[tuple[str, str]]) -> int:
    """cancel, suspend, resume or rerun each ``(kind, name)``; one that fails does not stop the rest."""
    ok = True
    rows = job_rows(home) if verb == "cancel" else {}
    for ref in refs:
        try:
            print(edit.control(home, verb, ref, rows))
        except NotFound as exc:
            print_error(exc)
            ok = False
    return 0 if ok else 1


def set_priority(home: Home, ref: tuple[str, str], value: str) -> int:
    try:
        print(edit.set_priority(home, ref, value))
    except NotFound as exc:
        print_error(exc)
        return 1
    return 0


def patch(home: Home, name: str, patch_text: str) -> int:
    """``gflowctl patch job NAME -p '{"spec": {...}}'``: a JSON merge patch, validated before it is
    written, applied in place so the rest of the file stays as the user wrote it."""

    try:
        data = json.loads(patch_text)
    except ValueError as exc:
        raise CliError(f'-p must be a JSON object like \'{{"spec": {{"priority": 5}}}}\' ({exc})') from None
    if not isinstance(data, dict) or not data:
        raise CliError('-p must be a non-empty JSON object, e.g. \'{"spec": {"priority": 5}}\'')
    unknown = set(data) - {"spec", "metadata"}
    if unknown:
        raise CliError(f"only spec and metadata can be patched, not {sorted(unknown)[0]}")
    try:
        print(f"{edit.edit_manifest(home, ('job', name), (), data)} patched")
    except NotFound as exc:
        print_error(exc)
        return 1
    return 0
