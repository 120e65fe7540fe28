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

Spares never hold space the disk needs: together they take at most 1/``FREE_SHARE`` of the free
space (checked every ``ROOM_CHECK`` seconds), and none are kept while less than ``FREE_FLOOR`` is
free; a write the disk refuses (ENOSPC, EDQUOT) gives every spare back first (``release``), so
the retry finds the room they held. (Unbounded, 4,096 of them filled a 6 MiB home, and took back
each block an admin freed: issue 32.)

A pass's replaces go through a ``Batch``: each text is staged as it comes, and the durable ones are
fsync'd on threads, each as soon as it is staged (from a batch's second on), and all before any of
them is renamed into place. One after another, fsyncs were most of a busy pass's time (~5 ms each
while hundreds of jobs start and end), and the loop waits for them; the device takes them at once
for little more than the cost of one, and the pass writes the rest meanwhile.
"""

from __future__ import annotations

import collections
import errno
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from controller.util.fsutil import free_bytes, temp_beside

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

PREFIX = ".spare."
QUIET = 5.0  # seconds a spare stays out of sight before it is rewritten
MAX_SPARES = 4096  # ~4 KiB of disk each at most; a 300 jobs/s drain hides ~1,500 within QUIET
FREE_SHARE = 32  # spares take at most this fraction (1/32) of the free space
FREE_FLOOR = 64 << 20  # none are kept while less than this is free: a small disk needs every block
ROOM_CHECK = 0.5  # seconds between looks at the free space (a statvfs)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
BATCH_FILES = 64  # staged files a batch keeps open before it puts them in place (file descriptors)
SYNC_THREADS = 16  # fsyncs in flight at once


class Spares:
    """The spares of one folder, and the replaces and removals that use them."""

    def __init__(
        self,
        directory: Path,
        clock: Callable[[], float] = time.monotonic,
        usable: Callable[[int], bool] | None = None,
        quiet: float = QUIET,
        free: Callable[[], int] | None = None,
    ) -> None:
        self.directory = directory
        self.clock = clock
        self.free = free or (lambda: free_bytes(directory))  # bytes free for us on the folder's disk
        self.bytes = 0  # what the spares hold on disk (st_blocks)
        self._room = 0  # bytes the spares may hold, as of the last look at the free space
        self._room_at = -1e18  # clock time of that look
        self.quiet = quiet  # seconds out of sight before a spare is rewritten (QUIET: readers we do not know)
        self.usable = usable  # a further test of a ready spare (its open descriptor); a spare failing it is unlinked
        self._ready: collections.deque[tuple[float, str, int]] = (
            collections.deque()
        )  # (hidden since, path, bytes), oldest first
        self._fresh: list[
            tuple[str, int]
        ] = []  # (path, bytes) hidden in this pass: ready after the folder fsync (``synced``)
        self._token = os.urandom(4).hex()
        self._count = 0
        self.created = 0  # inodes created because no spare was ready (figures and tests)
        self.reused = 0
        self._syncer: ThreadPoolExecutor | None = None  # made at the first batch with two durable files

    def __len__(self) -> int:
        return len(self._ready) + len(self._fresh)

    @property
    def fresh(self) -> int:
        """Spares hidden since the last ``synced``."""
        return len(self._fresh)

    def adopt(self, names: Iterable[str]) -> None:
        """Spares an earlier gflowd left (names in the folder starting with ``PREFIX``): kept, as if
        hidden just now; one that a status name still links to (killed between link and rename) or
        that is not a plain file loses its spare name."""
        now = self.clock()
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                st = os.lstat(path)
                size = st.st_blocks * 512
                if st.st_nlink != 1 or not stat.S_ISREG(st.st_mode) or not self._may_keep(size):
                    os.unlink(path)
                    continue
            except OSError:
                continue
            self._ready.append((now, path, size))
            self.bytes += size

    def release(self) -> int:
        """Every spare unlinked (the disk is full: their blocks are needed). Returns how many."""
        names = [path for _, path, _ in self._ready] + [path for path, _ in self._fresh]
        self._ready.clear()
        self._fresh.clear()
        self.bytes = 0
        self._room_at = -1e18  # look again before keeping any
        for path in names:
            _unlink(path)
        return len(names)

    def _may_keep(self, size: int) -> bool:
        """Whether one more spare of ``size`` bytes fits the bound (see the module docstring)."""
        if len(self) >= MAX_SPARES:
            return False
        now = self.clock()
        if now - self._room_at >= ROOM_CHECK:
            self._room_at = now
            try:
                free = self.free()
            except OSError:
                free = 0
            self._room = 0 if free < FREE_FLOOR else (free + self.bytes) // FREE_SHARE
        return self.bytes + size <= self._room

    def _refused(self, exc: OSError) -> None:
        """A write failed: when the disk is full, the spares' blocks go back first."""
        if exc.errno in DISK_FULL and len(self):
            self.release()

    def replace(self, path: Path, payload: bytes, durable: bool, mode: int = 0o644, new: bool = False) -> None:
        """``path`` replaced by ``payload`` atomically (fsync'd when ``durable``; the folder fsync is
        the caller's, then ``synced``). ``new``: the caller wrote no ``path`` before, so none is
        looked for to keep (should one exist, the rename frees it, as a plain replace does).
        Raises OSError naming ``path`` when the disk refuses."""
        with self.batch() as batch:
            batch.add(path, payload, durable, mode, new)

    def create(self, path: Path, payload: bytes, mode: int = 0o644, pad: bool = False) -> None:
        """A new file at ``path`` holding ``payload``, as ``O_EXCL`` makes one (FileExistsError when
        ``path`` exists): a ready spare, rewritten and given the name (a hard link, then its spare
        name goes), else a new file. Not fsync'd. ``pad``: a spare longer than ``payload`` is
        zeroed to its end instead of cut (for a format that carries its own length: freeing blocks
        costs a discard on some disks). Raises OSError naming ``path`` when the disk refuses;
        nothing is left at ``path`` then."""
        taken = self._take_spare()
        spare = taken is not None
        if taken is not None:
            fd, staged = taken
            if pad:
                payload += bytes(max(0, os.fstat(fd).st_size - len(payload)))
        else:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
            except OSError as exc:
                self._refused(exc)  # no inode left (tmpfs, ext4 inode tables)
                raise
            self.created += 1
            staged = ""
        try:
            try:
                _write_over(fd, payload, mode if spare else None, cut=spare and not pad)
            finally:
                os.close(fd)
            if spare:
                os.link(staged, path, follow_symlinks=False)
        except OSError as exc:
            if spare:
                self._unstage(staged, spare)
            else:
                _unlink(str(path))
            if isinstance(exc, FileExistsError):
                raise
            self._refused(exc)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        if spare:
            _unlink(staged)  # the inode keeps its new name only

    def batch(self) -> Batch:
        """Replaces staged now and put in place together (``Batch``); use as a context manager."""
        return Batch(self)

    def retire(self, path: Path) -> None:
        """``path`` removed: renamed to a spare (or unlinked when there are enough)."""
        try:
            size = os.lstat(path).st_blocks * 512
        except FileNotFoundError:
            return
        if not self._may_keep(size):
            _unlink(str(path))
            return
        keep = self._name()
        try:
            os.rename(path, keep)
        except FileNotFoundError:
            return
        self._fresh.append((keep, size))
        self.bytes += size

    def synced(self) -> None:
        """The folder was fsync'd: this pass's spares are out of sight for good, and start aging."""
        if self._fresh:
            now = self.clock()
            self._ready.extend((now, keep, size) for keep, size in self._fresh)
            self._fresh.clear()

    def _staging(self, path: Path) -> tuple[int, str, bool]:
        """An open file to write the new text into: a ready spare, else a new temp file."""
        taken = self._take_spare()
        if taken is not None:
            return taken[0], taken[1], True
        try:
            fd, tmp = temp_beside(path)
        except OSError as exc:
            self._refused(exc)
            raise
        self.created += 1
        return fd, tmp, False

    def _take_spare(self) -> tuple[int, str] | None:
        """A ready spare, open read-write, and its name; None when none is ready."""
        now = self.clock()
        while self._ready and now - self._ready[0][0] >= self.quiet:
            _, spare, size = self._ready.popleft()
            self.bytes -= size  # a live file's blocks from now on (or freed)
            try:
                fd = os.open(spare, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # removed by hand: forget it
            st = os.fstat(fd)
            if st.st_nlink == 1 and stat.S_ISREG(st.st_mode) and (self.usable is None or self.usable(fd)):
                self.reused += 1
                return fd, spare
            os.close(fd)
            _unlink(spare)  # linked under another name too (or unusable): never written through
        return None

    def _threads(self) -> ThreadPoolExecutor:
        """The fsync threads, made when a batch first has two durable files."""
        if self._syncer is None:
            from concurrent.futures import ThreadPoolExecutor  # lazy: only a pass with two durable files needs it

            self._syncer = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="fsync")
        return self._syncer

    def _unstage(self, staged: str, spare: bool) -> None:
        if spare:
            try:
                size = os.lstat(staged).st_blocks * 512
            except OSError:
                return
            self._ready.appendleft((self.clock() - self.quiet, staged, size))  # still hidden, still ready
            self.bytes += size
        else:
            _unlink(staged)

    def _hide(self, path: str) -> str | None:
        """A spare name linked to the file at ``path`` (about to be replaced); None when there is
        no such file or enough spares are kept (the replaced file is then freed, as before)."""
        try:
            size = os.lstat(path).st_blocks * 512
        except OSError:  # no file yet (a new job)
            return None
        if not self._may_keep(size):
            return None
        keep = self._name()
        try:
            os.link(path, keep, follow_symlinks=False)
        except OSError:  # gone meanwhile, or a file system without hard links
            return None
        self._fresh.append((keep, size))
        self.bytes += size
        return keep

    def _name(self) -> str:
        self._count += 1
        return os.path.join(self.directory, f"{PREFIX}{self._token}.{self._count}")


class _Staged:
    __slots__ = ("durable", "fd", "new", "path", "spare", "staged", "syncing", "then")

    def __init__(
        self, path: Path, fd: int, staged: str, spare: bool, durable: bool, new: bool, then: Callable[[], None] | None
    ) -> None:
        self.path, self.fd, self.staged, self.spare = path, fd, staged, spare
        self.durable, self.new, self.then = durable, new, then
        self.syncing: Future | None = None  # its fsync, under way on the batch's threads


class Batch:
    """Replaces of one folder, staged as they are added and put in place by ``commit`` (at the
    latest every ``BATCH_FILES``, and when the ``with`` block ends): the durable ones fsync'd at
    once, then each renamed over its file, in order, and its ``then`` called. Readers see every
    file old or new, never half of one, as with ``Spares.replace``. If the disk refuses, the
    files not yet in place are dropped and OSError names the file that failed; those already in
    place stay (their ``then`` was called)."""

    def __init__(self, spares: Spares) -> None:
        self.spares = spares
        self._staged: list[_Staged] = []

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.commit()
        else:
            self._drop()

    def add(
        self,
        path: Path,
        payload: bytes,
        durable: bool,
        mode: int = 0o644,
        new: bool = False,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Stage ``payload`` as the next text of ``path`` (see ``Spares.replace``); ``then`` runs
        once it is in place."""
        try:
            fd, staged, spare = self.spares._staging(path)
        except OSError:
            self._drop()
            raise
        try:
            _write_over(fd, payload, mode, cut=True)  # a spare may have held a longer text
        except OSError as exc:
            os.close(fd)
            self.spares._unstage(staged, spare)
            self._drop()
            self.spares._refused(exc)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        item = _Staged(path, fd, staged, spare, durable, new, then)
        self._staged.append(item)
        if durable:
            self._sync_early(item)
        if len(self._staged) >= BATCH_FILES:
            self.commit()

    def _sync_early(self, item: _Staged) -> None:
        """From the second durable file on, fsyncs start on the threads as files are staged: the
        disk works while the pass writes the rest, and ``commit`` waits for what is left. A batch
        with one durable file fsyncs it at ``commit``, on this thread."""
        waiting = [other for other in self._staged if other.durable and other.syncing is None]
        if len(waiting) < 2 and self.spares._syncer is None:
            return
        syncer = self.spares._threads()
        for other in waiting:
            other.syncing = syncer.submit(os.fsync, other.fd)  # the GIL is released in each fsync

    def commit(self) -> None:
        staged, self._staged = self._staged, []
        if not staged:
            return
        done = 0
        refused: OSError | None = None
        try:
            for item in staged:
                if not item.durable:
                    continue
                try:
                    if item.syncing is not None:
                        item.syncing.result()
                    else:
                        os.fsync(item.fd)
                except OSError as exc:
                    refused = exc
                    raise OSError(exc.errno, exc.strerror, str(item.path)) from exc
            for item in staged:
                os.close(item.fd)
                item.fd = -1
                self._put_in_place(item)
                done += 1
                if item.then is not None:
                    item.then()
        finally:
            _settle(staged)  # no fd is closed while a thread may still fsync it
            for item in staged[done:]:
                if item.fd >= 0:
                    os.close(item.fd)
                self.spares._unstage(item.staged, item.spare)
            if refused is not None:  # once the staged spares are back: they go too
                self.spares._refused(refused)

    def _put_in_place(self, item: _Staged) -> None:
        spares = self.spares
        keep = None if item.new else spares._hide(str(item.path))
        try:
            os.replace(item.staged, item.path)
        except BaseException:
            if keep is not None:
                entry = next(entry for entry in spares._fresh if entry[0] == keep)
                spares._fresh.remove(entry)
                spares.bytes -= entry[1]
                _unlink(keep)  # path is still the old file, under its own name
            raise

    def _drop(self) -> None:
        staged, self._staged = self._staged, []
        _settle(staged)
        for item in staged:
            os.close(item.fd)
            self.spares._unstage(item.staged, item.spare)


def _settle(staged: list[_Staged]) -> None:
    """Wait for every fsync under way on these files, failed or not."""
    for item in staged:
        if item.syncing is not None:
            try:
                item.syncing.result()
            except OSError:
                pass


def _write_over(fd: int, payload: bytes, mode: int | None, cut: bool) -> None:
    """``payload`` from the start of the open file ``fd``; ``cut``: the file ends after it; ``mode``
    (when given) set, as a rewritten spare keeps the mode it had."""
    view, at = memoryview(payload), 0
    while at < len(view):
        at += os.pwrite(fd, view[at:], at)
    if cut:
        os.ftruncate(fd, len(payload))
    if mode is not None:
        os.fchmod(fd, mode)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
