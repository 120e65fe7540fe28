"""Admission: is each manifest document a valid Job, and under which name? Pure functions.

``validate_document`` checks one document (schema, name) and caches well: its result depends only
on the document. ``admit`` looks across documents (duplicate names) and decides which manifest owns
each name. Neither touches the file system; the store hands in text and parsed data.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from controller.api.job import Job
from controller.api.names import document_name, is_valid_name

MAX_MANIFEST_BYTES = 1024 * 1024
RERUN_ANNOTATION = "gflow.dev/rerun"
# Fields that steer a job rather than define its work: they act on a running attempt, and changing
# them never runs a finished job again (SPEC.md section 3).
CONTROL_FIELDS = ("priority", "suspend", "cancelled", "timeLimit", "terminationGracePeriod", "ttlSecondsAfterFinished")


@dataclass(frozen=True)
class AdmittedJob:
    name: str
    job: Job
    source: str  # the manifest as users see it: jobs/a.yaml
    path: str  # absolute path of the manifest file
    doc_index: int
    spec_hash: str  # changes with any semantic spec change: bumps the generation
    run_hash: str  # changes with what a run depends on: a finished job runs again
    owner_uid: int = -1
    mtime_ns: int = 0
    owner: str | None = None  # the Sweep that created this job, if any
    real_dir: str | None = None  # the folder the manifest really lives in, when a symlink led to it

    @property
    def spec(self):
        return self.job.spec

    @property
    def folder(self) -> str:
        """Where relative paths and the default working directory resolve: the folder the manifest
        file really lives in, never a symlink's folder (docs/multi-user.md)."""
        return self.real_dir or os.path.dirname(self.path)


@dataclass(frozen=True)
class Rejection:
    name: str | None  # None when neither metadata.name nor the file stem is a valid name
    reason: str  # Invalid | YAMLError | DuplicateName | Forbidden
    message: str
    source: str
    path: str = ""
    doc_index: int = 0
    mtime_ns: int = 0


_serials = itertools.count(1)


@dataclass
class AdmissionResult:
    jobs: dict[str, AdmittedJob] = field(default_factory=dict)
    rejected: dict[str, Rejection] = field(default_factory=dict)
    # duplicates and documents without any valid name: reported as Warning events only
    warnings: list[Rejection] = field(default_factory=list)
    # name -> sources of documents that lost a duplicate-name contest, for a condition on the winner
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    sweeps: dict[str, Any] = field(default_factory=dict)  # name -> controller.sweeps.AdmittedSweep
    ttl_jobs: int = 0  # admitted jobs with their own ttlSecondsAfterFinished: expiry has work to do
    serial: int = field(default_factory=lambda: next(_serials))
    base: int | None = None  # set by admit_changes: the serial of the result this one patches...
    touched: frozenset[str] = frozenset()  # ...and the names whose entries it changed



def _hash(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def spec_hashes(job: Job) -> tuple[str, str]:
    spec = job.spec.model_dump(mode="json", by_alias=True)
    rerun = job.metadata.annotations.get(RERUN_ANNOTATION, "")
    run_part = {k: v for k, v in spec.items() if k not in CONTROL_FIELDS}
    return _hash([spec, rerun]), _hash([run_part, rerun])


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
        return Rejection(name, "Invalid", f"document is {kind}, not a Job mapping ({source})", source, path, doc_index, mtime_ns)
    kind = data.get("kind", "Job")
    if kind != "Job":
        line = _line(text, doc_index, ("kind",))
        return Rejection(
            name, "Invalid", f"kind: {kind!r} is not supported; use Job or Sweep ({_where(source, line)})", source, path, doc_index, mtime_ns
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
        return Rejection(name, "Invalid", _describe_errors(errors(), text, doc_index, source), source, path, doc_index, mtime_ns)
    if job.metadata.name is None:
        message = (
            "metadata.name: required when a file holds several documents"
            if not single
            else f"metadata.name: required, the file name {stem!r} is not a valid job name"
        )
        return Rejection(None, "Invalid", f"{message} ({_where(source, _line(text, doc_index, ('metadata',)))})", source, path, doc_index, mtime_ns)
    spec_hash, run_hash = known_hashes if known_hashes else spec_hashes(job)
    return AdmittedJob(job.metadata.name, job, source, path, doc_index, spec_hash, run_hash, owner_uid, mtime_ns)


def validate_any(data: Any, **kwargs: Any) -> list[Any]:
    """One document of any kind -> [AdmittedJob] | [AdmittedSweep, *children] | [Rejection]."""
    if isinstance(data, dict) and data.get("kind") == "Sweep":
        kwargs.pop("known_hashes", None)  # children's hashes are computed as they expand
        return _validate_sweep(data, **kwargs)
    return [validate_document(data, **kwargs)]


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
    from controller.api.sweep import Sweep
    from controller.sweeps import expand

    name, _ = document_name(data, stem, single)
    try:
        sweep = Sweep.model_validate(data)
    except Exception as exc:
        errors = getattr(exc, "errors", None)
        if errors is None:
            raise
        message = _describe_errors(errors(), text, doc_index, source, root=Sweep)
        return [Rejection(name, "Invalid", message, source, path, doc_index, mtime_ns)]
    if name is None:
        where = _where(source, _line(text, doc_index, ("metadata",)))
        return [Rejection(None, "Invalid", f"metadata.name: required for a Sweep in a file with several documents ({where})", source, path, doc_index, mtime_ns)]
    try:
        expanded = expand(sweep, name, source=source, path=path, doc_index=doc_index, owner_uid=owner_uid, mtime_ns=mtime_ns)
    except ValueError as exc:  # a child's spec is invalid after substitution
        return [Rejection(name, "Invalid", f"spec.template: {exc} ({source})", source, path, doc_index, mtime_ns)]
    if isinstance(expanded, Rejection):
        return [expanded]
    record, children = expanded
    return [record, *children]


def admit(
    documents: Iterable[AdmittedJob | Rejection],
    current_sources: Mapping[str, str] | None = None,
    *,
    controller_uid: int | None = None,
    conda_available: bool = True,
) -> AdmissionResult:
    """Across documents: the first manifest for a name owns it; later ones are DuplicateName.

    "First" is the manifest that already owns the name (``current_sources``: name -> source), else the
    oldest file (mtime, then path), so adding a second file never disturbs a running job.
    ``controller_uid``: a controller that is not root runs only manifests its own user owns.
    ``conda_available``: whether ``condaEnv`` can work on this machine.
    """
    current_sources = current_sources or {}
    by_name: dict[str, list[Any]] = {}
    result = AdmissionResult()
    documents = [check_environment(d, controller_uid, conda_available) for d in documents]
    children: list[AdmittedJob] = []
    for doc in documents:
        if isinstance(doc, AdmittedJob) and doc.owner is not None:
            children.append(doc)  # a sweep's child: admitted with its sweep, below
        elif doc.name is None:
            result.warnings.append(doc)
        else:
            by_name.setdefault(doc.name, []).append(doc)
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
        else:
            result.sweeps[name] = winner
    # children of the sweeps that won their names; a child's name may not collide with anything
    for child in children:
        sweep = result.sweeps.get(child.owner or "")
        if sweep is None or sweep.path != child.path or sweep.doc_index != child.doc_index:
            continue  # its sweep lost a duplicate-name contest or is being rejected
        clash = result.jobs.get(child.name) or result.rejected.get(child.name) or result.sweeps.get(child.name)
        if clash is not None:
            losers.append((child, clash))
            result.duplicates.setdefault(child.name, []).append(child.source)
            continue
        result.jobs[child.name] = child
    _reject_cycles(result)
    result.ttl_jobs = sum(1 for job in result.jobs.values() if job.job.spec.ttl_seconds_after_finished is not None)
    for loser, winner in losers:
        message = (
            f"job name {loser.name!r} is already defined in {winner.source}; "
            f"rename it in {loser.source} (metadata.name)"
        )
        stem = loser.source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        rejection = Rejection(loser.name, "DuplicateName", message, loser.source, loser.path, loser.doc_index, loser.mtime_ns)
        if is_valid_name(stem) and stem != loser.name and stem not in by_name and stem not in result.rejected:
            result.rejected[stem] = Rejection(stem, "DuplicateName", message, loser.source, loser.path, loser.doc_index, loser.mtime_ns)
        result.warnings.append(rejection)
    return result


def admit_changes(
    previous: AdmissionResult,
    gone: list[AdmittedJob | Rejection],
    came: list[AdmittedJob | Rejection],
    *,
    controller_uid: int | None = None,
    conda_available: bool = True,
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
    involved = set()
    for doc in (*gone, *came):
        if doc.name is None or doc.name in previous.duplicates:
            return None
        if isinstance(doc, AdmittedJob):
            if doc.owner is not None or doc.job.spec.depends_on:
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
        for holder in (previous.jobs.get(name), previous.rejected.get(name), previous.sweeps.get(name)):
            if holder is not None and id(holder) not in gone_ids:
                return None
    result = AdmissionResult(
        jobs=dict(previous.jobs),
        rejected=dict(previous.rejected),
        warnings=list(previous.warnings),
        duplicates=dict(previous.duplicates),
        sweeps=previous.sweeps,
        ttl_jobs=previous.ttl_jobs,
        base=previous.serial,
        touched=frozenset(involved),
    )
    for doc in gone:
        job = result.jobs.pop(doc.name, None)
        if job is not None and job.job.spec.ttl_seconds_after_finished is not None:
            result.ttl_jobs -= 1
        result.rejected.pop(doc.name, None)
    for doc in came:
        doc = check_environment(doc, controller_uid, conda_available)
        if isinstance(doc, AdmittedJob):
            result.jobs[doc.name] = doc
            if doc.job.spec.ttl_seconds_after_finished is not None:
                result.ttl_jobs += 1
        else:
            result.rejected[doc.name] = doc
    return result


def check_environment(doc: Any, controller_uid: int | None, conda: bool) -> Any:
    if not isinstance(doc, AdmittedJob):
        return doc
    if controller_uid not in (None, 0) and doc.owner_uid not in (-1, controller_uid):
        return Rejection(
            doc.name, "Forbidden",
            f"the manifest is owned by uid {doc.owner_uid}, but gflowd runs as uid {controller_uid} and runs only "
            f"its own user's jobs; run gflowd as root to serve several users ({doc.source})",
            doc.source, doc.path, doc.doc_index, doc.mtime_ns,
        )
    if doc.spec.conda_env and not conda:
        return Rejection(
            doc.name, "Invalid",
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
        if job.spec.depends_on
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
                name, "DependencyCycle", f"spec.dependsOn: dependency cycle {text} ({job.source})",
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
    if text is None:
        return None
    from controller.yamlio import line_of, roundtrip_documents

    try:
        docs = roundtrip_documents(text)
        return line_of(docs[doc_index], loc) if doc_index < len(docs) else None
    except Exception:  # the fast loader accepted it; never let line-finding hide the real error
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
    from controller.api.job import Job

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
    from typing import get_args

    from pydantic import BaseModel

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
    first = errors[0]
    loc = _clean_loc(tuple(first.get("loc", ())))
    line = _line(text, doc_index, loc)
    message = f"{_path(loc)}: {_explain(first, loc, root)} ({_where(source, line)})"
    if len(errors) > 1:
        message += f" and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''}"
    return message
