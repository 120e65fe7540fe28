"""The manifest store: what the spec directory says, parsed once per file change.

Observes only. Walks the spec dir (recursively, folder by open folder; hidden, swap and backup
files skipped; symlinks leaving the dir not followed). Each manifest is taken hold of once
(``security.SpecTree``): its owner, its parse-cache key ``(mtime_ns, size, inode, uid, ctime_ns)`` and the
text all come from that one descriptor, so an entry swapped between a look and a read can never
pair one file's text with another file's owner. A file is re-read only when its key changes.
The key holds the inode's ctime, which no user can set: a manifest rewritten in place with its
old size and its old mtime put back (``touch -r``, ``cp -p``, ``tar x``, a filesystem with
coarse timestamps) still has a new key, so a restart never admits a stale parse from the cache.
Parsing uses the fast C safe loader; the round-trip loader runs only when a document is invalid,
to find the line (see ``api/validation.py``). Whatever the filesystem throws at one entry is that entry's
problem (a Rejection, a Warning, or another look at the next refresh or scan), never the whole
pass's.
"""

from __future__ import annotations

import json
import logging
import marshal
import os
import stat as stat_mod
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from controller.api.names import is_valid_name
from controller.api.validation import MAX_MANIFEST_BYTES, cached_job, validate_any
from controller.model.documents import FILE_KEY, NO_LABELS, AdmittedJob, CachedJob, Rejection
from controller.observe.review_verdicts import ReviewVerdicts, Verdict
from controller.paths import is_manifest_name
from controller.util.fsutil import atomic_write
from controller.util.security import NOT_REGULAR, EntryChanged, Folder, NotRead, OpenedManifest, SpecTree
from controller.util.yamlio import YAMLSyntaxError, load_all

log = logging.getLogger("gflowd")

CACHE_VERSION = 7  # bump when parsing, validation, the spec hashes, the key or the file's shape change
SAVE_AT_LEAST_EVERY = 300.0  # seconds: see ManifestStore.save_cache
READ_BUDGET = 1024  # changed entries per owner a pass reads (see ManifestStore.refresh)
LOOKS = 3  # an entry changing under us is opened again at once this often, then next pass
# seconds a manifest rewritten in place may read with jobs missing before that counts (ManifestStore._held_back),
# and at most while it keeps changing
SHRINK_GRACE, SHRINK_MAX = 2.0, 10.0

# (mtime_ns, size, inode, uid, ctime_ns), packed: one object per file, not a tuple of five ints (three
# of them past the small-int cache): 9 -> 4 MiB at 50,000 manifests. The parse cache keeps it as it is.
_KEY = FILE_KEY
Key = bytes
NO_KEY: Key = _KEY.pack(0, 0, 0, 0, 0)  # an entry not read: looked at again on every scan


def file_key(st: os.stat_result) -> Key:
    """What says a file is unchanged: from the fstat of the descriptor it was read through. The
    ctime too: every write and every ``utime`` sets it to the kernel's clock (see the module doc)."""
    return _KEY.pack(st.st_mtime_ns, st.st_size, st.st_ino, st.st_uid, st.st_ctime_ns)


def key_numbers(key: Key) -> tuple[int, int, int, int, int]:
    """``(mtime_ns, size, inode, uid, ctime_ns)`` of a key."""
    return _KEY.unpack(key)


@dataclass(slots=True)
class ManifestFile:
    path: str
    key: Key
    documents: list[AdmittedJob | Rejection] = field(default_factory=list)
    parsed_json: str | None = None  # the parsed documents as JSON, for the parse cache
    via_symlink: bool = False  # read through a symlink: looked at again on every scan


def _within_budget(paths: set[str]) -> tuple[set[str], set[str]]:
    """(read now, read later): at most READ_BUDGET paths per owner of the folder they are in, in
    name order. One user writing 20,000 manifests at once made a pass read all of them while
    everyone else's new manifest waited; now a mass write is spread over passes (gflowd passes
    again at once while some wait) and others' files are read in the first."""
    owners: dict[str, int] = {}
    per_owner: dict[int, int] = {}
    now: set[str] = set()
    later: set[str] = set()
    for path in sorted(paths):
        folder = os.path.dirname(path)
        if folder not in owners:
            try:
                owners[folder] = os.stat(folder).st_uid
            except OSError:
                owners[folder] = -1
        uid = owners[folder]
        if per_owner.get(uid, 0) < READ_BUDGET:
            per_owner[uid] = per_owner.get(uid, 0) + 1
            now.add(path)
        else:
            later.add(path)
    return now, later


class ManifestStore:
    def __init__(
        self,
        spec_dir: Path,
        display: Callable[[str], str],
        cache_path: Path | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.spec_dir = spec_dir
        self._display = display
        self._spec = os.path.abspath(spec_dir)
        self._root_real = os.path.realpath(spec_dir)
        self._tree = SpecTree(self._spec, self._root_real, display)  # display: a path string as users see it
        self.files: dict[str, ManifestFile | CachedJob] = {}  # a CachedJob: a cached file of one plain Job
        self._gone: list[AdmittedJob | Rejection] = []  # see take_changes
        self._came: list[AdmittedJob | Rejection] = []
        self._in_flux: set[str] = (
            set()
        )  # entries that kept changing while read: looked at again by the next refresh or scan
        self.deferred: set[str] = set()  # changed entries beyond their owner's read budget: the next refresh's
        # path -> (key, since when it reads so, since when it reads with jobs missing): rewritten in place
        # with jobs missing, its old documents kept (_held_back)
        self._shrunk: dict[str, tuple[Key, float, float]] = {}
        self._monotonic = monotonic
        self._linked_folders = False  # the last scan walked a folder through a symlink (see through_symlinks)
        self.parses = 0  # for tests and benchmarks: how many files were actually (re)parsed
        self.cache_hits = 0
        self.cache_path = cache_path
        self.verdicts: ReviewVerdicts | None = None  # the review's, for files about to land (gflowd sets it)
        self._warm: dict[str, bytes] = self._load_cache()  # path -> its entry, marshalled (see _load_cache)
        self._unsaved = 0
        self._saved_at = time.monotonic()  # see save_cache

    # -- the parse cache: a restart need not re-parse 10,000 unchanged manifests ------------------

    def _load_cache(self) -> dict[str, bytes]:
        """path -> its entry ``(key, parsed JSON, hashes, jobs)`` (:func:`cache_bytes`) as marshal
        bytes, decoded only when the file is looked at (:func:`_entry`, ~1 us): at 50,000 files a
        JSON line decoded per file was ~0.4 s of a start's CPU. Each entry its own blob, not one
        blob of every entry: decoded at once, the parts a start frees (the entry's tuples) lay among
        the parts it keeps (key, parse, name) and pinned ~12 MiB of freed fragments. Entries are
        checked as they are used: a malformed one costs a parse, never a wrong document; a file
        torn or of another format is ignored."""
        if self.cache_path is None:
            return {}
        try:
            data = _read_own(self.cache_path)
            head, newline, _ = data[:4096].partition(b"\n")
            header = json.loads(head)
            if not newline or header != _cache_header(self.spec_dir):
                return {}
            warm = marshal.loads(memoryview(data)[len(head) + 1 :])  # paths and bytes: no container per file
            return warm if type(warm) is dict else {}
        except (OSError, ValueError, EOFError, TypeError, AttributeError):
            return {}

    def save_cache(self, force: bool = False, any_change: bool = False) -> None:
        """Write the parse cache (no fsync: it is only a cache) when enough changed, or when asked.
        Enough: a file in a hundred, or any file once SAVE_AT_LEAST_EVERY seconds passed since the
        last write. Rewriting it costs ~0.7 s at 50,000 files, which a resync after each edit would
        pay; what is not written yet costs a restart only the parse of those few files.
        ``any_change``: write if anything changed (a clean stop); ``force``: write in any case."""
        if self.cache_path is None or (not force and self._unsaved == 0):
            return
        if (
            not (force or any_change)
            and self._unsaved < len(self.files) // 100
            and time.monotonic() - self._saved_at < SAVE_AT_LEAST_EVERY
        ):
            return

        entries = {path: _cache_entry(f) for path, f in self.files.items() if f.parsed_json is not None}
        # 0600: it holds the text of every manifest, env included, also of manifests their owners keep private
        atomic_write(self.cache_path, cache_bytes(self.spec_dir, entries), mode=0o600, durable=False)
        self._unsaved = 0
        self._saved_at = time.monotonic()

    # -- observing ---------------------------------------------------------------------------

    def scan(self) -> set[str]:
        """Full resync: look at every manifest, re-read changed ones. Returns the paths that changed."""
        self._in_flux.clear()  # every entry is looked at again below
        self._linked_folders = False  # until the walk meets one
        seen: set[str] = set()
        changed: set[str] = set()
        warm, files = self._warm, self.files
        for path, entry, folder in self._walk(self._spec):
            seen.add(path)
            if (
                path in warm  # a start (or the first scan after one): the cache knows it...
                and path not in files  # ...and the store does not yet
                and folder.real is None  # in a real folder of the spec dir
                and not folder.links
                and self._take_warm(path, entry)
            ) or self._look(path, entry, folder):
                changed.add(path)
        for gone in set(self.files) - seen:
            self._drop(gone)
            changed.add(gone)
        self._warm = {}  # every file was looked at: what is left are files gone since the cache was written
        self.deferred = set()
        return changed

    def refresh(self, paths: Iterable[str]) -> set[str]:
        """Incremental: re-check only these paths (files or folders), and the entries that were
        changing last time. Returns the paths that changed."""
        changed: set[str] = set()
        again, self._in_flux = self._in_flux, set()
        todo = {*paths, *again, *self.deferred}
        self.deferred = set()
        if len(todo) > READ_BUDGET:
            todo, self.deferred = _within_budget(todo)
        for raw in todo:
            path = os.path.abspath(raw)
            try:
                changed |= self._refresh_path(path)
            except OSError:  # it changed while we looked (e.g. a folder became a symlink): next pass
                self._in_flux.add(path)
        return changed

    def looks_again(self) -> bool:
        """Whether some entry kept changing while read: the next pass looks at it again, not only
        the next deep resync (snapshot.DEEP_EVERY)."""
        return bool(self._in_flux)

    def look_again_at(self) -> float | None:
        """When (``monotonic``) a manifest held back as half-written (``_held_back``) is due for the
        look that takes it as it is: a pass must come then even if no file event does."""
        if not self._shrunk:
            return None
        return min(min(since + SHRINK_GRACE, first + SHRINK_MAX) for _, since, first in self._shrunk.values())

    def through_symlinks(self) -> bool:
        """Whether some manifest is read through a symlink (to it, or to its folder): changes
        there reach no inotify watch, only a scan."""
        return self._linked_folders or any(f.via_symlink for f in self.files.values())

    def documents(self) -> list[AdmittedJob | Rejection]:
        return [doc for f in self.files.values() for doc in f.documents]

    def take_changes(self) -> tuple[list[AdmittedJob | Rejection], list[AdmittedJob | Rejection]]:
        """The documents that left and the ones that came since the last call (files changed,
        added or removed), for incremental admission; the store itself stays the full truth."""
        gone, came = self._gone, self._came
        self._gone, self._came = [], []
        return gone, came

    def _set(self, path: str, manifest: ManifestFile | CachedJob) -> None:
        old = self.files.get(path)
        if old is not None:
            self._gone.extend(old.documents)
        self._came.extend(manifest.documents)
        self.files[path] = manifest

    def _drop(self, path: str) -> None:
        self._shrunk.pop(path, None)
        self._gone.extend(self.files.pop(path).documents)

    def _forget(self, path: str) -> bool:
        if path not in self.files:
            return False
        self._drop(path)
        return True

    # -- finding entries ---------------------------------------------------------------------

    def _refresh_path(self, path: str) -> set[str]:
        try:
            st = os.stat(path)  # follows: a folder, or a symlink to one inside, is walked
        except OSError:
            st = None
        if st is not None and stat_mod.S_ISDIR(st.st_mode):
            return self._refresh_dir(path) if self._accept_dir(path) else set()
        if st is None and not os.path.lexists(path):
            if path in self.files:  # a vanished manifest (it was no folder): no walk over every known path
                self._drop(path)
                return {path}
            # a vanished folder holding manifests
            prefix = path + os.sep
            gone = {known for known in self.files if known == path or known.startswith(prefix)}
            for known in gone:
                self._drop(known)
            return gone
        if not self._is_candidate(path):
            return {path} if self._forget(path) else set()
        return {path} if self._look(path) else set()

    def _refresh_dir(self, directory: str) -> set[str]:
        changed: set[str] = set()
        seen: set[str] = set()
        for path, entry, folder in self._walk(directory):
            seen.add(path)
            if self._look(path, entry, folder):
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
        rel = os.path.relpath(path, self._spec)
        if rel == ".":
            return True
        if rel.startswith("..") or any(p.startswith(".") for p in rel.split(os.sep)):
            return False
        return self._inside(path)

    def _is_candidate(self, path: str) -> bool:
        """Named like a manifest, under the spec dir, in no hidden folder nor one leaving the spec dir."""
        rel = os.path.relpath(path, self._spec)
        parts = rel.split(os.sep)
        if rel.startswith("..") or any(p.startswith(".") for p in parts[:-1]) or not is_manifest_name(parts[-1]):
            return False
        return self._inside(os.path.dirname(path))

    def _walk(self, directory: str) -> Iterable[tuple[str, os.DirEntry, Folder]]:
        """Every entry named like a manifest under ``directory``: (path, directory entry, the open
        folder it is in). Real folders come first, symlinked ones after: a folder is read once
        (``ln -s . jobs/loop``), and always under its own path when it has one, never under
        someone's link to it."""
        visited: set[tuple[int, int]] = set()
        pending = [directory]  # then the symlinked folders found on the way
        while pending:
            try:
                folder = self._tree.open_folder(pending.pop(0))
            except (OSError, EntryChanged, NotRead):
                continue  # gone, changing, or leading out of the spec dir
            yield from self._walk_folder(folder, visited, pending)

    def _walk_folder(
        self, folder: Folder, visited: set[tuple[int, int]], linked: list[str]
    ) -> Iterable[tuple[str, os.DirEntry, Folder]]:
        try:
            if (folder.stat.st_dev, folder.stat.st_ino) in visited:
                return
            visited.add((folder.stat.st_dev, folder.stat.st_ino))
            try:
                entries = list(os.scandir(folder.fd))
            except OSError:
                return
            # Each entry let go once looked at: its cached stat is ~15 objects, and 50,000 of them
            # alive until the end of the walk leave ~30 MiB of freed fragments among the store's records.
            entries.reverse()
            while entries:
                entry = entries.pop()
                if entry.name.startswith("."):
                    continue
                path = folder.path + os.sep + entry.name
                try:
                    if entry.is_symlink():
                        if entry.is_dir() and self._inside(path):
                            linked.append(path)
                            self._linked_folders = True
                        elif is_manifest_name(entry.name):
                            yield path, entry, folder  # a file symlink: where it leads is checked when opened
                    elif entry.is_dir(follow_symlinks=False):
                        sub = self._tree.open_subfolder(folder, entry.name)
                        if sub is None:
                            linked.append(path)  # it became a symlink meanwhile
                        else:
                            yield from self._walk_folder(sub, visited, linked)
                    elif is_manifest_name(entry.name):
                        yield path, entry, folder
                except OSError:
                    continue  # gone, or changing, while we looked: the next event or scan sees it
        finally:
            folder.close()

    # -- reading one entry -------------------------------------------------------------------

    def _look(self, path: str, entry: os.DirEntry | None = None, folder: Folder | None = None) -> bool:
        """Re-read one entry named like a manifest if it changed. True when its documents changed.
        Anything the filesystem throws here is this entry's problem alone."""
        try:
            if entry is None:
                st = os.lstat(path)
                is_link, regular = stat_mod.S_ISLNK(st.st_mode), stat_mod.S_ISREG(st.st_mode)
            else:
                is_link, regular = entry.is_symlink(), entry.is_file(follow_symlinks=False)
            if not is_link and not regular:
                return self._ignore(path, NOT_REGULAR)  # a FIFO or a device is never opened
            known = self.files.get(path)
            if known is not None and not is_link and not known.via_symlink:
                quick = entry.stat(follow_symlinks=False) if entry is not None else st
                if file_key(quick) == known.key:
                    return False  # the same file as last read: its key came from that read's fstat
            if (
                known is None
                and not is_link
                and entry is not None
                and folder is not None
                and folder.real is None
                and not folder.links
                and path in self._warm
            ):
                # a start: a file in a real folder of the spec dir, as the parse cache last saw it
                # (key from the same walk's stat, as above) needs no opening, reading or parsing
                quick = entry.stat(follow_symlinks=False)
                if self._from_warm(path, quick, file_key(quick), None):
                    return True
        except FileNotFoundError:
            return self._forget(path)
        except OSError:
            self._in_flux.add(path)
            return False
        for _ in range(LOOKS):
            try:
                return self._read(path, entry.name if folder is not None and entry is not None else None, folder)
            except EntryChanged:
                folder = None  # look again by path
        self._in_flux.add(path)
        return False

    def _read(self, path: str, name: str | None, folder: Folder | None) -> bool:
        try:
            opened = (
                self._tree.open_entry(folder, name, path)
                if folder is not None and name
                else self._tree.open_manifest(path)
            )
        except NotRead as why:
            if why.reason is None:
                return self._forget(path)
            if why.reason == "Ignored":
                return self._ignore(path, why.message)
            return self._refuse(path, why.reason, why.message)
        except (FileNotFoundError, NotADirectoryError):
            return self._forget(path)  # gone: removed, or a folder on the way replaced
        except OSError as exc:
            return self._unreadable(path, exc)
        with opened:
            return self._update(path, opened)

    def _ignore(self, path: str, why: str) -> bool:
        """Record an unreadable entry as a nameless rejection: admission turns it into a Warning."""
        source = self._display(path)
        message = f"{source}: {why}"
        return self._set_rejection(path, NO_KEY, Rejection(None, "Ignored", message, source, path), True)

    def _refuse(self, path: str, reason: str, message: str) -> bool:
        """A manifest that is not run (e.g. a symlink to another user's file): Rejected under its stem."""
        source = self._display(path)
        stem = os.path.basename(path).rsplit(".", 1)[0]
        name = stem if is_valid_name(stem) else None
        try:
            mtime_ns = os.lstat(path).st_mtime_ns  # the entry's own age, for a duplicate-name contest
        except OSError:
            mtime_ns = 0
        return self._set_rejection(path, NO_KEY, Rejection(name, reason, message, source, path, 0, mtime_ns), True)

    def _unreadable(self, path: str, exc: OSError) -> bool:
        try:
            key: Key = file_key(os.stat(path))
        except OSError:
            key = NO_KEY  # looked at again on every scan
        rejection = self._file_error(
            path, key_numbers(key)[0], "Invalid", f"cannot read the file: {exc.strerror or exc}"
        )[0]
        assert isinstance(rejection, Rejection)  # a whole-file error is one Rejection
        return self._set_rejection(path, key, rejection)

    def _set_rejection(self, path: str, key: Key, rejection: Rejection, via_symlink: bool = False) -> bool:
        known = self.files.get(path)
        if known is not None and known.key == key and known.documents == [rejection]:
            return False
        self._set(path, ManifestFile(path, key, [rejection], via_symlink=via_symlink))
        return True

    def _update(self, path: str, opened: OpenedManifest) -> bool:
        st = opened.stat
        key = file_key(st)
        via_symlink = opened.folder is not None
        known = self.files.get(path)
        if (
            known is not None
            and known.key == key
            and known.via_symlink == via_symlink
            and _folder_of(known) == opened.folder
        ):
            return False
        if self._from_warm(path, st, key, opened.folder):
            return True
        manifest = ManifestFile(path, key, via_symlink=via_symlink)
        manifest.documents = _placed(self._parse(path, opened, manifest), opened.folder)
        self.parses += 1
        if self._held_back(path, known, key, manifest.documents):
            self._in_flux.add(path)  # the next pass looks again (and the loop makes one by look_again_at)
            return False
        self._set(path, manifest)
        self._unsaved += 1
        return True

    def _held_back(
        self, path: str, known: ManifestFile | CachedJob | None, key: Key, documents: list[AdmittedJob | Rejection]
    ) -> bool:
        """Whether to keep a file's old documents a while longer: it was rewritten in place (the same
        inode: ``>`` redirection, nano, Python's ``write_text`` truncate, then write) and jobs it held
        are missing from what it says now. That is what such a write looks like half done: read
        while the writer is descheduled under load, an empty file meant its jobs deleted (a running
        one stopped) and made anew a moment later. A file still reading so after SHRINK_GRACE
        seconds unchanged means it, and one that keeps changing with jobs missing is taken as it
        reads after SHRINK_MAX (a script rewriting it in place every second must not keep a
        deleted job for good); a file saved whole (temp file and rename: gflowctl, vim, git) is a
        new inode, complete when it appears, and never waits."""
        if known is None or known.key == NO_KEY or key_numbers(known.key)[2] != key_numbers(key)[2]:
            self._shrunk.pop(path, None)
            return False
        now_named = {doc.name for doc in documents}
        if all(doc.name in now_named for doc in known.documents if isinstance(doc, AdmittedJob)):
            self._shrunk.pop(path, None)
            return False
        now = self._monotonic()
        held = self._shrunk.get(path)
        if held is None:
            log.debug("%s: rewritten in place with jobs missing; read again before they count as deleted", path)
            held = (key, now, now)
        elif held[0] != key:
            held = (key, now, held[2])
        if now - held[1] < SHRINK_GRACE and now - held[2] < SHRINK_MAX:
            self._shrunk[path] = held
            return True
        self._shrunk.pop(path, None)
        return False

    def _from_warm(self, path: str, st: os.stat_result, key: Key, folder: str | None) -> bool:
        """The file's documents from the parse cache, when its entry has this very key."""
        warm = _entry(self._warm.pop(path, None))
        if warm is None or warm[0] != key:
            return False  # none, changed since, or malformed: parse the file
        documents = self._from_facts(path, st, key, warm) or self._from_cache(path, st, warm)
        if documents is None:
            return False
        if folder is None and len(documents) == 1 and type(documents[0]) is CachedJob:
            self._set(path, documents[0])  # the file's entry and its job in one object
        else:
            self._set(path, ManifestFile(path, key, _placed(documents, folder), warm[1], folder is not None))
        self.cache_hits += 1
        return True

    def _take_warm(self, path: str, entry: os.DirEntry) -> bool:
        """A start's look at a file in a real folder of the spec dir that the parse cache knows and
        the store does not yet (``scan``): a regular file whose ``stat`` gives its entry's key is
        that entry's documents, with no opening, reading or parsing. A file of one plain Job is
        made its ``CachedJob`` here, straight (at 50,000 such files the general look, ``_look`` ->
        ``_from_warm`` -> ``_from_facts`` -> ``_cached_job``, was a third of a start's CPU). False
        when the general look must decide: a symlink, not a regular file, changed, or gone."""
        try:
            if not entry.is_file(follow_symlinks=False):
                return False
            key = file_key(entry.stat(follow_symlinks=False))
        except OSError:
            return False
        warm = _entry(self._warm.get(path))
        if warm is None or warm[0] != key:
            return False  # _look reads it (a malformed entry too: _from_warm drops it)
        parsed_json, jobs = warm[1], warm[3]
        if type(parsed_json) is str and type(jobs) is tuple and len(jobs) == 1 and type(jobs[0]) is tuple:
            job = self._cached_job(path, self._display(path), warm[0], parsed_json, jobs[0])
            if job is not None:
                del self._warm[path]
                self.files[path] = job
                self._came.append(job)
                self.cache_hits += 1
                return True
        return self._from_warm(path, entry.stat(follow_symlinks=False), key, None)

    def _from_facts(self, path: str, st: os.stat_result, key: Key, warm: tuple) -> list | None:
        """A file of plain valid Jobs, as its cache entry describes them: no parse, no validation;
        each job's pydantic model is built from the cached document only if it is ever needed.
        None (validate the cached parse instead) when the entry has no such description."""
        try:
            parsed_json, jobs = warm[1], warm[3]
            if type(parsed_json) is not str or type(jobs) is not tuple or not jobs:
                return None
            source = self._display(path)
            uid, mtime_ns = st.st_uid, st.st_mtime_ns
            if len(jobs) == 1:
                job = self._cached_job(path, source, key, parsed_json, jobs[0])
                return None if job is None else [job]
            documents = []
            # plain checks and keywords, no JobFacts per job: this loop is a quarter of a start at 50,000
            for facts in jobs:
                if not _facts_typed(facts):
                    return None
                doc_index, name, spec_hash, run_hash, priority, gpus, labels, ttl, cancelled, conda_env, depends = facts
                documents.append(
                    AdmittedJob(  # equal hashes (jobs of one spec) are one string
                        name,
                        None,  # type: ignore[arg-type]  # no model: built from the cached document when read
                        source,
                        path,
                        doc_index,
                        sys.intern(spec_hash),
                        sys.intern(run_hash),
                        uid,
                        mtime_ns,
                        priority=priority,
                        gpus=gpus,
                        labels=labels or NO_LABELS,  # one shared empty mapping, not 50,000
                        ttl=ttl,
                        cancelled=cancelled,
                        conda_env=conda_env,
                        depends=depends,
                        document=parsed_json,
                        build=cached_job,
                    )
                )
            return documents
        except (ValueError, TypeError, IndexError):
            return None

    def _cached_job(self, path: str, source: str, key: Key, parsed_json: str, facts: object) -> CachedJob | None:
        """A file of one plain valid Job, as its cache entry describes it (see :meth:`_from_facts`)."""
        if not _facts_typed(facts):
            return None
        return CachedJob.of_facts(key, source, path, facts, parsed_json, cached_job)  # type: ignore[arg-type]

    def _from_cache(self, path: str, st: os.stat_result, warm: tuple) -> list | None:
        """Validate cached parse results; None (parse the file) if anything is not simply valid,
        since error messages need the text for their line numbers. The spec hashes of the same
        parse are taken from the cache too (computing them is a third of validating)."""
        try:
            parsed_json, hashes = warm[1], warm[2]
            docs = json.loads(parsed_json)
        except (ValueError, TypeError, IndexError):
            return None
        results = self._validate(path, st, docs, None, hashes if isinstance(hashes, dict) else {})
        return None if any(isinstance(r, Rejection) for r in results) else results

    def _file_error(
        self, path: str, mtime_ns: int, reason: str, message: str, line: int | None = None
    ) -> list[AdmittedJob | Rejection]:
        """The whole file is bad: one Rejection under the file stem, naming the file (and line)."""
        source = self._display(path)
        stem = os.path.basename(path).rsplit(".", 1)[0]
        stem_name = stem if is_valid_name(stem) else None
        where = f"{source} line {line}" if line else source
        return [Rejection(stem_name, reason, f"{message} ({where})", source, path, 0, mtime_ns)]

    def _parse(
        self, path: str, opened: OpenedManifest, manifest: ManifestFile | None = None
    ) -> list[AdmittedJob | Rejection]:
        st = opened.stat
        if st.st_size > MAX_MANIFEST_BYTES:
            return self._file_error(
                path, st.st_mtime_ns, "Invalid", f"file is {st.st_size} bytes, over the 1 MiB limit for a manifest"
            )
        try:
            raw = opened.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            return self._file_error(path, st.st_mtime_ns, "Invalid", f"cannot read the file: {exc.strerror or exc}")
        if b"\0" in raw:
            return self._file_error(path, st.st_mtime_ns, "Invalid", "file is binary, not YAML text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._file_error(
                path, st.st_mtime_ns, "Invalid", f"file is not UTF-8 text (bad byte at offset {exc.start})"
            )
        verdict = self.verdicts.take((path, st.st_uid, raw)) if self.verdicts else None
        if verdict is not None:  # the review just judged these very bytes for this path: no second parse
            log.debug("%s: as the review judged it", path)
            if manifest is not None:
                manifest.parsed_json = verdict.parsed_json
            return verdict.documents(self._display(path), path, st.st_uid, st.st_mtime_ns)
        try:
            docs = load_all(text)
        except YAMLSyntaxError as exc:
            return self._file_error(path, st.st_mtime_ns, "YAMLError", f"YAML syntax error: {exc}", exc.line)
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
            return self._file_error(path, st.st_mtime_ns, "Invalid", "document is nested too deeply")

    def _validate(
        self, path: str, st: os.stat_result, docs: list, text: str | None, hashes: dict | None = None
    ) -> list[AdmittedJob | Rejection]:
        return validate_parsed(path, self._display(path), docs, text, st.st_uid, st.st_mtime_ns, hashes)


def validate_parsed(
    path: str, source: str, docs: list, text: str | None, owner_uid: int, mtime_ns: int, hashes: dict | None = None
) -> list[AdmittedJob | Rejection]:
    """The documents of the file at ``path`` (parsed as ``docs``), each validated."""
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
                owner_uid=owner_uid,
                mtime_ns=mtime_ns,
                known_hashes=(hashes or {}).get(str(index)),
            )
        )
    return results


def verdict_of(text: str, path: str) -> Verdict | None:
    """What ``ManifestStore._parse`` makes of ``text`` landing at ``path`` (the same functions),
    for the review to keep (``review_verdicts``); None unless every document is a plain valid Job."""
    if len(text.encode()) > MAX_MANIFEST_BYTES or "\0" in text:
        return None
    try:
        docs = load_all(text)
        results = validate_parsed(path, path, docs, text, -1, 0)
    except (YAMLSyntaxError, RecursionError):
        return None
    if not results or not all(type(r) is AdmittedJob and r.owner is None for r in results):
        return None
    try:
        parsed_json: str | None = json.dumps(docs, separators=(",", ":"))
    except (TypeError, ValueError):  # as _parse: not JSON, not cached
        parsed_json = None
    jobs = [(r.name, r.job, r.doc_index, r.spec_hash, r.run_hash) for r in results if isinstance(r, AdmittedJob)]
    return Verdict(parsed_json, jobs)


def _placed(documents: list, folder: str | None) -> list:
    """Jobs of a manifest reached through a symlink run where the file really lives (``folder``)."""
    if folder is None:
        return documents
    return [d.placed(folder) if isinstance(d, AdmittedJob) else d for d in documents]


def _folder_of(manifest: ManifestFile | CachedJob) -> str | None:
    return next((d.real_dir for d in manifest.documents if isinstance(d, AdmittedJob)), None)


def _read_own(path: Path) -> bytes:
    """The cache's bytes, only if this process's uid owns the file and nobody else may write it:
    a cache another user planted would decide which documents gflowd believes a manifest holds."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            raise ValueError(f"{path} is not this controller's own file")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    finally:
        os.close(fd)


def _cache_header(spec_dir: Path) -> dict:
    """The parse cache's first line, as JSON: marshal's format changes between Python versions."""
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return {"version": CACHE_VERSION, "specDir": str(spec_dir), "python": python, "marshal": marshal.version}


def cache_bytes(spec_dir: Path, entries: dict[str, tuple]) -> bytes:
    """The parse cache of ``spec_dir``'s files: a JSON header line, then one ``marshal`` blob of
    ``{path: marshal bytes of (key, parsed JSON, hashes, jobs)}`` (:func:`_cache_entry`). marshal:
    Python's own format for its own data (it builds values, never runs code), read back only from
    a file of gflowd's own uid that nobody else may write (:func:`_read_own`)."""
    blobs = {path: marshal.dumps(entry) for path, entry in entries.items()}
    return json.dumps(_cache_header(spec_dir)).encode() + b"\n" + marshal.dumps(blobs)


def _entry(blob: object) -> tuple | None:
    """A cache entry as :func:`_cache_entry` made it, from its marshal bytes; None when it is none."""
    try:
        entry = marshal.loads(blob)  # type: ignore[arg-type]
    except (EOFError, ValueError, TypeError):
        return None
    return entry if type(entry) is tuple and len(entry) == 4 else None


def _cache_entry(manifest: ManifestFile | CachedJob) -> tuple:
    """A file's cache entry: its key, its parse as JSON, then the spec hashes by document (None
    when the jobs say them) and each Job's facts when the file holds plain valid Jobs only (None
    otherwise: the cached parse is validated again)."""
    jobs = _jobs_of(manifest)
    return (manifest.key, manifest.parsed_json, None if jobs is not None else _hashes_of(manifest), jobs)


def _jobs_of(manifest: ManifestFile | CachedJob) -> tuple | None:
    """What admission reads of each Job of a file of plain valid Jobs, for a restart to admit them
    without validating (see ``_from_facts``); None for any other file (it is validated again)."""
    documents = manifest.documents
    plain = [d for d in documents if isinstance(d, AdmittedJob) and d.owner is None]
    if not documents or len(plain) != len(documents):
        return None
    return tuple((d.doc_index, d.name, d.spec_hash, d.run_hash, *d.facts) for d in plain)


def _hashes_of(manifest: ManifestFile | CachedJob) -> dict[str, list[str]]:
    """Spec hashes of a file's plain Job documents, by document index, for the parse cache."""
    return {
        str(d.doc_index): [d.spec_hash, d.run_hash]
        for d in manifest.documents
        if isinstance(d, AdmittedJob) and d.owner is None
    }


# The types of a cache entry's facts of one job (``_jobs_of``) that a start takes as they are: one
# C-level look (``_facts_typed``), not eleven checks, per job of a start
_FACT_TYPES = frozenset((int, str, str, str, int, int, dict, ttl, bool, bool, bool) for ttl in (type(None), int, float))


def _facts_typed(facts: object) -> bool:
    """A cache entry's facts of one job have the types a start takes as they are (else: parse)."""
    return type(facts) is tuple and tuple(map(type, facts)) in _FACT_TYPES
