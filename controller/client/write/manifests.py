"""The manifests gflowctl and the Python client write: reading ``-f`` inputs (files, folders,
stdin), checking them (the running gflowd's verdict, else the same check here), storing one
document in the spec dir under the file's lock. Shared by ``apply``, ``delete``, ``export`` and
``run``, and by ``Client.apply``/``submit``. Errors are ``GflowError`` with gflowctl's line.

The stored manifest keeps the user's text: apply writes each document's own text (comments and
order included) and never re-serialises. A job defined inside a multi-document file is updated in
place, leaving the other documents byte-for-byte alone. Every such rewrite goes through
``fsutil.rewrite_locked`` (under the file's lock, re-read there, owner and mode kept, a concurrent
writer's change never overwritten), and a new file is created only if no one created it meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator

from controller import API_VERSION
from controller.client.errors import GflowError
from controller.client.read.state import document_position, find_manifest
from controller.client.review import ask, ask_socket, check_documents
from controller.paths import Home, is_manifest_name
from controller.util.fsutil import NewFile, RewriteError, create_new, fsync_dir, lock_held, rewrite_locked
from controller.util.lean_path import lean
from controller.util.yamlio import iter_documents_text, load_one

TYPE_CHECKING = False  # not typing's: run's and apply's start-up imports no pathlib (util/lean_path.py)
if TYPE_CHECKING:
    from pathlib import Path

_ENV_KEY = re.compile(r"^\s*env\s*:", re.MULTILINE)  # spec.env (or a template's): a Job's secrets
# likely_stored's patterns, compiled on first use (run never needs them)
_META_NAME = r"(?m)^metadata:[ \t]*(?:\{[ \t]*|\n[ \t]+)name:[ \t]*([a-z0-9][-a-z0-9.]*)[ \t]*[,}\n#]"
_SPEC_FIRST_KEY = r"(?m)^spec:[ \t]*\n([ \t]+)[A-Za-z]"


class Doc:
    """One checked document of an input. A plain class, not a dataclass: gflowctl apply would pay
    ~10 ms importing dataclasses (and inspect) for it. ``data`` is parsed on first use: a new
    document that gflowd has checked and placed is stored without gflowctl loading a YAML parser."""

    __slots__ = ("_data", "kind", "name", "origin", "placed", "read_back", "skip", "text", "warning")

    def __init__(
        self,
        name: str,
        text: str,
        data: dict | None,
        origin: str,
        kind: str = "job",
        warning: str | None = None,
        placed: bool = False,
        read_back: bool = False,
        skip: str | None = None,
    ):
        self.name, self.text, self._data, self.origin, self.kind = name, text, data, origin, kind
        self.warning = warning  # gflowd's review: e.g. the job can never start on this machine
        self.placed = placed  # its workingDir already says where it was applied from
        self.read_back = read_back  # an object ``get -o yaml`` printed: the stored text stays when it asks nothing new
        self.skip = skip  # why apply leaves it alone (a Sweep's child read back: its Sweep defines it)

    @property
    def data(self) -> dict:
        if self._data is None:  # checked already, so it parses
            self._data = load_one(self.text)
        return self._data


class Stored:
    """One document apply wrote: ``verb`` is created, configured or unchanged. ``Client.apply``
    returns it as the public ``Submitted``; gflowctl only prints it (no dataclasses to import)."""

    __slots__ = ("kind", "name", "verb", "warning")

    def __init__(self, kind: str, name: str, verb: str, warning: str | None):
        self.kind, self.name, self.verb, self.warning = kind, name, verb, warning


class EarlyManifest:
    """The new manifest a submission most likely stores, written to a hidden temp (and fsynced)
    while gflowd reviews it: called as ``ask_socket``'s ``meanwhile``. ``store_document`` puts it
    in place only if the verdict stores that very text, under that name, with that mode; anything
    else abandons it (the caller abandons it too, in a ``finally``). A guess costs nothing when
    wrong but the temp written and removed; a refused manifest never lands."""

    __slots__ = ("file", "home", "name", "origin", "text")

    def __init__(self, home: Home, name: str, text: str, origin: str) -> None:
        self.home, self.name, self.text, self.origin = home, name, text, origin
        self.file: NewFile | None = None

    def __call__(self) -> None:
        body = self.text if self.text.endswith("\n") else self.text + "\n"
        try:
            self.file = NewFile(self.home.spec_dir / f"{self.name}.yaml", body, new_file_mode(self.origin, body))
        except Exception:  # a guess never changes the review's outcome (ask_socket would take it for no answer)
            self.file = None  # no spec dir yet, a full disk...: the ordinary write says what is wrong

    def take(self, target: Path, body: str, mode: int) -> NewFile | None:
        """The temp, if it holds ``body`` for ``target`` with ``mode``; else None (and it is gone)."""
        file, self.file = self.file, None
        if file is not None and (file.path, file.data, file.mode) == (target, body, mode):
            return file
        if file is not None:
            file.abandon()
        return None

    def abandon(self) -> None:
        if self.file is not None:
            self.file.abandon()
            self.file = None


def likely_stored(origin: str, text: str, folder: str | None) -> tuple[str, str] | None:
    """(name, text) apply will most likely store for a one-document input, guessed without a YAML
    parser: the name from ``metadata: {name: N}`` (or the file's stem), and, when it is applied from
    ``folder``, the ``workingDir`` line gflowd's review inserts first under ``spec:``
    (``manifest_edit.place_working_dir``). Only a guess, for :class:`EarlyManifest`; None when the
    text is not that plain."""
    if "\n---" in text or text.startswith("---") or "workingDir" in text or "kind: Sweep" in text:
        return None
    named = re.search(_META_NAME, text)
    name = named.group(1) if named else os.path.basename(origin).rsplit(".", 1)[0]
    if folder is None:
        return name, text
    spec = re.search(_SPEC_FIRST_KEY, text)
    if spec is None:
        return None
    at = spec.start(1)
    line = f"{spec.group(1)}workingDir: {json.dumps(os.path.normpath(folder))}\n"
    return name, text[:at] + line + text[at:]


def read_inputs(filenames: list[str], recursive: bool) -> list[tuple[str, str]]:
    """``-f`` of apply, delete, export: (origin, text) for every input file; ``-`` is stdin."""
    inputs: list[tuple[str, str]] = []
    for name in filenames:
        if name == "-":
            inputs.append(("<stdin>", sys.stdin.read()))
            continue
        path = lean(name)
        if path.is_dir():
            files = _manifests_in(path, recursive)
            if not files:
                raise GflowError(f"{name}: no .yaml or .yml files" + ("" if recursive else " (use -R for sub-folders)"))
            for file in files:
                inputs.append((str(file), read_manifest_text(file)))
        elif path.exists():
            inputs.append((str(path), read_manifest_text(path)))
        else:
            raise GflowError(f"{name}: no such file or folder")
    return inputs


def _manifests_in(folder: Path, recursive: bool) -> list[Path]:
    """The manifest files in ``folder`` (``recursive``: and below it), sorted. A flat folder is
    listed with ``os.scandir``: ``Path.glob`` compiles its pattern through fnmatch and re first."""
    if recursive:
        return sorted(p for p in folder.glob("**/*") if p.is_file() and is_manifest_name(p.name))
    try:
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if is_manifest_name(e.name) and e.is_file())
    except OSError:
        names = []  # as glob: an unreadable folder holds no manifests for us
    return [folder / name for name in names]


def read_manifest_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GflowError(f"{path}: {exc.strerror}") from None
    if len(raw) > 1024 * 1024:
        raise GflowError(f"{path}: over the 1 MiB limit for a manifest")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GflowError(f"{path}: not UTF-8 text") from None


def check_inputs(
    home: Home,
    inputs: list[tuple[str, str]],
    place: bool = False,
    early: Callable[[], object] | None = None,
    folders: list[str | None] | None = None,
) -> list[tuple[list[Doc], list[str]]]:
    """Each input's documents and errors: judged by the running gflowd when there is one (see
    controller/client/review.py), else checked here with the same function. ``place``: apply's
    inputs, whose ``workingDir`` the check also places (:func:`run_where_applied`); ``folders``:
    their :func:`source_folder`, when the caller has them. ``early()`` writes what it can while
    gflowd answers over its socket (an :class:`EarlyManifest`, or apply's batch of them)."""
    if place and folders is None:
        folders = [source_folder(home, origin) for origin, _ in inputs]
    answers = None
    if inputs and lock_held(home.lock_file):  # gflowd runs: its socket (any user), else its review folder
        answers = ask_socket(home.review_socket, inputs, folders=folders, meanwhile=early) or ask(
            home.review_dir, inputs, folders=folders
        )
    if answers is None:
        answers = [
            check_documents(origin, text, folder=folders[i] if folders else None)
            for i, (origin, text) in enumerate(inputs)
        ]
    checked = []
    for (origin, text), answer in zip(inputs, answers):
        parts = list(iter_documents_text(text))
        docs = [
            Doc(
                d["name"],
                str(d.get("text", parts[d["index"]])),
                None,
                origin,
                d["kind"],
                d.get("warning"),
                placed=bool(d.get("placed")),
                read_back=bool(d.get("readBack")),
                skip=d.get("skip"),
            )
            for d in answer["docs"]
        ]
        checked.append((docs, list(answer["errors"])))
    return checked


def store_document(
    home: Home,
    doc: Doc,
    dry_run: bool,
    source: str | None = None,
    early: EarlyManifest | None = None,
    unsynced: set[Path] | None = None,
) -> str:
    """Write one document: a new file, or in place of its old text. Returns the verb to print.
    A new file is never more open than ``source`` (default: the file it was applied from). A new
    file ``early`` wrote already (the very text) is put in place; otherwise ``early`` is abandoned.
    With ``unsynced``, a new file's folder is added to it instead of fsynced: the caller fsyncs
    each once before it reports any file created there."""
    body = doc.text if doc.text.endswith("\n") else doc.text + "\n"
    target = find_manifest(home, doc.name, doc.kind)
    if target is None and not dry_run:
        target = home.spec_dir / f"{doc.name}.yaml"
        mode = new_file_mode(source or doc.origin, body)
        written = early.take(target, body, mode) if early is not None else None
        try:
            if written is not None:
                written.commit(unsynced is None)
            else:
                create_new(target, body, mode=mode, sync_folder=unsynced is None)
            if unsynced is not None:
                unsynced.add(target.parent)
            return "created"
        except FileExistsError:
            pass  # created meanwhile (another apply): update it like any existing file
    if early is not None:
        early.abandon()
    if target is None:
        return "created"  # a dry run
    verb = "configured"

    def change(current: str) -> str:
        nonlocal verb
        if current == body:  # the same text applied again: unchanged, known without loading a YAML parser
            verb = "unchanged"
            return current
        parts = list(iter_documents_text(current))
        position = document_position(parts, doc.name, target)
        if position is None:
            raise GflowError(f"job/{doc.name}: its manifest {target} no longer defines it; try again")
        old = load_one(parts[position])
        verb = "unchanged" if _same(old, doc.data, doc.name, target, len(parts)) else "configured"
        if parts[position] == body or dry_run or (doc.read_back and verb == "unchanged"):
            return current  # an object read back that asks nothing new: the user's text (comments) stays
        parts[position] = body
        if len(parts) == 1:
            return parts[0]
        from controller.util.manifest_edit import join_documents  # lazy: its module imports typing (~3 ms)

        return join_documents(parts)

    try:
        if dry_run:
            change(target.read_text())
        else:
            rewrite_locked(target, change, within=home.spec_dir)
    except FileNotFoundError:
        raise GflowError(f"{doc.kind}/{doc.name}: its manifest {target} was removed meanwhile; try again") from None
    except RewriteError as exc:
        raise GflowError(f"{doc.kind}/{doc.name}: not changed: {exc}") from None
    return verb


def new_file_mode(origin: str, text: str) -> int:
    """A new manifest's mode: what the user's umask allows, never more open than the file it was
    applied from, and 0600 when it sets ``env`` (values there are often tokens). gflowd runs as
    root and reads it whatever its mode."""
    mode = 0o666 & ~current_umask()
    if not origin.startswith("<") and os.path.isfile(origin):
        try:
            mode &= os.stat(origin).st_mode & 0o666
        except OSError:
            pass
    if _ENV_KEY.search(text):
        mode &= 0o600
    return mode | 0o400  # the owner reads it at least (gflowctl edits it in place)


def current_umask() -> int:
    """The process's umask without changing it (``os.umask`` sets while it reads: not thread-safe)."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _same(old, new, name: str, target: Path, count: int) -> bool:
    """The same document, but for what its text leaves to defaults: the name its file gives, the
    apiVersion and kind, empty labels and annotations (``get -o yaml`` prints them all), and a
    timestamp written bare (a date to the YAML loader) or quoted."""

    def normal(data):
        if not isinstance(data, dict):
            return data
        meta = {k: v for k, v in (data.get("metadata") or {}).items() if v != {}}
        if count == 1 and target.stem == name:
            meta.setdefault("name", name)
        return _dates_as_text({"apiVersion": API_VERSION, "kind": "Job", **data, "metadata": meta})

    return normal(old) == normal(new)


def _dates_as_text(value):
    if isinstance(value, dict):
        return {k: _dates_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(v) for v in value]
    if hasattr(value, "isoformat"):  # datetime.date/datetime: what a bare timestamp loads as
        return value.isoformat()
    return value


def apply_inputs(
    home: Home,
    inputs: list[tuple[str, str]],
    dry_run: bool,
    on_input: Callable[[int], None] | None = None,
) -> Iterator[Stored | str]:
    """``gflowctl apply``'s work: every valid document stored (each yielded as it is), every error
    yielded as its one-line text, all of them (a bad document does not stop the good ones). A name
    defined twice is an error for the second. ``on_input(i)`` runs before input ``i`` is handled."""
    seen: dict[str, str] = {}
    home.spec_dir.mkdir(parents=True, exist_ok=True)
    folders = _source_folders(home, inputs)
    early = {} if dry_run else _early_manifests(home, inputs, folders)
    try:
        if (len(inputs) == 1 and early) or dry_run:  # one new file (or none): its folder fsynced as it lands
            yield from _store_checked(home, inputs, dry_run, on_input, seen, early, folders, None)
        else:
            unsynced: set[Path] = set()
            stored = _store_checked(home, inputs, dry_run, on_input, seen, early, folders, unsynced)
            yield from _synced_in_batches(stored, unsynced)
    finally:
        for manifest in early.values():
            manifest.abandon()


def _early_manifests(home: Home, inputs: list[tuple[str, str]], folders: list[str | None]) -> dict[str, EarlyManifest]:
    """An :class:`EarlyManifest` for each input that most likely stores a new file (by the name it
    will have): written while gflowd reviews them all, so that after its answer only the renames are
    left and the files land together, not one write and fsync apart (an ``apply -f DIR``)."""
    early: dict[str, EarlyManifest] = {}
    for (origin, text), folder in zip(inputs, folders):
        guess = likely_stored(origin, text, folder)
        if guess is None or guess[0] in early:
            continue
        if any(os.path.lexists(home.spec_dir / f"{guess[0]}{s}") for s in (".yaml", ".yml")):
            continue  # applied again: its file is rewritten in place, nothing to write early
        early[guess[0]] = EarlyManifest(home, guess[0], guess[1], origin)
    return early


SYNC_BATCH = 64  # outcomes held at most before their folders' fsync lets them be reported


def _synced_in_batches(stored: Iterator[Stored | str], unsynced: set[Path]) -> Iterator[Stored | str]:
    """``stored``'s outcomes in order, each batch held until the folders its new files were
    renamed into (``unsynced``) are fsynced: once per batch, not once per file (25 new files cost
    26 fsyncs, not 50), and nothing is reported created before its folder's fsync. A failure
    part-way still reports what was stored before it, then raises."""
    held: list[Stored | str] = []
    failure: Exception | None = None
    try:
        for outcome in stored:
            held.append(outcome)
            if len(held) >= SYNC_BATCH:
                _sync_folders(unsynced)
                yield from held
                held.clear()
    except Exception as exc:  # raised below, after what was stored before it is reported
        failure = exc
    _sync_folders(unsynced)
    yield from held
    if failure is not None:
        raise failure


def _sync_folders(unsynced: set[Path]) -> None:
    for folder in sorted(unsynced):
        fsync_dir(folder)
    unsynced.clear()


EARLY_WRITERS = 4  # threads writing a folder's temps: fsync waits on the disk, not the CPU


def _write_all(manifests: list[EarlyManifest]) -> None:
    """Each one's temp written and fsynced, a few at a time: on a busy disk 25 fsyncs one after
    another took 50-110 ms, four at a time 10-16 ms (docs/performance.md, "The burst")."""
    if len(manifests) < 2:
        for manifest in manifests:
            manifest()
        return
    import threading  # lazy: only a folder's apply writes several

    pending = iter(manifests)  # shared: each next() hands one manifest to one thread

    def write() -> None:
        for manifest in pending:
            manifest()  # never raises: a failed guess is written the ordinary way later

    threads = [threading.Thread(target=write) for _ in range(min(EARLY_WRITERS, len(manifests)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _store_checked(home, inputs, dry_run, on_input, seen, early, folders, unsynced) -> Iterator[Stored | str]:
    def write_early() -> None:
        _write_all(list(early.values()))

    checked = check_inputs(home, inputs, place=True, early=write_early if early else None, folders=folders)
    for done, (docs, doc_errors) in enumerate(checked):
        if on_input is not None:
            on_input(done)
        yield from doc_errors
        for doc in docs:
            if doc.skip:
                yield Stored(doc.kind, doc.name, "skipped", doc.skip)
                continue
            if doc.name in seen:
                yield f"job/{doc.name} is defined twice: in {seen[doc.name]} and {doc.origin}"
                continue
            seen[doc.name] = doc.origin
            doc = doc if doc.placed else run_where_applied(home, doc)
            verb = store_document(home, doc, dry_run, early=early.pop(doc.name, None), unsynced=unsynced)
            yield Stored(doc.kind, doc.name, verb, doc.warning)


def _source_folders(home: Home, inputs: list[tuple[str, str]]) -> list[str | None]:
    """:func:`source_folder` of each input, worked out once per folder (each resolves two paths)."""
    known: dict[str, str | None] = {}
    folders = []
    for origin, _ in inputs:
        key = "<" if origin.startswith("<") else os.path.dirname(os.path.abspath(origin))
        if key not in known:
            known[key] = source_folder(home, origin)
        folders.append(known[key])
    return folders


def source_folder(home: Home, origin: str) -> str | None:
    """The folder an input was applied from (stdin: the current folder), or None when it is under
    the spec dir, where a manifest keeps its own folder's rule."""
    source = os.getcwd() if origin.startswith("<") else os.path.dirname(os.path.abspath(origin))
    spec_dir = os.path.realpath(home.spec_dir)  # what Path.resolve reads
    if os.path.commonpath((spec_dir, os.path.realpath(source))) == spec_dir:  # the spec dir or below it
        return None
    return source


def run_where_applied(home: Home, doc: Doc) -> Doc:
    """A manifest applied from ``~/proj/job.yaml`` runs in ``~/proj`` (from stdin: the current
    folder), as sbatch would, not in the spec dir its copy lands in: when its ``workingDir`` is
    absent or relative, the copy gets that folder as an absolute ``workingDir`` (one line; the rest
    of the user's text is kept). A file already under the spec dir keeps its own folder's rule.
    The check usually did this already (``placed``); here for an answer that did not."""
    folder = source_folder(home, doc.origin)
    if folder is None:
        return doc
    from controller.util.manifest_edit import place_working_dir  # lazy: ruamel only when a copy needs the line

    text = place_working_dir(doc.kind, doc.data, doc.text, folder)
    return doc if text is None else Doc(doc.name, text, None, doc.origin, doc.kind, doc.warning, placed=True)
