"""``gflowctl stats``: the computation on hand-made history (every figure checked by hand), and a
real gflowd whose finished jobs are deleted still counted from run/history.jsonl."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys

import pytest
from helpers import wait_for, wait_phase, write_manifest

from controller.cli.stats import compute

NOW = 100_000.0
SINCE = 10_000.0


def rec(job, phase, start, end, gpus=1, wait=None, attempt=1, user="alice", labels=None, final=None):
    return {
        "job": job,
        "attempt": attempt,
        "phase": phase,
        "final": phase in ("Succeeded", "Failed", "Cancelled") if final is None else final,
        "start": start,
        "end": end,
        "gpus": gpus,
        "wait": wait,
        "user": user,
        "labels": labels or {},
    }


HISTORY = [
    rec("old", "Succeeded", 1000.0, 2000.0, gpus=8, wait=5.0),  # before the window
    rec("a", "Succeeded", 20_000.0, 23_600.0, gpus=2, wait=60.0, labels={"team": "vision"}),
    rec("b", "Failed", 30_000.0, 33_600.0, gpus=1, wait=120.0, user="bob", labels={"team": "nlp"}),
    rec("c", "Pending", 40_000.0, 41_800.0, gpus=1, wait=10.0, user="bob"),  # failed attempt, retried
    rec("c", "Succeeded", 42_000.0, 43_800.0, gpus=1, wait=100.0, attempt=2, user="bob"),
    rec("d", "Cancelled", None, 50_000.0, gpus=0, labels={"team": "vision"}),  # dependency failed
]
ROWS = {
    "a": {
        "phase": "Succeeded",
        "attempt": 1,
        "startTime": 20_000.0,
        "completionTime": 23_600.0004,
        "gpus": 2,
        "labels": {"team": "vision"},
    },
    "r": {
        "phase": "Running",
        "attempt": 1,
        "startTime": NOW - 1800,
        "created": NOW - 1900,
        "gpus": 4,
        "labels": {"team": "vision"},
        "manifest": "jobs/r.yaml",
    },
    "p": {"phase": "Pending", "attempt": 0, "gpus": 1},
    "f": {
        "phase": "Failed",
        "attempt": 1,
        "startTime": 60_000.0,
        "completionTime": 60_360.0,
        "created": 59_990.0,
        "gpus": 0,
        "manifest": "jobs/f.yaml",
    },
}


def test_compute_counts_outcomes_waits_runtimes_and_gpu_hours():
    users = {"jobs/r.yaml": "carol", "jobs/f.yaml": "alice"}.get
    r = compute(HISTORY, ROWS, SINCE, NOW, users=users)
    # outcomes: a, b, c (once: its retry is not an outcome), d, and f (index only); not "old"
    assert r["outcomes"] == {"Succeeded": 2, "Failed": 2, "Cancelled": 1} and r["jobs"] == 5
    assert (r["running"], r["pending"]) == (1, 1)
    assert r["successRate"] == pytest.approx(0.5)
    # waits: a 60, b 120, c 10 and 100, f 10 (start - created, attempt 1), r 100
    assert r["wait"]["count"] == 6 and r["wait"]["mean"] == pytest.approx(400 / 6) and r["wait"]["p95"] == 120
    # runtimes of finished attempts: 3600, 3600, 1800, 1800, 360
    assert (
        r["runtime"]["count"] == 5 and r["runtime"]["mean"] == pytest.approx(11160 / 5) and r["runtime"]["p95"] == 3600
    )
    # GPU-hours: a 2, b 1, c 0.5 + 0.5, r 4 x 0.5 so far = 6
    assert r["gpuHours"] == pytest.approx(6.0)
    unmeasured = {"gpuHoursUsed": 0.0, "gpuHoursMeasured": 0.0, "cpuHours": 0.0}  # no usage samples, no cgroups
    assert r["byUser"]["alice"] == {"jobs": 3, "succeeded": 1, "failed": 1, "gpuHours": 2.0, **unmeasured}
    assert r["byUser"]["bob"] == {"jobs": 2, "succeeded": 1, "failed": 1, "gpuHours": 2.0, **unmeasured}
    assert r["byUser"]["carol"] == {"jobs": 0, "succeeded": 0, "failed": 0, "gpuHours": 2.0, **unmeasured}
    assert r["byLabel"]["team=vision"] == {"jobs": 2, "succeeded": 1, "failed": 0, "gpuHours": 4.0, **unmeasured}
    assert (r["gpuHoursUsed"], r["gpuHoursMeasured"]) == (0.0, 0.0)


def test_compute_sums_the_cgroups_cpu_time_and_peak_memory_of_ended_attempts():
    history = [
        {**rec("a", "Succeeded", 20_000.0, 23_600.0), "cpuSeconds": 5400.0, "peakMemoryBytes": 2 << 30},
        {**rec("b", "Failed", 30_000.0, 33_600.0, user="bob"), "cpuSeconds": 1800.0, "peakMemoryBytes": 1 << 30},
        rec("c", "Succeeded", 40_000.0, 41_000.0, user="bob"),  # no cgroup: no usage, counts nothing
    ]
    r = compute(history, {}, SINCE, NOW)
    assert r["cpuHours"] == pytest.approx(2.0)
    assert r["byUser"]["alice"]["cpuHours"] == pytest.approx(1.5) and r["byUser"]["bob"]["cpuHours"] == pytest.approx(
        0.5
    )
    assert r["peakMemory"] == {"mean": 1.5 * (1 << 30), "max": 2 << 30, "count": 2}


def test_compute_with_a_selector_and_a_window_that_cuts_an_attempt():
    r = compute(HISTORY, ROWS, 21_800.0, NOW, selector=[("team", "vision", True)])
    assert r["outcomes"] == {"Succeeded": 1, "Failed": 0, "Cancelled": 1}
    assert r["gpuHours"] == pytest.approx(2 * 0.5 + 2.0)  # a's last half hour in the window, r so far
    assert r["wait"]["count"] == 1  # a started before the window: only r's start counts


@pytest.mark.e2e
def test_gpu_hours_used_against_allocated_on_a_scripted_history(home):
    # alice: "ddp" held 4 GPUs for 2 h and used 2 GPU-hours (one GPU busy); "ok" 1 GPU for 1 h, 0.9 used;
    # bob: "nb" 2 GPUs for 1 h, 0.1 used; "cpu" no GPUs; "old" had no samples (no NVML): unmeasured;
    # "run" is running: 2 GPUs for 30 min so far, 0.75 used (from the index)
    now = 1_800_000_000.0
    lines = [
        {**rec("ddp", "Succeeded", now - 10_000, now - 2800, gpus=4, labels={"team": "vision"}), "gpuUsed": 2.0},
        {**rec("ok", "Succeeded", now - 5000, now - 1400, gpus=1, labels={"team": "vision"}), "gpuUsed": 0.9},
        {**rec("nb", "Failed", now - 4000, now - 400, gpus=2, user="bob", labels={"team": "nlp"}), "gpuUsed": 0.1},
        rec("cpu", "Succeeded", now - 3000, now - 100, gpus=0, user="bob"),
        rec("old", "Succeeded", now - 9000, now - 5400, gpus=1, user="bob"),
    ]
    (home / "run").mkdir()
    (home / "run" / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    index = {
        "jobs": {
            "run": {
                "phase": "Running",
                "attempt": 1,
                "startTime": now - 1800,
                "gpus": 2,
                "labels": {"team": "nlp"},
                "gpuHoursUsed": 0.75,
            }
        }
    }
    (home / "run" / "index.json").write_text(json.dumps(index))
    r = compute([*lines], index["jobs"], 0.0, now, users=lambda m: "carol")
    assert r["gpuHours"] == pytest.approx(8 + 1 + 2 + 1 + 1)
    assert r["gpuHoursUsed"] == pytest.approx(2.0 + 0.9 + 0.1 + 0.75)
    assert r["gpuHoursMeasured"] == pytest.approx(8 + 1 + 2 + 1)  # "old" was never sampled
    assert r["byUser"]["alice"]["gpuHoursUsed"] == pytest.approx(2.9) and r["byUser"]["alice"]["gpuHours"] == 9.0
    assert r["byUser"]["bob"]["gpuHoursUsed"] == pytest.approx(0.1) and r["byUser"]["bob"]["gpuHoursMeasured"] == 2.0
    assert (
        r["byLabel"]["team=nlp"]["gpuHoursUsed"] == pytest.approx(0.85) and r["byLabel"]["team=nlp"]["gpuHours"] == 3.0
    )
    # a window that cuts ddp's 2 h in half counts half of its used hours
    cut = compute([lines[0]], {}, now - 10_000 + 3600, now, users=lambda m: "alice")
    assert (cut["gpuHours"], cut["gpuHoursUsed"]) == (pytest.approx(4.0), pytest.approx(1.0))
    # the same through the real CLI on these files (the running job at its real age is left out)
    (home / "run" / "index.json").write_text(json.dumps({"jobs": {}}))
    result = gflowctl(home, "stats", "--since", "all", "-o", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["gpuHours"], out["gpuHoursUsed"], out["gpuHoursMeasured"]) == (pytest.approx(12.0), 3.0, 11.0)
    text = gflowctl(home, "stats", "--since", "all").stdout
    assert "GPU-hours:     12.00 allocated, 3.00 used (27% of the 11.00 measured; utilization-weighted)" in text
    alice = next(line for line in text.splitlines() if line.startswith("alice"))
    assert alice.split()[-3:] == ["9.00", "2.90", "(32%)"]


def gflowctl(home, *args):
    env = {**os.environ, "GFLOW_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "controller.cli.main", *args], capture_output=True, text=True, env=env, timeout=30
    )


def test_finished_jobs_deleted_later_still_count(home, gflowd):
    daemon = gflowd()
    write_manifest(
        home / "jobs",
        "ok.yaml",
        "metadata: {name: ok, labels: {team: vision}}\nspec:\n  command: [sh, -c, 'sleep 0.2']\n",
    )
    write_manifest(
        home / "jobs", "bad.yaml", "metadata: {name: bad, labels: {team: nlp}}\nspec:\n  command: [sh, -c, 'exit 2']\n"
    )
    wait_phase(home, "ok", "Succeeded", daemon=daemon)
    wait_phase(home, "bad", "Failed", daemon=daemon)
    wait_for(
        lambda: (
            (home / "run" / "history.jsonl").exists()
            and len((home / "run" / "history.jsonl").read_text().splitlines()) == 2
        ),
        message="two history lines",
    )
    (home / "jobs" / "ok.yaml").unlink()
    (home / "jobs" / "bad.yaml").unlink()
    wait_for(
        lambda: not (home / "status" / "ok.yaml").exists() and not (home / "status" / "bad.yaml").exists(),
        message="statuses removed",
    )
    result = gflowctl(home, "stats", "-o", "json")
    assert result.returncode == 0, result.stderr
    r = json.loads(result.stdout)
    assert r["outcomes"] == {"Succeeded": 1, "Failed": 1, "Cancelled": 0}
    assert r["successRate"] == 0.5
    assert r["runtime"]["count"] == 2 and r["runtime"]["p95"] >= 0.2
    assert r["byUser"][getpass.getuser()]["jobs"] == 2
    assert r["byLabel"]["team=vision"]["succeeded"] == 1 and r["byLabel"]["team=nlp"]["failed"] == 1
    text = gflowctl(home, "stats", "-l", "team=nlp")
    assert text.returncode == 0 and "1 finished (0 succeeded, 1 failed, 0 cancelled)" in text.stdout
    assert "team=nlp" in text.stdout and "team=vision" not in text.stdout
    bad = gflowctl(home, "stats", "--since", "soon")
    assert bad.returncode == 1 and bad.stderr.startswith("error: --since: ")


def test_history_rotates_by_size_and_is_read_whole(tmp_path):
    from controller.util.jsonlog import append_lines, read_records

    path = tmp_path / "history.jsonl"
    for i in range(30):
        append_lines(path, [json.dumps({"job": f"j{i}"}) + "\n"], max_bytes=200)
    assert (tmp_path / "history.jsonl.1").exists() and path.stat().st_size <= 200 + 20
    jobs = [r["job"] for r in read_records(path)]
    assert jobs == [f"j{i}" for i in range(30 - len(jobs), 30)] and len(jobs) > 10
    with open(path, "a") as handle:
        handle.write('{"job": "torn')  # a line cut short by a crash is skipped, not an error
    assert [r["job"] for r in read_records(path)] == jobs
