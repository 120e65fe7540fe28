"""Admission: which valid document owns each name, and may gflowd run it? Pure functions.

Each document arrives validated (``api/validation.py``: schema, name, a Sweep's children; its
result depends only on the document, so the manifest store caches it). ``admit`` looks across
documents (duplicate names, dependency cycles) and at gflowd's own facts (whose manifests it may
run, conda on its PATH) and decides which manifest owns each name. Nothing here touches the file
system; the snapshot hands in the validated documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controller.api.names import is_valid_name
from controller.model.documents import AdmissionResult, AdmittedJob, AdmittedReservation, AdmittedSweep, Rejection
from controller.model.lean_records import MANIFEST, OWNER, changed_items, loaded_facts_items
from controller.model.overlay import Overlay
from controller.model.plan import Snapshot
from controller.model.reasons import Reason
from controller.model.records import JobState


def admit_observed(snap: Snapshot) -> AdmissionResult:
    """The snapshot's manifests admitted: the previous pass's result patched with the documents
    that changed when that is simple (:func:`admit_changes`), else every document afresh."""
    manifests, host, previous = snap.manifests, snap.host, snap.previous
    uid, conda, serial = host.controller_uid, host.conda_available, snap.serial
    if (
        not manifests.full
        and previous is not None
        and (previous.controller_uid, previous.conda_available) == (host.controller_uid, host.conda_available)
    ):
        patched = admit_changes(
            previous, manifests.gone, manifests.came, controller_uid=uid, conda_available=conda, serial=serial
        )
        if patched is not None:
            return patched
    # a resync, or a change that needs every document (duplicates, sweeps, cycles)
    current = manifest_sources(snap.states)
    current.update({name: sw.manifest for name, sw in snap.sweep_states.items() if sw.manifest})
    current.update({name: r.manifest for name, r in snap.reservation_states.items() if r.manifest})
    return admit(manifests.documents, current, controller_uid=uid, conda_available=conda, serial=serial)


def manifest_sources(states: Mapping[str, JobState]) -> dict[str, str]:
    """name -> the manifest each job's record names (not a Sweep's children): who owns a name. A
    record still as the start read it is read off its facts (``model/lean_records.py``)."""
    current = {name: f[MANIFEST] for name, f in loaded_facts_items(states) if f[MANIFEST] and not f[OWNER]}
    for name, state in changed_items(states):
        if state.manifest and not state.owner:
            current[name] = state.manifest
    return current


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


def _contest(
    result: AdmissionResult, by_name: dict[str, list[Any]], current_sources: Mapping[str, str]
) -> list[tuple[Any, Any]]:
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
            result.jobs.get(child.name)
            or result.rejected.get(child.name)
            or result.sweeps.get(child.name)
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
        f"job name {loser.name!r} is already defined in {winner.source}; rename it in {loser.source} (metadata.name)"
    )
    stem = loser.source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    rejection = Rejection(
        loser.name, Reason.DuplicateName, message, loser.source, loser.path, loser.doc_index, loser.mtime_ns
    )
    if is_valid_name(stem) and stem != loser.name and stem not in by_name and stem not in result.rejected:
        result.rejected[stem] = Rejection(
            stem, Reason.DuplicateName, message, loser.source, loser.path, loser.doc_index, loser.mtime_ns
        )
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
        gone_name = doc.name or ""  # a nameless rejection is under no name
        job = result.jobs.pop(gone_name, None)
        if job is not None and job.ttl is not None:
            result.ttl_jobs -= 1
        result.rejected.pop(gone_name, None)
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
        if previous.jobs.get(doc.name or "") is not doc and previous.rejected.get(doc.name or "") is not doc:
            return None  # e.g. it lost a contest, or was turned into a Forbidden rejection
    came_names = [doc.name or "" for doc in came]
    if len(set(came_names)) != len(came_names):
        return None
    for name in came_names:  # nothing that stays may already define the name
        for holder in (
            previous.jobs.get(name),
            previous.rejected.get(name),
            previous.sweeps.get(name),
            previous.reservations.get(name),
        ):
            if holder is not None and id(holder) not in gone_ids:
                return None
    return involved


def check_environment(doc: Any, controller_uid: int | None, conda: bool) -> Any:
    if not isinstance(doc, (AdmittedJob, AdmittedReservation)):
        return doc
    if controller_uid not in (None, 0) and doc.owner_uid not in (-1, controller_uid):
        return Rejection(
            doc.name,
            Reason.Forbidden,
            f"the manifest is owned by uid {doc.owner_uid}, but gflowd runs as uid {controller_uid} and runs only "
            f"its own user's jobs; run gflowd as root to serve several users ({doc.source})",
            doc.source,
            doc.path,
            doc.doc_index,
            doc.mtime_ns,
        )
    if isinstance(doc, AdmittedJob) and doc.conda_env and not conda:
        return Rejection(
            doc.name,
            Reason.Invalid,
            f"spec.condaEnv: conda is not installed here (not on gflowd's PATH); install it or remove condaEnv ({doc.source})",
            doc.source,
            doc.path,
            doc.doc_index,
            doc.mtime_ns,
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
                name,
                Reason.DependencyCycle,
                f"spec.dependsOn: dependency cycle {text} ({job.source})",
                job.source,
                job.path,
                job.doc_index,
                job.mtime_ns,
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
