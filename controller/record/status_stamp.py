"""``run/status-stamp.json``: what a start found of the status folder, so that the next start, finding
the folder and the records journal as they were then, need not ``stat`` each status file again.

A start checks each records-journal entry against its status file with one ``stat`` (an entry counts
only while the file has the key it was written with: ``records_journal``): 50,000 of them, ~0.15 s
of CPU. Status files are written by gflowd alone and always by rename (``Recorder``, ``util/spares``:
a spare rewritten in place is no status file, and one a status name still links to is never
rewritten); creating, removing or renaming an entry sets the folder's mtime and ctime. So while the
folder's ``(dev, inode, mtime_ns, ctime_ns)`` is what a start saw before it stat'ed every file, each
file is the one that start stat'ed, and the entries that matched then match now, as long as the
journal too is the file that start left (its ``(inode, mtime_ns, size)``: gflowd appends or
rewrites it, never leaves it the same).

What it assumes: nobody writes a status file in place (they are gflowd's, 0644 under a root
gflowd; an admin editing one with an editor that writes in place would go unseen until the next
start that stats every file, i.e. the first after any status write). And git's "racy clean" rule:
a folder changed within the filesystem's coarse clock tick of the start's look may keep the same
mtime through a later change; so a stamp is written only when the folder's mtime is older than the
moment the start began looking by more than ``RACY_NS`` (1 s: far above any Linux filesystem's tick;
``ctime``, which nobody can set, is part of the key too).

A cache: missing, torn or not matching, every status file is stat'ed, as before; written without
fsync, atomically, only by a start that stat'ed every file and found the folder unchanged meanwhile.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from controller.util.fsutil import atomic_write

FORMAT = 1
RACY_NS = 1_000_000_000  # a folder changed this close before a start's look is not stamped (see above)


def folder_key(path: str) -> list[int] | None:
    """What changes whenever an entry of the folder at ``path`` is made, removed or renamed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def file_key(path: str) -> list[int] | None:
    """The records journal's identity: an append or a rewrite changes it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_mtime_ns, st.st_size]


def unchecked(path: Path, folder: list[int] | None, journal: list[int] | None) -> frozenset[str] | None:
    """The names whose journal entry must still be checked by a ``stat`` (those that did not match
    when the stamp was written), when the stamp at ``path`` says the status folder (``folder``, its
    key now) and the journal (``journal``) are as it found them; None (check every entry) otherwise."""
    if folder is None or journal is None:
        return None
    try:
        with open(path, "rb") as handle:
            stamp = json.loads(handle.read())
        if (
            type(stamp) is dict
            and stamp.get("format") == FORMAT
            and stamp.get("folder") == folder
            and stamp.get("journal") == journal
            and type(stamp.get("at")) is int
            and folder[2] < stamp["at"] - RACY_NS
            and type(stamp.get("unmatched")) is list
        ):
            return frozenset(name for name in stamp["unmatched"] if type(name) is str)
    except (OSError, ValueError):
        pass
    return None


def write(path: Path, folder: list[int], at: int, journal: list[int], unmatched: list[str]) -> None:
    """The stamp of a start that began looking at ``at`` (``time.time_ns()``), found the folder with
    key ``folder`` before and after stat'ing every status file, left the journal as ``journal``, and
    found the entries of ``unmatched`` not matching their files."""
    if not folder[2] < at - RACY_NS:
        return  # racy: a change within the folder's clock tick might keep its mtime
    text = json.dumps({"format": FORMAT, "folder": folder, "at": at, "journal": journal, "unmatched": unmatched})
    try:
        atomic_write(path, text, durable=False)
    except OSError:
        pass  # a cache: the next start stats every file
