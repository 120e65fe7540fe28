#!/usr/bin/env python3
"""Runtime overhead: time from gflowd's decision to start a job until the job's process runs,
and the memory a supervisor costs. Real gflowd, real supervisors, CPU jobs.

    .venv/bin/python hack/bench/runtime_overhead.py [--jobs 30] [--json FILE]

The decision time is the job's status ``startTime`` (the reconcile pass that bound it); the job
prints the wall clock (``date +%s.%N``) first thing, so the figure includes fork, exec of ``sh``
and of ``date`` (about 1-2 ms): an upper bound of the runtime's share.
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
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout=30.0, interval=0.005, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what or predicate}")


def status_of(home: Path, name: str) -> dict | None:
    from ruamel.yaml import YAML

    try:
        data = YAML(typ="safe").load((home / "status" / f"{name}.yaml").read_text())
        return data.get("status") if isinstance(data, dict) else None
    except Exception:
        return None


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "jobs").mkdir(parents=True)
        env = {**os.environ, "GFLOW_HOME": str(home)}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "controller.daemon", "--home", str(home), "--log-level", "warning"],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: (home / "run" / "index.json").exists())
            latencies = []
            for i in range(args.jobs):
                name = f"lat-{i}"
                tmp_file = home / "jobs" / f".{name}.tmp"
                tmp_file.write_text(f"metadata: {{name: {name}}}\nspec:\n  command: [date, '+%s.%N']\n")
                os.rename(tmp_file, home / "jobs" / f"{name}.yaml")
                status = wait_for(lambda: (s := status_of(home, name)) and s.get("phase") == "Succeeded" and s)
                decided = datetime.fromisoformat(status["startTime"].replace("Z", "+00:00")).timestamp()
                ran = float((home / "logs" / f"{name}.log").read_text().split()[0])
                latencies.append((ran - decided) * 1000)
            # a long job, to weigh its supervisor
            (home / "jobs" / "weigh.yaml").write_text("spec:\n  command: [sleep, '30']\n")
            sys.path.insert(0, str(ROOT))
            from controller.act.runtime.record import read  # the attempt record's format (standard library only)

            run_record = wait_for(lambda: (read(str(home / "run" / "attempts" / "weigh.1"), ("run",)) or {}).get("run"))
            supervisor_rss = rss_kib(run_record["supervisorPid"]) / 1024
            (home / "jobs" / "weigh.yaml").unlink()
            # stopped and gone before gflowd stops: it removes its cgroup group only when no attempt is left
            wait_for(lambda: not (home / "status" / "weigh.yaml").exists())
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(10)
            time.sleep(0.5)
        latencies.sort()
        figures = {
            "start_latency_ms_p50": round(statistics.median(latencies), 2),
            "start_latency_ms_p90": round(latencies[int(len(latencies) * 0.9) - 1], 2),
            "supervisor_rss_mb": round(supervisor_rss, 1),
        }
        targets = {"start_latency_ms_p50": "<= 20", "start_latency_ms_p90": "-", "supervisor_rss_mb": "-"}
        units = {"start_latency_ms_p50": "ms", "start_latency_ms_p90": "ms", "supervisor_rss_mb": "MiB"}
        for key, value in figures.items():
            print(f"{key}: {value} {units[key]} (target {targets[key]})")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
