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
(``records_journal.frame``) of entries ``(NAME, INO, MTIME_NS, SIZE, INDEX_ROW, TABLE_ROW)``.
Missing, torn or of another format: ignored (every row built, as before). Written at the first
index write when the rows it built itself outnumber ``SLACK``; no fsync: a cache.
"""

from __future__ import annotations

import marshal
import sys

from controller.util.records_journal import frame

FORMAT = f"gflow-start-rows 1 python{sys.version_info[0]}.{sys.version_info[1]} marshal{marshal.version}\n".encode()
SLACK = 1000  # rows a start may build itself (or entries it may find dead) before the file is written anew


def read(path: str) -> dict[str, tuple]:
    """name -> its entry; empty when the file is missing, torn or of another format."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return {}
    if not data.startswith(FORMAT):
        return {}
    at = len(FORMAT)
    size = int.from_bytes(data[at : at + 4], "little")
    if at + 4 + size != len(data):
        return {}
    try:
        entries = marshal.loads(memoryview(data)[at + 4 :])
    except (ValueError, TypeError, EOFError):
        return {}
    if type(entries) is not list:
        return {}
    memo = {}
    for entry in entries:
        if type(entry) is not tuple or len(entry) != 6 or type(entry[4]) is not bytes or type(entry[5]) is not tuple:
            return {}
        memo[entry[0]] = entry
    return memo


def payload(entries: list[tuple]) -> bytes:
    """The file's bytes for ``entries`` (name, ino, mtime_ns, size, index row, table row)."""
    return FORMAT + frame(entries)
