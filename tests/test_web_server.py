"""The dashboard's file reading and caching (controller/web/server.py), on real files written by the
real Recorder, with an injected clock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from controller.model.records import JobState
from controller.paths import Home
from controller.record.recorder import Recorder
from controller.web.server import StateView, read_events_tail

T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def state_home(tmp_path: Path) -> Home:
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    return home


def test_without_an_index_the_status_files_are_read(state_home):
    Recorder(state_home).write_states(
        {
            "a": JobState(
                "a",
                phase="Succeeded",
                reason="Completed",
                devices=[1],
                gpus=1,
                start_time=T0 - 600,
                completion_time=T0 - 60,
                created=T0 - 700,
            ),
            "b": JobState(
                "b", phase="Pending", reason="Resources", message="needs 2 GPUs, 1 free", queue_position=1, gpus=2
            ),
        },
        [],
    )
    assert not state_home.index_file.exists()
    _, body = StateView(state_home, Clock(T0)).render(1.0)
    view = json.loads(body)
    assert [(q["name"], q["reason"], q["message"]) for q in view["queue"]] == [
        ("b", "Resources", "needs 2 GPUs, 1 free")
    ]
    (row,) = view["timeline"]["rows"]
    assert row["gpu"] == 1
    assert [(s["job"], s["start"], s["end"], s["phase"]) for s in row["spans"]] == [
        ("a", T0 - 600, T0 - 60, "Succeeded")
    ]
    assert view["updated"] is None


def test_rebuilt_when_a_state_file_changes_not_more_than_once_a_second(state_home):
    recorder = Recorder(state_home)
    recorder.write_states({"a": JobState("a", phase="Running", devices=[0], start_time=T0 - 5)}, [])
    recorder.write_index({"pid": 1})
    clock = Clock(T0)
    view = StateView(state_home, clock)
    etag1, body1 = view.render(6.0)
    assert view.render(6.0) == (etag1, body1)
    recorder.write_states(
        {"a": JobState("a", phase="Succeeded", devices=[0], start_time=T0 - 5, completion_time=T0)}, []
    )
    recorder.write_index({"pid": 1})
    assert view.render(6.0)[0] == etag1  # within a second: the same answer for every client
    clock.now += 1.5
    etag2, body2 = view.render(6.0)
    assert etag2 != etag1 and json.loads(body2)["counts"] == {"Succeeded": 1}
    clock.now += 1.5
    assert view.render(6.0)[0] == etag2  # nothing changed: same ETag, so the page gets a 304
    clock.now += 30
    assert view.render(6.0)[0] != etag2  # the window moved on
    assert view.render(2.0)[0] != view.render(6.0)[0]  # one answer per window size


def test_events_tail_skips_a_cut_first_line_and_garbage(tmp_path):
    path = tmp_path / "events.jsonl"
    lines = [
        json.dumps({"time": f"t{i}", "reason": "Started", "object": f"job/j{i}", "message": "x" * 50})
        for i in range(100)
    ]
    path.write_text("\n".join(lines[:99]) + "\nnot json\n[1, 2]\n" + lines[99] + "\n")
    tail = read_events_tail(path, max_bytes=1000)
    assert tail and tail[-1]["object"] == "job/j99"
    assert all(isinstance(e, dict) and e["reason"] == "Started" for e in tail)
    assert len(tail) < 100 and tail[0]["object"] == f"job/j{100 - len(tail)}"
    assert read_events_tail(tmp_path / "missing.jsonl") == []


def test_job_detail_is_the_status_the_folded_events_and_the_end_of_the_log(state_home):
    from controller.paths import UnsafeName
    from controller.web.server import job_detail

    recorder = Recorder(state_home)
    recorder.write_states({"a": JobState("a", phase="Running", reason="Started", devices=[0], start_time=T0 - 5)}, [])
    recorder.write_index({"pid": 1})
    lines = [
        json.dumps(
            {
                "time": "2027-01-15T08:00:00.000Z",
                "type": "Normal",
                "reason": "Resources",
                "object": "job/a",
                "message": "needs 1 GPU, 0 free",
            }
        )
    ] * 30
    lines.append(
        json.dumps(
            {
                "time": "2027-01-15T08:01:00.000Z",
                "type": "Normal",
                "reason": "Started",
                "object": "job/a",
                "message": "on GPU 0",
            }
        )
    )
    lines.append(
        json.dumps(
            {
                "time": "2027-01-15T08:02:00.000Z",
                "type": "Normal",
                "reason": "Started",
                "object": "job/b",
                "message": "other job",
            }
        )
    )
    state_home.events_file.write_text("\n".join(lines) + "\n")
    state_home.log_file("a").write_bytes(b"".join(b"line %d <b>\n" % i for i in range(5000)) + b"\x1b[31mlast\n")

    detail = job_detail(state_home, "a", 0)
    assert detail["status"]["kind"] == "JobStatus" and detail["status"]["status"]["phase"] == "Running"
    assert [(e["reason"], e["count"]) for e in detail["events"]] == [("Started", 1), ("Resources", 30)]
    assert detail["log"]["cut"] is True and detail["log"]["path"] == "logs/a.log"
    text = detail["log"]["text"]
    assert text.endswith("line 4999 <b>\n\x1blast\n".replace("\x1blast", "\x1b[31mlast"))
    assert text.startswith("line ") and len(text.encode()) <= 16 * 1024  # whole lines, the last 16 KiB
    assert detail["owner"] == "?"  # the status names no manifest file that exists
    assert job_detail(state_home, "nope", 0) is None
    with pytest.raises(UnsafeName):
        job_detail(state_home, "../etc", 0)
    # no manifest: the log's owner decides (this process's uid); anyone else, or an unknown viewer, is refused
    assert job_detail(state_home, "a", os.geteuid()) is not None
    from controller.web.server import Forbidden

    for stranger in (os.geteuid() + 4242, None):
        with pytest.raises(Forbidden, match=r"job/a is .*: its log and events are shown only to"):
            job_detail(state_home, "a", stranger)
