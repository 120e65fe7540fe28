"""Record: what a pass writes under the state directory (the others who write there: docs/design.md).

Status files are written atomically and only when the job's record changed; the index (one JSON
summary), the jobs table and the JSON copies of the statuses (what ``gflowctl get jobs`` and
``-o json`` read: one file each), ``node.yaml`` and ``events.jsonl`` are kept here too. Nothing here
decides anything.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import operator
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from controller import API_VERSION
from controller.api.units import format_cpu_list as format_cores
from controller.api.units import format_quantity
from controller.model.lean_records import (
    COMPLETION_TIME,
    CREATED,
    FACT_FIELDS,
    LABELS,
    MANIFEST,
    OWNER,
    PHASE,
    RUN_HASH,
    SPEC_HASH,
    VALID_VERDICT,
    Facts,
    LeanRecords,
    changed_items,
    facts_of,
)
from controller.model.plan import Event
from controller.model.reasons import QUEUE_REASONS, SETTLED_PHASES, Condition, Phase, Reason
from controller.model.records import (
    JOB_FIELDS,
    ROW_AT,
    FrozenConditions,
    JobState,
    ReservationState,
    SweepState,
    condition_verdicts,
    rfc3339,
    row_value,
    shared_empty,
)
from controller.model.scheduling import CorePool, GpuSlot
from controller.paths import Home
from controller.record import start_rows, status_stamp
from controller.util import jobs_table, pretty_json
from controller.util import records_journal as journal
from controller.util.fsutil import atomic_write, fsync_dir
from controller.util.jsonlog import append_lines
from controller.util.spares import PREFIX as SPARE_PREFIX
from controller.util.spares import Spares
from controller.util.yamlio import YAMLSyntaxError, dump, load_one, load_own

log = logging.getLogger("gflowd.recorder")
EVENTS_MAX_BYTES = 10 * 1024 * 1024
QUEUED_UNWRITTEN_MAX = 10.0  # seconds a new job of a flood, bound and about to start, may go without a status file
RUNNING_UNWRITTEN_MAX = 1.0  # seconds such a job, once started, may still go without one (see _may_wait)
LAGGING_REFRESH = (
    64  # a waiting job's status lagging behind only by queue detail: refreshed this many per owner per resync
)
# What changes for every waiting job at each GPU turnover: which jobs hold the GPUs (the message), the queue
# position, the aged priority, and Resources <-> Priority (jobs ahead took the GPUs in this pass, or in the
# last). A status file lagging behind only in these, its reason one of QUEUE_REASONS (the queue's answers,
# model/reasons.py), is not rewritten (see Recorder.write_states).
_VOLATILE = {"reason", "message", "queue_position", "effective_priority"}
_stable = operator.attrgetter(*(f for f in JOB_FIELDS if f not in _VOLATILE))
JOURNAL_SLACK = 1000  # dead entries the records journal may hold beyond one per finished job before it is rewritten
TABLE_SLACK = 1000  # dead rows the jobs table may hold beyond one per job before it is rewritten
JSON_FIELDS = ("json",)  # the status JSON journal's entries: (name, ino, mtime_ns, size, text)
JSON_SLACK_BYTES = 1 << 20  # dead bytes it may hold beyond half the live texts before it is rewritten
JSON_MEAN_GUESS = 1500  # bytes an entry takes, until this run has appended some


def _process_entry(process, unmanaged: bool) -> dict:
    entry = {"pid": process.pid, "usedMemory": format_quantity(process.used_memory) or "0"}
    if unmanaged:
        entry["unmanaged"] = True  # not started by gflow: memory no job of ours holds
    if process.gone:
        entry["gone"] = True  # no such pid any more: the driver holds its memory until a GPU reset
    if process.started is not None:
        entry["started"] = rfc3339(process.started)
    if process.name:
        entry["name"] = process.name
    if process.user:
        entry["user"] = process.user
    if process.utilization is not None:
        entry["utilization"] = process.utilization
    return entry


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # one encoder: json.dumps with arguments builds one per call


def _queue_detail_only(known: JobState, state: JobState) -> bool:
    """Both records say the job waits in the queue (``QUEUE_REASONS``), and differ only in what
    moves at every GPU turnover."""
    return (
        known.phase == state.phase == Phase.Pending
        and known.reason in QUEUE_REASONS
        and state.reason in QUEUE_REASONS
        and known.attempt == state.attempt
        and _stable(known) == _stable(state)
    )


def _index_row(name: str, state: JobState) -> bytes:
    return f"{json.dumps(name)}:{_COMPACT.encode(state.summary())}".encode()


_NUMBER_TEXT: dict[int, str] = {}  # gpus and priority as the table writes them: one string per value, not per job


def _number_text(value: int) -> str:
    text = _NUMBER_TEXT.get(value)
    if text is None:
        text = _NUMBER_TEXT[value] = str(value)
    return text


def _table_row(name: str, state: JobState, uid: int | None) -> tuple:
    """The job's row of the jobs table (util/jobs_table.py ``FIELDS``): plain str, not the StrEnums
    (marshal writes exact types only)."""
    devices = state.devices
    return (
        name,
        uid,
        str(state.phase),
        _number_text(state.gpus),
        ",".join([str(d) for d in devices]) if devices else "-",
        _number_text(state.priority),
        state.created,
        str(state.reason),
        state.completion_time,
        state.labels,
        state.owner,
        state.manifest,
    )


_PHASE_AT = ROW_AT["phase"]


def _settled_row(row: object, name: str) -> bool:
    """A journal row of a finished (or rejected) job named ``name``: kept lean if its start rows are on disk."""
    return type(row) is tuple and len(row) == len(JOB_FIELDS) and row[0] == name and row[_PHASE_AT] in SETTLED_PHASES


def _settled_in(records: LeanRecords, name: str) -> bool:
    """Whether ``records`` holds a finished (or rejected) record of ``name``, without building it."""
    facts = records.facts(name)
    if facts is not None:
        return facts[PHASE] in SETTLED_PHASES
    state = records.get(name)
    return state is not None and state.phase in SETTLED_PHASES


def _copied(text: str | None) -> str | None:
    """A new string of ``text``'s content (see ``_facts_of_row``)."""
    return None if text is None else text.encode().decode()


def _shared(text: str | None) -> str | None:
    """``text``'s content as the one string every holder of it shares (``sys.intern`` of a copy):
    the spec hashes, which the manifest store interns too (observe/manifests.py). Two strings a job
    (~6 MiB at 50,000) when they were copies; as many as there are different specs now."""
    return None if text is None else sys.intern(text.encode().decode())


def _facts_of_row(row: tuple) -> Facts:
    """``lean_records.facts_of`` the record a journal row stands for. Its values copied, but for the
    vocabulary (phases, reasons) and small numbers: the facts outlive the start, where the journal's
    decoded rows are freed, and an object kept among those rows would keep their memory (the
    allocator's arena it sits in: at 50,000 jobs, 130 MiB with copies, 150 without)."""
    flat = row[_AT_CONDITIONS]
    conditions = FrozenConditions(flat) if type(flat) is tuple else flat or []
    labels, created, completion = row[_AT_LABELS], row[_AT_CREATED], row[_AT_COMPLETION]
    return (
        row[_AT_PHASE],
        row[_AT_REASON],
        _shared(row[_AT_SPEC_HASH]),
        _shared(row[_AT_RUN_HASH]),
        _copied(row[_AT_MANIFEST]),
        _copied(row[_AT_OWNER]),
        row[_AT_PRIORITY] + 0,
        row[_AT_GPUS] + 0,
        dict(labels) if labels else row_value(row, "labels"),
        created + 0.0,
        None if completion is None else completion + 0.0,
        condition_verdicts(conditions, (Condition.Admitted, Condition.DuplicateName)) == VALID_VERDICT,
    )


def _lean_facts(state: JobState | None) -> Facts | None:
    """The facts a start keeps of ``state`` as read back, if finished (as ``_facts_of_row`` makes them
    of its journal row: its spec hashes shared), for ``run/start-rows.cache``; None otherwise."""
    if state is None or state.phase not in SETTLED_PHASES:
        return None
    facts = facts_of(state)
    shared = (_shared(facts[SPEC_HASH]), _shared(facts[RUN_HASH]))
    labels = facts[LABELS] or shared_empty("labels")  # as a journal row's (a record read from YAML has its own)
    return (*facts[:SPEC_HASH], *shared, *facts[RUN_HASH + 1 : LABELS], labels, *facts[LABELS + 1 :])


_AT_PHASE, _AT_REASON, _AT_CONDITIONS = ROW_AT["phase"], ROW_AT["reason"], ROW_AT["conditions"]
_AT_SPEC_HASH, _AT_RUN_HASH, _AT_MANIFEST = ROW_AT["spec_hash"], ROW_AT["run_hash"], ROW_AT["manifest"]
_AT_OWNER, _AT_PRIORITY, _AT_GPUS, _AT_LABELS = ROW_AT["owner"], ROW_AT["priority"], ROW_AT["gpus"], ROW_AT["labels"]
_AT_CREATED, _AT_COMPLETION = ROW_AT["created"], ROW_AT["completion_time"]
# _facts_of_row builds the facts in FACT_FIELDS' order
assert tuple(ROW_AT[name] for name in FACT_FIELDS) == (
    _AT_PHASE, _AT_REASON, _AT_SPEC_HASH, _AT_RUN_HASH, _AT_MANIFEST, _AT_OWNER, _AT_PRIORITY, _AT_GPUS, _AT_LABELS,
    _AT_CREATED, _AT_COMPLETION,
)  # fmt: skip


# A new job waiting with one of these reasons may go without a status file for a moment (Recorder._may_wait)
HELD_BACK_REASONS = frozenset({Reason.Queued, Reason.JobLimit})


def _unwritten_due(state: JobState) -> float:
    """When the status file of a job held back (``Recorder._may_wait``) must be written."""
    if state.attempt == 0:
        return state.created + QUEUED_UNWRITTEN_MAX
    return (state.start_time or 0.0) + RUNNING_UNWRITTEN_MAX


class Recorder:
    def __init__(self, home: Home, clock: Callable[[], float] = time.time):
        self.home = home
        self.clock = clock  # the index's "updated": gflowd's injected clock, as every timestamp
        # the records as their status files hold them; at a start, finished ones as rows (LeanRecords)
        self.written: LeanRecords = LeanRecords()
        self.unwritten: dict[
            str, JobState
        ] = {}  # new jobs of a flood, about to start or just started: in the index only
        self.write_due: float | None = None  # when a started job of ``unwritten`` must have its status file (clock)
        self._held_due: float | None = None  # no job of ``unwritten`` is due before then (a lower bound)
        self.written_sweeps: dict[str, SweepState] = {}
        self.written_reservations: dict[str, ReservationState] = {}
        self._rows: dict[str, bytes] = {}  # name -> the job's index entry as JSON, b'"name":{...}'
        # ...or, for a record as load() read it, where its row is in run/start-rows.cache (left on
        # disk: read back at each index write). A name is in one of the two maps, never both.
        self._on_disk: dict[str, int] = {}
        self._disk_rows = start_rows.Rows()
        self._order: list[str] | None = None  # names sorted, kept until the set of names changes
        self._node_text = ""
        self.status_writes = 0
        self.lagging: dict[str, str] = {}  # waiting jobs whose status file shows older queue detail -> owner
        self._journal = str(home.records_journal)
        self._journal_count = 0  # entries in the journal, dead ones too: it is rewritten when they outgrow the jobs
        self._journal_pending: list[tuple] = []  # entries of this pass's finished records, appended in one write
        self._journal_rewrite = False  # the file is missing, torn or of another format: rewrite, never append
        self._unjournaled: set[str] = set()  # unsettled jobs whose status file this run wrote: no journal entry
        self.spares = Spares(home.status_dir)  # replaced status files, rewritten in place later (util/spares.py)
        self.uid_of: Callable[[str], int | None] = lambda name: None  # a job's user; the writer sets it each pass
        self._table: dict[str, tuple] = {}  # name -> its row of the jobs table, as on disk once written
        self._table_pending: dict[str, tuple] = {}  # rows changed since the table was written; (name,): removed
        self._table_count = 0  # rows in the file, dead ones too
        self._table_rewrite = True  # at start the file is an earlier run's: rewritten at the first index write
        self._json = str(home.status_json_journal)
        self._json_docs: dict[str, dict] = {}  # statuses written since the last index write: their JSON copies due
        self._json_bytes = 0  # the file's size, as far as this gflowd wrote it
        self._json_rewrite = False
        self._json_appended = [0, 0]  # entries and bytes appended by this run: the mean size of an entry
        self._start_rows = str(home.run_dir / "start-rows.cache")
        self._status_stamp = home.run_dir / "status-stamp.json"  # record/status_stamp.py
        self.status_stats = 0  # status files load() stat'ed (for tests and benchmarks)
        # until the first index write: name -> the record load() read (no new object per job: freed
        # after the first pass, small objects made among the records would pin their memory)
        self._loaded: dict[str, JobState] = {}
        # ...and the finished ones kept lean, as their facts (model/lean_records.py)
        self._loaded_facts: dict[str, Facts] = {}
        self._rows_reused = 0  # rows load() took from start_rows instead of building them
        self._rows_memo_count = 0  # entries that file held

    def load(self) -> tuple[LeanRecords, dict[str, SweepState], dict[str, ReservationState]]:
        """Rebuild the controller's memory from status files (at start-up). A job's record
        comes from the records journal (util/records_journal.py) when its entry names the status file as it
        is now (one ``stat``), else from the file's YAML, and the journal is then rewritten once.
        Plain strings, not pathlib, in this loop: at 50,000 jobs path objects alone cost seconds."""
        collecting = gc.isenabled()
        gc.disable()  # ~1M objects are built here, none of them garbage: collections would halve the speed
        try:
            return self._load()
        finally:
            if collecting:
                gc.enable()

    def _load(self) -> tuple[LeanRecords, dict[str, SweepState], dict[str, ReservationState]]:
        states: dict[str, JobState] = {}
        rows: dict[str, tuple] = {}  # finished records as the journal's rows: kept as facts or built
        sweeps: dict[str, SweepState] = {}
        reservations: dict[str, ReservationState] = {}
        began = time.time_ns()  # before the folder's key: see status_stamp (the racy rule)
        status_dir = str(self.home.status_dir)
        folder = status_stamp.folder_key(status_dir)
        # the names whose entry needs its stat; None: every one (no stamp, or it does not hold)
        unchecked = status_stamp.unchecked(self._status_stamp, folder, status_stamp.file_key(self._journal))
        unmatched: list[str] = []  # entries whose file has another key (or is gone): for the next stamp
        entries = journal.read(self._journal, JOB_FIELDS)
        known = entries.last
        loaded = self._loaded
        try:
            names = os.listdir(status_dir)  # names only: no DirEntry per file (~20 ms at 50,000)
        except FileNotFoundError:
            names = []
        status_prefix = os.path.join(status_dir, "")
        self.spares.adopt(n for n in names if n.startswith(SPARE_PREFIX))
        parse: list[tuple[str, str]] = []  # (name, path) of files read from their YAML
        kept: list[tuple] = []  # the journal as it should be: one current entry per finished job
        # One loop, keeping nothing per job but the record (its name the one string the maps share)
        # and the journal's own entry: what a job's check makes is freed before the next job's, so
        # 50,000 of them leave no fragments among the records.
        names.reverse()
        while names:
            file_name = names.pop()  # freed as we go
            if not file_name.endswith(".yaml") or file_name[0] == ".":
                continue
            stem, path = file_name[:-5], status_prefix + file_name  # not os.path.join: ~0.1 s at 50,000
            entry = known.get(stem)
            if entry is not None:
                if unchecked is None or stem in unchecked:
                    self.status_stats += 1
                    try:
                        current = journal.key_of(os.stat(path)) == journal.entry_key(entry)
                    except OSError:
                        unmatched.append(stem)
                        continue  # gone since the scan
                    if not current:
                        unmatched.append(stem)
                else:  # the folder and the journal as a start that stat'ed this file found them
                    current = True
                if current:
                    row = entry[4]
                    if _settled_row(row, stem):  # lean if its index and table rows are on disk (below)
                        rows[row[0]] = row
                        kept.append(entry)
                        continue
                    try:
                        state = JobState.from_row(row)  # ~10x faster than from_status of the YAML
                    except (TypeError, ValueError):
                        state = None
                    if state is not None and state.name == stem:  # any phase: the file is as read then
                        states[state.name] = state
                        kept.append(entry)
                        loaded[state.name] = state
                        continue
            parse.append((stem, path))
        self._take_start_rows(known, {stem for stem, _path in parse}, rows)
        lean_facts = self._loaded_facts
        for name, row in rows.items():  # the others are built now, from the row, as ever
            if name not in lean_facts:
                states[name] = loaded[name] = JobState.from_row(row)
        rows.clear()
        stale = entries.torn or not entries.current or entries.count - len(kept) > JOURNAL_SLACK
        for stem, path in parse:
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                    source = os.fstat(handle.fileno())
                try:
                    data = load_own(text)  # our own subset of YAML: ~6x faster than the real loader
                except ValueError:
                    data = load_one(text)
                if isinstance(data, dict) and data.get("kind") == "SweepStatus":
                    sweep = SweepState.from_status(data)
                    if sweep.name == stem:
                        sweeps[sweep.name] = sweep
                        self.written_sweeps[sweep.name] = sweep
                    continue
                if isinstance(data, dict) and data.get("kind") == "ReservationStatus":
                    reservation = ReservationState.from_status(data)
                    if reservation.name == stem:
                        reservations[reservation.name] = self.written_reservations[reservation.name] = reservation
                    continue
                state = JobState.from_status(data)
            except (OSError, YAMLSyntaxError, KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("ignoring unreadable status file %s: %s", path, exc)
                continue
            if state.name != stem:
                continue
            # waiting and running jobs too: a restart on 7,000 pending jobs read all their YAML
            kept.append((state.name, *journal.key_of(source), state.to_row()))  # the next start reads the journal
            loaded[state.name] = state
            stale = True
            states[state.name] = state
        lean = LeanRecords(dict(lean_facts), states, build=self._read_back)
        self.written = lean.sibling()
        if stale:
            self._rewrite_journal(kept)
            unmatched = []  # the journal now holds only entries read from their files as they are
        else:
            self._journal_count = entries.count
        if unchecked is None and folder is not None and status_stamp.folder_key(status_dir) == folder:
            # every entry checked, and the folder the same throughout: the next start may trust them
            journal_key = status_stamp.file_key(self._journal)
            if journal_key is not None:
                status_stamp.write(self._status_stamp, folder, began, journal_key, unmatched)
        self._drop_json_copies()
        self._open_json_journal()
        return lean, sweeps, reservations

    def _take_start_rows(self, known: dict[str, tuple], parsed: set[str], rows: dict[str, tuple]) -> None:
        """The index and table rows of the records read from the journal whose status file has the
        key the last start saw (record/start_rows.py): the rows this very record yields. A finished
        record of ``rows`` (journal rows) found there is kept lean: its facts (``_loaded_facts``)."""
        memo = start_rows.read(self._start_rows)
        self._rows_memo_count = len(memo.names)
        loaded, on_disk, table = self._loaded, self._on_disk, self._table
        lean, memo_facts, table_rows = self._loaded_facts, memo.facts, memo.table_rows
        reused = 0
        # each name's key unpacked to the journal's form (records_journal.key_of), compared as tuples:
        # no slice, pack and two calls per job (~0.1 s of a 50,000-job start)
        for at, (name, key) in enumerate(zip(memo.names, memo.key_tuples())):
            entry = known.get(name)
            if entry is None or name in parsed:
                continue
            row = rows.get(name)
            if row is None and name not in loaded:
                continue
            if key == journal.entry_key(entry):
                on_disk[name] = at
                cells = table_rows[at]
                # the row as _table_row builds it: the record's own strings, times and labels, not copies
                if row is not None:  # the facts as a start before kept them, else made of the journal's row
                    facts = lean[name] = memo_facts[at] or _facts_of_row(row)
                    table[name] = (
                        name,
                        cells[1],
                        cells[2],
                        cells[3],
                        cells[4],
                        cells[5],
                        facts[CREATED],
                        cells[7],
                        facts[COMPLETION_TIME],
                        facts[LABELS],
                        facts[OWNER],
                        facts[MANIFEST],
                    )
                else:
                    state = loaded[name]
                    table[name] = (
                        state.name,
                        *cells[1:6],
                        state.created,
                        cells[7],
                        state.completion_time,
                        state.labels,
                        state.owner,
                        state.manifest,
                    )
                reused += 1
        self._rows_reused += reused
        if on_disk:
            self._disk_rows = memo.rows
        else:
            memo.rows.close()

    def _read_back(self, name: str) -> JobState:
        """The record of a finished job kept lean (``LeanRecords``), when something reads it: from its
        status file, which no pass has written since the start found it as its journal entry says
        (a pass that writes it replaces the lean record first). Should the file be gone or torn
        (someone else's doing), from the journal's entry."""
        path = self.home.status_file(name)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            try:
                data = load_own(text)
            except ValueError:
                data = load_one(text)
            state = JobState.from_status(data)
            if state.name == name:
                return state
        except (OSError, YAMLSyntaxError, KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("status file %s unreadable since the start (%s): its record from the journal", path, exc)
        entry = journal.read(self._journal, JOB_FIELDS).last.get(name)
        if entry is None:
            raise KeyError(name)
        return JobState.from_row(entry[4])

    def _open_json_journal(self) -> None:
        """Appends go on where the last gflowd stopped when its journal is of this format (its
        header read, not its texts: a start reads no JSON); else the first pass rewrites it."""
        try:
            with open(self._json, "rb") as handle:
                head = handle.read(len(journal.header(JSON_FIELDS)))
                self._json_bytes = os.fstat(handle.fileno()).st_size
        except OSError:
            head = b""
        self._json_rewrite = head != journal.header(JSON_FIELDS)

    def _rewrite_journal(self, entries: list[tuple]) -> None:
        """The journal replaced by one frame of ``entries`` (a cache: no fsync; a failure leaves the
        next start to read more YAML)."""
        try:
            atomic_write(self.home.records_journal, journal.header(JOB_FIELDS) + journal.frame(entries), durable=False)
        except (OSError, ValueError) as exc:
            log.debug("records journal not rewritten: %s", exc)
            self._journal_rewrite = True
            return
        self._journal_count = len(entries)
        self._journal_rewrite = False

    def _drop_json_copies(self) -> None:
        """``run/status-json/``, where an older gflowd kept a JSON copy per finished job: the
        journal replaces it (once; then the folder is gone)."""
        folder = str(self.home.run_dir / "status-json")
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
        try:
            os.rmdir(folder)
        except OSError:
            pass

    def write_sweeps(self, sweeps: Mapping[str, SweepState], removed: Iterable[str]) -> bool:
        return self._write_records(self.written_sweeps, sweeps, removed)

    def write_reservations(self, reservations: Mapping[str, ReservationState], removed: Iterable[str]) -> bool:
        return self._write_records(self.written_reservations, reservations, removed)

    def _write_records(self, written: dict, records: Mapping, removed: Iterable[str]) -> bool:
        """Status files of Sweeps or Reservations (``written``: as on disk) that changed; removed ones go."""
        changed = False
        for name in removed:
            written.pop(name, None)
            if name not in self.written:  # the name may have passed to a job meanwhile
                self._remove_status(name)
            changed = True
        for name, record in records.items():
            if written.get(name) == record:
                continue
            document = record.to_status()
            self.spares.replace(
                self.home.status_file(name), dump(document).encode(), durable=True, new=name not in written
            )
            written[name] = record
            changed = True
        if changed:
            fsync_dir(self.home.status_dir)  # one folder fsync for every such status file of this pass
            self.spares.synced()
        return changed

    def write_states(
        self,
        states: Mapping[str, JobState],
        removed: Iterable[str],
        only: Iterable[str] | None = None,
        owner_of: Callable[[str], str | None] = lambda name: None,
    ) -> bool:
        """Write the status files that changed and remove the given ones. True when anything did.
        ``only``: the names that may have changed (the pass carried every other record over as the
        very object written before); None: compare them all (a resync).

        A waiting job whose record differs from its file only in queue detail (``_VOLATILE``) is
        not rewritten: with 20,000 jobs waiting, every GPU turnover rewrote 20,000 files. Its file
        lags (its phase and kind of wait still true; ``gflowctl explain`` says the live why); each
        resync refreshes LAGGING_REFRESH of them per owner (``owner_of``)."""
        changed = False
        for name in removed:
            self.written.pop(name, None)
            self.lagging.pop(name, None)
            self.unwritten.pop(name, None)
            self._rows.pop(name, None)
            self._on_disk.pop(name, None)
            self._unjournaled.discard(name)
            self._json_docs.pop(name, None)
            if self._table.pop(name, None) is not None:
                self._table_pending[name] = (name,)
            self._order = None
            self._remove_status(name)
            changed = True
        if only is None:  # a resync: a manifest that changed hands (its job's row keeps its record)
            self._refresh_uids()
        pairs: Iterable[tuple[str, JobState]] = (  # (a resync: records still as loaded are as on disk)
            changed_items(states) if only is None else [(n, states[n]) for n in only if n in states]
        )
        now = self.clock()
        self.write_due = None
        # a record held back by an earlier pass and carried over as that very object (a flood's
        # tail) is not due before _held_due, its lower bound: no _may_wait, no comparison for it
        held_until = (
            self._held_due if only is not None and self._held_due is not None and now < self._held_due else None
        )
        if only is None:
            self._held_due = None  # every record is looked at: _may_wait finds the earliest again
        elif self.unwritten:  # held back, then parked out of the pass's sight: looked at once due
            if self._held_due is not None and now < self._held_due:
                self.write_due = self._held_due
            else:
                pairs = [*pairs, *self._overdue(states, only, now)]
        written = 0
        with self.spares.batch() as batch:  # the durable files of the pass fsync'd together (spares.py)
            for name, state in pairs:
                known = self.written.get(name)
                if known is state:  # identity first: unchanged records are shared between passes
                    continue
                if known == state:
                    self.written[name] = state  # same content: keep this object, so next time `is` holds
                    continue
                if known is not None and _queue_detail_only(known, state):
                    self.lagging[name] = owner_of(name) or ""
                    continue
                if known is None and held_until is not None and self.unwritten.get(name) is state:
                    continue
                if known is None and self._may_wait(name, state, now):
                    changed = self._index_only(name, state) or changed
                    continue
                # A job that never started has nothing to lose: its manifest recreates it. Every other
                # record (a start decided, an exit recorded) must reach the disk before it is relied on.
                durable = state.attempt > 0 or state.phase != "Pending"
                document = state.to_status()
                batch.add(
                    self.home.status_file(name),
                    dump(document).encode(),
                    durable=durable,
                    new=known is None,
                    then=functools.partial(self._written, name, state, document, known),
                )
                written += 1
            if only is None:
                written += self._refresh_lagging(states, batch)
        if written:
            fsync_dir(self.home.status_dir)  # one folder fsync for every rename of this pass
            self.spares.synced()
        self._flush_journal()
        return changed or written > 0

    def _refresh_lagging(self, states: Mapping[str, JobState], batch) -> int:
        """At a resync: rewrite up to LAGGING_REFRESH lagging status files per owner (queue order
        is not known here: by name). Returns how many."""
        taken: dict[str, int] = {}
        count = 0
        for name, owner in sorted(self.lagging.items()):
            state = states.get(name)
            if state is None or taken.get(owner, 0) >= LAGGING_REFRESH:
                continue
            taken[owner] = taken.get(owner, 0) + 1
            document = state.to_status()
            batch.add(
                self.home.status_file(name),
                dump(document).encode(),
                durable=False,
                new=False,
                then=functools.partial(self._written, name, state, document, self.written.get(name)),
            )
            count += 1
        return count

    def _written(self, name: str, state: JobState, document: dict, known: JobState | None) -> None:
        """``state`` is on disk as ``status/<name>.yaml``: remember it (``write_states``), with its
        JSON copy (every status, so ``get -o json`` parses no YAML) and, once settled, its journal line."""
        self.lagging.pop(name, None)
        self._json_docs[name] = document  # its JSON copy is made at the index write (a flood's last status only)
        if state.phase in SETTLED_PHASES:
            self._journal_line(name, document)
            self._unjournaled.discard(name)
        else:
            self._unjournaled.add(name)
        if known is None:
            self._order = None
            self.unwritten.pop(name, None)
        self.written[name] = state  # the controller never mutates a recorded state again
        self._set_row(name, state)
        self._table_set(name, state)
        self.status_writes += 1

    def _set_row(self, name: str, state: JobState) -> None:
        self._rows[name] = _index_row(name, state)
        self._on_disk.pop(name, None)

    def _table_set(self, name: str, state: JobState) -> None:
        row = _table_row(name, state, self.uid_of(name))
        if self._table.get(name) != row:
            self._table[name] = self._table_pending[name] = row

    def _refresh_uids(self) -> None:
        """Rows whose uid is no longer the one admission read (a manifest replaced by another
        user's file of that name): rebuilt. O(jobs), at a resync only."""
        uid_of, UID = self.uid_of, jobs_table.UID
        for name, row in list(self._table.items()):
            if row[UID] != uid_of(name):
                state = self.written.get(name) or self.unwritten.get(name)
                if state is not None:
                    self._table_set(name, state)

    def _may_wait(self, name: str, state: JobState, now: float) -> bool:
        """A new job of a flood that waits its turn (reason Queued: bound, starts within a pass or
        two; or JobLimit: its user runs as many jobs as allowed, it starts when one of them ends)
        gets its first status file when it starts: one write instead of two or three (a drain of
        1,000 jobs under ``maxRunningCpuJobs`` wrote Pending/JobLimit, Pending/Queued, Running and
        Succeeded). It shows in the index meanwhile (readers of its status use the index's row),
        and a crash loses nothing (its manifest recreates it). Not for long: after
        QUEUED_UNWRITTEN_MAX seconds its Pending status is written (``write_due`` wakes gflowd).

        Once such a job has started, its ``Running`` status waits RUNNING_UNWRITTEN_MAX more: a
        short job of the flood (a sweep's point, a test) has ended by then, and its one status file
        is its end. The index shows it Running at once; its attempt record is on disk before its
        process starts, so a gflowd killed meanwhile adopts it again (act/runtime/backends/local/). A
        job started outside a flood (no status file held back before) is written at once."""
        if state.attempt == 0:
            if state.phase != Phase.Pending or state.reason not in HELD_BACK_REASONS:
                return False
        elif state.phase != Phase.Running or state.start_time is None or name not in self.unwritten:
            return False
        due = _unwritten_due(state)
        if now >= due:
            return False
        self.write_due = due if self.write_due is None else min(self.write_due, due)
        self._held_due = due if self._held_due is None else min(self._held_due, due)
        return True

    def _overdue(self, states: Mapping[str, JobState], only: Iterable[str], now: float) -> list[tuple[str, JobState]]:
        """Held-back jobs (``_may_wait``) this pass did not look at (a backlog parked beyond its
        owner's queue head): those whose status is due now, to be written; ``write_due`` set for
        the others. O(held back): done only once the earliest of them is due (``_held_due``), so
        the passes of a flood do not cost per held-back job."""
        seen = only if isinstance(only, (set, frozenset)) else set(only)
        due_now = []
        self._held_due = None
        for name, held in self.unwritten.items():
            if name in seen:
                continue
            state = states.get(name)
            if state is None:
                continue
            due = _unwritten_due(held)
            if now >= due:
                due_now.append((name, state))
            else:
                self.write_due = due if self.write_due is None else min(self.write_due, due)
                self._held_due = due if self._held_due is None else min(self._held_due, due)
        return due_now

    def _index_only(self, name: str, state: JobState) -> bool:
        """Record ``state`` in the index rows only (see ``_may_wait``); True when the row changed."""
        if self.unwritten.get(name) == state:
            return False
        if name not in self.unwritten:
            self._order = None
        self.unwritten[name] = state
        self._set_row(name, state)
        self._table_set(name, state)
        return True

    def journal_unsettled(self) -> None:
        """At a clean stop: the journal entries of the waiting and running jobs whose status files
        this run wrote (a pass journals finished records only), so the next start reads them from
        the journal, not from their YAML: the first restart on 7,000 waiting jobs read 7,000 YAML
        files (~1 s of CPU) that the restarts after it did not. A cache, as every journal line."""
        names, self._unjournaled = self._unjournaled, set()
        for name in sorted(names):
            state = self.written.get(name)
            if state is not None:  # written[name] is the record its file holds (a lagging file's too)
                self._journal_line(name, state.to_status())
        self._flush_journal()

    def _journal_line(self, name: str, document: dict) -> None:
        """The journal line of a finished job's status file just written, appended with the pass's
        others (``_flush_journal``). The row is the record read back from ``document``, exactly what
        a restart would build from the file. A cache: a failure costs a slower start, never the pass."""
        try:
            source = os.stat(self.home.status_file(name))
        except OSError as exc:
            log.debug("no journal line for status/%s.yaml: %s", name, exc)
            return
        row = JobState.from_status(document).to_row()
        self._journal_pending.append((row[0], *journal.key_of(source), row))

    def _flush_json(self) -> None:
        """The JSON copies of the statuses written since the last index write (each job's last one:
        under a flood its earlier ones are never made), ``json.dumps(indent=2)``'s text (made by
        ``util/pretty_json.py``, ~2x faster) of the document
        its YAML holds, keyed by the file's identity, in one frame appended to
        ``run/status-json.journal``; the file rewritten instead when it is missing or torn, or holds
        more than 1.5 times the live texts (by its bytes: a start never reads it) plus
        ``JSON_SLACK_BYTES``: ``get -o json`` reads all of it. A cache, as the records journal."""
        docs, self._json_docs = self._json_docs, {}
        pending = []
        for name, document in docs.items():
            try:
                source = os.stat(self.home.status_file(name))
            except OSError as exc:
                log.debug("no JSON copy of status/%s.yaml: %s", name, exc)
                continue
            pending.append((name, *journal.key_of(source), pretty_json.dumps(document)))
        if not pending and not self._json_rewrite:
            return
        payload = journal.frame(pending)
        counted = self._json_appended
        mean = counted[1] / counted[0] if counted[0] else JSON_MEAN_GUESS
        if (
            not self._json_rewrite
            and self._json_bytes + len(payload) <= 1.5 * mean * len(self.written) + JSON_SLACK_BYTES
        ):
            try:
                journal.append(self._json, payload)
            except (OSError, ValueError) as exc:  # missing, cut short (disk full): rewritten below, with them
                log.debug("status JSON journal not appended: %s", exc)
            else:
                self._json_bytes += len(payload)
                counted[0] += len(pending)
                counted[1] += len(payload)
                return
        fresh = {entry[0] for entry in pending}
        entries = journal.read(self._json, JSON_FIELDS)
        kept = [entry for name, entry in entries.last.items() if name not in fresh and name in self.written]
        data = journal.header(JSON_FIELDS) + journal.frame(kept + pending)
        try:
            atomic_write(self.home.status_json_journal, data, durable=False)
        except (OSError, ValueError) as exc:
            log.debug("status JSON journal not rewritten: %s", exc)
            self._json_rewrite = True
            return
        self._json_bytes, self._json_rewrite = len(data), False

    def _flush_journal(self) -> None:
        """This pass's journal entries in one frame, appended; the journal rewritten instead when it
        is missing or torn, or holds more dead entries than ``JOURNAL_SLACK`` beyond one per job."""
        pending, self._journal_pending = self._journal_pending, []
        if not pending and not self._journal_rewrite:
            return
        if self._journal_rewrite or self._journal_count + len(pending) > 2 * len(self.written) + JOURNAL_SLACK:
            self._compact_journal(pending)
            return
        try:
            journal.append(self._journal, journal.frame(pending))
        except (OSError, ValueError) as exc:  # missing, cut short (disk full), a value marshal refuses
            log.debug("records journal not appended: %s", exc)
            self._journal_rewrite = True
            return
        self._journal_count += len(pending)

    def _compact_journal(self, pending: list[tuple]) -> None:
        """The journal rewritten with the last entry of each finished job it holds, then ``pending``."""
        entries = journal.read(self._journal, JOB_FIELDS)
        fresh = {entry[0] for entry in pending}
        kept = [entry for name, entry in entries.last.items() if name not in fresh and _settled_in(self.written, name)]
        self._rewrite_journal(kept + pending)

    def _remove_status(self, name: str) -> None:
        """The status file, kept as a spare (its journal entry, if any, is dead from now on: it
        names a file that is gone)."""
        self.spares.retire(self.home.status_file(name))

    def write_index(self, controller_info: dict) -> None:
        """``run/index.json``: every job's summary row, for ``gflowctl get jobs``. A cache of the
        status files (written without fsync: losing it in a crash costs nothing). Rows are kept as
        JSON text per job, so a rewrite costs a join, not a serialisation of every job."""
        listed = len(self.written) + len(self.unwritten)
        rows, on_disk = self._rows, self._on_disk
        disk_rows = self._disk_rows.read() if on_disk else None
        if on_disk and disk_rows is None:  # the file changed in place under us: build those rows
            log.warning("%s changed while gflowd had it open; index rows built from the records", self._start_rows)
            self._forget_disk_rows()
        if len(rows) + len(on_disk) != listed:  # after load(): rows of the states read back
            written = self.written
            for name in written:  # (by name: a lean record's row is on disk, its record never built here)
                if name not in rows and name not in on_disk:
                    rows[name] = _index_row(name, written[name])
        if self._order is None or len(self._order) != listed:
            # the written names alone when none waits unwritten (a start): no set of 50,000 made first
            unwritten = self.unwritten
            self._order = sorted(self.written.keys() | unwritten.keys()) if unwritten else sorted(self.written)
        head = json.dumps(
            {"apiVersion": API_VERSION, "kind": "JobIndex", "updated": self.clock(), "controller": controller_info},
            separators=(",", ":"),
        )[:-1]
        if disk_rows is None:
            jobs = b",".join([rows[name] for name in self._order])
        elif not rows:  # a start's first index write: every row on disk
            jobs = self._disk_rows.joined(disk_rows, map(on_disk.__getitem__, self._order))
            del disk_rows
        else:
            row = self._disk_rows.row
            jobs = b",".join([rows.get(name) or row(disk_rows, on_disk[name]) for name in self._order])
            del disk_rows
        sweeps = json.dumps({n: s.summary() for n, s in sorted(self.written_sweeps.items())}, separators=(",", ":"))
        reservations = json.dumps(
            {n: r.summary() for n, r in sorted(self.written_reservations.items())}, separators=(",", ":")
        )
        payload = b"".join(
            [
                head.encode(),
                b',"jobs":{',
                jobs,
                b'},"sweeps":',
                sweeps.encode(),
                b',"reservations":',
                reservations.encode(),
                b"}",
            ]
        )
        self._flush_json()
        self._write_table()  # before the index: who sees the new index finds the table as new
        atomic_write(self.home.index_file, payload, durable=False)
        if self._loaded or self._loaded_facts:
            self._save_start_rows()
        if not on_disk:
            self._disk_rows.close()

    def _forget_disk_rows(self) -> None:
        """Every row of ``_on_disk`` built from its record instead; the file closed."""
        for name in self._on_disk:
            self._rows[name] = _index_row(name, self.written.get(name) or self.unwritten[name])
        self._on_disk = {}
        self._disk_rows.close()

    def _save_start_rows(self) -> None:
        """At the first index write: the rows of the records as load() read them, still unchanged,
        for the next start (``record/start_rows.py``), when this start built enough of them itself
        or the file holds enough dead entries. A cache: a failure costs the next start the rows."""
        loaded, self._loaded = self._loaded, {}
        lean, self._loaded_facts = self._loaded_facts, {}
        built = len(loaded) + len(lean) - self._rows_reused
        if built <= start_rows.SLACK and self._rows_memo_count - self._rows_reused <= start_rows.SLACK:
            return
        written, rows, on_disk, table = self.written, self._rows, self._on_disk, self._table
        disk_rows = self._disk_rows.read() if on_disk else None
        if on_disk and disk_rows is None:
            return  # the file changed in place under us: the next start builds the rows
        entries = []
        for name in [*lean, *loaded]:
            state = loaded.get(name)
            if state is None:  # a finished record kept lean: unchanged while written still holds it so
                unchanged = written.facts(name) is lean[name]
            else:
                now = written.get(name)
                unchanged = now is state or now == state
            row: bytes | memoryview | None = rows.get(name)
            if row is None and disk_rows is not None and name in on_disk:
                row = self._disk_rows.row(disk_rows, on_disk[name])
            if unchanged and row is not None and name in table:
                try:  # the file the record was read from: no pass wrote it since (else a new record)
                    key = journal.key_of(os.stat(self.home.status_file(name)))
                except OSError:
                    continue
                entries.append((name, *key, row, table[name], lean.get(name) or _lean_facts(state)))
        try:
            atomic_write(Path(self._start_rows), start_rows.payload(entries), durable=False)
        except (OSError, ValueError) as exc:
            log.debug("%s not written: %s", self._start_rows, exc)

    def _write_table(self) -> None:
        """``run/jobs.table`` (util/jobs_table.py): the rows changed since the last index write,
        appended as one frame; the whole table rewritten at start, after a failure, and when dead
        rows outgrow the live ones by ``TABLE_SLACK``. No fsync: a cache. A table that could not be
        written is removed (readers then use the index), never left behind stale."""
        table = self._table
        order = self._order or []
        if len(table) != len(order):  # after load(): the rows of the states read back
            for name in order:
                if name not in table:
                    self._table_set(name, self.written.get(name) or self.unwritten[name])
        pending, self._table_pending = self._table_pending, {}
        try:
            if self._table_rewrite or self._table_count + len(pending) > 2 * len(table) + TABLE_SLACK:
                rows = [table[name] for name in order]
                atomic_write(self.home.jobs_table, jobs_table.rewritten(rows), durable=False)
                self._table_count, self._table_rewrite = len(rows), False
            elif pending:
                journal.append(str(self.home.jobs_table), jobs_table.frame(list(pending.values())))
                self._table_count += len(pending)
            else:
                os.utime(self.home.jobs_table)  # current with this index (client/read/state.py read_table)
        except (OSError, ValueError) as exc:
            log.debug("jobs table not written: %s", exc)
            self._table_rewrite = True
            try:
                os.unlink(self.home.jobs_table)
            except OSError:
                pass

    def write_node(
        self, slots: Sequence[GpuSlot], source: str, cores: CorePool | None = None, limits: str | None = None
    ) -> None:
        gpus = []
        for slot in slots:
            gpu = slot.gpu
            entry = {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.display_name,  # a MIG instance: MIG 1g.10gb (GPU 0)
                "profile": gpu.profile or None,
                "parent": gpu.parent,
                "memory": format_quantity(gpu.memory_total),
                "memoryBytes": gpu.memory_total,  # exact, for tools comparing with nvidia-smi
                "memoryUsed": format_quantity(gpu.memory_used) or "0",
                # what NVML says is free now: what a job declaring gpuMemory is placed by
                "memoryFree": format_quantity(max(0, gpu.memory_total - max(gpu.memory_used, slot.used_memory))) or "0",
                "utilization": gpu.utilization,
                "state": slot.state,
                "jobs": list(slot.jobs),
            }
            if gpu.processes:
                others = {p.pid for p in slot.occupants}
                entry["processes"] = [_process_entry(p, p.pid in others) for p in gpu.processes]
            if gpu.error:
                entry["error"] = gpu.error
            if slot.cordon:
                entry["cordon"] = slot.cordon  # state Restricted: an admin's cordon or drain
            gpus.append({k: v for k, v in entry.items() if v is not None})
        data: dict = {"apiVersion": API_VERSION, "kind": "Node", "inventory": source, "gpus": gpus}
        if cores is not None:  # the CPU cores booked by resources.cpus
            data["cpus"] = {
                "total": len(cores.cores),
                "free": len(cores.cores) - len(cores.taken),
                "cores": format_cores(sorted(cores.cores)),
                "jobs": {
                    name: format_cores(sorted(c for c, n in cores.taken.items() if n == name))
                    for name in sorted(set(cores.taken.values()))
                },
            }
        if limits:
            data["limits"] = limits  # what the kernel enforces (cgroups), or why nothing is
        text = dump(data)
        if text != self._node_text:
            # no fsync: gflowd never reads it back; every pass after a crash writes it anew
            atomic_write(self.home.node_file, text, durable=False)
            self._node_text = text

    def write_gpu_usage(self, text: str) -> None:
        """Running attempts' GPU usage samples (``observe.gpu_usage``): statistics, so no fsync; the
        atomic rename still means a reader (gflowctl top) never sees half of it."""
        atomic_write(self.home.gpu_usage_file, text, durable=False)

    def events(self, events: Iterable[Event], now: float) -> None:
        lines = []
        for event in events:
            record = {
                "time": rfc3339(now),
                "type": event.type,
                "reason": event.reason,
                "object": f"{event.kind}/{event.object}" if event.object else "",
                "message": event.message,
            }
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
            level = logging.WARNING if event.type == "Warning" else logging.INFO
            log.log(level, "%s %s: %s", record["object"] or "-", event.reason, event.message)
        # one O_APPEND write: each event line lands whole, even with concurrent readers
        append_lines(self.home.events_file, lines, EVENTS_MAX_BYTES)
