"""Status files replaced without creating or deleting an inode: replaced files are kept as hidden
spares and, once out of sight for a while, rewritten in place to become the next new version.

Why: on ext4 without a journal the inode allocator skips every inode freed in the last seconds,
reading its inode table block each time, so each temp-file-and-rename (one inode created, one
freed) makes every later creation in that block group slower: 15-20 us in a quiet folder, 0.6-1 ms
of kernel CPU where files churn (docs/performance.md). Rewriting an inode that exists costs ~10 us.

How a replace goes: the new text is written into a *ready* spare (or, when none is ready, a new
temp file, as ``fsutil.atomic_write`` does), fsync'd when it matters, then the file being replaced
is hard-linked to a new spare name (``.spare.TOKEN.N``: hidden, no ``.yaml``, never read) and the
staged file renamed over it. Readers see the old file or the new one, never half of one (SPEC):

- a spare is rewritten only once nobody can still be reading it as a status file: it left sight at
  least ``QUIET`` seconds before, and a reader opens, reads a few KiB and closes;
- a spare counts only after the folder fsync that made its rename durable (``synced``): else a
  machine crash could bring back the old name on an inode since rewritten;
- a spare is rewritten only while no status name links to it (``st_nlink == 1``): gflowd killed
  between the link and the rename leaves both names on one inode; such a spare name is dropped;
- spares left by an earlier gflowd are adopted at start (``adopt``) as if hidden just now.

Removed status files become spares too (a rename, not an unlink). At most ``MAX_SPARES`` are kept;
beyond that a replaced file is unlinked, as before.
"""

from __future__ import annotations

import collections
import os
import stat
import time
from pathlib import Path
from typing import Callable, Iterable

from controller.util.fsutil import temp_beside

PREFIX = ".spare."
QUIET = 5.0  # seconds a spare stays out of sight before it is rewritten
MAX_SPARES = 4096  # ~4 KiB of disk each at most; a 300 jobs/s drain hides ~1,500 within QUIET


class Spares:
    """The spares of one folder, and the replaces and removals that use them."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.clock = clock
        self._ready: collections.deque[tuple[float, str]] = collections.deque()  # (hidden since, path), oldest first
        self._fresh: list[str] = []  # hidden in this pass: ready after the folder fsync (``synced``)
        self._token = os.urandom(4).hex()
        self._count = 0
        self.created = 0  # inodes created because no spare was ready (figures and tests)
        self.reused = 0

    def __len__(self) -> int:
        return len(self._ready) + len(self._fresh)

    def adopt(self, names: Iterable[str]) -> None:
        """Spares an earlier gflowd left (names in the folder starting with ``PREFIX``): kept, as if
        hidden just now; one that a status name still links to (killed between link and rename) or
        that is not a plain file loses its spare name."""
        now = self.clock()
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                st = os.lstat(path)
                if st.st_nlink != 1 or not stat.S_ISREG(st.st_mode) or len(self) >= MAX_SPARES:
                    os.unlink(path)
                    continue
            except OSError:
                continue
            self._ready.append((now, path))

    def replace(self, path: Path, payload: bytes, durable: bool, mode: int = 0o644, new: bool = False) -> None:
        """``path`` replaced by ``payload`` atomically (fsync'd when ``durable``; the folder fsync is
        the caller's, then ``synced``). ``new``: the caller wrote no ``path`` before, so none is
        looked for to keep (should one exist, the rename frees it, as a plain replace does).
        Raises OSError naming ``path`` when the disk refuses."""
        fd, staged, spare = self._staging(path)
        try:
            try:
                view, at = memoryview(payload), 0
                while at < len(view):
                    at += os.pwrite(fd, view[at:], at)
                os.ftruncate(fd, len(payload))  # a spare may have held a longer text
                if durable:
                    os.fsync(fd)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        except OSError as exc:
            self._unstage(staged, spare)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        keep = None if new else self._hide(str(path))
        try:
            os.replace(staged, path)
        except BaseException:
            if keep is not None:
                self._fresh.remove(keep)
                _unlink(keep)  # path is still the old file, under its own name
            self._unstage(staged, spare)
            raise

    def retire(self, path: Path) -> None:
        """``path`` removed: renamed to a spare (or unlinked when there are enough)."""
        if len(self) >= MAX_SPARES:
            _unlink(str(path))
            return
        keep = self._name()
        try:
            os.rename(path, keep)
        except FileNotFoundError:
            return
        self._fresh.append(keep)

    def synced(self) -> None:
        """The folder was fsync'd: this pass's spares are out of sight for good, and start aging."""
        if self._fresh:
            now = self.clock()
            self._ready.extend((now, keep) for keep in self._fresh)
            self._fresh.clear()

    def _staging(self, path: Path) -> tuple[int, str, bool]:
        """An open file to write the new text into: a ready spare, else a new temp file."""
        now = self.clock()
        while self._ready and now - self._ready[0][0] >= QUIET:
            _, spare = self._ready.popleft()
            try:
                fd = os.open(spare, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # removed by hand: forget it
            st = os.fstat(fd)
            if st.st_nlink == 1 and stat.S_ISREG(st.st_mode):
                self.reused += 1
                return fd, spare, True
            os.close(fd)
            _unlink(spare)  # linked under another name too: never written through
        fd, tmp = temp_beside(path)
        self.created += 1
        return fd, tmp, False

    def _unstage(self, staged: str, spare: bool) -> None:
        if spare:
            self._ready.appendleft((self.clock() - QUIET, staged))  # still hidden, still ready
        else:
            _unlink(staged)

    def _hide(self, path: str) -> str | None:
        """A spare name linked to the file at ``path`` (about to be replaced); None when there is
        no such file or enough spares are kept (the replaced file is then freed, as before)."""
        if len(self) >= MAX_SPARES:
            return None
        keep = self._name()
        try:
            os.link(path, keep, follow_symlinks=False)
        except OSError:  # no file yet (a new job), or a file system without hard links
            return None
        self._fresh.append(keep)
        return keep

    def _name(self) -> str:
        self._count += 1
        return os.path.join(self.directory, f"{PREFIX}{self._token}.{self._count}")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
