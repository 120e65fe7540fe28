"""The manifests gflowctl writes: reading ``-f`` inputs (files, folders, stdin), checking them
(the running gflowd's verdict, else the same check here), storing one document in the spec dir
under the file's lock. Shared by ``apply``, ``delete``, ``export`` and ``run``."""

from __future__ import annotations

import sys
from pathlib import Path

from controller.cli.common import CliError, document_position
from controller.client.review import ask, check_documents
from controller.client.state import find_manifest
from controller.paths import Home, is_manifest_name
from controller.util.fsutil import RewriteError, create_new, lock_held, rewrite_locked
from controller.util.manifest_edit import join_documents
from controller.util.yamlio import iter_documents_text, load_one


class Doc:
    """One document to store: its name, its own text (comments kept), that text parsed, where it
    came from. A plain class: ``dataclasses`` would cost every ``apply`` ~5 ms of start-up."""

    __slots__ = ("name", "text", "data", "origin", "kind", "warning")

    def __init__(self, name: str, text: str, data: dict, origin: str, kind: str = "job", warning: str | None = None) -> None:
        self.name, self.text, self.data, self.origin, self.kind = name, text, data, origin, kind
        self.warning = warning  # gflowd's review: e.g. the job can never start on this machine

    def with_text(self, text: str, data: dict) -> "Doc":
        return Doc(self.name, text, data, self.origin, self.kind, self.warning)


def read_inputs(filenames: list[str], recursive: bool) -> list[tuple[str, str]]:
    """``-f`` of apply, delete, export: (origin, text) for every input file; ``-`` is stdin."""
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
                inputs.append((str(file), read_manifest_text(file)))
        elif path.exists():
            inputs.append((str(path), read_manifest_text(path)))
        else:
            raise CliError(f"{name}: no such file or folder")
    return inputs


def read_manifest_text(path: Path) -> str:
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


def check_inputs(home: Home, inputs: list[tuple[str, str]]) -> list[tuple[list[Doc], list[str]]]:
    """Each input's documents and errors: judged by the running gflowd when there is one (see
    controller/client/review.py), else checked here with the same function."""
    answers = ask(home.review_dir, inputs) if inputs and lock_held(home.lock_file) else None
    if answers is None:
        answers = [check_documents(origin, text) for origin, text in inputs]
    checked = []
    for (origin, text), answer in zip(inputs, answers):
        parts = list(iter_documents_text(text))
        docs = [
            Doc(d["name"], parts[d["index"]], load_one(parts[d["index"]]), origin, d["kind"], d.get("warning"))
            for d in answer["docs"]
        ]
        checked.append((docs, list(answer["errors"])))
    return checked


def store_document(home: Home, doc: Doc, dry_run: bool) -> str:
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
