"""Build a home of N finished jobs in minutes, for measuring a big home (cold start, RSS, passes).

Running 50,000 jobs through a gflowd takes most of an hour on a small machine. This runs a few
real jobs through a real gflowd (the checkout's), then clones what that gflowd wrote for them:
manifests, status files and logs. A last real gflowd start then reads the clones and writes the
index, the records journal and the parse cache,
so the home ends as one a gflowd left behind, and is checked: N jobs, all Succeeded, none rerun.

    python hack/bench/make_home.py HOME --jobs 50000
    python hack/bench.py --home HOME --only cold_start_s,gflowd_rss_mb,incremental_pass_ms,idle_cpu_pct

Uses the interpreter running it (the checkout's .venv). Prints the seconds each step took.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED = 4  # real jobs run; the clones copy the first one's files
TEMPLATE = "seedjob-0"
GPUS = "gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 8


def manifest(name: str) -> str:
    return f"metadata: {{name: {name}}}\nspec:\n  command: ['true']\n"


def start(home: Path, gpus: Path) -> subprocess.Popen:
    env = dict(os.environ, GFLOW_HOME=str(home))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.daemon",
            "--home",
            str(home),
            "--fake-gpus",
            str(gpus),
            "--log-level",
            "warning",
        ],
        cwd=str(ROOT),
        env=env,
        stdin=subprocess.DEVNULL,
    )


def index(home: Path) -> dict:
    try:
        return json.loads((home / "run" / "index.json").read_bytes())
    except (OSError, ValueError):
        return {}


def wait_succeeded(home: Path, proc: subprocess.Popen, n: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = index(home)
        if (data.get("controller") or {}).get("pid") == proc.pid:
            phases = [row.get("phase") for row in (data.get("jobs") or {}).values()]
            if len(phases) == n and all(p == "Succeeded" for p in phases):
                return data
        if proc.poll() is not None:
            raise SystemExit(f"make_home: gflowd exited with {proc.returncode}")
        time.sleep(0.2)
    raise SystemExit(f"make_home: {n} jobs not all Succeeded after {timeout:g}s")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("--jobs", type=int, default=50000)
    args = parser.parse_args()
    home: Path = args.home.resolve()
    if home.exists() and any(home.iterdir()):
        raise SystemExit(f"make_home: {home} is not empty")
    (home / "jobs").mkdir(parents=True, exist_ok=True)
    gpus = home.parent / f"{home.name}-gpus.yaml"
    gpus.write_text(GPUS)

    t0 = time.perf_counter()
    for i in range(SEED):
        (home / "jobs" / f"seedjob-{i}.yaml").write_text(manifest(f"seedjob-{i}"))
    proc = start(home, gpus)
    wait_succeeded(home, proc, SEED, 120)
    stop(proc)
    print(f"seed: {SEED} real jobs in {time.perf_counter() - t0:.1f}s", flush=True)

    t0 = time.perf_counter()
    status_text = (home / "status" / f"{TEMPLATE}.yaml").read_text()
    log_text = (home / "logs" / f"{TEMPLATE}.log").read_bytes() if (home / "logs" / f"{TEMPLATE}.log").exists() else b""
    for name in (f"seedjob-{i}" for i in range(SEED)):  # the clones replace the seeds
        for path in (home / "jobs" / f"{name}.yaml", home / "status" / f"{name}.yaml", home / "logs" / f"{name}.log"):
            path.unlink(missing_ok=True)
    jobs, status, logs = str(home / "jobs"), str(home / "status"), str(home / "logs")
    for i in range(args.jobs):
        name = f"p-{i:05d}"  # the names hack/bench.py edits (``--home``)
        with open(os.path.join(jobs, f"{name}.yaml"), "w") as handle:
            handle.write(manifest(name))
        target = os.path.join(status, f"{name}.yaml")
        with open(target, "w") as handle:
            handle.write(status_text.replace(TEMPLATE, name))
        with open(os.path.join(logs, f"{name}.log"), "wb") as handle:
            handle.write(log_text)
    for stale in ("index.json", "manifest-cache.json", "records.journal"):
        (home / "run" / stale).unlink(missing_ok=True)
    print(f"clone: {args.jobs} jobs in {time.perf_counter() - t0:.1f}s", flush=True)

    t0 = time.perf_counter()
    proc = start(home, gpus)
    data = wait_succeeded(home, proc, args.jobs, 1800)
    stop(proc)
    reran = [name for name, row in data["jobs"].items() if row.get("attempt") != 1]
    if reran:
        raise SystemExit(f"make_home: {len(reran)} clones were run again (e.g. {reran[0]}): the clone is wrong")
    print(
        f"first start: index and parse cache written in {time.perf_counter() - t0:.1f}s; "
        f"{args.jobs} jobs Succeeded, none rerun",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
