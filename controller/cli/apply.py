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
from dataclasses import dataclass, replace
from pathlib import Path

from controller.cli.common import CliError, document_position, print_error, printable
from controller.cli.live import Progress
from controller.client.review import ask, check_documents
from controller.client.state import find_manifest, owner_of
from controller.paths import Home, is_manifest_name
from controller.util.fsutil import RewriteError, create_new, lock_held, rewrite_locked
from controller.util.manifest_edit import join_documents
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one


@dataclass
class _Doc:
    name: str
    text: str
    data: dict
    origin: str
    kind: str = "job"
    warning: str | None = None  # gflowd's review: e.g. the job can never start on this machine


def _read_inputs(filenames: list[str], recursive: bool) -> list[tuple[str, str]]:
    """(origin, text) for every input file; ``-`` is stdin."""
    inputs: list[tuple[str, str]] = []
    for name in filenames:
        if name == "-":
            inputs.append(("<stdin>", sys.stdin.read()))
            continue
        path = Path(name)
        if path.is_dir():
            pattern = "**/*" if recursive else "*"
            files = sorted(p for p in path.glob(pattern) if p.is_file() and is_manifest_name(p.name))
            if not files:
                raise CliError(f"{name}: no .yaml or .yml files" + ("" if recursive else " (use -R for sub-folders)"))
            for file in files:
                inputs.append((str(file), _read_text(file)))
        elif path.exists():
            inputs.append((str(path), _read_text(path)))
        else:
            raise CliError(f"{name}: no such file or folder")
    return inputs


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror}") from None
    if len(raw) > 1024 * 1024:
        raise CliError(f"{path}: over the 1 MiB limit for a manifest")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None


def _check_inputs(home: Home, inputs: list[tuple[str, str]]) -> list[tuple[list[_Doc], list[str]]]:
    """Each input's documents and errors: judged by the running gflowd when there is one (see
    controller/review.py), else checked here with the same function."""
    answers = ask(home.review_dir, inputs) if inputs and lock_held(home.lock_file) else None
    if answers is None:
        answers = [check_documents(origin, text) for origin, text in inputs]
    checked = []
    for (origin, text), answer in zip(inputs, answers):
        parts = list(iter_documents_text(text))
        docs = [
            _Doc(d["name"], parts[d["index"]], load_one(parts[d["index"]]), origin, d["kind"], d.get("warning"))
            for d in answer["docs"]
        ]
        checked.append((docs, list(answer["errors"])))
    return checked


def apply(home: Home, filenames: list[str], recursive: bool, dry_run: bool) -> int:
    errors: list[str] = []
    seen: dict[str, str] = {}
    home.spec_dir.mkdir(parents=True, exist_ok=True)

    inputs = _read_inputs(filenames, recursive)
    progress = Progress(len(inputs), "applying")  # on stderr, only on a terminal, only for many files
    stored = 0
    for done, (docs, doc_errors) in enumerate(_check_inputs(home, inputs)):
        progress.step(done)
        errors.extend(doc_errors)
        for doc in docs:
            if doc.name in seen:
                errors.append(f"job/{doc.name} is defined twice: in {seen[doc.name]} and {doc.origin}")
                continue
            seen[doc.name] = doc.origin
            verb = _store(home, _run_where_applied(home, doc), dry_run)
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


def _run_where_applied(home: Home, doc: _Doc) -> _Doc:
    """A manifest applied from ``~/proj/job.yaml`` runs in ``~/proj`` (from stdin: the current
    folder), as sbatch would, not in the spec dir its copy lands in: when its ``workingDir`` is
    absent or relative, the copy gets that folder as an absolute ``workingDir`` (one line; the rest
    of the user's text is kept). A file already under the spec dir keeps its own folder's rule."""
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


def _store(home: Home, doc: _Doc, dry_run: bool) -> str:
    """Write one document: a new file, or in place of its old text. Returns the verb to print."""
    body = doc.text if doc.text.endswith("\n") else doc.text + "\n"
    target = find_manifest(home, doc.name, doc.kind)
    if target is None:
        if dry_run:
            return "created"
        target = home.spec_dir / f"{doc.name}.yaml"
        try:
            create_new(target, body)
            return "created"
        except FileExistsError:
            pass  # created meanwhile (another apply): update it like any existing file
    verb = "configured"

    def change(current: str) -> str:
        nonlocal verb
        parts = list(iter_documents_text(current))
        position = document_position(parts, doc.name, target)
        if position is None:
            raise CliError(f"job/{doc.name}: its manifest {target} no longer defines it; try again")
        old = load_one(parts[position])
        verb = "unchanged" if _same(old, doc.data, doc.name, target, len(parts)) else "configured"
        if parts[position] == body or dry_run:
            return current
        parts[position] = body
        return parts[0] if len(parts) == 1 else join_documents(parts)

    try:
        if dry_run:
            change(target.read_text())
        else:
            rewrite_locked(target, change, within=home.spec_dir)
    except FileNotFoundError:
        raise CliError(f"{doc.kind}/{doc.name}: its manifest {target} was removed meanwhile; try again") from None
    except RewriteError as exc:
        raise CliError(f"{doc.kind}/{doc.name}: not changed: {exc}") from None
    return verb


def _same(old, new, name: str, target: Path, count: int) -> bool:
    def normal(data):
        if not isinstance(data, dict):
            return data
        meta = dict(data.get("metadata") or {})
        if count == 1 and target.stem == name:
            meta.setdefault("name", name)
        return {**data, "metadata": meta}

    return normal(old) == normal(new)


def delete(home: Home, names: list[str], filenames: list[str], kind: str = "job") -> int:
    targets = list(names)
    for docs, errors in _check_inputs(home, _read_inputs(filenames, False)) if filenames else []:
        if errors:
            raise CliError(errors[0])
        targets.extend(d.name for d in docs)
    if not targets:
        raise CliError("name the jobs to delete: gflowctl delete job NAME... or -f FILE")

    failed = False
    for name in targets:
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
