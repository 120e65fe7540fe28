"""A start takes each unchanged record's index and table rows from ``run/start-rows.cache``
(record/start_rows.py) instead of building them, and builds them for every record whose status
file changed since: what it writes is what a start without the file writes. Real files in a temp
home, the recorder driven as gflowd's first pass drives it."""

from __future__ import annotations

import json
import os

import pytest

from controller.model.records import JobState
from controller.paths import Home
from controller.record import start_rows
from controller.record.recorder import Recorder
from controller.util import jobs_table

T0 = 1_800_000_000.0


@pytest.fixture(autouse=True)
def _every_start_writes_the_file(monkeypatch):
    monkeypatch.setattr(start_rows, "SLACK", 0)


def _finished(name: str, message: str = "attempt 1 exited with code 0") -> JobState:
    return JobState(
        name=name,
        phase="Succeeded",
        reason="Completed",
        message=message,
        created=T0,
        attempt=1,
        start_time=T0 + 0.1234567,  # finer than a status file keeps: a read-back record differs
        completion_time=T0 + 1.7654321,
        exit_code=0,
    )


def _start(home: Home, uid: int = 1000) -> tuple[dict, dict]:
    """A gflowd start: load, a first full pass that changes nothing, the first index write.
    Returns the index's jobs and the jobs table's rows as written."""
    recorder = Recorder(home, clock=lambda: T0 + 10)
    states = recorder.load()[0]
    recorder.uid_of = lambda name: uid
    recorder.write_states(dict(states), [], None)
    recorder.write_index({"pid": 1})
    return json.loads(home.index_file.read_text())["jobs"], jobs_table.read(str(home.jobs_table)).rows


def _memo(home: Home) -> dict:
    """name -> (name, ino, mtime_ns, size, index row, table row), as ``start_rows.payload`` takes them."""
    memo = start_rows.read(str(home.run_dir / "start-rows.cache"))
    rows = memo.rows.read()
    try:
        return {
            name: (name, *start_rows.KEY.unpack(memo.key(at)), bytes(memo.rows.row(rows, at)), memo.table_rows[at])
            for at, name in enumerate(memo.names)
        }
    finally:
        memo.rows.close()


def _home_of_finished_jobs(tmp_path, names) -> Home:
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home, clock=lambda: T0)
    recorder.load()
    recorder.write_states({n: _finished(n) for n in names}, [])
    recorder.write_index({"pid": 1})
    return home


def test_a_start_writes_the_rows_of_the_records_it_read_and_the_next_start_writes_the_same(tmp_path):
    home = _home_of_finished_jobs(tmp_path, ["a", "b", "c"])
    assert _memo(home) == {}  # records made by a pass are not read-back records: never memoized
    first = _start(home)
    memo = _memo(home)
    assert set(memo) == {"a", "b", "c"}
    assert memo["a"][1:4] == tuple(
        getattr(os.stat(home.status_file("a")), f) for f in ("st_ino", "st_mtime_ns", "st_size")
    )
    again = _start(home)
    assert again == first
    os.unlink(home.run_dir / "start-rows.cache")
    assert _start(home) == first  # built from the records: byte for byte what the file gave


def test_a_start_takes_an_unchanged_records_rows_from_the_file_and_builds_a_changed_ones(tmp_path):
    home = _home_of_finished_jobs(tmp_path, ["a", "b"])
    _start(home)
    path = home.run_dir / "start-rows.cache"
    memo = _memo(home)
    # rows that say which source they came from (a's and b's keys kept: they name the files as they are)
    planted = [
        (n, *memo[n][1:4], memo[n][4].replace(b"attempt 1 exited", b"from the memo"), memo[n][5]) for n in ("a", "b")
    ]
    path.write_bytes(start_rows.payload(planted))
    status = home.status_file("b")  # b's status file rewritten behind the file's back (a new inode)
    staged = status.with_name(".b.tmp")
    staged.write_text(status.read_text().replace("attempt 1 exited with code 0", "read from the file"))
    staged.replace(status)
    jobs, _ = _start(home)
    assert jobs["a"]["message"] == "from the memo with code 0"
    assert jobs["b"]["message"] == "read from the file"
    assert _memo(home)["b"][1:4] != planted[1][1:4]  # written anew with b's new key


def test_a_memoized_table_row_whose_user_changed_is_rebuilt(tmp_path):
    home = _home_of_finished_jobs(tmp_path, ["a"])
    _start(home, uid=1000)
    assert _memo(home)["a"][5][jobs_table.UID] == 1000
    _, table = _start(home, uid=1001)  # the manifest is another user's file now
    assert table["a"][jobs_table.UID] == 1001


@pytest.mark.parametrize("damage", ["torn", "other format", "garbage frame", "rows and names apart"])
def test_a_damaged_file_is_ignored_and_written_anew(tmp_path, damage):
    home = _home_of_finished_jobs(tmp_path, ["a", "b"])
    first = _start(home)
    path = home.run_dir / "start-rows.cache"
    data = path.read_bytes()
    path.write_bytes(
        {
            "torn": data[:-5],
            "other format": b"gflow-start-rows 0 python2.7 marshal1\n" + data.split(b"\n", 1)[1],
            "garbage frame": start_rows.FORMAT + (5).to_bytes(4, "little") + b"\xff\xff\xff\xff\xff",
            "rows and names apart": start_rows.FORMAT
            + start_rows.frame((["a", "b"], start_rows.KEY.pack(1, 2, 3) * 2, (6).to_bytes(8, "little"), [(), ()]))
            + b'"a":{}',
        }[damage]
    )
    assert _start(home) == first
    assert set(_memo(home)) == {"a", "b"}


def test_a_record_a_pass_changed_since_the_file_was_written_gets_rows_built_from_it(tmp_path):
    """The usual case after a run: gflowd wrote b's new status (and its journal entry), so the
    next start reads b from the journal, under a key the file's entry for b no longer has."""
    home = _home_of_finished_jobs(tmp_path, ["a", "b"])
    _start(home)
    recorder = Recorder(home, clock=lambda: T0 + 20)
    states = recorder.load()[0]
    recorder.write_states({**states, "b": _finished("b", "ran again")}, [], None)
    recorder.write_index({"pid": 2})
    jobs, table = _start(home)
    assert jobs["b"]["message"] == "ran again"
    assert table["b"][jobs_table.COMPLETION] == jobs["b"]["completionTime"]


def _keep_running(home: Home, uid: int = 1000) -> Recorder:
    """A gflowd start that stays up: load, the first pass, the first index write."""
    recorder = Recorder(home, clock=lambda: T0 + 10)
    states = recorder.load()[0]
    recorder.uid_of = lambda name: uid
    recorder.write_states(dict(states), [], None)
    recorder.write_index({"pid": 1})
    return recorder


def test_the_rows_stay_on_disk_and_later_index_writes_read_them_back(tmp_path):
    """The memo's index rows are not held in memory: each index write reads them from the file
    gflowd keeps open, even once the file was replaced (by rename, as gflowd writes it)."""
    home = _home_of_finished_jobs(tmp_path, ["a", "b", "c"])
    first = _start(home)
    recorder = _keep_running(home)
    assert recorder._rows == {} and set(recorder._on_disk) == {"a", "b", "c"}
    path = home.run_dir / "start-rows.cache"
    staged = path.with_name(".replaced")
    staged.write_bytes(start_rows.payload([]))
    staged.replace(path)
    recorder.write_states({**recorder.written, "d": _finished("d")}, [], ["d"])
    recorder.write_index({"pid": 1})
    jobs = json.loads(home.index_file.read_text())["jobs"]
    assert {n: jobs[n] for n in first[0]} == first[0] and jobs["d"]["phase"] == "Succeeded"


@pytest.mark.parametrize("cut", [5, 10_000])
def test_a_file_cut_short_in_place_under_a_running_gflowd_costs_only_building_the_rows(tmp_path, cut):
    home = _home_of_finished_jobs(tmp_path, ["a", "b", "c"])
    first = _start(home)
    recorder = _keep_running(home)
    path = home.run_dir / "start-rows.cache"
    os.truncate(path, max(0, path.stat().st_size - cut))
    recorder.write_states({**recorder.written, "b": _finished("b", "ran again")}, [], ["b"])
    recorder.write_index({"pid": 1})
    jobs = json.loads(home.index_file.read_text())["jobs"]
    assert jobs["b"]["message"] == "ran again"
    assert {n: jobs[n] for n in ("a", "c")} == {n: first[0][n] for n in ("a", "c")}
    assert recorder._on_disk == {}  # built from the records, the file let go


def test_a_start_takes_a_finished_records_facts_from_the_file_as_its_journal_row_gives_them(tmp_path, monkeypatch):
    """The file holds each finished record's facts as a start keeps it lean (model/lean_records.py),
    written by the start that built the record (no file yet) as by one that kept it lean: the next
    start takes them and the table row as they are, and they are the facts of the journal's row."""
    from controller.record import recorder as recorder_module
    from controller.util import records_journal as journal

    home = _home_of_finished_jobs(tmp_path, ["a", "b"])
    _start(home)  # no file yet: every record built from the journal's rows, the file written
    memo = start_rows.read(str(home.run_dir / "start-rows.cache"))
    memo.rows.close()
    facts = dict(zip(memo.names, memo.facts))
    fields = recorder_module.JOB_FIELDS
    rows = {e[0]: e[4] for e in journal.read(str(home.run_dir / "records.journal"), fields).last.values()}
    assert facts == {n: recorder_module._facts_of_row(rows[n]) for n in ("a", "b")}

    def unused(row):
        raise AssertionError("facts made from a journal row")

    monkeypatch.setattr(recorder_module, "_facts_of_row", unused)
    recorder = Recorder(home, clock=lambda: T0 + 10)
    states = recorder.load()[0]
    assert {n: states.facts(n) for n in ("a", "b")} == facts
    assert set(recorder._table) == {"a", "b"}
