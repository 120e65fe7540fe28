"""The records journal, ``run/records.journal``: finished jobs' records in one file, so a restart
and ``gflowctl get jobs -o json`` read one file instead of a file per job.

After a header line, the file is a run of frames, each a 4-byte length and a ``marshal`` blob: a
list of entries ``(NAME, INO, MTIME_NS, SIZE, ROW)``, ROW being ``JobState.to_row()``, the record as
its status file holds it (format 2: its conditions and usage as flat tuples, which a restart keeps as
they are, ``model.records.FrozenConditions``), and INO/MTIME_NS/SIZE that file's identity when the
entry was written.
gflowd appends one frame per pass, in one ``O_APPEND`` write. The status file stays the truth: an
entry counts only while its file still has that identity (one ``stat``), so an entry left behind
by a later change (gflowd died in between), an edit or a removal is ignored; a later entry of the
same name replaces an earlier one. A frame cut short (killed mid-write, disk full) is ignored, and
the writer then rewrites the file rather than append after it. No fsync: a cache, rebuilt from the
status files.

Why ``marshal``, not JSON: 50,000 records decode ~2.5x faster (measured: 0.36 against 0.92 s), and
it keeps strings interned, so records read back share "Succeeded", "manifest is valid" and the
condition keys without a pass to share them. It is Python's own format for trusted data (the run
folder is gflowd's, as ``run/index.json`` is; marshal builds data, never runs code) and changes
between Python versions: the header names both, and a journal of another version is not read.

Imports stay light (``gflowctl`` reads it through ``controller.client.read.state``). The writer is
``controller/record/recorder.py``; this module is in ``util`` because the read model uses it too.
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

FORMAT = f"gflow-records 2 python{sys.version_info[0]}.{sys.version_info[1]} marshal{marshal.version}"


def header(fields: Iterable[str]) -> bytes:
    return f"{FORMAT} {','.join(fields)}\n".encode()


def key_of(source: os.stat_result) -> tuple[int, int, int]:
    """What an entry remembers of its status file: a rewrite changes at least one of them."""
    return source.st_ino, source.st_mtime_ns, source.st_size


def frame(entries: list[tuple[str, int, int, int, Any]]) -> bytes:
    """One frame: ``entries`` as (name, ino, mtime_ns, size, row); the name best the row's own
    string (marshal then stores it once, and a restart keeps one copy)."""
    blob = marshal.dumps(entries)
    return len(blob).to_bytes(4, "little") + blob


def entry_key(entry: tuple) -> tuple[int, int, int]:
    """The status file key (``key_of``) an entry was written with."""
    return entry[1:4]


class Entries:
    """A journal as read: ``last`` maps name -> its last entry, the tuple as written (``entry_key``
    and ``entry[4]``, the row: no new objects per job, which a restart would free again);
    ``count`` counts every entry read (dead ones too); ``torn``: some frame was cut short or did
    not decode; ``current``: the header names this format and these fields."""

    def __init__(self) -> None:
        self.last: dict[str, tuple] = {}
        self.count = 0
        self.torn = False
        self.current = False


def read(path: str, fields: Iterable[str]) -> Entries:
    """The journal at ``path``; empty when it is missing, unreadable or of another format."""
    entries = Entries()
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return entries
    expected = header(fields)
    if not data.startswith(expected):
        entries.torn = bool(data)
        return entries
    entries.current = True
    last = entries.last
    view = memoryview(data)
    at, end = len(expected), len(data)
    while at < end:
        size = int.from_bytes(data[at : at + 4], "little")
        if at + 4 + size > end:
            entries.torn = True  # the last frame was cut short
            break
        counted = 0  # a local, not an attribute per entry: 50,000 of them at a start
        try:
            decoded = marshal.loads(view[at + 4 : at + 4 + size])  # a view: no copy of the frame
            for entry in decoded:
                if type(entry) is not tuple or len(entry) != 5:
                    raise ValueError("not a journal entry")
                last[entry[0]] = entry
                counted += 1
        except (ValueError, TypeError, EOFError):
            entries.torn = True
        entries.count += counted
        at += 4 + size
    return entries


def append(path: str, payload: bytes) -> None:
    """``payload`` (frames) in one ``O_APPEND`` write; FileNotFoundError when there is no journal."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
