"""The texts ``gflowctl get jobs -o json`` printed, kept in the caller's own cache (beside the
manifests' cache of client/read/specs.py: ``objects-<home>.marshal``, 0600), each under what it
was made from: the status file's and the manifest file's (inode, mtime, ctime, size) and the job's user.
A listing of 2,000 finished jobs then takes a ``stat`` of each status file and each manifest and
prints the texts it kept; only the jobs whose files moved are made again (gflowd's JSON copy, the
manifest's parse: controller/cli/get.py). Each key is taken before its file is read, so a file
that changes meanwhile leaves a key that no longer matches: made again the next time."""

from __future__ import annotations

import os

from controller.client.read.specs import _cache_file, _load_cache, _save_cache, manifest_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any

    from controller.paths import Home

FORMAT = 2  # bump when an entry's shape or the text's changes
MAX_TEXT_BYTES = 32 << 20  # a bigger listing is not kept (the cache's loader refuses 64 MiB)


class ObjectTexts:
    """One listing's use of the cache: ``stale`` (the names to make), then ``merged``."""

    def __init__(self, home: Home, users: dict[str, str]) -> None:
        self.path = _cache_file(home, "objects")
        self.cache: dict[str, Any] = _load_cache(self.path, FORMAT) if self.path else {}
        self.roots = (str(home.root), str(home.spec_dir.parent))
        self.folder = str(home.status_dir) + os.sep
        self.users = users
        self.kept: dict[str, str] = {}
        self.status_keys: dict[str, tuple[int, int, int, int]] = {}

    def stale(self, names: list[str]) -> list[str]:
        """The names whose kept text is missing or no longer matches its files (to be made)."""
        rest = []
        for name in names:
            try:
                st = os.stat(self.folder + name + ".yaml") if "/" not in name else None
            except OSError:
                st = None
            if st is None:
                rest.append(name)
                continue
            key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
            entry = self.cache.get(name)
            if (
                entry is not None
                and entry[0] == key
                and entry[1] == self.users.get(name)
                and manifest_key(self.roots, entry[2]) == entry[3]
            ):
                self.kept[name] = entry[4]
            else:
                self.status_keys[name] = key
                rest.append(name)
        return rest

    def merged(
        self,
        names: list[str],
        made: dict[str, str],
        manifests: dict[str, str | None],
        located: dict[str, Any],
        present: Collection[str] | None = None,
    ) -> list[str]:
        """The texts of ``names`` in order: kept or ``made`` (name -> text; ``manifests``: its
        status's manifest, ``located``: that file's ``manifest_key`` when read); keeps the made.
        ``present``: every job there is (a listing's filter shows fewer), whose entries are kept:
        the others' jobs are gone, and a cache holding more entries than there are jobs is
        rewritten without them even when nothing was made."""
        for name, text in made.items():
            key = self.status_keys.get(name)
            if key is not None:
                self.cache[name] = (key, self.users.get(name), manifests.get(name), located.get(name), text)
        both = {**self.kept, **made}
        texts = [both[name] for name in names if name in both]
        gone = present is not None and len(self.cache) > len(present)
        if (made or gone) and self.path and sum(map(len, texts)) <= MAX_TEXT_BYTES:
            listed = {n: self.cache[n] for n in names if n in self.cache}
            keep = {n: entry for n, entry in self.cache.items() if n in present} if present is not None else listed
            _save_cache(self.path, keep, FORMAT, fewer=listed)
        return texts
