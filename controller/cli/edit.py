"""Verbs that act by editing a manifest in place: cancel, suspend, resume, rerun, set priority.

Each changes one field and keeps the rest of the file as the user wrote it (``manifest_edit``).
The read-modify-write goes through ``fsutil.rewrite_locked``: it holds the file's lock, edits
what is on disk under it, keeps the file's owner and mode, and never overwrites a change made by
someone who did not take the lock; an edit that could not be made says so (exit 1).
"""

from __future__ import annotations

import json
import time

from controller.cli.common import CliError, document_position, print_error
from controller.client.state import find_manifest, job_rows, owner_of
from controller.model.documents import Rejection
from controller.paths import Home
from controller.util.fsutil import RewriteError, rewrite_locked
from controller.util.manifest_edit import EditError, merge_patch, set_field
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

_FIELDS = {
    "cancel": (("spec", "cancelled"), True, "cancelled"),
    "suspend": (("spec", "suspend"), True, "suspended"),
    "resume": (("spec", "suspend"), False, "resumed"),
}


class _Gone(Exception):
    """The file no longer defines the job (edited or replaced meanwhile)."""


def _edit(home: Home, ref: tuple[str, str], path: tuple[str, ...], value, verb: str = "") -> str | None:
    """Set ``path`` in the manifest of ``ref`` (``(kind, name)``; ``path == ()``: ``value`` is a
    merge patch). Returns the ``kind/name`` edited; None (and a message) when it is unknown;
    CliError when the result would be invalid or the file could not be rewritten."""
    kind, name = ref
    owner = owner_of(home, name) if kind == "job" else None
    if owner is not None:
        print_error(f"job/{name} belongs to sweep/{owner}; edit the sweep's template instead")
        return None
    manifest = find_manifest(home, name) if kind == "job" else None
    if manifest is None and (kind == "sweep" or path[:1] == ("spec",)):
        # a Sweep (named as one, or by a bare name no job has): cancel/suspend/resume/priority act
        # on its template, so on every child; rerun's annotation is copied to every child
        manifest = find_manifest(home, name, "sweep")
        if manifest is not None:
            kind = "sweep"
            path = ("spec", "template", *path[1:]) if path[:1] == ("spec",) else path
    if manifest is None:
        print_error(f"{kind}/{name} not found")
        return None

    def change(text: str) -> str:
        parts = list(iter_documents_text(text))
        position = document_position(parts, name, manifest)
        if position is None:
            raise _Gone
        try:
            new_text = merge_patch(text, position, value) if not path else set_field(text, position, path, value)
        except EditError as exc:
            raise CliError(f"{kind}/{name}: cannot edit {manifest}: {exc}") from None
        _check_still_valid(new_text, position, f"{kind}/{name}", manifest)
        return new_text

    # lazy: pydantic (~100 ms), loaded before the lock: the lock is held for the edit alone
    import controller.decide.admission  # noqa: F401
    try:
        rewrite_locked(manifest, change, within=home.spec_dir)
    except (_Gone, FileNotFoundError):
        print_error(f"{kind}/{name} not found in {manifest}")
        return None
    except RewriteError as exc:
        raise CliError(f"{kind}/{name}: not changed: {exc}") from None
    if verb:
        print(f"{kind}/{name} {verb}")
    return f"{kind}/{name}"


def _check_still_valid(text: str, position: int, what: str, manifest) -> None:
    from controller.decide.admission import validate_any  # lazy: pydantic (~100 ms) only to check an edited manifest

    parts = list(iter_documents_text(text))
    try:
        data = load_one(parts[position])
    except YAMLSyntaxError as exc:
        raise CliError(f"{what}: the edit would break the YAML: {exc}") from None
    result = validate_any(data, source=str(manifest), path=str(manifest), stem=manifest.stem,
                          single=len(parts) == 1, text=parts[position])[0]
    if isinstance(result, Rejection):
        raise CliError(f"{what}: not changed, the result would be invalid: {result.message}")


def control(home: Home, verb: str, refs: list[tuple[str, str]]) -> int:
    """cancel, suspend, resume or rerun each ``(kind, name)``; one that fails does not stop the rest."""
    ok = True
    rows = job_rows(home) if verb == "cancel" else {}
    for ref in refs:
        kind, name = ref
        row = (rows.get(name) or {}) if kind == "job" else {}
        if row.get("phase") == "Rejected":
            # nothing runs, and a manifest that does not parse cannot be edited: say so, and how to end it
            print(f"job/{name} is Rejected ({row.get('reason')}) and never runs: nothing to cancel; "
                  f"fix {row.get('manifest') or 'its manifest'}, or gflowctl delete job {name}")
            continue
        if verb == "rerun":
            done = _edit(home, ref, ("metadata", "annotations", "gflow.dev/rerun"), str(time.time_ns()))
            what = "rerun requested"
        else:
            path, value, what = _FIELDS[verb]
            done = _edit(home, ref, path, value)
        if done:
            print(f"{done} {what}")
        ok = ok and done is not None
    return 0 if ok else 1


def set_priority(home: Home, ref: tuple[str, str], value: str) -> int:
    try:
        priority = int(value)
    except ValueError:
        raise CliError(f"priority must be an integer, not {value!r}") from None
    done = _edit(home, ref, ("spec", "priority"), priority)
    if done is None:
        return 1
    print(f"{done} priority set to {priority}")
    return 0


def patch(home: Home, name: str, patch_text: str) -> int:
    """``gflowctl patch job NAME -p '{"spec": {...}}'``: a JSON merge patch, validated before it is
    written, applied in place so the rest of the file stays as the user wrote it."""

    try:
        data = json.loads(patch_text)
    except ValueError as exc:
        raise CliError(f"-p must be a JSON object like '{{\"spec\": {{\"priority\": 5}}}}' ({exc})") from None
    if not isinstance(data, dict) or not data:
        raise CliError("-p must be a non-empty JSON object, e.g. '{\"spec\": {\"priority\": 5}}'")
    unknown = set(data) - {"spec", "metadata"}
    if unknown:
        raise CliError(f"only spec and metadata can be patched, not {sorted(unknown)[0]}")
    return 0 if _edit(home, ("job", name), (), data, verb="patched") else 1
