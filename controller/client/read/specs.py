"""The manifest documents behind jobs, for ``gflowctl get -o yaml|json``: kubectl's object, spec and
status together, so that ``get job NAME -o yaml | gflowctl apply -f -`` round-trips.

gflowd's shared files carry no manifest text (docs/multi-user.md), so the caller reads each manifest
itself: a user sees the specs of the manifests they may read, as ``cat`` would show them. Parsing is
~0.3 ms a document (ruamel), too slow for 2,000 jobs on every ``get``, so the parses are kept in the
caller's own cache (``$GFLOW_CACHE_DIR``, ``$XDG_CACHE_HOME/gflow`` or ``~/.cache/gflow``; 0600), each file's keyed by its
(inode, mtime, ctime, size): a warm ``get jobs -o json`` stats each manifest and loads one marshal file,
and imports no YAML library.
"""

from __future__ import annotations

import hashlib
import marshal
import os

from controller.paths import Home

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

CACHE_FORMAT = 3  # bump when what a cache entry holds changes
JSON_PARTS = ("spec", "labels", "annotations")  # kept as json.dumps(indent=2) text too: see json_parts
CACHE_MAX_BYTES = 64 * 1024 * 1024  # a bigger file is not ours to load: start afresh
CACHE_KEEP_BYTES = 32 * 1024 * 1024  # a rewrite keeps at most this much (else only what the listing used)
CACHE_UNUSED_S = 30 * 86400  # a cache file no gflowctl read or wrote for this long (its home gone): removed
CACHE_PREFIXES = ("manifests-", "objects-")


def manifest_path(roots: tuple[str, ...], manifest: str | None) -> str | None:
    """A job's ``manifest`` (as its status records it: ``jobs/a.yaml``) as a path that exists, under
    the first of ``roots`` (the home, the spec dir's parent) that has it. Plain strings, not
    pathlib: 2,000 joins cost ~30 ms with it."""
    found = _manifest_stat(roots, manifest)
    return found[0] if found is not None else None


def _manifest_stat(roots: tuple[str, ...], manifest: str | None) -> tuple[str, os.stat_result] | None:
    """``manifest_path`` and the file's ``stat``, from one ``stat`` call (2,000 a listing)."""
    if not manifest:
        return None
    candidates = (manifest,) if manifest.startswith("/") else [f"{root}/{manifest}" for root in roots]
    for candidate in candidates:
        try:
            return candidate, os.stat(candidate)
        except OSError:
            continue
    return None


def manifest_key(roots: tuple[str, ...], manifest: str | None) -> tuple[str, tuple[int, int, int, int]] | None:
    """Which file a job's ``manifest`` is now (``manifest_path``) and its (inode, mtime, ctime, size)."""
    found = _manifest_stat(roots, manifest)
    return None if found is None else (found[0], _stat_key(found[1]))


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    # ctime too: a chmod that takes the caller's read access away changes it, not the mtime
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def manifest_documents(
    home: Home, wanted: dict[str, str | None], located: dict[str, Any] | None = None
) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """name -> (the document of its manifest that defines it, plain data with timestamps as text;
    its ``json_parts``), for each ``wanted`` name (-> its ``manifest``) whose file the caller can
    read and still defines it. ``located``, when given, gets name -> ``manifest_key`` of the file
    as it was read (for caches of what was made from it: client/read/object_texts.py)."""
    roots = (str(home.root), str(home.spec_dir.parent))
    cache_file = _cache_file(home)
    cache = _load_cache(cache_file) if cache_file else {}
    changed = False
    parsed: dict[str, dict[str, tuple[dict[str, Any], dict[str, str]]]] = {}  # path -> its documents by name
    found: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
    stats: dict[str | None, tuple[str, os.stat_result] | None] = {}  # manifest -> its path and stat, once
    for name, manifest in wanted.items():
        found_file = (
            stats[manifest] if manifest in stats else stats.setdefault(manifest, _manifest_stat(roots, manifest))
        )
        if located is not None:
            located[name] = None if found_file is None else (found_file[0], _stat_key(found_file[1]))
        if found_file is None:
            continue
        path, st = found_file
        if path not in parsed:
            key = _stat_key(st)
            entry = cache.get(path)
            if entry is not None and entry[0] == key:
                parsed[path] = entry[1]
            else:
                parsed[path] = _documents_of(path)
                cache[path] = (key, parsed[path])
                changed = True
        entry_of_name = parsed[path].get(name)
        if entry_of_name is not None:
            found[name] = entry_of_name
    if changed and cache_file:
        # a long listing keeps what it read (manifests deleted since drop out); a few names add theirs
        used = {path: cache[path] for path in parsed}
        if len(wanted) <= 8:  # a few names: the others' entries too, but for files that are gone
            there = _existing(cache)
            used = {path: entry for path, entry in cache.items() if path in parsed or path in there}
        _save_cache(cache_file, used, fewer={path: cache[path] for path in parsed})
    return found


def _existing(paths: Iterable[str]) -> set[str]:
    """Which of ``paths`` exist, from one listing of each folder (a home's manifests share a few):
    2,000 ``stat`` calls cost ~10 ms. A folder that cannot be listed counts as empty (a cache miss)."""
    by_folder: dict[str, list[str]] = {}
    for path in paths:
        by_folder.setdefault(os.path.dirname(path), []).append(path)
    there: set[str] = set()
    for folder, group in by_folder.items():
        try:
            names = set(os.listdir(folder))
        except OSError:
            continue
        there.update(path for path in group if os.path.basename(path) in names)
    return there


def _documents_of(path: str) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """The documents of one manifest file by the name they define ({} when it cannot be read or parsed)."""
    from controller.util.yamlio import YAMLSyntaxError, load_all  # lazy: only where a manifest changed

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1024 * 1024 + 1)
        docs = [d for d in load_all(text) if isinstance(d, dict)]
    except (OSError, UnicodeDecodeError, YAMLSyntaxError):
        return {}
    stem = os.path.basename(path).rsplit(".", 1)[0]
    by_name: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
    for doc in docs:
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name = meta.get("name") if isinstance(meta.get("name"), str) else (stem if len(docs) == 1 else None)
        if name:
            plain = plain_data(doc)
            by_name[name] = (plain, json_parts(plain))
    return by_name


def json_parts(doc: dict[str, Any]) -> dict[str, str]:
    """``json.dumps(value, indent=2)`` of the document's spec, labels and annotations, made once per
    version of the file: json's indenting encoder is pure Python, and ``get -o json`` of 2,000 jobs
    would spend ~0.1 s a thousand making them again."""
    import json  # lazy: only where a manifest changed (a warm cache needs none)

    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    parts = {"spec": doc["spec"]} if "spec" in doc else {}
    parts.update((key, meta[key]) for key in ("labels", "annotations") if meta.get(key))
    return {key: json.dumps(value, indent=2) for key, value in parts.items()}


def plain_data(value: Any) -> Any:
    """JSON's and marshal's types only: a timestamp YAML loaded as a date becomes its ISO text."""
    if isinstance(value, dict):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _cache_file(home: Home, prefix: str = "manifests") -> str | None:
    """``$GFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gflow``, else ``~/.cache/gflow``: one file per home (and ``prefix``)."""
    folder = os.environ.get("GFLOW_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gflow"
    )
    if not os.path.isabs(folder):
        return None
    digest = hashlib.sha1(str(home.root).encode()).hexdigest()[:16]
    return os.path.join(folder, f"{prefix}-{digest}.marshal")


def _load_cache(path: str, form: int = CACHE_FORMAT) -> dict[str, Any]:
    """Only a cache that is ours: a file this uid owns that no one else may write (marshal trusts
    its input), of this format."""
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size > CACHE_MAX_BYTES:
                return {}
            data = marshal.loads(handle.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(data, tuple) or len(data) != 2 or data[0] != form or not isinstance(data[1], dict):
        return {}
    return data[1]


def _save_cache(
    path: str, entries: dict[str, Any], form: int = CACHE_FORMAT, fewer: dict[str, Any] | None = None
) -> None:
    """Written whole, atomically; a cache: no fsync, and no error reaches the user (a home without
    a writable cache folder just parses every time). Bounded: over ``CACHE_KEEP_BYTES`` only
    ``fewer`` (what this listing used) is kept, else nothing. Cache files left unused for
    ``CACHE_UNUSED_S`` beside it (homes that are gone) are removed then."""
    folder = os.path.dirname(path)
    try:
        data = marshal.dumps((form, entries))
        if len(data) > CACHE_KEEP_BYTES:
            data = marshal.dumps((form, fewer if fewer is not None and fewer is not entries else {}))
            if len(data) > CACHE_KEEP_BYTES:
                data = marshal.dumps((form, {}))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except (OSError, ValueError):
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
        return
    _remove_unused(folder)


def _remove_unused(folder: str) -> None:
    """The caller's cache files in ``folder`` (and temp files of writers that died) neither read nor
    written for ``CACHE_UNUSED_S``: a home that is gone leaves its files, named by a digest of its
    path, to no one else. One listing of a folder of a few files, on a rewrite only."""
    import time  # lazy: only a rewrite

    too_old = time.time() - CACHE_UNUSED_S
    try:
        names = [n for n in os.listdir(folder) if n.startswith(CACHE_PREFIXES)]
    except OSError:
        return
    for name in names:
        try:
            st = os.lstat(os.path.join(folder, name))
            if st.st_uid == os.geteuid() and max(st.st_atime, st.st_mtime) < too_old:
                os.unlink(os.path.join(folder, name))
        except OSError:
            continue
