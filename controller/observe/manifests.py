"""The manifest store: what the spec directory says, parsed once per file change.

Observes only. Walks the spec dir (recursively; hidden, swap and backup files skipped; symlinks
leaving the dir not followed), keys every file by ``(mtime_ns, size, inode)`` and re-reads a file
only when that key changes. Parsing uses the fast C safe loader; the round-trip loader runs only
when a document is invalid, to find the line (see ``admission``).
"""

from __future__ import annotations

import json
import os
import stat as stat_mod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from controller.api.names import is_valid_name
from controller.decide.admission import MAX_MANIFEST_BYTES, validate_any
from controller.model.documents import AdmittedJob, Rejection
from controller.paths import is_manifest_name  # noqa: F401  (re-exported: the store's rule)
from controller.util.fsutil import atomic_write
from controller.util.yamlio import YAMLSyntaxError, load_all

CACHE_VERSION = 2  # bump when parsing, validation or the spec hashes change


@dataclass
class ManifestFile:
    path: str
    key: tuple[int, int, int]
    documents: list[AdmittedJob | Rejection] = field(default_factory=list)
    parsed_json: str | None = None  # the parsed documents as JSON, for the parse cache


class ManifestStore:
    def __init__(self, spec_dir: Path, display: Callable[[Path], str], cache_path: Path | None = None):
        self.spec_dir = spec_dir
        self._display = display
        self._root_real = os.path.realpath(spec_dir)
        self.files: dict[str, ManifestFile] = {}
        self._gone: list[AdmittedJob | Rejection] = []  # see take_changes
        self._came: list[AdmittedJob | Rejection] = []
        self.parses = 0  # for tests and benchmarks: how many files were actually (re)parsed
        self.cache_hits = 0
        self.cache_path = cache_path
        self._warm: dict[str, tuple[list[int], str, dict]] = self._load_cache()
        self._unsaved = 0

    # -- the parse cache: a restart need not re-parse 10,000 unchanged manifests ------------------

    def _load_cache(self) -> dict[str, tuple[list[int], str, dict]]:
        if self.cache_path is None:
            return {}
        try:
            data = json.loads(self.cache_path.read_text())
            if data.get("version") == CACHE_VERSION and data.get("specDir") == str(self.spec_dir):
                return {path: (entry[0], entry[1], entry[2]) for path, entry in data["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            pass
        return {}

    def save_cache(self, force: bool = False) -> None:
        """Write the parse cache (no fsync: it is only a cache) when enough changed, or when asked."""
        if self.cache_path is None or (not force and self._unsaved == 0):
            return

        entries = ",".join(
            f"{json.dumps(path)}:[{json.dumps(list(f.key))},{json.dumps(f.parsed_json)},{json.dumps(_hashes_of(f))}]"
            for path, f in self.files.items()
            if f.parsed_json is not None
        )
        head = json.dumps({"version": CACHE_VERSION, "specDir": str(self.spec_dir)})[:-1]
        atomic_write(self.cache_path, f'{head},"files":{{{entries}}}}}', durable=False)
        self._unsaved = 0

    # -- observing ---------------------------------------------------------------------------

    def scan(self) -> set[str]:
        """Full resync: stat every manifest, re-read changed ones. Returns the paths that changed."""
        seen: set[str] = set()
        changed: set[str] = set()
        for path, st in self._walk(str(self.spec_dir)):
            seen.add(path)
            if self._update_or_ignore(path, st):
                changed.add(path)
        for gone in set(self.files) - seen:
            self._drop(gone)
            changed.add(gone)
        return changed

    def refresh(self, paths: Iterable[str]) -> set[str]:
        """Incremental: re-check only these paths (files or folders). Returns the paths that changed."""
        changed: set[str] = set()
        for raw in paths:
            path = os.path.abspath(raw)
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is not None and stat_mod.S_ISDIR(st.st_mode):
                if self._accept_dir(path):
                    changed |= self._refresh_dir(path)
                continue
            if st is None and not os.path.islink(path):
                # a vanished file, or a vanished folder holding manifests
                prefix = path + os.sep
                for known in [p for p in self.files if p == path or p.startswith(prefix)]:
                    self._drop(known)
                    changed.add(known)
                continue
            why = self._ignored_reason(path, st)
            if why is not None:
                if self._ignore(path, why):
                    changed.add(path)
                continue
            if st is None or not self._accept(path, st):
                if path in self.files:
                    self._drop(path)
                    changed.add(path)
                continue
            if self._update(path, st):
                changed.add(path)
        return changed

    def documents(self) -> list[AdmittedJob | Rejection]:
        return [doc for f in self.files.values() for doc in f.documents]

    def take_changes(self) -> tuple[list[AdmittedJob | Rejection], list[AdmittedJob | Rejection]]:
        """The documents that left and the ones that came since the last call (files changed,
        added or removed), for incremental admission; the store itself stays the full truth."""
        gone, came = self._gone, self._came
        self._gone, self._came = [], []
        return gone, came

    def _set(self, path: str, manifest: ManifestFile) -> None:
        old = self.files.get(path)
        if old is not None:
            self._gone.extend(old.documents)
        self._came.extend(manifest.documents)
        self.files[path] = manifest

    def _drop(self, path: str) -> None:
        self._gone.extend(self.files.pop(path).documents)

    # -- internals ---------------------------------------------------------------------------

    def _refresh_dir(self, directory: str) -> set[str]:
        changed: set[str] = set()
        seen: set[str] = set()
        for path, st in self._walk(directory):
            seen.add(path)
            if self._update_or_ignore(path, st):
                changed.add(path)
        prefix = directory.rstrip(os.sep) + os.sep
        for known in [p for p in self.files if p.startswith(prefix) and p not in seen]:
            self._drop(known)
            changed.add(known)
        return changed

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self._root_real or real.startswith(self._root_real + os.sep)

    def _accept_dir(self, path: str) -> bool:
        """Folders get the same rules as the walk: no hidden ones, no symlinks leaving the spec dir."""
        rel = os.path.relpath(path, self.spec_dir)
        if rel == ".":
            return True
        if rel.startswith("..") or any(p.startswith(".") for p in rel.split(os.sep)):
            return False
        return self._inside(path)

    def _ignored_reason(self, path: str, st: os.stat_result | None) -> str | None:
        """Why an entry that looks like a manifest is not read (reported once, as a Warning), or None."""
        rel = os.path.relpath(path, self.spec_dir)
        parts = rel.split(os.sep)
        if rel.startswith("..") or any(p.startswith(".") for p in parts[:-1]) or not is_manifest_name(parts[-1]):
            return None
        if not self._inside(os.path.dirname(path)):
            return None  # inside a folder symlink that leaves the spec dir: not looked at at all
        if os.path.islink(path) and not self._inside(path):
            return "a symlink leading outside the spec directory: not followed"
        if st is None:
            return "a symlink that cannot be resolved (dangling, or a loop): not read" if os.path.islink(path) else None
        if not stat_mod.S_ISREG(st.st_mode) and not stat_mod.S_ISDIR(st.st_mode):
            return "not a regular file (a FIFO, socket or device): not read"
        return None

    def _ignore(self, path: str, why: str) -> bool:
        """Record an unreadable entry as a nameless rejection: admission turns it into a Warning."""
        known = self.files.get(path)
        source = self._display(Path(path))
        message = f"{source}: {why}"
        if known is not None and known.documents and getattr(known.documents[0], "message", None) == message:
            return False
        self.files[path] = ManifestFile(path, (0, 0, 0), [Rejection(None, "Ignored", message, source, path)])
        return True

    def _accept(self, path: str, st: os.stat_result) -> bool:
        rel = os.path.relpath(path, self.spec_dir)
        if rel.startswith(".."):
            return False
        parts = rel.split(os.sep)
        if any(p.startswith(".") for p in parts[:-1]) or not is_manifest_name(parts[-1]):
            return False
        if not stat_mod.S_ISREG(st.st_mode):
            return False
        return self._inside(path)  # the file, or a symlinked folder on its way, must stay inside

    def _walk(self, directory: str, visited: set[tuple[int, int]] | None = None) -> Iterable[tuple[str, os.stat_result]]:
        if visited is None:
            visited = set()
        try:
            st = os.stat(directory)
        except OSError:
            return
        if (st.st_dev, st.st_ino) in visited:
            return  # a symlink loop (ln -s . jobs/loop): each folder is read once
        visited.add((st.st_dev, st.st_ino))
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_symlink() and not self._inside(entry.path):
                    if is_manifest_name(entry.name):
                        yield entry.path, None  # not followed, but reported
                    continue  # symlinks that leave the spec dir are not followed
                if entry.is_dir():
                    yield from self._walk(entry.path, visited)
                elif is_manifest_name(entry.name):
                    # a FIFO or a looping symlink is reported, never opened (a FIFO would block)
                    yield entry.path, entry.stat() if entry.is_file() else None
            except OSError:
                continue

    def _update_or_ignore(self, path: str, st: os.stat_result | None) -> bool:
        if st is None:
            try:
                st = os.stat(path)
            except OSError:
                pass
            why = self._ignored_reason(path, st) or "not a regular file: not read"
            return self._ignore(path, why)
        return self._update(path, st)

    def _update(self, path: str, st: os.stat_result) -> bool:
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        known = self.files.get(path)
        if known is not None and known.key == key:
            return False
        warm = self._warm.pop(path, None)
        if warm is not None and tuple(warm[0]) == key:
            documents = self._from_cache(path, st, warm[1], warm[2])
            if documents is not None:
                self._set(path, ManifestFile(path, key, documents, warm[1]))
                self.cache_hits += 1
                return True
        manifest = ManifestFile(path, key)
        manifest.documents = self._parse(path, st, manifest)
        self._set(path, manifest)
        self.parses += 1
        self._unsaved += 1
        return True

    def _from_cache(self, path: str, st: os.stat_result, parsed_json: str, hashes: dict) -> list | None:
        """Validate cached parse results; None (parse the file) if anything is not simply valid,
        since error messages need the text for their line numbers. The spec hashes of the same
        parse are taken from the cache too (computing them is a third of validating)."""
        try:
            docs = json.loads(parsed_json)
        except ValueError:
            return None
        results = self._validate(path, st, docs, None, hashes if isinstance(hashes, dict) else {})
        return None if any(isinstance(r, Rejection) for r in results) else results

    def _parse(self, path: str, st: os.stat_result, manifest: ManifestFile | None = None) -> list[AdmittedJob | Rejection]:
        source = self._display(Path(path))
        stem = os.path.basename(path).rsplit(".", 1)[0]
        stem_name = stem if is_valid_name(stem) else None

        def file_error(reason: str, message: str) -> list[AdmittedJob | Rejection]:
            return [Rejection(stem_name, reason, f"{message} ({source})", source, path, 0, st.st_mtime_ns)]

        if st.st_size > MAX_MANIFEST_BYTES:
            return file_error("Invalid", f"file is {st.st_size} bytes, over the 1 MiB limit for a manifest")
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            return file_error("Invalid", f"cannot read the file: {exc.strerror or exc}")
        if b"\0" in raw:
            return file_error("Invalid", "file is binary, not YAML text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return file_error("Invalid", f"file is not UTF-8 text (bad byte at offset {exc.start})")
        try:
            docs = load_all(text)
        except YAMLSyntaxError as exc:
            where = f"{source} line {exc.line}" if exc.line else source
            return [Rejection(stem_name, "YAMLError", f"YAML syntax error: {exc} ({where})", source, path, 0, st.st_mtime_ns)]
        try:
            if manifest is not None:
                try:
                    manifest.parsed_json = json.dumps(docs, separators=(",", ":"))
                except (TypeError, ValueError):  # e.g. an unquoted timestamp: not JSON, not cached
                    manifest.parsed_json = None
            return self._validate(path, st, docs, text)
        except RecursionError:  # deep block nesting the parser took but later walks cannot
            if manifest is not None:
                manifest.parsed_json = None
            return file_error("Invalid", "document is nested too deeply")

    def _validate(
        self, path: str, st: os.stat_result, docs: list, text: str | None, hashes: dict | None = None
    ) -> list[AdmittedJob | Rejection]:
        source = self._display(Path(path))
        stem = os.path.basename(path).rsplit(".", 1)[0]
        single = sum(d is not None for d in docs) == 1
        results: list[AdmittedJob | Rejection] = []
        for index, data in enumerate(docs):
            if data is None:  # an empty document (a stray ---) is nothing, not an error
                continue
            results.extend(
                validate_any(
                    data,
                    source=source,
                    path=path,
                    stem=stem,
                    single=single,
                    doc_index=index,
                    text=text,
                    owner_uid=st.st_uid,
                    mtime_ns=st.st_mtime_ns,
                    known_hashes=(hashes or {}).get(str(index)),
                )
            )
        return results


def _hashes_of(manifest: ManifestFile) -> dict[str, list[str]]:
    """Spec hashes of a file's plain Job documents, by document index, for the parse cache."""
    return {
        str(d.doc_index): [d.spec_hash, d.run_hash]
        for d in manifest.documents
        if isinstance(d, AdmittedJob) and d.owner is None
    }
