"""A real gflowd restarted on a home of finished jobs keeps them lean (their records as the records
journal's rows, model/lean_records.py; their manifests as the parse cache's facts, CachedJob) and
writes the index, the jobs table and the status files a start that built every record from its YAML
and parsed every manifest writes, byte for byte (the index's head aside: it names the new pid); the
finished jobs then behave as ever when touched: an edited one runs again as a new
generation, a deleted one loses its status, a new job depending on one starts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from controller.paths import Home
from controller.record import start_rows, status_stamp
from controller.record.recorder import Recorder
from controller.util import jobs_table
from tests.helpers import job_status, wait_for, write_manifest

NAMES = [f"done-{i}" for i in range(6)]


def _what_a_start_wrote(home: Path) -> tuple[bytes, dict, dict[str, bytes]]:
    index = (home / "run" / "index.json").read_bytes()
    statuses = {p.name: p.read_bytes() for p in sorted((home / "status").glob("*.yaml"))}
    return index[index.index(b'"jobs":') :], jobs_table.read(str(home / "run" / "jobs.table")).rows, statuses


def _manifest(name: str, command: str = "true", extra: str = "") -> str:
    return f"metadata: {{name: {name}}}\nspec:\n  command: ['{command}']\n{extra}"


def _every_job_succeeded_then_stop(home, gflowd) -> None:
    """NAMES' manifests run to Succeeded by a gflowd, which then stops cleanly."""
    for name in NAMES:
        write_manifest(home / "jobs", f"{name}.yaml", _manifest(name))
    first = gflowd()
    wait_for(
        lambda: all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in NAMES),
        message=lambda: f"every job Succeeded\n{first.stderr()}",
    )
    assert first.terminate() == 0


def test_a_restart_on_lean_records_writes_what_a_restart_from_the_yaml_writes_and_touched_jobs_run_as_ever(
    home, gflowd
):
    _every_job_succeeded_then_stop(home, gflowd)
    assert (home / "run" / "records.journal").exists()  # what the next start keeps as rows
    minute_ago = time.time_ns() - 60 * 10**9  # the status folder last changed well before the next start
    os.utime(home / "status", ns=(minute_ago, minute_ago))

    lean = gflowd()  # stats each status file, and leaves the stamp (record/status_stamp.py)
    assert lean.terminate() == 0
    stamp = json.loads((home / "run" / "status-stamp.json").read_text())
    assert stamp["folder"] == status_stamp.folder_key(str(home / "status"))  # this start stats none
    trusting = gflowd()
    assert trusting.terminate() == 0
    from_rows = _what_a_start_wrote(home)

    (home / "run" / "records.journal").unlink()  # every record built from its status file's YAML
    (home / "run" / "start-rows.cache").unlink(missing_ok=True)
    (home / "run" / "status-stamp.json").unlink()
    (home / "run" / "manifest-cache.json").unlink()  # and every manifest parsed (a start: CachedJobs)
    built = gflowd()
    assert built.terminate() == 0
    assert _what_a_start_wrote(home) == from_rows
    assert set(from_rows[1]) == set(NAMES) and len(from_rows[2]) == len(NAMES)

    again = gflowd()  # lean again: the journal was rewritten by that start
    write_manifest(home / "jobs", "done-0.yaml", _manifest("done-0", command="/bin/true"))
    os.unlink(home / "jobs" / "done-1.yaml")
    write_manifest(home / "jobs", "after.yaml", _manifest("after", extra="  dependsOn: [done-2]\n"))
    wait_for(
        lambda: (
            (job_status(home, "done-0") or {}).get("observedGeneration") == 2
            and job_status(home, "done-0").get("phase") == "Succeeded"
            and job_status(home, "done-0").get("attempt") == 2
            and job_status(home, "done-1") is None
            and (job_status(home, "after") or {}).get("phase") == "Succeeded"
        ),
        message=lambda: f"done-0 ran again, done-1 gone, after ran\n{again.stderr()}",
    )
    assert all((job_status(home, n) or {}).get("attempt") == 1 for n in NAMES[2:])
    assert again.terminate() == 0


def test_a_start_whose_start_rows_miss_a_record_builds_only_that_one(home, gflowd, monkeypatch):
    """The index rows of records not in ``run/start-rows.cache`` (a job edited since the file was
    written) are built from those records alone: the finished jobs kept lean stay unbuilt (a start
    after any edit read all 50,000 status files)."""
    _every_job_succeeded_then_stop(home, gflowd)
    monkeypatch.setattr(start_rows, "SLACK", 0)  # the file a start of more than SLACK read-back records writes
    recorder = Recorder(Home.resolve(home))
    recorder.uid_of = lambda name: os.stat(home / "jobs" / f"{name}.yaml").st_uid
    recorder.write_states(recorder.load()[0], [], None)
    recorder.write_index({"pid": 1})
    assert (home / "run" / "start-rows.cache").exists()

    edit = gflowd()  # done-0's status rewritten: the file's entry for it no longer holds
    write_manifest(home / "jobs", "done-0.yaml", _manifest("done-0", extra="  priority: 5\n"))
    wait_for(
        lambda: (job_status(home, "done-0") or {}).get("priority") == 5,
        message=lambda: f"done-0's new priority recorded\n{edit.stderr()}",
    )
    assert edit.terminate() == 0

    monkeypatch.setattr(start_rows, "SLACK", 10**9)  # read the file, never rewrite it here
    recorder = Recorder(Home.resolve(home))
    recorder.uid_of = lambda name: os.stat(home / "jobs" / f"{name}.yaml").st_uid
    states = recorder.load()[0]
    assert set(states.loaded_names()) == set(NAMES[1:])
    recorder.write_states(states, [], None)
    recorder.write_index({"pid": 1})
    assert states._built == {}


@pytest.fixture(autouse=True)
def _linux_proc():
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
