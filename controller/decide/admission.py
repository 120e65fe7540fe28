"""Admission: is each manifest document a valid Job, and under which name? Pure functions.

``validate_document`` checks one document (schema, name) and caches well: its result depends only
on the document. ``admit`` looks across documents (duplicate names) and decides which manifest owns
each name. Neither touches the file system; the store hands in text and parsed data.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Iterable, Mapping, get_args

from pydantic import BaseModel

from controller.api.job import Job
from controller.api.names import document_name, is_valid_name
from controller.decide.hashes import document_hash, spec_hashes
from controller.decide.sweeps import expand
from controller.model.documents import AdmissionResult, AdmittedJob, AdmittedReservation, AdmittedSweep, Rejection
from controller.model.overlay import Overlay
from controller.model.plan import Snapshot
from controller.model.reasons import Reason
from controller.util.yamlio import line_of, roundtrip_documents

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
        return Rejection(name, Reason.Invalid, f"document is {kind}, not a Job mapping ({source})", source, path, doc_index, mtime_ns)
    kind = data.get("kind", "Job")
    if kind != "Job":
        line = _line(text, doc_index, ("kind",))
        return Rejection(
            name, Reason.Invalid, f"kind: {kind!r} is not supported; use Job, Sweep or Reservation ({_where(source, line)})", source, path, doc_index, mtime_ns
        )
    meta = data.get("metadata")
    if single and stem is not None and name == stem and not (isinstance(meta, dict) and "name" in meta):
        data = {**data, "metadata": {**(meta if isinstance(meta, dict) else {}), "name": stem}}
    try:
        job = Job.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError; imported lazily with the models
        errors = getattr(exc, "errors", None)
        if errors is None:
            raise
        return Rejection(name, Reason.Invalid, _describe_errors(errors(), text, doc_index, source), source, path, doc_index, mtime_ns)
    if job.metadata.name is None:
        if not single:
            message = "metadata.name: required when a file holds several documents"
        elif stem is None:  # stdin: no file name to take it from
            message = "metadata.name: required when applying from stdin"
        else:
            message = f"metadata.name: required, the file name {stem!r} is not a valid job name"
        return Rejection(None, Reason.Invalid, f"{message} ({_where(source, _line(text, doc_index, ('metadata',)))})", source, path, doc_index, mtime_ns)
    spec_hash, run_hash = known_hashes if known_hashes else spec_hashes(job)
    return AdmittedJob(job.metadata.name, job, source, path, doc_index, spec_hash, run_hash, owner_uid, mtime_ns)


def cached_job(document: str, doc_index: int, name: str) -> Job:
    """The Job of a document of a file's cached parse (JSON), validated as :func:`validate_document`
    did when it admitted it as ``name`` (the file stem, when the document names none)."""
    data = json.loads(document)[doc_index]
    meta = data.get("metadata")
    if not (isinstance(meta, dict) and "name" in meta):
        data = {**data, "metadata": {**(meta if isinstance(meta, dict) else {}), "name": name}}
    return Job.model_validate(data)


def validate_any(data: Any, **kwargs: Any) -> list[Any]:
    """One document of any kind -> [AdmittedJob] | [AdmittedSweep, *children] | [AdmittedReservation]
    | [Rejection]."""
    if isinstance(data, dict) and data.get("kind") == "Sweep":
        kwargs.pop("known_hashes", None)  # children's hashes are computed as they expand
        return _validate_sweep(data, **kwargs)
    if isinstance(data, dict) and data.get("kind") == "Reservation":
        kwargs.pop("known_hashes", None)
        return [_validate_reservation(data, **kwargs)]
    return [validate_document(data, **kwargs)]


def _validate_reservation(
    data: dict, *, source: str, path: str, stem: str | None, single: bool, doc_index: int = 0,
    text: str | None = None, owner_uid: int = -1, mtime_ns: int = 0,
) -> AdmittedReservation | Rejection:
    """A Reservation's schema; whether it fits the machine is decided each pass (decide/reservations.py)."""
    from controller.api.reservation import Reservation  # lazy: only a Reservation document needs its model
    name, _ = document_name(data, stem, single)
    reservation = _validated(Reservation, data, name, source=source, path=path, doc_index=doc_index, text=text, mtime_ns=mtime_ns)
    if isinstance(reservation, Rejection):
        return reservation
    return AdmittedReservation(name, reservation, source, path, doc_index, document_hash(reservation.spec), owner_uid, mtime_ns)


def _validated(model: Any, data: dict, name: str | None, *, source: str, path: str, doc_index: int, text: str | None, mtime_ns: int) -> Any:
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
    name, _ = document_name(data, stem, single)
    sweep = _validated(Sweep, data, name, source=source, path=path, doc_index=doc_index, text=text, mtime_ns=mtime_ns)
    if isinstance(sweep, Rejection):
        return [sweep]
    try:
        expanded = expand(sweep, name, source=source, path=path, doc_index=doc_index, owner_uid=owner_uid, mtime_ns=mtime_ns)
    except ValueError as exc:  # a child's spec is invalid after substitution
        return [Rejection(name, Reason.Invalid, f"spec.template: {exc} ({source})", source, path, doc_index, mtime_ns)]
    if isinstance(expanded, Rejection):
        return [expanded]
    record, children = expanded
    return [record, *children]


def admit_observed(snap: Snapshot) -> AdmissionResult:
    """The snapshot's manifests admitted: the previous pass's result patched with the documents
    that changed when that is simple (:func:`admit_changes`), else every document afresh."""
    manifests, host, previous = snap.manifests, snap.host, snap.previous
    facts = {"controller_uid": host.controller_uid, "conda_available": host.conda_available, "serial": snap.serial}
    if (
        not manifests.full
        and previous is not None
        and (previous.controller_uid, previous.conda_available) == (host.controller_uid, host.conda_available)
    ):
        patched = admit_changes(previous, manifests.gone, manifests.came, **facts)
        if patched is not None:
            return patched
    # a resync, or a change that needs every document (duplicates, sweeps, cycles)
    current = {name: st.manifest for name, st in snap.states.items() if st.manifest and not st.owner}
    current.update({name: sw.manifest for name, sw in snap.sweep_states.items() if sw.manifest})
    current.update({name: r.manifest for name, r in snap.reservation_states.items() if r.manifest})
    return admit(manifests.documents, current, **facts)


def admit(
    documents: Iterable[AdmittedJob | Rejection],
    current_sources: Mapping[str, str] | None = None,
    *,
    controller_uid: int | None = None,
    conda_available: bool = True,
    serial: int = 0,
) -> AdmissionResult:
    """Across documents: the first manifest for a name owns it; later ones are DuplicateName.

    "First" is the manifest that already owns the name (``current_sources``: name -> source), else the
    oldest file (mtime, then path), so adding a second file never disturbs a running job.
    ``controller_uid``: a controller that is not root runs only manifests its own user owns.
    ``conda_available``: whether ``condaEnv`` can work on this machine.
    ``serial``: which pass this is (see :func:`admit_changes`).
    """
    result = AdmissionResult(serial=serial, controller_uid=controller_uid, conda_available=conda_available)
    by_name: dict[str, list[Any]] = {}
    children: list[AdmittedJob] = []
    for doc in documents:
        doc = check_environment(doc, controller_uid, conda_available)
        if isinstance(doc, AdmittedJob) and doc.owner is not None:
            children.append(doc)  # a sweep's child: admitted with its sweep, below
        elif doc.name is None:
            result.warnings.append(doc)
        else:
            by_name.setdefault(doc.name, []).append(doc)
    losers = _contest(result, by_name, current_sources or {})
    losers += _admit_children(result, children)
    _reject_cycles(result)
    result.ttl_jobs = sum(1 for job in result.jobs.values() if job.ttl is not None)
    for loser, winner in losers:
        _report_duplicate(result, loser, winner, by_name)
    return result


def _contest(result: AdmissionResult, by_name: dict[str, list[Any]], current_sources: Mapping[str, str]) -> list[tuple[Any, Any]]:
    """Each name to its first document (see :func:`admit`); the (loser, winner) pairs."""
    losers: list[tuple[Any, Any]] = []
    for name, docs in by_name.items():
        if len(docs) > 1:
            owner = current_sources.get(name)
            docs.sort(key=lambda d: (d.source != owner, d.mtime_ns, d.source, d.doc_index))
            losers.extend((d, docs[0]) for d in docs[1:])
            result.duplicates[name] = [d.source for d in docs[1:]]
        winner = docs[0]
        if isinstance(winner, AdmittedJob):
            result.jobs[name] = winner
        elif isinstance(winner, Rejection):
            result.rejected[name] = winner
        elif isinstance(winner, AdmittedSweep):
            result.sweeps[name] = winner
        else:
            result.reservations[name] = winner
    return losers


def _admit_children(result: AdmissionResult, children: list[AdmittedJob]) -> list[tuple[Any, Any]]:
    """Children of the sweeps that won their names; a child's name may not collide with anything."""
    losers: list[tuple[Any, Any]] = []
    for child in children:
        sweep = result.sweeps.get(child.owner or "")
        if sweep is None or sweep.path != child.path or sweep.doc_index != child.doc_index:
            continue  # its sweep lost a duplicate-name contest or is being rejected
        clash = (
            result.jobs.get(child.name) or result.rejected.get(child.name) or result.sweeps.get(child.name)
            or result.reservations.get(child.name)
        )
        if clash is not None:
            losers.append((child, clash))
            result.duplicates.setdefault(child.name, []).append(child.source)
            continue
        result.jobs[child.name] = child
    return losers


def _report_duplicate(result: AdmissionResult, loser: Any, winner: Any, by_name: dict[str, list[Any]]) -> None:
    """A Warning for the losing document; a DuplicateName status under its file stem when free."""
    message = (
        f"job name {loser.name!r} is already defined in {winner.source}; "
        f"rename it in {loser.source} (metadata.name)"
    )
    stem = loser.source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    rejection = Rejection(loser.name, Reason.DuplicateName, message, loser.source, loser.path, loser.doc_index, loser.mtime_ns)
    if is_valid_name(stem) and stem != loser.name and stem not in by_name and stem not in result.rejected:
        result.rejected[stem] = Rejection(stem, Reason.DuplicateName, message, loser.source, loser.path, loser.doc_index, loser.mtime_ns)
    result.warnings.append(rejection)


def admit_changes(
    previous: AdmissionResult,
    gone: list[AdmittedJob | Rejection],
    came: list[AdmittedJob | Rejection],
    *,
    controller_uid: int | None = None,
    conda_available: bool = True,
    serial: int = 0,
) -> AdmissionResult | None:
    """:func:`admit` for a few changed documents: the previous result patched, or None when the
    change is not simple enough to patch and a full :func:`admit` must run.

    Simple means what a full admit would decide name by name, without looking across documents:
    plain Jobs and rejected documents only (no Sweeps or their children), each name involved
    defined by exactly one document before and after (no duplicate contest), and no ``dependsOn``
    involved (a cycle can only form or break through a job that has one). The previous result is
    never modified; unchanged entries are the same objects, which is what lets reconcile skip them.
    """
    if not gone and not came:
        return previous
    involved = _patchable(previous, gone, came)
    if involved is None:
        return None
    result = AdmissionResult(
        jobs=Overlay(previous.jobs),  # the previous result's, patched without copying 50,000 entries
        rejected=Overlay(previous.rejected),
        warnings=list(previous.warnings),
        duplicates=dict(previous.duplicates),
        sweeps=previous.sweeps,
        reservations=previous.reservations,
        ttl_jobs=previous.ttl_jobs,
        serial=serial,
        base=previous.serial,
        touched=frozenset(involved),
        controller_uid=controller_uid,
        conda_available=conda_available,
    )
    for doc in gone:
        job = result.jobs.pop(doc.name, None)
        if job is not None and job.ttl is not None:
            result.ttl_jobs -= 1
        result.rejected.pop(doc.name, None)
    for doc in came:
        doc = check_environment(doc, controller_uid, conda_available)
        if isinstance(doc, AdmittedJob):
            result.jobs[doc.name] = doc
            if doc.ttl is not None:
                result.ttl_jobs += 1
        else:
            result.rejected[doc.name] = doc
    return result


def _patchable(
    previous: AdmissionResult, gone: list[AdmittedJob | Rejection], came: list[AdmittedJob | Rejection]
) -> set[str] | None:
    """The names a simple change touches (see :func:`admit_changes`), or None when it is not simple."""
    involved = set()
    for doc in (*gone, *came):
        if doc.name is None or doc.name in previous.duplicates:
            return None
        if isinstance(doc, AdmittedJob):
            if doc.owner is not None or doc.depends:
                return None
        elif not isinstance(doc, Rejection):
            return None  # a Sweep
        involved.add(doc.name)
    gone_ids = {id(doc) for doc in gone}
    for doc in gone:  # each must be its name's one definition in the previous result
        if previous.jobs.get(doc.name) is not doc and previous.rejected.get(doc.name) is not doc:
            return None  # e.g. it lost a contest, or was turned into a Forbidden rejection
    came_names = [doc.name for doc in came]
    if len(set(came_names)) != len(came_names):
        return None
    for name in came_names:  # nothing that stays may already define the name
        for holder in (
            previous.jobs.get(name), previous.rejected.get(name), previous.sweeps.get(name), previous.reservations.get(name)
        ):
            if holder is not None and id(holder) not in gone_ids:
                return None
    return involved


def check_environment(doc: Any, controller_uid: int | None, conda: bool) -> Any:
    if not isinstance(doc, (AdmittedJob, AdmittedReservation)):
        return doc
    if controller_uid not in (None, 0) and doc.owner_uid not in (-1, controller_uid):
        return Rejection(
            doc.name, Reason.Forbidden,
            f"the manifest is owned by uid {doc.owner_uid}, but gflowd runs as uid {controller_uid} and runs only "
            f"its own user's jobs; run gflowd as root to serve several users ({doc.source})",
            doc.source, doc.path, doc.doc_index, doc.mtime_ns,
        )
    if isinstance(doc, AdmittedJob) and doc.conda_env and not conda:
        return Rejection(
            doc.name, Reason.Invalid,
            f"spec.condaEnv: conda is not installed here (not on gflowd's PATH); install it or remove condaEnv ({doc.source})",
            doc.source, doc.path, doc.doc_index, doc.mtime_ns,
        )
    return doc


def _reject_cycles(result: AdmissionResult) -> None:
    """Jobs whose dependsOn form a cycle can never start: reject each, spelling the cycle out."""
    # only jobs with dependencies can be in a cycle: the graph is as small as the pipelines are
    graph = {
        name: [d.job for d in job.spec.depends_on if d.job in result.jobs]
        for name, job in result.jobs.items()
        if job.depends
    }
    graph = {name: [d for d in deps if d in graph] for name, deps in graph.items()}
    for component in _cycles(graph):
        members = set(component)
        start = min(component)
        path = _cycle_path(graph, start, members)
        text = " -> ".join(path)
        for name in sorted(component):
            job = result.jobs.pop(name)
            result.rejected[name] = Rejection(
                name, Reason.DependencyCycle, f"spec.dependsOn: dependency cycle {text} ({job.source})",
                job.source, job.path, job.doc_index, job.mtime_ns,
            )


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components that contain a cycle (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(component)
    return found


def _cycle_path(graph: dict[str, list[str]], start: str, members: set[str]) -> list[str]:
    """One cycle through ``start`` inside the component, as a closed path: a -> b -> a."""
    parents: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node]):
            if child == start:
                path = [start]
                walk = node
                chain = []
                while walk != start:
                    chain.append(walk)
                    walk = parents[walk]
                return path + chain[::-1] + [start]
            if child in members and child not in parents:
                parents[child] = node
                queue.append(child)
    return [start, start]


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


def _describe_errors(errors: list[dict[str, Any]], text: str | None, doc_index: int, source: str, root: Any = None) -> str:
    """Every error at once, each with its line: one fix-and-retry round, not one per error."""
    document = _roundtrip(text, doc_index)
    found: dict[str, int] = {}  # message -> line; a union reports one mistake once per alternative
    for error in errors:
        loc = _clean_loc(tuple(error.get("loc", ())))
        line = _line_in(document, loc)
        found.setdefault(f"{_path(loc)}: {_explain(error, loc, root)} ({_where(source, line)})", line or 0)
    parts = sorted(found, key=found.__getitem__)  # in the order of the file (stable: pydantic's within a line)
    return parts[0] if len(parts) == 1 else f"{len(parts)} errors: " + "; ".join(parts)
