"""The spec dir's own inotify thread: reads the kernel's events and drops, before anything else is
done with them, those no manifest can be behind (a ``.txt``, a swap file, an editor's temp file).

watchdog paired every rename's two halves in a queue that held each event half a second and
searched it linearly, and dispatched each event through two more threads: a user creating and
deleting .txt files as fast as one process can kept three threads of gflowd busy, and everyone's
manifest waited behind hers in that queue (alice's submissions: 3-10 s). Here one thread reads
the descriptor in large batches, parses each event's name, and hands on only the paths that may
matter (``watch.may_matter``); a rename is simply two paths, both dirty.

Folders are watched as they appear (their contents are then marked dirty: files made before the
watch was added are seen too); symlinked folders are not followed (the store reads them; the
resync sees changes inside them). When the kernel's queue overflows, the whole spec dir is marked
dirty. Observes only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import threading
from collections.abc import Callable

log = logging.getLogger("gflowd")

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x4000, 0x8000, 0x1000000, 0x2000000, 0x40000000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
# a file's content may still be coming after these (a create before its write, a write before its
# close); after any other event (renamed into place, closed after writing, deleted) it is whole
UNSETTLED = IN_CREATE | IN_MODIFY
# what changes a manifest or a folder of them; never opens or closes-without-write (gflowd's own reads)
MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class SpecWatch(threading.Thread):
    """``on_paths(*paths)`` for each batch of events that may change a manifest; ``.stop()``. With
    ``on_settled``, a batch after which every file it names is whole (each one's last event a
    rename into place, a close after writing, a delete: what apply, run and editors that save by
    rename make) goes there instead, so the loop may pass at once rather than wait for quiet."""

    def __init__(
        self,
        spec_dir: str,
        on_paths: Callable[..., None],
        may_matter: Callable[[str], bool],
        on_settled: Callable[..., None] | None = None,
    ) -> None:
        super().__init__(name="gflowd-inotify", daemon=True)
        self.spec_dir = os.path.abspath(spec_dir)
        self.on_paths = on_paths
        self.on_settled = on_settled
        self.settled = False  # whether the last batch _paths read was settled
        self.may_matter = may_matter
        self.fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._stop_r, self._stop_w = os.pipe()
        self.folders: dict[int, str] = {}  # watch descriptor -> the folder's path
        self.dropped = 0  # events no manifest can be behind, for tests
        self.complete = True  # every folder is watched: False once one could not be, or the spec dir's own watch went
        self._add_tree(self.spec_dir)

    def stop(self) -> None:
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass  # the thread has ended already (and closed it)

    def run(self) -> None:
        try:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            poller.register(self._stop_r, select.POLLIN)
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._stop_r in ready:
                    return
                try:
                    data = os.read(self.fd, 256 * 1024)
                except BlockingIOError:
                    continue
                paths = self._paths(data)
                if paths:
                    (self.on_settled if self.settled and self.on_settled is not None else self.on_paths)(*paths)
        except Exception:  # the resync still sees every change; say why changes are seen late
            log.exception("the spec dir's watch stopped; changes are seen on the resync tick only")
        finally:
            for fd in (self.fd, self._stop_r, self._stop_w):
                os.close(fd)

    def _paths(self, data: bytes) -> list[str]:
        """The paths of one read's events that may matter, in order, each once; ``self.settled``
        says whether each one's last event left it whole (see UNSETTLED; folders never are)."""
        paths: dict[str, None] = {}
        unsettled: set[str] = set()
        folders = self.folders
        offset, end = 0, len(data)
        while offset < end:
            wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
            name = data[offset + 16 : offset + 16 + size].rstrip(b"\0")
            offset += 16 + size
            if mask & IN_Q_OVERFLOW:
                log.warning("inotify queue overflowed: re-reading the whole spec dir")
                paths[self.spec_dir] = None
                unsettled.add(self.spec_dir)
                continue
            folder = folders.get(wd)
            if folder is None:
                continue
            if mask & IN_IGNORED:
                if folders.pop(wd) == self.spec_dir:
                    self.complete = False  # deleted or moved away: a new one is seen by the resync only
                continue
            if not name:
                continue  # the folder itself (deleted, moved): its parent's event names it
            path = folder + os.sep + os.fsdecode(name)
            if mask & IN_ISDIR:
                if mask & (IN_CREATE | IN_MOVED_TO):
                    self._add_tree(path)
                paths[path] = None
                unsettled.add(path)  # its files come next
            elif self.may_matter(path):
                paths[path] = None
                if mask & UNSETTLED:
                    unsettled.add(path)
                else:
                    unsettled.discard(path)
            else:
                self.dropped += 1
        self.settled = not unsettled
        return list(paths)

    def _add_tree(self, top: str) -> None:
        """Watch ``top`` and every real folder under it (not hidden, not through a symlink)."""
        pending = [top]
        while pending:
            folder = pending.pop()
            # the spec dir itself may be a symlink (jobs -> /data/jobs); folders inside are not followed
            mask = MASK & ~IN_DONT_FOLLOW if folder == self.spec_dir else MASK
            wd = _libc.inotify_add_watch(self.fd, os.fsencode(folder), mask)
            if wd < 0:
                err = ctypes.get_errno()
                if err == errno.ENOSPC:
                    self.complete = False
                    log.warning(
                        "cannot watch %s: the inotify watch limit (fs.inotify.max_user_watches) "
                        "is reached; changes there are seen on the resync tick",
                        folder,
                    )
                continue  # gone, or not a folder any more: its parent's event said so
            self.folders[wd] = folder
            try:
                with os.scandir(folder) as entries:
                    pending.extend(  # is_dir first: a spec dir of 50,000 manifests holds few folders
                        e.path for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                    )
            except OSError:
                continue
