"""What the recorder writes per pass: a new job of a flood that is about to start gets its first
status file when it starts (the index shows it meanwhile), and JSON copies are kept for finished
jobs only. Real files in a temp home."""

from __future__ import annotations

import json

from controller.model.records import JobState
from controller.paths import Home
from controller.record.recorder import QUEUED_UNWRITTEN_MAX, Recorder

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


def test_a_queued_new_job_is_in_the_index_and_gets_one_status_write_when_it_starts(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    queued = _queued("a", T0)
    assert recorder.write_states({"a": queued}, [])  # the index changed
    assert not home.status_file("a").exists()
    assert _index_jobs(recorder, home)["a"]["reason"] == "Queued"
    running = JobState(name="a", phase="Running", reason="Started", created=T0, attempt=1, start_time=T0 + 0.5)
    clock[0] = T0 + 0.5
    recorder.write_states({"a": running}, [])
    assert "phase: Running" in home.status_file("a").read_text()
    assert recorder.status_writes == 1
    assert _index_jobs(recorder, home)["a"]["phase"] == "Running"


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


def test_json_copies_are_written_for_finished_jobs_only(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    running = JobState(name="a", phase="Running", reason="Started", created=T0, attempt=1, start_time=T0)
    recorder.write_states({"a": running}, [])
    assert home.status_file("a").exists() and not home.status_json_file("a").exists()
    done = JobState(name="a", phase="Succeeded", reason="Completed", created=T0, attempt=1, start_time=T0,
                    completion_time=T0 + 1, exit_code=0)
    recorder.write_states({"a": done}, [])
    copy = home.status_json_file("a").read_text()
    assert json.loads(copy.split("\n", 1)[1])["status"]["phase"] == "Succeeded"


def _finished(name: str, message: str = "attempt 1 exited with code 0") -> JobState:
    return JobState(name=name, phase="Succeeded", reason="Completed", message=message, created=T0, attempt=1,
                    start_time=T0, completion_time=T0 + 1, exit_code=0)


def test_a_restart_reads_finished_jobs_from_their_json_copies_and_never_a_stale_copy(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _finished("a"), "b": _finished("b")}, [])
    # the copy is what load reads: make it say something the YAML does not (same identity line)
    copy = home.status_json_file("a")
    copy.write_text(copy.read_text().replace("attempt 1 exited with code 0", "read from the copy"))
    # b's status file changed behind its copy (gflowd died between the two writes): the file wins
    status = home.status_file("b")
    staged = status.with_name(".b.tmp")
    staged.write_text(status.read_text().replace("attempt 1 exited with code 0", "read from the file"))
    staged.replace(status)
    states = Recorder(home).load()[0]
    assert states["a"].message == "read from the copy"
    assert states["b"].message == "read from the file"


def test_a_restart_writes_the_missing_json_copy_of_a_finished_job_once(tmp_path):
    clock = [T0]
    recorder, home = _recorder(tmp_path, clock)
    recorder.write_states({"a": _finished("a")}, [])
    home.status_json_file("a").unlink()  # e.g. status files written by an older gflowd
    assert Recorder(home).load()[0]["a"].phase == "Succeeded"
    assert home.status_json_file("a").exists()
    assert Recorder(home).load()[0]["a"] == _finished("a")
