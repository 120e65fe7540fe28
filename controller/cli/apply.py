"""``gflowctl apply`` and ``delete``: write and remove manifests in the spec directory.

The stored manifest keeps the user's text: apply writes each document's own text (comments and
order included) and never re-serialises. A job defined inside a multi-document file is updated or
removed in place, leaving the other documents byte-for-byte alone. Every such rewrite goes through
``fsutil.rewrite_locked`` (under the file's lock, re-read there, owner and mode kept, a concurrent
writer's change never overwritten), and a new file is created only if no one created it meanwhile.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from controller.cli.common import CliError, document_position, print_error, printable
from controller.cli.live import Progress
from controller.cli.manifests import Doc, check_inputs, read_inputs, store_document
from controller.client.state import find_manifest, owner_of
from controller.paths import Home
from controller.util.fsutil import RewriteError, lock_held, rewrite_locked
from controller.util.manifest_edit import join_documents
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one


def apply(home: Home, filenames: list[str], recursive: bool, dry_run: bool) -> int:
    errors: list[str] = []
    seen: dict[str, str] = {}
    home.spec_dir.mkdir(parents=True, exist_ok=True)

    inputs = read_inputs(filenames, recursive)
    progress = Progress(len(inputs), "applying")  # on stderr, only on a terminal, only for many files
    stored = 0
    for done, (docs, doc_errors) in enumerate(check_inputs(home, inputs)):
        progress.step(done)
        errors.extend(doc_errors)
        for doc in docs:
            if doc.name in seen:
                errors.append(f"job/{doc.name} is defined twice: in {seen[doc.name]} and {doc.origin}")
                continue
            seen[doc.name] = doc.origin
            verb = store_document(home, _run_where_applied(home, doc), dry_run)
            stored += verb != "unchanged"
            progress.clear()
            print(f"{doc.kind}/{doc.name} {verb}" + (" (dry run)" if dry_run else ""), flush=progress.enabled)
            if doc.warning:
                sys.stderr.write(f"warning: {printable(doc.warning)}\n")
    progress.done()
    if stored and not dry_run and not lock_held(home.lock_file):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; the jobs start when it runs (gflowd up)\n")
    for error in errors:
        print_error(error)
    return 1 if errors else 0


def _run_where_applied(home: Home, doc: Doc) -> Doc:
    """A manifest applied from ``~/proj/job.yaml`` runs in ``~/proj`` (from stdin: the current
    folder), as sbatch would, not in the spec dir its copy lands in: when its ``workingDir`` is
    absent or relative, the copy gets that folder as an absolute ``workingDir`` (one line; the rest
    of the user's text is kept). A file already under the spec dir keeps its own folder's rule."""
    if doc.kind == "reservation":
        return doc  # nothing runs: no working directory
    source = Path.cwd() if doc.origin == "<stdin>" else Path(os.path.abspath(doc.origin)).parent
    spec_dir = home.spec_dir.resolve()
    if spec_dir == source.resolve() or spec_dir in source.resolve().parents:
        return doc
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    path = ("spec", "workingDir")
    if doc.kind == "sweep" and isinstance(spec, dict):
        spec, path = spec.get("template"), ("spec", "template", "workingDir")
    if not isinstance(spec, dict):
        return doc
    current = spec.get("workingDir")
    if isinstance(current, str) and (current.startswith("~") or os.path.isabs(current)):
        return doc
    folder = os.path.normpath(os.path.join(source, current or "."))
    from controller.util.manifest_edit import set_field  # lazy: ruamel only when a copy needs the line

    text = set_field(doc.text, 0, path, folder)
    return replace(doc, text=text, data=load_one(text))


def delete(home: Home, refs: list[tuple[str, str]], filenames: list[str]) -> int:
    """Delete each ``(kind, name)`` and every document of ``filenames`` (their manifests, or the
    document in a multi-document file); each failure is one line, the others go on."""
    targets = list(refs)
    for docs, errors in check_inputs(home, read_inputs(filenames, False)) if filenames else []:
        if errors:
            raise CliError(errors[0])
        targets.extend((d.kind, d.name) for d in docs)
    if not targets:
        raise CliError("name the jobs to delete: gflowctl delete job NAME... (or job/NAME sweep/NAME ...) or -f FILE")

    failed = False
    for kind, name in targets:
        owner = owner_of(home, name) if kind == "job" else None
        if owner is not None:
            print_error(f"job/{name} belongs to sweep/{owner}; delete the sweep or change its matrix")
            failed = True
            continue
        path = find_manifest(home, name, kind)
        if path is None:
            print_error(f"{kind}/{name} not found")
            failed = True
            continue

        def cut(text: str, name: str = name, path: Path = path) -> str | None:
            parts = list(iter_documents_text(text))
            position = document_position(parts, name, path)
            if position is None and len(parts) == 1 and path.stem == name and not _parses(parts[0]):
                return None  # a file named for the job that does not parse (Rejected/YAMLError): it goes
            if position is None:
                raise _NotIn
            if len(parts) == 1:
                return None  # the whole file goes
            del parts[position]
            return join_documents(parts)

        try:
            rewrite_locked(path, cut, within=home.spec_dir)
        except (_NotIn, FileNotFoundError):
            print_error(f"{kind}/{name} not found in {path}")
            failed = True
            continue
        except RewriteError as exc:
            print_error(f"{kind}/{name}: not deleted: {exc}")
            failed = True
            continue
        print(f"{kind}/{name} deleted")
    return 1 if failed else 0


def _parses(text: str) -> bool:
    try:
        load_one(text)
    except YAMLSyntaxError:
        return False
    return True


class _NotIn(Exception):
    """The file no longer defines the job."""
