"""``gflowctl export slurm|k8s NAME | -f FILE``: print a job as an sbatch script or a Kubernetes Job.

The translation is ``controller.export``; this verb only finds the manifest, validates it like
``apply`` does, and prints. What does not map is printed on stderr as ``warning:`` lines, so the
output can be piped straight into ``sbatch`` or ``kubectl apply -f -``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from controller.cli.common import CliError
from controller.client.state import find_manifest
from controller.decide.admission import validate_any
from controller.export import k8s, slurm
from controller.model.documents import AdmittedJob, Rejection
from controller.paths import Home
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one


def _documents(path: Path, text: str) -> list[list[Any]]:
    """Each document of ``text`` validated: [AdmittedJob] or [AdmittedSweep, *children]."""
    parts = list(iter_documents_text(text))
    out = []
    for index, part in enumerate(parts):
        try:
            data = load_one(part)
        except YAMLSyntaxError as exc:
            raise CliError(f"{path}: YAML syntax error: {exc}") from None
        if data is None:
            continue
        result = validate_any(
            data, source=str(path), path=str(path.absolute()), stem=path.stem, single=len(parts) == 1,
            doc_index=index, text=part,
        )
        if isinstance(result[0], Rejection):
            raise CliError(result[0].message)
        out.append(result)
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None


def _select(home: Home, name: str | None, filename: str | None) -> list[tuple[Path, list[Any]]]:
    """The documents to export: every one in FILE, or the one named NAME (a job, a sweep or a sweep's child)."""
    if filename is not None:
        path = Path(filename)
        if not path.is_file():
            raise CliError(f"{filename}: no such file")
    else:
        assert name is not None
        found = find_manifest(home, name) or find_manifest(home, name, "sweep")
        if found is None:
            raise CliError(f"job/{name} not found (no status names its manifest and {home.spec_dir}/{name}.yaml does not exist)")
        path = found
    docs = _documents(path, _read(path))
    if name is None:
        if not docs:
            raise CliError(f"{filename}: no job or sweep in it")
        return [(path, doc) for doc in docs]
    for doc in docs:
        if doc[0].name == name:
            return [(path, doc)]
        for child in doc[1:]:
            if child.name == name:  # one child of a sweep: a plain job
                return [(path, [child])]
    raise CliError(f"job/{name} is not defined in {path}")


def export(home: Home, target: str, name: str | None, filename: str | None, options: dict[str, Any]) -> int:
    if name is None and filename is None:
        raise CliError(f"name a job or a file: gflowctl export {target} NAME | -f FILE")
    selected = _select(home, name, filename)
    if target == "slurm" and len(selected) > 1:
        names = ", ".join(doc[0].name for _, doc in selected)
        raise CliError(f"{filename} defines {len(selected)} jobs ({names}); a batch script holds one: name it")
    texts = []
    notes: list[str] = []
    for path, doc in selected:
        head = doc[0]
        manifest_dir = os.path.dirname(str(path.absolute()))
        if isinstance(head, AdmittedJob):
            exported = _export_job(target, head, manifest_dir, options)
        else:
            exported = _export_sweep(target, head, doc[1:], manifest_dir, options)
        texts.append(exported.text)
        notes.extend(exported.notes)
    sys.stdout.write("---\n".join(texts))
    for note in notes:
        sys.stderr.write(f"warning: {note}\n")
    return 0


def _export_job(target: str, admitted: Any, manifest_dir: str, options: dict[str, Any]):
    if target == "slurm":
        return slurm.export_job(
            admitted.job, admitted.name, manifest_dir,
            output=options.get("output") or "%x-%j.log", partition=options.get("partition"), account=options.get("account"),
        )
    return k8s.export_job(admitted.job, admitted.name, manifest_dir, image=options.get("image"), queue=options.get("queue"), namespace=options.get("namespace"))


def _export_sweep(target: str, sweep: Any, children: list[Any], manifest_dir: str, options: dict[str, Any]):
    if not children:
        raise CliError(f"sweep/{sweep.name} has no children (its excludes remove every combination)")
    if target == "slurm":
        return slurm.export_sweep(
            sweep.sweep, sweep.name, children, manifest_dir,
            output=options.get("output") or "%x-%A_%a.log", partition=options.get("partition"), account=options.get("account"),
        )
    return k8s.export_sweep(sweep.sweep, sweep.name, children, manifest_dir, image=options.get("image"), queue=options.get("queue"), namespace=options.get("namespace"))
