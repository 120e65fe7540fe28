"""Acting on a job by editing its manifest in place: cancel, suspend, resume, rerun, set priority,
patch. Shared by gflowctl's verbs and the Python client (one implementation; errors are
``GflowError`` with gflowctl's line, an unknown job ``NotFound``).

Each changes one field and keeps the rest of the file as the user wrote it (``manifest_edit``).
The read-modify-write goes through ``fsutil.rewrite_locked``: it holds the file's lock, edits
what is on disk under it, keeps the file's owner and mode, and never overwrites a change made by
someone who did not take the lock; an edit that could not be made raises.
"""

from __future__ import annotations

import time
from typing import Any

from controller.client.errors import GflowError, NotFound
from controller.client.read.state import document_position, find_manifest, job_rows, owner_of
from controller.model.documents import Rejection
from controller.paths import Home
from controller.util.fsutil import RewriteError, rewrite_locked
from controller.util.manifest_edit import EditError, merge_patch, set_field
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

FIELDS = {
    "cancel": (("spec", "cancelled"), True, "cancelled"),
    "suspend": (("spec", "suspend"), True, "suspended"),
    "resume": (("spec", "suspend"), False, "resumed"),
}
VERBS = (*FIELDS, "rerun")


class _Gone(Exception):
    """The file no longer defines the job (edited or replaced meanwhile)."""


def edit_manifest(home: Home, ref: tuple[str, str], path: tuple[str, ...], value: Any) -> str:
    """Set ``path`` in the manifest of ``ref`` (``(kind, name)``; ``path == ()``: ``value`` is a
    merge patch). Returns the ``kind/name`` edited. NotFound when it is unknown (or a sweep's
    child); GflowError when the result would be invalid or the file could not be rewritten."""
    kind, name = ref
    owner = owner_of(home, name) if kind == "job" else None
    if owner is not None:
        raise NotFound(f"job/{name} belongs to sweep/{owner}; edit the sweep's template instead")
    manifest = find_manifest(home, name) if kind == "job" else None
    if manifest is None and (kind == "sweep" or path[:1] == ("spec",)):
        # a Sweep (named as one, or by a bare name no job has): cancel/suspend/resume/priority act
        # on its template, so on every child; rerun's annotation is copied to every child
        manifest = find_manifest(home, name, "sweep")
        if manifest is not None:
            kind = "sweep"
            path = ("spec", "template", *path[1:]) if path[:1] == ("spec",) else path
    if manifest is None:
        raise NotFound(f"{kind}/{name} not found")

    def change(text: str) -> str:
        parts = list(iter_documents_text(text))
        position = document_position(parts, name, manifest)
        if position is None:
            raise _Gone
        try:
            new_text = merge_patch(text, position, value) if not path else set_field(text, position, path, value)
        except EditError as exc:
            raise GflowError(f"{kind}/{name}: cannot edit {manifest}: {exc}") from None
        _check_still_valid(new_text, position, f"{kind}/{name}", manifest)
        return new_text

    # lazy: pydantic (~100 ms), loaded before the lock: the lock is held for the edit alone
    import controller.api.validation  # noqa: F401

    try:
        rewrite_locked(manifest, change, within=home.spec_dir)
    except (_Gone, FileNotFoundError):
        raise NotFound(f"{kind}/{name} not found in {manifest}") from None
    except RewriteError as exc:
        raise GflowError(f"{kind}/{name}: not changed: {exc}") from None
    return f"{kind}/{name}"


def _check_still_valid(text: str, position: int, what: str, manifest) -> None:
    from controller.api.validation import validate_any  # lazy: pydantic (~100 ms) only to check an edited manifest

    parts = list(iter_documents_text(text))
    try:
        data = load_one(parts[position])
    except YAMLSyntaxError as exc:
        raise GflowError(f"{what}: the edit would break the YAML: {exc}") from None
    result = validate_any(
        data, source=str(manifest), path=str(manifest), stem=manifest.stem, single=len(parts) == 1, text=parts[position]
    )[0]
    if isinstance(result, Rejection):
        raise GflowError(f"{what}: not changed, the result would be invalid: {result.message}")


def control(home: Home, verb: str, ref: tuple[str, str], rows: dict[str, dict] | None = None) -> str:
    """cancel, suspend, resume or rerun ``ref``; the line that says what was done. ``rows`` (the
    jobs' summary rows, read once for many names) spots a Rejected job: there is nothing to cancel."""
    kind, name = ref
    if verb == "cancel":
        rows = job_rows(home) if rows is None else rows
        row = (rows.get(name) or {}) if kind == "job" else {}
        if row.get("phase") == "Rejected":
            # nothing runs, and a manifest that does not parse cannot be edited: say so, and how to end it
            return (
                f"job/{name} is Rejected ({row.get('reason')}) and never runs: nothing to cancel; "
                f"fix {row.get('manifest') or 'its manifest'}, or gflowctl delete job {name}"
            )
    if verb == "rerun":
        done = edit_manifest(home, ref, ("metadata", "annotations", "gflow.dev/rerun"), str(time.time_ns()))
        return f"{done} rerun requested"
    path, value, what = FIELDS[verb]
    return f"{edit_manifest(home, ref, path, value)} {what}"


def set_priority(home: Home, ref: tuple[str, str], value: str | int) -> str:
    """Set ``spec.priority``; the line that says so."""
    try:
        priority = int(value)
    except ValueError:
        raise GflowError(f"priority must be an integer, not {value!r}") from None
    return f"{edit_manifest(home, ref, ('spec', 'priority'), priority)} priority set to {priority}"
