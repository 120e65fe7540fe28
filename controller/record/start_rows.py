"""``run/start-rows.cache``: each job's index row and jobs-table row as the last start built them,
so the next start need not build them again.

A start turns every record into its ``run/index.json`` row (``state.summary()`` encoded as JSON) and
its ``run/jobs.table`` row: ~1 s of CPU at 50,000 jobs, though almost every record is the one the
start before read. Both rows are functions of the record alone (and of the uid the table names,
which the first resync checks against admission, as ever). A record read back at a start is a
function of its status file; so an entry keyed by the file's identity (``records_journal.key_of``,
the key the records journal trusts) gives the very rows that record would yield. Entries are only
written for records as read back at a start (never for one a pass just made: those differ from
their read-back in the precision of their times), so a row taken from here is byte for byte the
row the start would have built.

After a header line (format, Python and marshal versions), one frame as in the records journal
(``records_journal.frame``) of ``(NAMES, KEYS, ENDS, TABLE_ROWS, FACTS)``, then the index rows, one
after the other: KEYS the status files' keys packed in one bytes object (``KEY``), ENDS where each
index row ends in the rows that follow the frame (8 bytes each, little-endian), FACTS each finished
record's facts as the start kept it lean (``model/lean_records.py``; None for any other record): a
function of the record too, so a start takes them as they are instead of making them from the
journal's row (~0.5 s of CPU at 50,000 under cProfile); the table row is built around them as ever
(its objects shared as before: ``run/jobs.table``'s marshal bytes are the same). The index rows are not read
into memory at all: gflowd keeps the file open (:class:`Rows`) and reads them back, all at once,
when it writes the index (~20 MiB at 50,000 jobs, which were a bytes object per job in its heap).
A start makes no object per job beyond the rows it keeps (small objects made and freed among the
records pin their memory).
Missing, torn or of another format: ignored (every row built, as before). Written at the first
index write when the rows it built itself outnumber ``SLACK``; no fsync: a cache.
"""

from __future__ import annotations

import marshal
import os
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator
from itertools import pairwise

from controller.model.lean_records import FACT_FIELDS
from controller.util.records_journal import frame

FORMAT = f"gflow-start-rows 3 python{sys.version_info[0]}.{sys.version_info[1]} marshal{marshal.version}\n".encode()
SLACK = 1000  # rows a start may build itself (or entries it may find dead) before the file is written anew
KEY = struct.Struct("<QqQ")  # a status file's key (records_journal.key_of): inode, mtime_ns, size
FACTS_SIZE = len(FACT_FIELDS) + 1  # lean_records.Facts: the fields, then VALID


class Rows:
    """The index rows of an open file: row ``at`` is ``rows[ends[at - 1]:ends[at]]`` of what
    :meth:`read` returns. The descriptor stays open, so the rows are those of the file as read
    even once a later start replaced it (gflowd writes it by rename only)."""

    def __init__(self, fd: int = -1, offset: int = 0, ends: array | None = None) -> None:
        self.fd, self.offset, self.ends = fd, offset, ends if ends is not None else array("Q")

    def read(self) -> memoryview | None:
        """Every row, as one buffer; None when the file no longer holds them (cut short in place)."""
        size = self.ends[-1] if self.ends else 0
        try:
            data = os.pread(self.fd, size, self.offset)
        except (OSError, ValueError):
            return None
        return memoryview(data) if len(data) == size else None

    def row(self, rows: memoryview, at: int) -> memoryview:
        ends = self.ends
        return rows[ends[at - 1] if at else 0 : ends[at]]

    def joined(self, rows: memoryview, ats: Iterable[int]) -> bytes:
        """Rows ``ats`` of ``rows`` (what :meth:`read` returned), in that order, joined by commas:
        the jobs of an index every row of which is the file's (a start's first), one slice a row."""
        ends = self.ends
        starts = array("Q", [0])
        starts.extend(ends[:-1])
        return b",".join([rows[starts[at] : ends[at]] for at in ats])

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Memo:
    """The file as read: ``names[i]``'s rows are index row ``i`` of ``rows`` and ``table_rows[i]``
    while its status file has the key ``key(i)``."""

    def __init__(
        self,
        names: list = [],  # noqa: B006 (never mutated)
        keys: bytes = b"",
        table_rows: list = [],  # noqa: B006
        rows: Rows | None = None,
        facts: list = [],  # noqa: B006
    ) -> None:
        self.names, self.keys, self.table_rows, self.facts = names, keys, table_rows, facts
        self.rows = rows if rows is not None else Rows()

    def key(self, at: int) -> bytes:
        return self.keys[at * KEY.size : (at + 1) * KEY.size]

    def key_tuples(self) -> Iterator[tuple[int, int, int]]:
        """Each name's key in order, as ``records_journal.key_of`` makes it: (inode, mtime_ns, size)."""
        return KEY.iter_unpack(self.keys)


def packed(key: tuple[int, int, int]) -> bytes | None:
    try:
        return KEY.pack(*key)
    except struct.error:
        return None


def read(path: str) -> Memo:
    """The file at ``path`` (its index rows left on disk: ``Memo.rows``, whose descriptor the caller
    closes); empty when it is missing, torn or of another format."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return Memo()
    try:
        memo = _read(fd)
    except (OSError, ValueError, TypeError, EOFError):
        memo = None
    if memo is None:
        os.close(fd)
        return Memo()
    return memo


def _read(fd: int) -> Memo | None:
    size_of_file = os.fstat(fd).st_size
    head = os.pread(fd, len(FORMAT) + 4, 0)
    if not head.startswith(FORMAT) or len(head) != len(FORMAT) + 4:
        return None
    at = len(FORMAT) + 4
    size = int.from_bytes(head[len(FORMAT) :], "little")
    data = os.pread(fd, size, at)
    if len(data) != size:
        return None
    names, keys, ends_bytes, table_rows, facts = marshal.loads(data)
    del data
    if not (
        type(names) is list
        and type(keys) is bytes
        and type(ends_bytes) is bytes
        and type(table_rows) is list
        and type(facts) is list
        and len(names) == len(table_rows) == len(facts)
        and len(keys) == KEY.size * len(names)
        and len(ends_bytes) == 8 * len(names)
        and all(type(row) is tuple for row in table_rows)
        and all(f is None or (type(f) is tuple and len(f) == FACTS_SIZE) for f in facts)
    ):
        return None
    ends = array("Q", ends_bytes)
    if sys.byteorder != "little":
        ends.byteswap()
    rows_at = at + size
    if (ends[-1] if ends else 0) != size_of_file - rows_at or any(a > b for a, b in pairwise(ends)):
        return None  # the rows cut short, or not where the frame says
    return Memo(names, keys, table_rows, Rows(fd, rows_at, ends), facts)


def payload(entries: list[tuple]) -> bytes:
    """The file's bytes for ``entries`` (name, ino, mtime_ns, size, index row, table row, and the
    record's facts when it is kept lean: None or left out otherwise)."""
    entries = [entry for entry in entries if packed(entry[1:4]) is not None]
    names = [entry[0] for entry in entries]
    keys = b"".join([KEY.pack(*entry[1:4]) for entry in entries])
    rows = [entry[4] for entry in entries]
    ends, end = [], 0
    for row in rows:
        end += len(row)
        ends.append(end)
    facts = [entry[6] if len(entry) > 6 else None for entry in entries]
    data = (names, keys, struct.pack(f"<{len(ends)}Q", *ends), [entry[5] for entry in entries], facts)
    return b"".join([FORMAT, frame(data), *rows])  # type: ignore[arg-type]
