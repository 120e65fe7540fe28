"""What the recorder writes per pass: a new job of a flood that is about to start gets its first
status file when it ends or has run for a moment (the index shows it meanwhile), and finished jobs'
records go to the records journal, which a restart reads and never trusts over a status file. Real
files in a temp home."""

from __future__ import annotations

import json
import os

from controller.client.read.objects import Job
from controller.client.read.state import read_status
from controller.model.conditions import set_condition
from controller.model.reasons import Condition, Phase, Reason
from controller.model.records import JOB_FIELDS, FrozenConditions, FrozenMapping, JobState
from controller.paths import Home
from controller.record.recorder import QUEUED_UNWRITTEN_MAX, RUNNING_UNWRITTEN_MAX, Recorder
from controller.util import records_journal as journal
from controller.util.yamlio import dump, load_own

T0 = 1_800_000_000.0


def _recorder(tmp_path, clock: list[float]) -> tuple[Recorder, Home]:
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    return Recorder(home, clock=lambda: clock[0]), home


def _index_jobs(recorder: Recorder, home: Home) -> dict:
    recorder.write_index({"pid": 1})
    return json.loads(home.index_file.read_text())["jobs"]


def _queued(name: str, created: float) -> JobState:
    return JobState(name=name, phase="Pending", reason="Queued", message="starts in a moment", created=created)


def _running(name: str, started: float) -> JobState:
    return JobState(name=name, phase="Running", reason="Started", created=T0, attempt=1, start_time=started)


def test_a_queued_new_job_is_in_the_index_and_gets_one_status_write_when_it_ends(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    assert recorder.write_states({"a": _queued("a", T0)}, [])  # the index changed
    assert not home.status_file("a").exists()
    assert _index_jobs(recorder, home)["a"]["reason"] == "Queued"
    clock[0] = T0 + 0.5
    assert recorder.write_states({"a": _running("a", T0 + 0.5)}, [])
    assert not home.status_file("a").exists() and recorder.status_writes == 0
    assert recorder.write_due == T0 + 0.5 + RUNNING_UNWRITTEN_MAX  # gflowd passes again by then
    assert _index_jobs(recorder, home)["a"]["phase"] == "Running"
    # readers of the status file get the index's row meanwhile
    assert read_status(home, "a")["status"]["phase"] == "Running"
    assert read_status(home, "a")["status"]["startTime"].endswith("Z")
    assert Job.from_status(read_status(home, "a")).phase == "Running"  # the Python client's get()
    clock[0] = T0 + 0.8
    recorder.write_states({"a": _finished("a")}, [])
    assert "phase: Succeeded" in home.status_file("a").read_text()
    assert recorder.status_writes == 1 and recorder.write_due is None
    assert _index_jobs(recorder, home)["a"]["phase"] == "Succeeded"


def test_a_flood_job_still_running_gets_its_running_status_when_due(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _queued("a", T0), "b": _queued("b", T0)}, [])
    clock[0] = T0 + 0.1
    recorder.write_states({"a": _running("a", T0 + 0.1)}, [])
    clock[0] = T0 + 0.2
    recorder.write_states({"a": _running("a", T0 + 0.1), "b": _running("b", T0 + 0.2)}, [])
    assert recorder.write_due == T0 + 0.1 + RUNNING_UNWRITTEN_MAX  # the earlier of the two
    clock[0] = T0 + 0.1 + RUNNING_UNWRITTEN_MAX
    recorder.write_states({"a": _running("a", T0 + 0.1), "b": _running("b", T0 + 0.2)}, [])
    assert "phase: Running" in home.status_file("a").read_text()
    assert not home.status_file("b").exists() and recorder.write_due == T0 + 0.2 + RUNNING_UNWRITTEN_MAX
    clock[0] = T0 + 5
    recorder.write_states({"b": _running("b", T0 + 0.2)}, [])
    assert "phase: Running" in home.status_file("b").read_text() and recorder.write_due is None


def test_a_job_started_outside_a_flood_gets_its_running_status_at_once(tmp_path):
    """Nothing was held back for it (it started in the pass that admitted it, or it had a status
    file already): its start is written in the pass that decided it."""
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _running("a", T0)}, [])
    assert "phase: Running" in home.status_file("a").read_text() and recorder.write_due is None
    recorder.write_states({"b": JobState(name="b", phase="Pending", reason="Resources", created=T0)}, [])
    clock[0] = T0 + 0.3
    recorder.write_states({"b": _running("b", T0 + 0.3)}, [])
    assert "phase: Running" in home.status_file("b").read_text() and recorder.write_due is None


def test_a_job_with_neither_status_file_nor_index_row_reads_as_none(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    assert read_status(home, "ghost") is None
    recorder.write_states({"a": _queued("a", T0)}, [])
    _index_jobs(recorder, home)
    assert read_status(home, "ghost") is None
    assert read_status(home, "a")["status"]["reason"] == "Queued"


def _limited(name: str, created: float) -> JobState:
    return JobState(name=name, phase="Pending", reason="JobLimit", message="64 CPU-only jobs run", created=created)


def test_a_flood_job_waiting_on_a_job_limit_gets_one_status_write_when_it_ends(tmp_path):
    """A flood of short CPU-only jobs over ``maxRunningCpuJobs``: each waits JobLimit, then Queued,
    runs and ends within seconds; its one status file is its end (the index shows the rest)."""
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    assert recorder.write_states({"a": _limited("a", T0)}, [])  # the index changed
    assert not home.status_file("a").exists()
    assert recorder.write_due == T0 + QUEUED_UNWRITTEN_MAX  # gflowd wakes to write it, should it still wait
    assert _index_jobs(recorder, home)["a"]["reason"] == "JobLimit"
    assert read_status(home, "a")["status"]["reason"] == "JobLimit"  # readers get the index's row
    clock[0] = T0 + 2
    recorder.write_states({"a": _queued("a", T0)}, [])
    clock[0] = T0 + 2.5
    recorder.write_states({"a": _running("a", T0 + 2.5)}, [])
    assert not home.status_file("a").exists()
    clock[0] = T0 + 3
    recorder.write_states({"a": _finished("a")}, [])
    assert "phase: Succeeded" in home.status_file("a").read_text()
    assert recorder.status_writes == 1


def test_a_job_held_back_then_out_of_the_pass_sight_gets_its_pending_status_when_due(tmp_path):
    """A held-back job that later passes do not look at (a backlog parked beyond its owner's queue
    head: ``only`` leaves it out) still gets its status file once due, and gflowd is woken for it."""
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    states = {"a": _limited("a", T0), "b": _limited("b", T0 + 1)}
    recorder.write_states(states, [])
    clock[0] = T0 + 5
    recorder.write_states(states, [], only=set())
    assert not home.status_file("a").exists() and recorder.write_due == T0 + QUEUED_UNWRITTEN_MAX
    clock[0] = T0 + QUEUED_UNWRITTEN_MAX
    recorder.write_states(states, [], only=set())
    assert "reason: JobLimit" in home.status_file("a").read_text()
    assert not home.status_file("b").exists() and recorder.write_due == T0 + 1 + QUEUED_UNWRITTEN_MAX
    clock[0] = T0 + 1 + QUEUED_UNWRITTEN_MAX
    recorder.write_states(states, [], only=set())
    assert "reason: JobLimit" in home.status_file("b").read_text() and recorder.write_due is None


class _CountingRecorder(Recorder):
    """Counts how often a record is asked whether it may wait (``_may_wait``)."""

    asked = 0

    def _may_wait(self, name, state, now):
        self.asked += 1
        return super()._may_wait(name, state, now)


def test_a_held_back_tail_carried_over_as_the_same_records_is_not_looked_at_until_due(tmp_path):
    """A flood's tail carried between passes (decide/queue.py ``carried_tail``) is in each pass's
    ``only`` as the very records held back before: not asked again (~10 us each, each pass), yet
    gflowd is still woken for the earliest and each is written once due."""
    clock = [T0]
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = _CountingRecorder(home, clock=lambda: clock[0])
    states = {"a": _limited("a", T0), "b": _limited("b", T0 + 1)}
    recorder.write_states(states, [])
    assert recorder.asked == 2
    for step in range(1, 6):
        clock[0] = T0 + step
        recorder.write_states(states, [], only={"a", "b"})
        assert recorder.write_due == T0 + QUEUED_UNWRITTEN_MAX
    assert recorder.asked == 2 and recorder.status_writes == 0
    states["b"] = _queued("b", T0 + 1)  # a new record of a held-back job is looked at
    recorder.write_states(states, [], only={"a", "b"})
    assert recorder.asked == 3 and _index_jobs(recorder, home)["b"]["reason"] == "Queued"
    clock[0] = T0 + QUEUED_UNWRITTEN_MAX
    recorder.write_states(states, [], only={"a", "b"})
    assert "reason: JobLimit" in home.status_file("a").read_text()
    assert not home.status_file("b").exists() and recorder.write_due == T0 + 1 + QUEUED_UNWRITTEN_MAX
    clock[0] = T0 + 1 + QUEUED_UNWRITTEN_MAX
    recorder.write_states(states, [], only={"a", "b"})
    assert "reason: Queued" in home.status_file("b").read_text() and recorder.write_due is None


def test_a_job_waiting_for_gpus_gets_its_pending_status_at_once(tmp_path):
    """Only a turn in a flood is held back: a job waiting for GPUs (or anything else) is written."""
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": JobState(name="a", phase="Pending", reason="Resources", created=T0)}, [])
    assert "reason: Resources" in home.status_file("a").read_text() and recorder.write_due is None


def test_a_job_queued_for_long_gets_its_pending_status(tmp_path):
    clock = [T0 + QUEUED_UNWRITTEN_MAX + 1]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _queued("a", T0)}, [])
    assert "reason: Queued" in home.status_file("a").read_text()


def test_a_queued_job_deleted_before_it_started_leaves_no_trace(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _queued("a", T0), "b": _queued("b", T0)}, [])
    assert set(_index_jobs(recorder, home)) == {"a", "b"}
    recorder.write_states({"b": _queued("b", T0)}, ["a"])
    assert set(_index_jobs(recorder, home)) == {"b"}
    assert not home.status_file("a").exists()


def _journal(home: Home) -> dict:
    return journal.read(str(home.records_journal), JOB_FIELDS).last


def test_journal_entries_are_written_for_finished_jobs_only(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.load()  # starts the journal
    running = JobState(name="a", phase="Running", reason="Started", created=T0, attempt=1, start_time=T0)
    recorder.write_states({"a": running}, [])
    assert home.status_file("a").exists() and "a" not in _journal(home)
    # as the controller makes them: StrEnum members, which the journal stores as their text
    done = JobState(
        name="a",
        phase=Phase.Succeeded,
        reason=Reason.Completed,
        created=T0,
        attempt=1,
        start_time=T0,
        completion_time=T0 + 1,
        exit_code=0,
        conditions=[
            {
                "type": Condition.Admitted,
                "status": "True",
                "reason": "Valid",
                "message": "ok",
                "lastTransitionTime": "2027-01-15T08:00:00.000Z",
            }
        ],
    )
    recorder.write_states({"a": done}, [])
    entry = _journal(home)["a"]
    row = entry[4]
    assert journal.entry_key(entry) == journal.key_of(os.stat(home.status_file("a")))
    assert JobState.from_row(row) == done
    assert not (home.run_dir / "status-json").exists()


def test_a_record_read_back_from_the_journal_is_compact_and_reads_as_written(tmp_path):
    """What a restart keeps of a finished job: its conditions and usage as the journal's flat tuples
    (one string for two equal times), read as the lists and mappings they were; the status it writes
    is the one written before; changing it (a rerun) works on real dicts."""
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.load()
    when = "2027-01-15T08:00:00.000Z"
    conditions = [
        {
            "type": Condition.Admitted,
            "status": "True",
            "reason": "Valid",
            "message": "manifest is valid",
            "lastTransitionTime": when,
        },
        {
            "type": Condition.Scheduled,
            "status": "True",
            "reason": "Bound",
            "message": "started on GPU 0",
            "lastTransitionTime": "".join(when),
        },  # equal, not the same string
    ]
    done = JobState(
        name="a",
        phase=Phase.Succeeded,
        reason=Reason.Completed,
        created=T0,
        attempt=1,
        start_time=T0,
        completion_time=T0 + 1,
        exit_code=0,
        conditions=conditions,
        usage={"cpuSeconds": 1.5, "peakMemoryBytes": 1 << 20},
    )
    odd = JobState(
        name="b",
        phase=Phase.Failed,
        reason=Reason.Error,
        created=T0,
        attempt=1,
        exit_code=1,
        conditions=[{"type": "Custom", "status": "True"}],
    )  # not the five keys: kept as it is
    recorder.write_states({"a": done, "b": odd}, [])
    written = home.status_file("a").read_text()
    states = Recorder(home).load()[0]
    a, b = states["a"], states["b"]
    assert a == done and done == a and b == odd
    assert isinstance(a.conditions, FrozenConditions) and isinstance(a.usage, FrozenMapping)
    assert a.conditions.flat[4] is a.conditions.flat[9]  # one time string for both
    assert list(a.conditions) == conditions and len(a.conditions) == 2 and a.conditions[1]["reason"] == "Bound"
    assert dict(a.usage) == {"cpuSeconds": 1.5, "peakMemoryBytes": 1 << 20} and a.usage.get("missing") is None
    assert type(b.conditions) is list and b.conditions == [{"type": "Custom", "status": "True"}]
    assert dump(a.to_status()) == written
    rerun = a.copy()
    assert type(rerun.usage) is dict and all(type(c) is dict for c in rerun.conditions)
    rerun.conditions = set_condition(rerun.conditions, Condition.Admitted, "False", "Invalid", "bad", "later")
    assert [c["status"] for c in rerun.conditions] == ["False", "True"] and rerun != a
    assert a.conditions[0]["status"] == "True"  # the record read back is untouched


def _finished(name: str, message: str = "attempt 1 exited with code 0") -> JobState:
    return JobState(
        name=name,
        phase="Succeeded",
        reason="Completed",
        message=message,
        created=T0,
        attempt=1,
        start_time=T0,
        completion_time=T0 + 1,
        exit_code=0,
    )


def _replace_status(home: Home, name: str, old: str, new: str) -> None:
    """As gflowd's atomic write does (a new inode), behind the journal's back."""
    status = home.status_file(name)
    staged = status.with_name(f".{name}.tmp")
    staged.write_text(status.read_text().replace(old, new))
    staged.replace(status)


def _journal_saying(home: Home, name: str, message: str) -> None:
    """Append an entry for ``name`` that names its status file as it is but says ``message``: what
    load then reports shows which of the two it read."""
    state = JobState.from_status(load_own(home.status_file(name).read_text()))
    state.message = message
    journal.append(
        str(home.records_journal),
        journal.frame([(name, *journal.key_of(os.stat(home.status_file(name))), state.to_row())]),
    )


def test_a_restart_reads_finished_jobs_from_the_journal_and_never_a_stale_entry(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.load()
    recorder.write_states({"a": _finished("a"), "b": _finished("b")}, [])
    _journal_saying(home, "a", "read from the journal")
    _journal_saying(home, "b", "read from the journal")
    # b's status file changed behind its entry (gflowd died between the two writes): the file wins
    _replace_status(home, "b", "attempt 1 exited with code 0", "read from the file")
    states = Recorder(home).load()[0]
    assert states["a"].message == "read from the journal"
    assert states["b"].message == "read from the file"


def test_a_restart_without_a_journal_reads_the_yaml_and_writes_the_journal_once(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _finished("a"), "b": _finished("b")}, [])
    home.records_journal.unlink(missing_ok=True)  # e.g. status files written by an older gflowd
    (home.run_dir / "status-json").mkdir()
    (home.run_dir / "status-json" / "a.json").write_text("{}\n")  # that gflowd's JSON copies: dropped
    assert Recorder(home).load()[0]["a"].phase == "Succeeded"
    assert set(_journal(home)) == {"a", "b"}
    assert not (home.run_dir / "status-json").exists()
    _journal_saying(home, "a", "read from the journal")
    assert Recorder(home).load()[0]["a"].message == "read from the journal"
    assert Recorder(home).load()[0]["b"] == _finished("b")


def test_a_journal_cut_short_is_read_up_to_the_cut_and_then_rewritten(tmp_path):
    """gflowd killed in the middle of an append: the entries before the cut count, the cut frame
    does not (its job is read from its YAML), and the next start rewrites the file whole."""
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.load()
    recorder.write_states({"a": _finished("a")}, [])
    recorder.write_states({"b": _finished("b"), "a": _finished("a")}, [])
    _journal_saying(home, "a", "a from the journal")
    whole = home.records_journal.read_bytes()
    _journal_saying(home, "b", "b from the journal")
    torn = home.records_journal.read_bytes()[:-7]
    for cut in (torn, whole[: len(whole) - 3], whole[:-40]):
        home.records_journal.write_bytes(cut)
        states = Recorder(home).load()[0]
        assert states["b"] == _finished("b")  # from its YAML
        assert states["a"].message in ("a from the journal", "attempt 1 exited with code 0")
        entries = journal.read(str(home.records_journal), JOB_FIELDS)
        assert not entries.torn and set(entries.last) == {"a", "b"}  # rewritten whole
    home.records_journal.write_bytes(b"something else entirely\n")  # another format: not read at all
    assert Recorder(home).load()[0] == {"a": _finished("a"), "b": _finished("b")}


def test_the_journal_is_appended_per_pass_and_rewritten_when_dead_entries_pile_up(tmp_path, monkeypatch):
    import controller.record.recorder as recorder_module

    monkeypatch.setattr(recorder_module, "JOURNAL_SLACK", 5)
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.load()
    inode = os.stat(home.records_journal).st_ino
    recorder.write_states({"a": _finished("a"), "b": _finished("b")}, [])
    recorder.write_states({"a": _finished("a", "again"), "b": _finished("b")}, [])
    assert os.stat(home.records_journal).st_ino == inode  # appended to, not replaced
    assert journal.read(str(home.records_journal), JOB_FIELDS).count == 3
    for k in range(8):  # a rerun job's entries: every one but the last is dead
        recorder.write_states({"a": _finished("a", f"run {k}"), "b": _finished("b")}, [])
    entries = journal.read(str(home.records_journal), JOB_FIELDS)
    assert entries.count <= 2 * 2 + 5 and JobState.from_row(entries.last["a"][4]).message == "run 7"
    recorder.write_states({"b": _finished("b")}, ["a"])
    assert Recorder(home).load()[0] == {"b": _finished("b")}  # a's entry names a file that is gone


def test_a_read_back_records_admission_verdict_is_the_one_its_conditions_say(tmp_path):
    """What a restart asks of 50,000 finished records (decide/lifecycle.py ``_finished_and_current``),
    read from the journal's flat conditions without building dicts: the same answer as the dicts give."""
    from controller.decide.lifecycle import _finished_and_current
    from controller.model.documents import AdmittedJob
    from controller.model.records import condition_verdicts

    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.load()
    valid = set_condition([], Condition.Admitted, "True", "Valid", "manifest is valid", "t0")
    valid = set_condition(valid, Condition.Scheduled, "True", "Bound", "started", "t0")
    other = set_condition(valid, Condition.Admitted, "True", "Valid", "admitted once more", "t1")
    twice = valid + [dict(valid[0], type=str(Condition.DuplicateName))]
    cases = {"valid": valid, "other": other, "twice": twice}
    for name, conditions in cases.items():
        state = _finished(name)
        state.conditions = conditions
        recorder.write_states({name: state}, [])
    states = Recorder(home).load()[0]
    types = (Condition.Admitted, Condition.DuplicateName)
    for name, conditions in cases.items():
        read_back = states[name].conditions
        assert isinstance(read_back, FrozenConditions)
        assert condition_verdicts(read_back, types) == condition_verdicts(conditions, types)
    job = AdmittedJob(
        "valid",
        None,
        "",
        "",
        0,
        "",
        "",
        priority=0,
        document="[]",
        build=lambda *a: None,  # type: ignore[arg-type]
    )
    for name, current in (("valid", True), ("other", False), ("twice", False)):
        record = states[name]
        job.name, job.spec_hash, job.run_hash, job.source = name, record.spec_hash, record.run_hash, record.manifest
        assert _finished_and_current(record, job) is current, name
