"""Concurrent edits of one manifest are never lost silently (issue 14, finding 5).

Every test starts real ``gflowctl`` processes at once on one file. Each edit must either land in the
final file or exit 1 with a one-line error saying it did not: an exit 0 whose change is missing is
the bug. A writer that does not take gflowctl's lock (a user's script) is simulated by a real
process appending to the file in place while the edits run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import wait_phase
from ruamel.yaml import YAML

_yaml = YAML(typ="safe")


def start_ctl(home: Path, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "GFLOW_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", *argv],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_all(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, out, err))
    return results


def documents(path: Path) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in _yaml.load_all(path.read_text()) if d}


def jobs_text(names: list[str]) -> str:
    """Suspended jobs: gflowd knows them (its index says which file defines each) and runs none."""
    return "---\n".join(f"metadata: {{name: {n}}}\nspec:\n  command: [sleep, '60']\n  suspend: true\n" for n in names)


def assert_failure_is_one_line(code: int, err: str, what: str) -> None:
    assert code == 1, f"{what}: exit {code}: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, f"{what}: {err}"


def test_a_cancel_among_priority_edits_lands_or_says_it_failed_while_a_script_writes(home, gflowd):
    manifest = home / "jobs" / "one.yaml"
    manifest.write_text(jobs_text(["one"]))
    daemon = gflowd()
    wait_phase(home, "one", "Pending", daemon=daemon)
    stop = home / "stop-writer"
    # a user's script: appends a comment in place every few ms, never taking gflowctl's lock
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import os, random, time
        n = 0
        while not os.path.exists({str(stop)!r}):
            n += 1
            with open({str(manifest)!r}, "a") as f:
                f.write(f"# script {{n}}\\n")
            time.sleep(random.uniform(0.02, 0.08))
        """),
        ]
    )
    try:
        edits = [start_ctl(home, "set", "priority", "one", str(p)) for p in range(1, 10)]
        edits.append(start_ctl(home, "cancel", "one"))
        edits += [start_ctl(home, "set", "priority", "one", str(p)) for p in range(10, 20)]
        results = run_all(edits)
    finally:
        stop.touch()
        writer.wait(timeout=30)
    spec = documents(manifest)["one"]["spec"]
    code, out, err = results[9]
    if code == 0:
        assert out == "job/one cancelled\n"
        assert spec.get("cancelled") is True, f"cancel said it was done, but the file has none:\n{manifest.read_text()}"
    else:
        assert_failure_is_one_line(code, err, "cancel")
    landed = {p for p, (c, _, _) in zip([*range(1, 10), None, *range(10, 20)], results) if c == 0 and p is not None}
    for (code, _, err), what in zip(results, ["priority"] * 9 + ["cancel"] + ["priority"] * 10):
        if code != 0:
            assert_failure_is_one_line(code, err, what)
    assert landed, "no priority edit landed at all"
    assert spec["priority"] in landed, "the file's priority is none of the edits that said they were done"


def test_priority_and_cancel_on_nine_jobs_of_one_file_all_land(home, gflowd):
    names = [f"a{i}" for i in range(1, 10)]
    manifest = home / "jobs" / "nine.yaml"
    manifest.write_text(jobs_text(names))
    daemon = gflowd()  # its index tells gflowctl which file defines each job
    wait_phase(home, "a9", "Pending", daemon=daemon)
    procs = []
    for name in names:
        procs.append(start_ctl(home, "set", "priority", name, "7"))
        procs.append(start_ctl(home, "cancel", name))
    for code, _out, err in run_all(procs):
        assert code == 0, err
    docs = documents(manifest)
    lost = [n for n in names if docs[n]["spec"].get("priority") != 7 or docs[n]["spec"].get("cancelled") is not True]
    assert not lost, f"edits lost on {lost}:\n{manifest.read_text()}"


def test_twenty_parallel_edits_to_a_ten_job_file_all_land(home, gflowd):
    names = [f"j{i}" for i in range(10)]
    manifest = home / "jobs" / "ten.yaml"
    manifest.write_text(jobs_text(names))
    daemon = gflowd()
    wait_phase(home, "j9", "Pending", daemon=daemon)
    procs = []
    for i, name in enumerate(names):
        procs.append(start_ctl(home, "set", "priority", name, str(100 + i)))
        procs.append(start_ctl(home, "patch", "job", name, "-p", f'{{"metadata": {{"labels": {{"n": "v{i}"}}}}}}'))
    for code, _out, err in run_all(procs):
        assert code == 0, err
    docs = documents(manifest)
    lost = [
        n
        for i, n in enumerate(names)
        if docs[n]["spec"].get("priority") != 100 + i or (docs[n]["metadata"].get("labels") or {}).get("n") != f"v{i}"
    ]
    assert not lost, f"edits lost on {lost}:\n{manifest.read_text()}"


def test_two_concurrent_applies_into_one_file_never_lose_a_change(home, gflowd, tmp_path):
    daemon = gflowd()
    manifest = home / "jobs" / "pair.yaml"
    manifest.write_text(
        "metadata: {name: x}\nspec:\n  command: [sleep, '60']\n  suspend: true\n---\n"
        "metadata: {name: y}\nspec:\n  command: [sleep, '60']\n  suspend: true\n"
    )
    wait_phase(home, "x", "Pending", daemon=daemon)
    wait_phase(home, "y", "Pending", daemon=daemon)
    for trial in range(1, 11):
        sources = []
        for name in ("x", "y"):
            source = tmp_path / f"{name}-{trial}.yaml"
            source.write_text(
                f"metadata: {{name: {name}}}\nspec:\n  command: [sleep, '60']\n  suspend: true\n  priority: {trial}\n"
            )
            sources.append(source)
        results = run_all([start_ctl(home, "apply", "-f", str(s)) for s in sources])
        for (code, out, err), name in zip(results, ("x", "y")):
            assert (code, out) == (0, f"job/{name} configured\n"), f"trial {trial}: {err}"
        docs = documents(manifest)
        assert [docs["x"]["spec"].get("priority"), docs["y"]["spec"].get("priority")] == [trial, trial], (
            f"trial {trial}: both applies said configured, the file has:\n{manifest.read_text()}"
        )


def test_apply_right_after_gflowd_wrote_a_status_edits_its_file_not_a_new_one(home, gflowd, tmp_path):
    """gflowd writes a job's status at once and its jobs table and index (where apply looks up which
    file defines a name) up to a second later. An apply in that gap created ``jobs/x.yaml`` beside
    the file defining x, a duplicate name (CI, under load). The gap is made here by taking x out of
    the table and index that a real gflowd wrote."""
    import json

    from controller.paths import Home

    manifest = home / "jobs" / "pair.yaml"
    manifest.write_text(jobs_text(["x", "y"]))
    daemon = gflowd()
    wait_phase(home, "x", "Pending", daemon=daemon)
    wait_phase(home, "y", "Pending", daemon=daemon)
    daemon.terminate()
    layout = Home(home, home / "jobs")
    layout.jobs_table.unlink()  # without a table, the index is read
    index = json.loads(layout.index_file.read_text())
    del index["jobs"]["x"]
    layout.index_file.write_text(json.dumps(index))
    source = tmp_path / "x.yaml"
    source.write_text("metadata: {name: x}\nspec:\n  command: [sleep, '60']\n  suspend: true\n  priority: 7\n")

    ((code, out, err),) = run_all([start_ctl(home, "apply", "-f", str(source))])
    assert (code, out) == (0, "job/x configured\n"), err
    assert not (home / "jobs" / "x.yaml").exists()
    assert documents(manifest)["x"]["spec"]["priority"] == 7
