"""A start that stat'ed every status file and found the status folder unchanged meanwhile leaves
``run/status-stamp.json`` (record/status_stamp.py); the next start, finding the folder and the
records journal as that start left them, takes the journal's entries without a ``stat`` per file,
and reads what a start stat'ing every file reads. Anything that makes, removes or renames a status
file, touches the journal, or a folder changed too recently (the racy rule) means a ``stat`` of each
again. Real files in a temp home, the recorder driven as gflowd's first pass drives it."""

from __future__ import annotations

import json
import os
import time

from controller.model.records import JobState
from controller.paths import Home
from controller.record import status_stamp
from controller.record.recorder import Recorder
from controller.util import jobs_table

T0 = 1_800_000_000.0
NAMES = ["a", "b", "c", "d"]


def _finished(name: str, message: str = "attempt 1 exited with code 0") -> JobState:
    return JobState(
        name=name,
        phase="Succeeded",
        reason="Completed",
        message=message,
        created=T0,
        attempt=1,
        start_time=T0 + 0.5,
        completion_time=T0 + 1.5,
        exit_code=0,
    )


def _home(tmp_path) -> Home:
    """Four finished jobs' status files and journal entries, the folder last changed a minute ago."""
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home, clock=lambda: T0)
    recorder.load()
    recorder.write_states({n: _finished(n) for n in NAMES}, [])
    recorder.write_index({"pid": 1})
    _age(home)
    return home


def _age(home: Home) -> None:
    """The status folder's mtime a minute back (its ctime stays now: nobody can set it)."""
    minute_ago = time.time_ns() - 60 * 10**9
    os.utime(home.status_dir, ns=(minute_ago, minute_ago))


def _start(home: Home) -> tuple[Recorder, dict, dict, dict]:
    """A gflowd start: load, a first full pass that changes nothing, the first index write.
    Returns the recorder, each job's record, and the index's jobs and table rows it wrote."""
    recorder = Recorder(home, clock=lambda: T0 + 10)
    states = recorder.load()[0]
    recorder.uid_of = lambda name: 1000
    records = {name: states[name] for name in states}
    recorder.write_states(dict(states), [], None)
    recorder.write_index({"pid": 1})
    index = json.loads(home.index_file.read_text())["jobs"]
    return recorder, records, index, jobs_table.read(str(home.jobs_table)).rows


def _replace_status(home: Home, name: str, state: JobState) -> None:
    """``name``'s status file replaced by rename, as gflowd writes one (by a recorder of its own)."""
    other = Home.resolve(home.root.parent / "elsewhere")
    other.ensure()
    writer = Recorder(other, clock=lambda: T0)
    writer.load()
    writer.write_states({name: state}, [])
    os.rename(other.status_file(name), home.status_file(name))


def test_a_start_after_one_that_stated_every_file_stats_none_and_reads_the_same(tmp_path):
    home = _home(tmp_path)
    first, records, index, table = _start(home)
    assert first.status_stats == len(NAMES)
    assert (home.run_dir / "status-stamp.json").exists()

    second, again, index_again, table_again = _start(home)
    assert second.status_stats == 0
    assert again == records and index_again == index and table_again == table


def test_a_status_file_replaced_after_the_stamp_is_seen_even_with_the_folders_mtime_put_back(tmp_path):
    """A rename into the folder sets its mtime and ctime: the stamp no longer holds, every file is
    stat'ed, and the new file is read; putting the mtime back (a coarse clock would keep it) leaves
    the new ctime."""
    home = _home(tmp_path)
    _start(home)
    before = os.stat(home.status_dir)
    _replace_status(home, "b", _finished("b", "attempt 1 exited with code 0, replaced"))
    os.utime(home.status_dir, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(home.status_dir).st_mtime_ns == before.st_mtime_ns

    recorder, records, _, _ = _start(home)
    assert recorder.status_stats == len(NAMES)
    assert records["b"].message == "attempt 1 exited with code 0, replaced"


def test_a_status_file_added_or_removed_after_the_stamp_is_seen(tmp_path):
    home = _home(tmp_path)
    _start(home)
    os.unlink(home.status_file("a"))
    _replace_status(home, "e", _finished("e"))

    recorder, records, index, _ = _start(home)
    assert recorder.status_stats == len(NAMES) - 1  # e has no journal entry yet: read from its YAML
    assert sorted(records) == sorted(index) == ["b", "c", "d", "e"]


def test_a_folder_changed_within_a_second_of_the_start_is_not_stamped(tmp_path):
    """The racy rule: a change right after the start's look might keep the folder's coarse mtime."""
    home = _home(tmp_path)
    now = time.time_ns()
    os.utime(home.status_dir, ns=(now, now))
    first, records, _, _ = _start(home)
    assert first.status_stats == len(NAMES) and not (home.run_dir / "status-stamp.json").exists()
    second, again, _, _ = _start(home)
    assert second.status_stats == len(NAMES) and again == records


def test_a_journal_written_since_the_stamp_means_every_file_is_stated(tmp_path):
    home = _home(tmp_path)
    _start(home)
    with open(home.records_journal, "ab") as handle:  # what an append of a later pass does to its key
        handle.write(b"")
    os.utime(home.records_journal, ns=(1, 1))
    recorder, _, _, _ = _start(home)
    assert recorder.status_stats == len(NAMES)


def test_a_torn_or_foreign_stamp_is_ignored(tmp_path):
    home = _home(tmp_path)
    _, records, _, _ = _start(home)
    stamp = home.run_dir / "status-stamp.json"
    text = stamp.read_text()
    for damaged in (text[:-9], text.replace('"format": 1', '"format": 2'), "[]", ""):
        stamp.write_text(damaged)
        recorder, again, _, _ = _start(home)
        assert recorder.status_stats == len(NAMES) and again == records
    assert json.loads(stamp.read_text())["format"] == status_stamp.FORMAT  # written anew


def test_an_entry_that_did_not_match_is_stated_again_while_the_stamp_holds(tmp_path):
    """A status file unreadable as YAML whose journal entry is stale stays unmatched: the stamp
    names it, and each later start still checks it (and skips it), never trusting its entry."""
    home = _home(tmp_path)
    path = home.status_file("c")
    path.write_text("kind: [unclosed\n")  # in place, by hand: what the stamp's assumption excludes...
    _age(home)  # ...but the in-place write of a start's own check is caught: the entry's key differs
    first, records, _, _ = _start(home)
    assert first.status_stats == len(NAMES) and "c" not in records
    assert json.loads((home.run_dir / "status-stamp.json").read_text())["unmatched"] == ["c"]
    second, again, _, _ = _start(home)
    assert second.status_stats == 1 and again == records


def test_a_start_that_rewrites_the_journal_stamps_no_unmatched_entry(tmp_path):
    """Every status file replaced (a home copied with ``cp -a``: new inodes): the start reads each
    from its YAML and rewrites the journal with their keys as they are now; its stamp names no
    entry as unmatched, so the start after it stats none."""
    home = _home(tmp_path)
    _start(home)
    for name in NAMES:  # the same bytes under a new inode each
        path = home.status_file(name)
        copy = path.with_name(f".{name}.copy")
        copy.write_bytes(path.read_bytes())
        os.rename(copy, path)
    _age(home)
    first, records, _, _ = _start(home)
    assert first.status_stats == len(NAMES)
    assert json.loads((home.run_dir / "status-stamp.json").read_text())["unmatched"] == []
    second, again, _, _ = _start(home)
    assert second.status_stats == 0 and again == records
