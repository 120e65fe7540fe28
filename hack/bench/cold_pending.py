"""Cold restart of gflowd on a home of N jobs that stay Pending (each asks 9 GPUs of 8 fake ones).

    python hack/bench/cold_pending.py HOME --jobs 7000 --runs 5 [--suspend]

Builds HOME on the first call (N manifests, then one gflowd start that writes the status files,
the index and the parse cache), then times each restart: gflowd started -> ``run/index.json``
names the new pid and counts N Pending. Prints one line per run and the median. Uses the
interpreter running it (the checkout's venv). ``--suspend``: the jobs are held by
``suspend: true`` instead of asking too many GPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from make_home import GPUS, start, stop  # hack/bench/, the script's own folder: first on sys.path


def manifest(name: str, suspend: bool) -> str:
    hold = "  suspend: true\n" if suspend else "  resources: {gpus: 9}\n"
    return f"metadata: {{name: {name}}}\nspec:\n  command: ['true']\n{hold}"


def pending(home: Path, pid: int) -> int:
    try:
        data = json.loads((home / "run" / "index.json").read_bytes())
    except (OSError, ValueError):
        return -1
    if (data.get("controller") or {}).get("pid") != pid:
        return -1
    return sum(row.get("phase") == "Pending" for row in (data.get("jobs") or {}).values())


def wait_pending(home: Path, proc: subprocess.Popen, n: int, timeout: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if pending(home, proc.pid) == n:
            return time.perf_counter() - t0
        if proc.poll() is not None:
            raise SystemExit(f"cold_pending: gflowd exited with {proc.returncode}")
        time.sleep(0.01)
    raise SystemExit(f"cold_pending: {n} jobs not all Pending after {timeout:g}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("--jobs", type=int, default=7000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--suspend", action="store_true")
    args = parser.parse_args()
    home: Path = args.home.resolve()
    gpus = home.parent / f"{home.name}-gpus.yaml"
    gpus.write_text(GPUS)
    if not (home / "jobs").is_dir():
        (home / "jobs").mkdir(parents=True)
        for i in range(args.jobs):
            name = f"p-{i:05d}"
            (home / "jobs" / f"{name}.yaml").write_text(manifest(name, args.suspend))
        proc = start(home, gpus)
        try:
            took = wait_pending(home, proc, args.jobs, 1800)
        finally:
            stop(proc)
        print(f"first start (parses every manifest): {took:.2f} s", flush=True)
    times = []
    for run in range(args.runs):
        proc = start(home, gpus)
        try:
            times.append(wait_pending(home, proc, args.jobs, 600))
        finally:
            stop(proc)
        print(f"cold restart {run + 1}: {times[-1]:.2f} s", flush=True)
    print(f"cold_start_pending_{args.jobs}_s: {statistics.median(times):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
