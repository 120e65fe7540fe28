"""The jobs table, ``run/jobs.table``: the rows ``gflowctl get jobs`` prints, one file for them all.

``run/index.json`` holds every job's whole summary as JSON: at 50,000 jobs ~20 MB to parse, and the
USER column took a ``stat`` of each job's manifest. A table row holds only what the default table,
``-o name`` and the selection (names, labels, phase, user, the one-day window) need, its cells
already text, and the uid the job runs as (what admission read from the manifest's descriptor): a
table is read with one ``marshal.loads`` and printed without touching another file.

Rows hold what ``get jobs`` shows every user, no more (docs/multi-user.md): name, owner, phase,
GPUs, devices, priority, times, reason, labels, the owning Sweep and the manifest's path; never
manifest text, env or log lines. The file is gflowd's, ``0644``, like the index.

After a header line (format, Python and marshal versions, the fields), frames as in the records
journal (``records_journal.frame``: a 4-byte length, a ``marshal`` blob): a list of rows, a later
row of a name replacing an earlier one, ``(name,)`` removing it. gflowd appends one frame per index
write with the rows that changed (one ``O_APPEND`` write) and rewrites the file (atomically, one
frame sorted by name) when dead rows outgrow the live ones, at start and after a failed append. A
frame cut short (killed mid-write, disk full) is ignored: a reader sees the table as of the frame
before, never half a row. No fsync: a cache; gflowctl falls back to the index when it is missing.

Imports stay light: ``gflowctl get jobs`` reads it. The writer is ``controller/record/recorder.py``.
"""

from __future__ import annotations

import marshal
import sys
from operator import itemgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Row layout: cells as the table prints them where they need no clock (GPUS, DEVICES, PRIORITY are text).
FIELDS = (
    "name",
    "uid",  # the user the job runs as; None when gflowd did not know it (the reader stats the manifest)
    "phase",
    "gpus",
    "devices",
    "priority",
    "created",
    "reason",
    "completionTime",
    "labels",
    "owner",  # the Sweep that owns the job, or None
    "manifest",
)
NAME, UID, PHASE, GPUS, DEVICES, PRIORITY, CREATED, REASON, COMPLETION, LABELS, OWNER, MANIFEST = range(len(FIELDS))
HEADER = (
    f"gflow-jobs-table 1 python{sys.version_info[0]}.{sys.version_info[1]} marshal{marshal.version} "
    f"{','.join(FIELDS)}\n"
).encode()


class Table:
    """A table as read: ``rows`` maps name -> row (a tuple in ``FIELDS`` order); ``ordered``: the
    rows are in name order (no frame after the first added a name); ``count``: rows read, dead
    ones too."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Any, ...]] = {}
        self.ordered = True
        self.count = 0


def read(path: str) -> Table | None:
    """The table at ``path``; None when it is missing, unreadable or of another format (the
    caller reads the index instead)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if not data.startswith(HEADER):
        return None
    table = Table()
    rows = table.rows
    at, end = len(HEADER), len(data)
    first = True
    while at + 4 <= end:
        size = int.from_bytes(data[at : at + 4], "little")
        if at + 4 + size > end:
            break  # the last frame was cut short: the table as of the frame before
        try:
            frame = marshal.loads(data[at + 4 : at + 4 + size])
        except (ValueError, TypeError, EOFError):
            break
        if type(frame) is not list or not set(map(type, frame)) <= {tuple}:
            break
        if not set(map(len, frame)) <= ({len(FIELDS)} if first else {1, len(FIELDS)}):
            break
        at += 4 + size
        if first:  # the rewritten table: one frame of every row, sorted
            rows.update(zip(map(itemgetter(0), frame), frame))
            table.count = len(frame)
            first = False
            continue
        for row in frame:
            name = row[0]
            if len(row) == 1:
                rows.pop(name, None)
            else:
                if table.ordered and name not in rows:
                    table.ordered = False
                rows[name] = row
        table.count += len(frame)
    return None if first else table


def rewritten(rows: list[tuple[Any, ...]]) -> bytes:
    """The whole file: the header and one frame of ``rows`` (sorted by name)."""
    return HEADER + frame(rows)


def frame(rows: list[tuple[Any, ...]]) -> bytes:
    """One frame: rows, and ``(name,)`` for each removed job."""
    blob = marshal.dumps(rows)
    return len(blob).to_bytes(4, "little") + blob
