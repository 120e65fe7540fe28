"""``gflowctl export slurm|k8s [NAME] [-f FILE|DIR|- ...] [-R]``: print jobs as an sbatch script or
Kubernetes Jobs.

The translation is ``controller.export``; this verb finds the manifests (``-f`` reads files,
folders and stdin as ``apply`` does), validates them like ``apply`` (every bad document is named,
at once), takes the cluster's settings from the home's ``config.yaml`` (``slurm.gpuTypes``,
``slurm.partition``, ``slurm.account``, ``k8s.image``, ``k8s.namespace``, ``k8s.queue``; a flag
wins), and prints. What does not map is printed on stderr as ``warning:`` lines, so the output can
be piped straight into ``sbatch`` or ``kubectl apply -f -``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from controller.api.config import ConfigError, SlurmConfig, load_config
from controller.api.validation import validate_any
from controller.cli.common import CliError
from controller.client.read.state import find_manifest
from controller.client.write.manifests import read_inputs
from controller.export import k8s, slurm
from controller.export.slurm import UnmappedGpuType
from controller.model.documents import AdmittedJob, Rejection
from controller.paths import Home
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one


def foreign(data: Any) -> str | None:
    """Why a YAML document is no gflow manifest at all (a fake-GPU file, a Kubernetes ConfigMap):
    such files sit beside manifests in a folder, and are skipped, not errors. None: it is one (or
    means to be: a Job with mistakes is validated and its mistakes named)."""
    if not isinstance(data, dict):
        return "not a mapping"
    if not {"apiVersion", "kind", "metadata", "spec"} & data.keys():
        return "no apiVersion, kind, metadata or spec"
    api = data.get("apiVersion")
    if isinstance(api, str) and not api.startswith("gflow"):
        return f"apiVersion {api} is not gflow's"
    return None


def _documents(origin: str, text: str) -> tuple[list[list[Any]], list[str]]:
    """Each document of ``text`` validated: [AdmittedJob] or [AdmittedSweep, *children]; and the
    errors, one line each. Documents that are no gflow manifest are skipped, each said on stderr."""

    parts = list(iter_documents_text(text))
    stdin = origin == "<stdin>"
    path = Path(origin)
    out, errors = [], []
    for index, part in enumerate(parts):
        try:
            data = load_one(part)
        except YAMLSyntaxError as exc:
            errors.append(f"{origin}: YAML syntax error: {exc}")
            continue
        if data is None:
            continue
        why = foreign(data)
        if why is not None and not stdin:
            where = origin if len(parts) == 1 else f"{origin} (document {index + 1})"
            sys.stderr.write(f"skipped {where}: not a gflow manifest ({why})\n")
            continue
        result = validate_any(
            data,
            source=origin,
            path=origin if stdin else str(path.absolute()),
            stem=None if stdin else path.stem,
            single=len(parts) == 1,
            doc_index=index,
            text=part,
        )
        if isinstance(result[0], Rejection):
            hint = " (metadata.name is required from stdin)" if stdin and result[0].name is None else ""
            errors.append(result[0].message + hint)
            continue
        out.append(result)
    return out, errors


def _inputs(home: Home, name: str | None, filenames: list[str], recursive: bool) -> list[tuple[str, str]]:
    """(origin, text) of every manifest to look in: the ``-f`` inputs, else the one defining NAME."""
    if filenames:
        return read_inputs(filenames, recursive)
    assert name is not None
    found = find_manifest(home, name) or find_manifest(home, name, "sweep")
    if found is None:
        raise CliError(
            f"job/{name} not found (no status names its manifest and {home.spec_dir}/{name}.yaml does not exist)"
        )
    try:
        return [(str(found), found.read_text())]
    except OSError as exc:
        raise CliError(f"{found}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{found}: not UTF-8 text") from None


def _select(
    home: Home, name: str | None, filenames: list[str], recursive: bool
) -> tuple[list[tuple[str, list[Any]]], list[str]]:
    """The documents to export, with where each came from: every one in the inputs, or the one
    named NAME (a job, a sweep or a sweep's child); else the errors, one line each."""
    selected: list[tuple[str, list[Any]]] = []
    errors: list[str] = []
    for origin, text in _inputs(home, name, filenames, recursive):
        docs, doc_errors = _documents(origin, text)
        errors.extend(doc_errors)
        selected.extend((origin, doc) for doc in docs)
    if errors:
        return [], errors
    where = ", ".join(filenames) if filenames else home.spec_dir
    if name is None:
        if not selected:
            raise CliError(f"{where}: no job or sweep in it")
        return selected, []
    for origin, doc in selected:
        if doc[0].name == name:
            return [(origin, doc)], []
        for child in doc[1:]:
            if child.name == name:  # one child of a sweep: a plain job
                return [(origin, [child])], []
    raise CliError(f"job/{name} is not defined in {where}")


def _settings(home: Home, target: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The flags, with what they leave unset taken from config.yaml's ``slurm`` or ``k8s`` section."""

    gpu_types = flags.get("gpu_types")
    if gpu_types is not None:
        try:
            gpu_types = SlurmConfig.model_validate({"gpuTypes": gpu_types}).gpu_types
        except ValidationError as exc:
            raise CliError(
                f"--gpu-types: {exc.errors()[0].get('ctx', {}).get('error') or exc.errors()[0]['msg']}"
            ) from None
    try:
        config = load_config(home.config_file, {})
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    section = config.slurm if target == "slurm" else config.k8s
    keys = ("partition", "account") if target == "slurm" else ("image", "namespace", "queue")
    out = {k: flags.get(k) if flags.get(k) is not None else getattr(section, k) for k in keys}
    out["output"] = flags.get("output")
    out["operator"] = bool(flags.get("operator"))
    if target == "slurm":
        out["gpu_types"] = gpu_types if gpu_types is not None else config.slurm.gpu_types
    elif not out["image"]:
        raise CliError(
            f"a Kubernetes Job needs a container image: pass --image IMAGE, or set k8s.image in {home.config_file}"
        )
    return out


def export(
    home: Home, target: str, name: str | None, filenames: list[str], options: dict[str, Any], recursive: bool = False
) -> int:

    if name is None and not filenames:
        raise CliError(f"name a job or a file: gflowctl export {target} NAME | -f FILE")
    try:
        settings, errors = _settings(home, target, options), []
    except CliError as exc:  # reported with the manifests' errors: every error at once
        settings, errors = {}, [str(exc)]
    try:
        selected, doc_errors = _select(home, name, filenames, recursive)
    except CliError as exc:
        selected, doc_errors = [], [str(exc)]
    if errors or doc_errors:
        return _errors(errors + doc_errors)
    if target == "slurm" and len(selected) > 1:
        names = ", ".join(doc[0].name for _, doc in selected)
        raise CliError(
            f"{', '.join(filenames)} defines {len(selected)} jobs ({names}); a batch script holds one: name it"
        )
    texts = []
    notes: list[str] = []
    for origin, doc in selected:
        head = doc[0]
        manifest_dir = os.getcwd() if origin == "<stdin>" else os.path.dirname(os.path.abspath(origin))
        try:
            if isinstance(head, AdmittedJob):
                exported = _export_job(target, head, manifest_dir, settings)
            else:
                exported = _export_sweep(target, head, doc[1:], manifest_dir, settings)
        except UnmappedGpuType as exc:
            errors.append(f"{head.name}: {exc}, or pass --gpu-types {exc.gpu_type}=TYPE")
            continue
        texts.append(exported.text)
        notes.extend(exported.notes)
    if errors:
        return _errors(errors)
    sys.stdout.write("---\n".join(texts))
    for note in notes:
        sys.stderr.write(f"warning: {note}\n")
    return 0


def _errors(errors: list[str]) -> int:
    for error in errors:
        sys.stderr.write(f"error: {error}\n")
    return 1


def _export_job(target: str, admitted: Any, manifest_dir: str, settings: dict[str, Any]):
    if target == "slurm":
        return slurm.export_job(
            admitted.job,
            admitted.name,
            manifest_dir,
            output=settings["output"] or "%x-%j.log",
            partition=settings["partition"],
            account=settings["account"],
            gpu_types=settings["gpu_types"],
            operator=settings["operator"],
        )

    return k8s.export_job(
        admitted.job,
        admitted.name,
        manifest_dir,
        image=settings["image"],
        queue=settings["queue"],
        namespace=settings["namespace"],
    )


def _export_sweep(target: str, sweep: Any, children: list[Any], manifest_dir: str, settings: dict[str, Any]):
    if not children:
        raise CliError(f"sweep/{sweep.name} has no children (its excludes remove every combination)")
    if target == "slurm":
        return slurm.export_sweep(
            sweep.sweep,
            sweep.name,
            children,
            manifest_dir,
            output=settings["output"] or "%x-%A_%a.log",
            partition=settings["partition"],
            account=settings["account"],
            gpu_types=settings["gpu_types"],
            operator=settings["operator"],
        )

    return k8s.export_sweep(
        sweep.sweep,
        sweep.name,
        children,
        manifest_dir,
        image=settings["image"],
        queue=settings["queue"],
        namespace=settings["namespace"],
    )
