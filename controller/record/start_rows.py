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
(``records_journal.frame``) of ``(NAMES, KEYS, INDEX_ROWS, TABLE_ROWS)``: three lists in one order
and KEYS the status files' keys packed in one bytes object (``KEY``): a start makes no object per
job beyond the rows it keeps (small objects made and freed among the records pin their memory).
Missing, torn or of another format: ignored (every row built, as before). Written at the first
index write when the rows it built itself outnumber ``SLACK``; no fsync: a cache.
"""

from __future__ import annotations

import marshal
import struct
import sys

from controller.util.records_journal import frame

FORMAT = f"gflow-start-rows 1 python{sys.version_info[0]}.{sys.version_info[1]} marshal{marshal.version}\n".encode()
SLACK = 1000  # rows a start may build itself (or entries it may find dead) before the file is written anew
KEY = struct.Struct("<QqQ")  # a status file's key (records_journal.key_of): inode, mtime_ns, size


class Memo:
    """The file as read: ``names[i]``'s rows are ``index_rows[i]`` and ``table_rows[i]`` while its
    status file has the key ``key(i)``."""

    def __init__(self, names: list = [], keys: bytes = b"", index_rows: list = [], table_rows: list = []) -> None:  # noqa: B006 (never mutated)
        self.names, self.keys, self.index_rows, self.table_rows = names, keys, index_rows, table_rows

    def key(self, at: int) -> bytes:
        return self.keys[at * KEY.size : (at + 1) * KEY.size]


def packed(key: tuple[int, int, int]) -> bytes | None:
    try:
        return KEY.pack(*key)
    except struct.error:
        return None


def read(path: str) -> Memo:
    """The file at ``path``; empty when it is missing, torn or of another format."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return Memo()
    if not data.startswith(FORMAT):
        return Memo()
    at = len(FORMAT)
    size = int.from_bytes(data[at : at + 4], "little")
    if at + 4 + size != len(data):
        return Memo()
    try:
        names, keys, index_rows, table_rows = marshal.loads(memoryview(data)[at + 4 :])
    except (ValueError, TypeError, EOFError):
        return Memo()
    if not (
        type(names) is list
        and type(keys) is bytes
        and type(index_rows) is list
        and type(table_rows) is list
        and len(names) == len(index_rows) == len(table_rows)
        and len(keys) == KEY.size * len(names)
        and all(type(row) is bytes for row in index_rows)
        and all(type(row) is tuple for row in table_rows)
    ):
        return Memo()
    return Memo(names, keys, index_rows, table_rows)


def payload(entries: list[tuple]) -> bytes:
    """The file's bytes for ``entries`` (name, ino, mtime_ns, size, index row, table row)."""
    entries = [entry for entry in entries if packed(entry[1:4]) is not None]
    names = [entry[0] for entry in entries]
    keys = b"".join([KEY.pack(*entry[1:4]) for entry in entries])
    data = (names, keys, [entry[4] for entry in entries], [entry[5] for entry in entries])
    return FORMAT + frame(data)  # type: ignore[arg-type]
