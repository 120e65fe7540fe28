#!/usr/bin/env python3
"""Cgroups against polling, through a real gflowd: the per-job overhead and the OOM figures.

    .venv/bin/python hack/bench/gflowd_limits.py [--jobs 20] [--oom-runs 5] [--json FILE]

For each of ``--cgroups auto`` and ``--cgroups off`` (polling), on a temp home:

* per job: CPU jobs ``date +%s.%N`` with ``memory: 1Gi`` (so the cgroup run makes a memory cgroup,
  the polled one polls): decision (status ``startTime``) to the job's first instruction, and
  decision to the recorded end (``completionTime``);
* OOM: a job with ``memory: 50Mi`` that prints the time and then touches 1 MiB chunks towards
  200 MiB: from its first allocation to the recorded end (the exit record's time), the peak memory
  the status reports, and whether it ended ``OOMKilled``.

Needs root (or a delegated cgroup) for the cgroup half; prints ``name: value unit`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from runtime_overhead import status_of, wait_for  # the same polling and status read as the sibling bench

OOM_JOB = (
    "import time\nprint(time.time(), flush=True)\nchunks = []\n"
    "for _ in range(200):\n    chunk = bytearray(1 << 20)\n    chunk[::4096] = b'x' * 256\n    chunks.append(chunk)\n"
    "print('survived', flush=True)\n"
)


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def submit(home: Path, name: str, body: str) -> dict:
    tmp = home / "jobs" / f".{name}.tmp"
    tmp.write_text(f"metadata: {{name: {name}}}\nspec:\n{body}")
    os.rename(tmp, home / "jobs" / f"{name}.yaml")
    return wait_for(
        lambda: (s := status_of(home, name)) and s.get("phase") in ("Succeeded", "Failed") and s, timeout=60.0
    )


def measure(mode: str, jobs: int, oom_runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="gflowd-limits-") as tmp:
        home = Path(tmp) / "home"
        (home / "jobs").mkdir(parents=True)
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.daemon",
                "--home",
                str(home),
                "--log-level",
                "warning",
                "--cgroups",
                mode,
            ],
            env={**os.environ, "GFLOW_HOME": str(home)},
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: (home / "run" / "index.json").exists(), timeout=60.0)
            starts, ends = [], []
            for i in range(jobs):
                status = submit(home, f"job-{i}", "  command: [date, '+%s.%N']\n  resources: {memory: 1Gi}\n")
                ran = float((home / "logs" / f"job-{i}.log").read_text().split()[0])
                starts.append((ran - stamp(status["startTime"])) * 1000)
                ends.append((stamp(status["completionTime"]) - stamp(status["startTime"])) * 1000)
            latencies, peaks, killed = [], [], 0
            for i in range(oom_runs):
                status = submit(
                    home, f"oom-{i}", f"  command: [python3, -c, {OOM_JOB!r}]\n  resources: {{memory: 50Mi}}\n"
                )
                log = (home / "logs" / f"oom-{i}.log").read_text().split()
                latencies.append((stamp(status["completionTime"]) - float(log[0])) * 1000)
                peaks.append((status.get("usage") or {}).get("peakMemoryBytes", 0) / 2**20)
                killed += status.get("reason") == "OOMKilled"
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)
    return {
        "start_ms_p50": round(statistics.median(starts), 2),
        "decision_to_end_ms_p50": round(statistics.median(ends), 2),
        "oom_alloc_to_end_ms_p50": round(statistics.median(latencies), 1),
        "oom_alloc_to_end_ms_max": round(max(latencies), 1),
        "oom_peak_mib_max": round(max(peaks), 1),
        "oom_killed": f"{killed}/{oom_runs}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--oom-runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = {}
    for mode, label in (("auto", "cgroups"), ("off", "polling")):
        for key, value in measure(mode, args.jobs, args.oom_runs).items():
            figures[f"{label}_{key}"] = value
            print(f"{label}_{key}: {value}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
