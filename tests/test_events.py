"""Events: ``gflowctl get events`` (table, JSON, --for, -w across a rotation), repeats folded in
``describe``, and events.jsonl rotated by size with both files read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import wait_for
from test_cli import run

from controller.cli.events import age_text, read_events
from controller.client.read.events import aggregate
from controller.model.plan import Event
from controller.paths import Home
from controller.record.recorder import Recorder


@pytest.fixture
def home(tmp_path, monkeypatch) -> Home:
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "home"))
    h = Home.resolve(tmp_path / "home")
    h.ensure()
    return h


def log_events(home: Home, *events: tuple[str, str, str, str], at: float | None = None) -> None:
    Recorder(home).events([Event(t, r, o, m) for t, r, o, m in events], at or time.time())


def test_get_events_lists_filters_and_prints_json(home):
    log_events(home, ("Normal", "Started", "a", "bound to GPU 0"), ("Warning", "Error", "b", "exited with code 3"))
    code, out, _ = run("get", "events")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split()[1:4] == ["Normal", "Started", "job/a"] and lines[2].split()[1:4] == [
        "Warning",
        "Error",
        "job/b",
    ]
    code, out, _ = run("get", "events", "--for", "job/b", "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    assert [(e["object"], e["reason"], e["message"]) for e in items] == [("job/b", "Error", "exited with code 3")]
    assert run("get", "events", "--for", "a")[1].count("job/a") == 1  # a bare name is a job
    code, _, err = run("get", "events", "--for", "pod/a")
    assert code == 1 and "use job/NAME, sweep/NAME or reservation/NAME" in err
    code, _, err = run("get", "events", "-o", "yaml")
    assert code == 1 and "-o json" in err


def test_rotation_by_size_keeps_one_previous_file_and_readers_read_both(home, monkeypatch):
    import controller.record.recorder as recorder

    monkeypatch.setattr(recorder, "EVENTS_MAX_BYTES", 400)
    for i in range(12):
        log_events(home, ("Normal", "Started", f"job{i}", "x" * 60))
    assert home.events_file.with_name("events.jsonl.1").exists()
    assert home.events_file.stat().st_size <= 400 + 200
    names = [e["object"] for e in read_events(home)]
    kept = len(names)
    assert names == [f"job/job{i}" for i in range(12 - kept, 12)], names  # oldest first, nothing twice
    assert kept > 4  # more than the current file alone holds


def test_describe_folds_repeated_events(home):
    now = float(int(time.time()))  # whole seconds: event times are kept to the millisecond
    log_events(home, ("Normal", "Started", "r", "bound to GPU 0"), at=now - 1200)
    for ago in (900, 600, 300):
        log_events(home, ("Warning", "BackOff", "r", "attempt failed; retry"), at=now - ago)
    groups = aggregate(read_events(home, "job/r"))
    assert [(g["reason"], g["count"]) for g in groups] == [("Started", 1), ("BackOff", 3)]
    assert age_text(groups[1], now) == "5m0s (x3 over 10m)"
    assert age_text(groups[0], now) == "20m"


def test_describe_shows_the_folded_count(home):
    from test_cli import JOB

    (home.spec_dir / "r.yaml").write_text(JOB.format(name="r"))
    now = time.time()
    for ago in (900, 600, 300):
        log_events(home, ("Warning", "BackOff", "r", "attempt failed; retry"), at=now - ago)
    code, out, _ = run("describe", "job", "r")
    assert code == 0
    [line] = [row for row in out.splitlines() if "BackOff" in row]
    assert "(x3 over 10m)" in line and line.rstrip().endswith("attempt failed; retry")


@pytest.mark.e2e
def test_watch_follows_new_events_across_a_rotation(home):
    log_events(home, ("Normal", "Started", "before", "one"))
    env = {**os.environ, "GFLOW_HOME": str(home.root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "get", "events", "-w", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        objects = lambda: [json.loads(ln)["object"] for ln in list(lines)]
        wait_for(lambda: objects() == ["job/before"], message="the existing event")
        log_events(home, ("Normal", "Started", "second", "two"))
        wait_for(lambda: objects() == ["job/before", "job/second"], message="a new event")
        # rotate the way gflowd does, with an event written to the old file just before
        log_events(home, ("Normal", "Started", "third", "three"))
        os.replace(home.events_file, home.events_file.with_name("events.jsonl.1"))
        log_events(home, ("Normal", "Started", "fourth", "four"))
        wait_for(
            lambda: objects() == ["job/before", "job/second", "job/third", "job/fourth"],
            message=lambda: f"all events once: {objects()}",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_get_events_without_any_events_says_so(home):
    code, out, err = run("get", "events")
    assert code == 0 and out == "" and "No events found." in err
