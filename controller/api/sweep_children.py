"""Expand a Sweep into its child Jobs. Pure: a validated Sweep in, AdmittedJobs out.

Children are ordinary Jobs with an owner: they are scheduled, run, retried and reported like any
other job, and they exist exactly as long as the Sweep's manifest does.
"""

from __future__ import annotations

from controller.api.hashes import spec_hashes
from controller.api.job import Job
from controller.api.names import is_valid_name
from controller.api.sweep import Sweep, parse_indices
from controller.model.documents import AdmittedJob, AdmittedSweep, Rejection
from controller.model.reasons import Reason
from controller.model.sweep_params import DEFAULT_NAME_TEMPLATE, combinations_of
from controller.model.sweep_params import substitute as _substitute

SWEEP_LABEL = "gflow.dev/sweep"


def combinations(sweep: Sweep) -> list[dict[str, str]]:
    """The children's parameters, in order, after excludes."""
    spec = sweep.spec
    if spec.indices is not None:
        return [{} for _ in parse_indices(spec.indices)]
    assert spec.matrix is not None
    return combinations_of(spec.matrix, spec.exclude)


def expand(
    sweep: Sweep, name: str, *, source: str, path: str, doc_index: int, owner_uid: int, mtime_ns: int
) -> tuple[AdmittedSweep, list[AdmittedJob]] | Rejection:
    spec = sweep.spec
    indices = parse_indices(spec.indices) if spec.indices is not None else None
    template = spec.template.model_dump(mode="json", by_alias=True, exclude_none=True)
    name_template = spec.name_template or DEFAULT_NAME_TEMPLATE
    children: list[AdmittedJob] = []
    seen: set[str] = set()
    for position, combo in enumerate(combinations(sweep)):
        index = indices[position] if indices is not None else position
        values = {"sweep": name, "index": str(index), **combo}
        child_name = _substitute(name_template, values)
        if not is_valid_name(child_name):
            return Rejection(
                name,
                Reason.Invalid,
                f"spec.nameTemplate: child name {child_name!r} is not a valid job name "
                f"(lowercase letters, digits, '-'; at most 63) ({source})",
                source,
                path,
                doc_index,
                mtime_ns,
            )
        if child_name in seen:
            return Rejection(
                name,
                Reason.Invalid,
                f"spec.nameTemplate: two children would be named {child_name!r}; add {{index}} ({source})",
                source,
                path,
                doc_index,
                mtime_ns,
            )
        seen.add(child_name)
        child_spec = dict(template)
        if "command" in child_spec:
            child_spec["command"] = [_substitute(a, values) for a in child_spec["command"]]
        if "script" in child_spec:
            child_spec["script"] = _substitute(child_spec["script"], values)
        env = {k: _substitute(v, values) for k, v in (child_spec.get("env") or {}).items()}
        env.update({k.upper(): v for k, v in combo.items()})
        env.update({"GFLOW_SWEEP_NAME": name, "GFLOW_SWEEP_INDEX": str(index)})
        child_spec["env"] = env
        metadata = {
            "name": child_name,
            "labels": {**sweep.metadata.labels, SWEEP_LABEL: name},
            "annotations": dict(sweep.metadata.annotations),
        }
        job = Job.model_validate({"metadata": metadata, "spec": child_spec})
        spec_hash, run_hash = spec_hashes(job)
        children.append(
            AdmittedJob(child_name, job, source, path, doc_index, spec_hash, run_hash, owner_uid, mtime_ns, owner=name)
        )
    sweep_hash = spec_hashes(Job.model_validate({"spec": template}))[0]
    record = AdmittedSweep(
        name, sweep, source, path, doc_index, tuple(c.name for c in children), sweep_hash, owner_uid, mtime_ns
    )
    return record, children
