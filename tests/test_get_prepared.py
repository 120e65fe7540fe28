"""``gflowctl get jobs`` and ``-o json`` from the files gflowd prepares for them: the jobs table
(``run/jobs.table``, util/jobs_table.py: the rows the table prints, one file for every job) and the
JSON copies of every status written (``run/status-json.journal``). Checked: the recorder keeps both
as statuses change (appended, compacted, a job's user from admission); a reader never sees half of
either (a frame cut short is ignored, another format falls back to the index); and, against a real
gflowd, the CLI prints from them exactly what it prints from the index and the status files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import ctl, read_index, wait_for, wait_phase

from controller.model.records import JobState
from controller.paths import Home
from controller.record.recorder import TABLE_SLACK, Recorder
from controller.util import jobs_table
from controller.util import records_journal as journal
from controller.util.yamlio import load_own

T0 = 1_800_000_000.0


def _recorder(tmp_path: Path) -> tuple[Recorder, Home]:
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home, clock=lambda: T0)
    recorder.uid_of = {"a": 1001, "b": 1002}.get
    return recorder, home


def _state(name: str, phase: str = "Running", **fields) -> JobState:
    base = {"reason": "Started", "message": "started (CPU job)", "created": T0, "attempt": 1, "start_time": T0}
    if phase == "Succeeded":
        base = {"reason": "Completed", "message": "attempt 1 exited with code 0", "created": T0, "attempt": 1}
        base |= {"start_time": T0, "completion_time": T0 + 5, "exit_code": 0}
    if phase == "Pending":
        base = {"reason": "Unschedulable", "message": "needs 8 GPUs, this machine has 2", "created": T0}
    return JobState(name=name, phase=phase, manifest=f"jobs/{name}.yaml", **(base | fields))


def _table(home: Home) -> dict[str, tuple]:
    table = jobs_table.read(str(home.jobs_table))
    assert table is not None
    return table.rows


def _json_copies(home: Home) -> dict[str, str]:
    return {name: entry[4] for name, entry in journal.read(str(home.status_json_journal), ("json",)).last.items()}


def test_the_table_holds_each_jobs_row_as_printed_with_the_user_admission_read(tmp_path):
    recorder, home = _recorder(tmp_path)
    recorder.write_states({"a": _state("a", devices=[0, 1], gpus=2, labels={"team": "nlp"})}, [])
    recorder.write_index({"pid": 1})
    row = _table(home)["a"]
    assert dict(zip(jobs_table.FIELDS, row)) == {
        "name": "a",
        "uid": 1001,
        "phase": "Running",
        "gpus": "2",
        "devices": "0,1",
        "priority": "0",
        "created": T0,
        "reason": "Started",
        "completionTime": None,
        "labels": {"team": "nlp"},
        "owner": None,
        "manifest": "jobs/a.yaml",
    }
    inode = os.stat(home.jobs_table).st_ino
    recorder.write_states({"a": _state("a", "Succeeded"), "b": _state("b", "Pending")}, [])
    recorder.write_index({"pid": 1})
    assert os.stat(home.jobs_table).st_ino == inode  # appended to, not rewritten
    rows = _table(home)
    assert [(n, r[jobs_table.PHASE], r[jobs_table.UID]) for n, r in rows.items()] == [
        ("a", "Succeeded", 1001),
        ("b", "Pending", 1002),
    ]
    recorder.write_states({"b": _state("b", "Pending")}, ["a"])
    recorder.write_index({"pid": 1})
    assert list(_table(home)) == ["b"]  # a removed job's row goes
    os.utime(home.jobs_table, (1000, 1000))
    recorder.write_index({"pid": 1})  # nothing changed: the table is touched, current with the index
    assert home.jobs_table.stat().st_mtime > 1000


def test_a_manifest_that_changed_hands_changes_its_rows_user_at_the_next_resync(tmp_path):
    recorder, home = _recorder(tmp_path)
    states = {"a": _state("a", "Succeeded")}
    recorder.write_states(states, [])
    recorder.write_index({"pid": 1})
    recorder.uid_of = {"a": 1003}.get
    recorder.write_states(states, [], only=[])  # an ordinary pass looks at no row it did not change
    recorder.write_index({"pid": 1})
    assert _table(home)["a"][jobs_table.UID] == 1001
    recorder.write_states(states, [])  # a resync
    recorder.write_index({"pid": 1})
    assert _table(home)["a"][jobs_table.UID] == 1003


def test_the_table_is_rewritten_when_dead_rows_outgrow_the_live_ones(tmp_path):
    recorder, home = _recorder(tmp_path)
    for priority in range(TABLE_SLACK + 10):
        recorder.write_states({"a": _state("a", priority=priority)}, [])
        recorder.write_index({"pid": 1})
    table = jobs_table.read(str(home.jobs_table))
    assert table is not None and table.count < TABLE_SLACK + 3
    assert table.rows["a"][jobs_table.PRIORITY] == str(TABLE_SLACK + 9)


def test_a_table_cut_short_shows_the_rows_before_and_another_format_none(tmp_path):
    recorder, home = _recorder(tmp_path)
    recorder.write_states({"a": _state("a")}, [])
    recorder.write_index({"pid": 1})
    whole = home.jobs_table.read_bytes()
    recorder.write_states({"a": _state("a", "Succeeded")}, [])
    recorder.write_index({"pid": 1})
    newer = home.jobs_table.read_bytes()
    assert len(newer) > len(whole)
    for cut in range(len(whole), len(newer)):  # killed anywhere in the append: the table as before it
        home.jobs_table.write_bytes(newer[:cut])
        assert _table(home)["a"][jobs_table.PHASE] == "Running"
    for cut in (0, 10, len(jobs_table.HEADER) + 2, len(whole) - 1):  # no whole first frame: not a table
        home.jobs_table.write_bytes(newer[:cut])
        assert jobs_table.read(str(home.jobs_table)) is None
    home.jobs_table.write_bytes(newer.replace(b"python3", b"python2", 1))  # another Python's marshal
    assert jobs_table.read(str(home.jobs_table)) is None


def test_every_status_written_has_its_json_copy_the_text_json_gives_for_the_parsed_file(tmp_path):
    recorder, home = _recorder(tmp_path)
    pending = _state("b", "Pending", labels={"team": "nlp"}, queue_position=3, effective_priority=2.5)
    for states in ({"a": _state("a", devices=[1], gpus=1, pid=4242)}, {"a": _state("a", "Succeeded"), "b": pending}):
        recorder.write_states(states, [])
        recorder.write_index({"pid": 1})  # the copies are made with the index
        copies = _json_copies(home)
        for name in states:
            parsed = load_own(home.status_file(name).read_text())
            assert copies[name] == json.dumps(parsed, indent=2)
            assert journal.entry_key(journal.read(str(home.status_json_journal), ("json",)).last[name]) == (
                journal.key_of(os.stat(home.status_file(name)))
            )


def test_the_json_copies_are_rewritten_when_missing_or_outgrown(tmp_path):
    recorder, home = _recorder(tmp_path)
    recorder.write_states({"a": _state("a")}, [])
    recorder.write_index({"pid": 1})
    home.status_json_journal.unlink()  # an append has nowhere to go: the file is written anew, with it
    recorder.write_states({"a": _state("a", "Succeeded"), "b": _state("b")}, [])
    recorder.write_index({"pid": 1})
    assert set(_json_copies(home)) == {"a", "b"}
    size = home.status_json_journal.stat().st_size
    for priority in range(3000):  # ~3 MB of copies of one job: rewritten to about one copy
        recorder.write_states({"a": _state("a", "Succeeded", priority=priority), "b": _state("b")}, [])
        recorder.write_index({"pid": 1})
    assert home.status_json_journal.stat().st_size < size + (1 << 20) + 3000
    assert json.loads(_json_copies(home)["a"])["status"]["priority"] == 2999
    assert set(_json_copies(home)) == {"a", "b"}


# -- the CLI, against a real gflowd --------------------------------------------------------------------

JOB = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: {name}
  labels: {{team: {team}}}
spec:
  command: {command}
{extra}"""
JOBS = {
    "done": ("vision", "[sh, -c, 'echo done']", ""),
    "broke": ("nlp", "[sh, -c, 'exit 3']", ""),
    "runs": ("vision", "[sleep, '300']", ""),
    "huge": ("nlp", "[sh, -c, 'exit 0']", "  resources: {gpus: 8}\n"),
    "held": ("nlp", "[sh, -c, 'exit 0']", "  suspend: true\n"),
}
PHASES = {"done": "Succeeded", "broke": "Failed", "runs": "Running", "huge": "Pending", "held": "Pending"}


def _settled_home(home: Path, gflowd, fake_gpus: Path) -> None:
    """Jobs in every phase the table shows, then gflowd stopped (the files as it left them)."""
    daemon = gflowd("--fake-gpus", fake_gpus)
    for name, (team, command, extra) in JOBS.items():
        (home / "jobs" / f"{name}.yaml").write_text(JOB.format(name=name, team=team, command=command, extra=extra))
    for name, phase in PHASES.items():
        wait_phase(home, name, phase, daemon=daemon)
    wait_for(
        lambda: all(
            ((read_index(home) or {}).get("jobs", {}).get(n) or {}).get("phase") == p for n, p in PHASES.items()
        ),
        timeout=30,
        message="the index to show every job's phase",
    )
    daemon.terminate()


def _no_age(text: str) -> str:
    return "\n".join(" ".join(line.split()[:6] + line.split()[7:]) for line in text.splitlines())


LISTINGS = [
    ("get", "jobs"),
    ("get", "jobs", "-A", "-o", "name"),
    ("get", "jobs", "-l", "team=nlp"),
    ("get", "jobs", "--phase", "R,pending"),
    ("get", "jobs", "--user", "root", "-o", "name"),
    ("get", "jobs", "--user", "nobody"),
    ("get", "jobs", "runs", "held", "gone"),
    ("get", "jobs", "gone"),
    ("get", "jobs", "-o", "json"),
    ("get", "job/runs", "-o", "json"),
    ("get", "jobs", "huge", "done", "-o", "yaml"),
]


def test_get_jobs_prints_from_the_table_what_it_prints_from_the_index(home, gflowd, fake_gpus):
    _settled_home(home, gflowd, fake_gpus)
    table = home / "run" / "jobs.table"
    assert table.exists()
    from_table = [ctl(home, *argv) for argv in LISTINGS]
    table.rename(home / "run" / "jobs.table.aside")  # no table (an older gflowd): the index and the status files
    from_index = [ctl(home, *argv) for argv in LISTINGS]
    for argv, new, old in zip(LISTINGS, from_table, from_index):
        assert (new.returncode, new.stderr) == (old.returncode, old.stderr), argv
        assert _no_age(new.stdout) == _no_age(old.stdout), argv
    assert "root" in from_table[0].stdout.splitlines()[1].split()  # USER: the manifest's owner


def test_a_table_its_gflowd_no_longer_keeps_is_not_read(home, gflowd, fake_gpus):
    """An older gflowd (no table) runs after a newer one: its index moves on, the table does not."""
    _settled_home(home, gflowd, fake_gpus)
    listed = ctl(home, "get", "jobs", "-o", "name").stdout.split()
    table, index = home / "run" / "jobs.table", home / "run" / "index.json"
    rows = jobs_table.read(str(table)).rows
    rows.pop("runs")  # what the table would say were it stale
    table.write_bytes(jobs_table.rewritten(sorted(rows.values())))
    now = index.stat().st_mtime
    os.utime(table, (now - 1, now - 1))  # written with that index: believed
    assert "job/runs" not in ctl(home, "get", "jobs", "-o", "name").stdout.split()
    os.utime(table, (now - 60, now - 60))  # an index written a minute after it: not the table's
    assert ctl(home, "get", "jobs", "-o", "name").stdout.split() == listed


def test_get_jobs_reads_the_table_alone_and_json_reads_no_yaml_for_any_phase(home, gflowd, fake_gpus):
    """The table is one file: with the index unreadable the table is whole. ``-o json`` of running
    and waiting jobs comes from their JSON copies and, once a listing has read the manifests, their
    specs from gflowctl's own cache of them: the YAML reader is not even imported."""
    _settled_home(home, gflowd, fake_gpus)
    listed = ctl(home, "get", "jobs")
    index, status = home / "run" / "index.json", home / "status"
    index.write_text("{ not json")
    status.rename(home / "status.aside")  # nor a status file to read
    again = ctl(home, "get", "jobs")
    assert _no_age(again.stdout) == _no_age(listed.stdout) and len(again.stdout.splitlines()) == 1 + len(JOBS)
    (home / "status.aside").rename(status)
    ctl(home, "get", "jobs", "-o", "json")  # reads the manifests once: gflowctl's cache of them
    for argv in (
        ["get", "jobs", "-o", "json"],
        ["get", "job/runs", "-o", "json"],
        ["get", "jobs", "huge", "-o", "json"],
    ):
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, io; from controller.cli.main import main; sys.stdout = io.StringIO(); "
                f"code = main({argv!r}); out = sys.stdout.getvalue(); sys.stdout = sys.__stdout__; "
                "print(code, 'controller.util.yamlio' in sys.modules, out.count('\"kind\": \"Job\"'), "
                "out.count('\"spec\": {'))",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "GFLOW_HOME": str(home)},
            timeout=60,
        )
        shown = len(JOBS) if argv[1] == "jobs" and len(argv) == 4 else 1
        assert probe.stdout.split() == ["0", "False", str(shown), str(shown)], (argv, probe.stdout, probe.stderr)


def test_a_wide_tree_lines_a_sweep_up_with_its_children():
    """A Sweep's line has every -o wide column (it lacked PARAMS: the table could not be drawn)."""
    from controller.cli.get import _format_table, _tree_table

    child = {"phase": "Succeeded", "owner": "grid", "manifest": "jobs/grid.yaml", "message": "child done"}
    sweeps = {"grid": {"phase": "Succeeded", "children": 1, "manifest": "jobs/grid.yaml", "message": "sweep done"}}
    lines = _format_table(_tree_table([("grid-0", child)], sweeps, wide=True, user_of=lambda manifest: "root"))
    at = lines[0].index("MESSAGE")
    assert [line[at:] for line in lines] == ["MESSAGE", "sweep done", "child done"]
