"""A real gflowd restarted on a home of finished jobs with ``run/start-rows.cache`` in place (its
index rows left on disk, record/start_rows.py) writes the index, the jobs table and the status files
a start without that file writes, byte for byte (the index's head aside: it names the new pid)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.paths import Home
from controller.record import start_rows
from controller.record.recorder import Recorder
from controller.util import jobs_table
from tests.helpers import job_status, wait_for, write_manifest

NAMES = [f"done-{i}" for i in range(6)]


def _what_a_start_wrote(home: Path) -> tuple[bytes, dict, dict[str, bytes]]:
    index = (home / "run" / "index.json").read_bytes()
    statuses = {p.name: p.read_bytes() for p in sorted((home / "status").glob("*.yaml"))}
    return index[index.index(b'"jobs":') :], jobs_table.read(str(home / "run" / "jobs.table")).rows, statuses


def _holds_open(pid: int, path: Path) -> bool:
    fds = f"/proc/{pid}/fd"
    return any(os.readlink(os.path.join(fds, fd)) == str(path) for fd in os.listdir(fds))


def test_a_restart_taking_its_index_rows_from_the_file_writes_what_a_restart_without_it_writes(
    home, gflowd, monkeypatch
):
    for name in NAMES:
        write_manifest(home / "jobs", f"{name}.yaml", f"metadata: {{name: {name}}}\nspec:\n  command: ['true']\n")
    first = gflowd()
    wait_for(
        lambda: all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in NAMES),
        message=lambda: f"every job Succeeded\n{first.stderr()}",
    )
    assert first.terminate() == 0
    # the file a start of more than start_rows.SLACK read-back records writes: here by gflowd's own recorder
    monkeypatch.setattr(start_rows, "SLACK", 0)
    recorder = Recorder(Home.resolve(home))
    states = recorder.load()[0]
    recorder.uid_of = lambda name: os.stat(home / "jobs" / f"{name}.yaml").st_uid
    recorder.write_states(dict(states), [], None)
    recorder.write_index({"pid": 1})
    cache = home / "run" / "start-rows.cache"
    assert cache.exists()

    with_file = gflowd()
    assert _holds_open(with_file.pid, cache)  # its rows are read from there, not kept in memory
    assert with_file.terminate() == 0
    taken = _what_a_start_wrote(home)

    cache.unlink()
    without = gflowd()
    assert not _holds_open(without.pid, cache)
    assert without.terminate() == 0
    assert _what_a_start_wrote(home) == taken
    assert set(taken[1]) == set(NAMES) and len(taken[2]) == len(NAMES)


@pytest.fixture(autouse=True)
def _linux_proc():
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
