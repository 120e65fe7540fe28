"""Validation: is one manifest document a valid Job, Sweep or Reservation, and under which name?

Pure functions of the document (its parsed data, and its text only to name the line of an error), so
every reader checks a document the same way: gflowd as it reads the spec dir (``observe/manifests.py``,
which caches the result per file), ``gflowctl apply`` and ``edit`` before they write
(``client/``), and gflowd answering a review (``daemon/review.py``). A Sweep is expanded
into its children here (``sweep_children``): a child whose spec is invalid rejects the Sweep.
What needs more than the document (duplicate names across files, whose manifests gflowd may run,
dependency cycles) is decided each pass by ``decide/admission.py``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, get_args

from controller.api.names import document_name
from controller.model.documents import AdmittedJob, AdmittedReservation, Rejection
from controller.model.reasons import Reason
from controller.util.yamlio import line_of, roundtrip_documents

if TYPE_CHECKING:
    from controller.api.job import Job

# The models (pydantic) are imported by the functions that validate: gflowd's manifest store imports
# this module, and a start whose manifests are all in the parse cache validates none of them.

MAX_MANIFEST_BYTES = 1024 * 1024


def validate_document(
    data: Any,
    *,
    source: str,
    path: str,
    stem: str | None,
    single: bool,
    doc_index: int = 0,
    text: str | None = None,
    owner_uid: int = -1,
    mtime_ns: int = 0,
    known_hashes: list[str] | tuple[str, str] | None = None,
) -> AdmittedJob | Rejection:
    """One parsed document -> an admitted Job or a Rejection whose message names field and line.
    ``known_hashes``: the spec hashes of this very parse, from the parse cache."""
    name, _ = document_name(data, stem, single)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        return Rejection(
            name, Reason.Invalid, f"document is {kind}, not a Job mapping ({source})", source, path, doc_index, mtime_ns
        )
    kind = data.get("kind", "Job")
    if kind != "Job":
        line = _line(text, doc_index, ("kind",))
        return Rejection(
            name,
            Reason.Invalid,
            f"kind: {kind!r} is not supported; use Job, Sweep or Reservation ({_where(source, line)})",
            source,
            path,
            doc_index,
            mtime_ns,
        )
    from controller.api.hashes import spec_hashes  # lazy: the models (pydantic) only to validate
    from controller.api.job import Job

    meta = data.get("metadata")
    if single and stem is not None and name == stem and not (isinstance(meta, dict) and "name" in meta):
        data = {**data, "metadata": {**(meta if isinstance(meta, dict) else {}), "name": stem}}
    try:
        job = Job.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError; imported lazily with the models
        errors = getattr(exc, "errors", None)
        if errors is None:
            raise
        return Rejection(
            name, Reason.Invalid, _describe_errors(errors(), text, doc_index, source), source, path, doc_index, mtime_ns
        )
    if job.metadata.name is None:
        if not single:
            message = "metadata.name: required when a file holds several documents"
        elif stem is None:  # stdin: no file name to take it from
            message = "metadata.name: required when applying from stdin"
        else:
            message = f"metadata.name: required, the file name {stem!r} is not a valid job name"
        return Rejection(
            None,
            Reason.Invalid,
            f"{message} ({_where(source, _line(text, doc_index, ('metadata',)))})",
            source,
            path,
            doc_index,
            mtime_ns,
        )
    spec_hash, run_hash = known_hashes if known_hashes else spec_hashes(job)
    return AdmittedJob(job.metadata.name, job, source, path, doc_index, spec_hash, run_hash, owner_uid, mtime_ns)


def cached_job(document: str, doc_index: int, name: str) -> Job:
    """The Job of a document of a file's cached parse (JSON), validated as :func:`validate_document`
    did when it admitted it as ``name`` (the file stem, when the document names none)."""
    from controller.api.job import Job  # lazy: the models (pydantic) only when a cached job's model is read

    data = json.loads(document)[doc_index]
    meta = data.get("metadata")
    if not (isinstance(meta, dict) and "name" in meta):
        data = {**data, "metadata": {**(meta if isinstance(meta, dict) else {}), "name": name}}
    return Job.model_validate(data)


# What ``gflowctl get -o yaml|json`` prints beside a manifest's own fields: gflowd's, read-only. A
# document that carries them (an object read back, kubectl's ``get -o yaml | apply -f -``) is
# taken without them, as Kubernetes ignores ``status`` and server-set metadata on apply.
READ_ONLY_FIELDS: tuple[tuple[str, ...], ...] = (
    ("status",),
    ("metadata", "user"),
    ("metadata", "creationTimestamp"),
    ("metadata", "ownerReferences"),
)


def read_only_fields(data: Any) -> list[tuple[str, ...]]:
    """The read-only fields (``READ_ONLY_FIELDS``) ``data`` carries."""
    if not isinstance(data, dict):
        return []
    meta = data.get("metadata")
    return [
        path
        for path in READ_ONLY_FIELDS
        if (path[-1] in data if len(path) == 1 else isinstance(meta, dict) and path[-1] in meta)
    ]


def without_read_only(data: Any) -> Any:
    """``data`` without the read-only fields it carries (a copy; ``data`` itself when it has none)."""
    present = read_only_fields(data)
    if not present:
        return data
    data = {key: value for key, value in data.items() if key != "status"}
    if any(len(path) == 2 for path in present):
        dropped = {path[1] for path in present if len(path) == 2}
        data["metadata"] = {key: value for key, value in data["metadata"].items() if key not in dropped}
    return data


def validate_any(data: Any, **kwargs: Any) -> list[Any]:
    """One document of any kind -> [AdmittedJob] | [AdmittedSweep, *children] | [AdmittedReservation]
    | [Rejection]. Read-only fields an object read back carries (``READ_ONLY_FIELDS``) are ignored."""
    data = without_read_only(data)
    if isinstance(data, dict) and data.get("kind") == "Sweep":
        kwargs.pop("known_hashes", None)  # children's hashes are computed as they expand
        return _validate_sweep(data, **kwargs)
    if isinstance(data, dict) and data.get("kind") == "Reservation":
        kwargs.pop("known_hashes", None)
        return [_validate_reservation(data, **kwargs)]
    return [validate_document(data, **kwargs)]


def _validate_reservation(
    data: dict,
    *,
    source: str,
    path: str,
    stem: str | None,
    single: bool,
    doc_index: int = 0,
    text: str | None = None,
    owner_uid: int = -1,
    mtime_ns: int = 0,
) -> AdmittedReservation | Rejection:
    """A Reservation's schema; whether it fits the machine is decided each pass (decide/reservations.py)."""
    from controller.api.hashes import document_hash
    from controller.api.reservation import Reservation  # lazy: only a Reservation document needs its model

    name, _ = document_name(data, stem, single)
    reservation = _validated(
        Reservation, data, name, source=source, path=path, doc_index=doc_index, text=text, mtime_ns=mtime_ns
    )
    if isinstance(reservation, Rejection):
        return reservation
    assert name is not None  # _validated rejects a nameless document
    return AdmittedReservation(
        name, reservation, source, path, doc_index, document_hash(reservation.spec), owner_uid, mtime_ns
    )


def _validated(
    model: Any, data: dict, name: str | None, *, source: str, path: str, doc_index: int, text: str | None, mtime_ns: int
) -> Any:
    """``data`` as ``model`` (a Sweep or a Reservation), or a Rejection naming every error, or the
    name a document in a file of several must have."""
    try:
        document = model.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError; imported lazily with the models
        errors = getattr(exc, "errors", None)
        if errors is None:
            raise
        message = _describe_errors(errors(), text, doc_index, source, root=model)
        return Rejection(name, Reason.Invalid, message, source, path, doc_index, mtime_ns)
    if name is None:
        where = _where(source, _line(text, doc_index, ("metadata",)))
        message = f"metadata.name: required for a {model.__name__} in a file with several documents ({where})"
        return Rejection(None, Reason.Invalid, message, source, path, doc_index, mtime_ns)
    return document


def _validate_sweep(
    data: dict,
    *,
    source: str,
    path: str,
    stem: str | None,
    single: bool,
    doc_index: int = 0,
    text: str | None = None,
    owner_uid: int = -1,
    mtime_ns: int = 0,
) -> list[Any]:
    from controller.api.sweep import Sweep  # lazy: only a Sweep document needs its model
    from controller.api.sweep_children import expand

    name, _ = document_name(data, stem, single)
    sweep = _validated(Sweep, data, name, source=source, path=path, doc_index=doc_index, text=text, mtime_ns=mtime_ns)
    if isinstance(sweep, Rejection):
        return [sweep]
    assert name is not None  # _validated rejects a nameless document
    try:
        expanded = expand(
            sweep, name, source=source, path=path, doc_index=doc_index, owner_uid=owner_uid, mtime_ns=mtime_ns
        )
    except ValueError as exc:  # a child's spec is invalid after substitution
        return [Rejection(name, Reason.Invalid, f"spec.template: {exc} ({source})", source, path, doc_index, mtime_ns)]
    if isinstance(expanded, Rejection):
        return [expanded]
    record, children = expanded
    return [record, *children]


# --- messages --------------------------------------------------------------------------------


def _where(source: str, line: int | None) -> str:
    return f"{source} line {line}" if line else source


def _line(text: str | None, doc_index: int, loc: tuple[Any, ...]) -> int | None:
    """Line of ``loc``: re-parses in round-trip mode, only on the (rare) error path."""
    return _line_in(_roundtrip(text, doc_index), loc)


def _roundtrip(text: str | None, doc_index: int) -> Any:
    if text is None:
        return None
    try:
        docs = roundtrip_documents(text)
        return docs[doc_index] if doc_index < len(docs) else None
    except Exception:  # the fast loader accepted it; never let line-finding hide the real error
        return None


def _line_in(document: Any, loc: tuple[Any, ...]) -> int | None:
    if document is None:
        return None
    try:
        return line_of(document, loc)
    except Exception:  # never let line-finding hide the real error
        return None


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + (str(part) if part != "" else '""')  # an empty key, visibly
    return out or "document"


_ALLOWED_KEYS_CACHE: dict[tuple[str, ...], list[str]] = {}


def _allowed_keys(loc: tuple[Any, ...], root: Any = None) -> list[str]:
    """Field names valid at ``loc`` (for "did you mean" on unknown fields)."""
    from controller.api.job import Job  # lazy: the models (pydantic), only on an error's path

    model: Any = root or Job
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        found = None
        for fname, finfo in model.model_fields.items():
            if (finfo.alias or fname) == part:
                found = finfo.annotation
        model = _model_in(found)
    if model is None:
        return []
    return [finfo.alias or fname for fname, finfo in model.model_fields.items()]


def _model_in(annotation: Any) -> Any:
    from pydantic import BaseModel  # lazy: only on an error's path

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


_SCHEMA_TAG = re.compile(r"^[\w-]+\[.*\]$")  # e.g. function-before[parse_quantity(), int], list[str]


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic inserts schema tags (e.g. "function-before[...]") for wrapped types; users never wrote them
    return tuple(p for p in loc if isinstance(p, int) or not _SCHEMA_TAG.match(str(p)))


def _explain(err: dict[str, Any], loc: tuple[Any, ...], root: Any = None) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        import difflib  # lazy: only an unknown field's "did you mean"

        field_name = str(loc[-1]) if loc else ""
        close = difflib.get_close_matches(field_name, _allowed_keys(loc[:-1], root), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown field{hint}"
    if kind == "missing":
        return "required field is missing"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {op} {bound}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind in ("string_type",):
        return "must be a string (quote numbers and booleans)"
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if kind in ("list_type", "tuple_type"):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}".replace("'", "")
    if kind in ("too_short", "string_too_short"):
        return "must not be empty"
    if kind == "value_error":
        return str(ctx.get("error", err.get("msg", "")))
    msg = str(err.get("msg", "invalid value"))
    return msg[:1].lower() + msg[1:]


def _describe_errors(
    errors: list[dict[str, Any]], text: str | None, doc_index: int, source: str, root: Any = None
) -> str:
    """Every error at once, each with its line: one fix-and-retry round, not one per error."""
    document = _roundtrip(text, doc_index)
    found: dict[str, int] = {}  # message -> line; a union reports one mistake once per alternative
    for error in errors:
        loc = _clean_loc(tuple(error.get("loc", ())))
        line = _line_in(document, loc)
        found.setdefault(f"{_path(loc)}: {_explain(error, loc, root)} ({_where(source, line)})", line or 0)
    parts = sorted(found, key=found.__getitem__)  # in the order of the file (stable: pydantic's within a line)
    return parts[0] if len(parts) == 1 else f"{len(parts)} errors: " + "; ".join(parts)
