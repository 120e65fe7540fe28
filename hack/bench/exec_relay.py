#!/usr/bin/env python3
"""``gflowctl exec`` figures: latency (median of ``exec JOB -- true``, gflowctl's start included) and
throughput of the relay, out (``head -c N /dev/zero`` to /dev/null) and in (a file into
``cat > /dev/null``), in MiB/s. A real gflowd and a real job in a throwaway home; gflowctl runs as a
subprocess with its stdin and stdout redirected (so pipes, not a pty).

    python hack/bench/exec_relay.py                      # this checkout
    python hack/bench/exec_relay.py --checkout /tmp/old  # another one (e.g. a git worktree of main)

Run it twice, once per checkout, to compare. The machine's load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkout", default=str(Path(__file__).resolve().parents[2]), help="the gflow checkout to measure"
    )
    parser.add_argument("--runs", type=int, default=30, help="exec true runs for the latency")
    parser.add_argument("--mib", type=int, default=256, help="MiB each way for the throughput")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gflow-exec-bench-"))
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": args.checkout, "GFLOW_HOME": str(home)}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), "--resync", "1s"],
        env=env,
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(root / "gflowd.stderr", "wb"),
    )
    try:
        (home / "jobs" / "bench.yaml").write_text("metadata: {name: bench}\nspec:\n  command: [sleep, '3600']\n")
        gflowctl = [sys.executable, "-m", "controller.cli.main", "exec", "bench", "--"]

        def run(argv: list[str], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) -> float:
            start = time.perf_counter()
            done = subprocess.run(
                [*gflowctl, *argv], env=env, cwd=root, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE
            )
            took = time.perf_counter() - start
            if done.returncode:
                raise RuntimeError(f"exec {argv}: {done.returncode} {done.stderr.decode().strip()}")
            return took

        deadline = time.monotonic() + 60
        while True:  # until the job runs and serves its socket
            try:
                run(["true"])
                break
            except RuntimeError:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise
                time.sleep(0.2)
        latency = statistics.median(run(["true"]) for _ in range(args.runs))
        size = args.mib << 20
        out_seconds = run(["head", "-c", str(size), "/dev/zero"])
        data = root / "in.bin"
        with open(data, "wb") as f:
            f.truncate(size)
        with open(data, "rb") as f:
            in_seconds = run(["sh", "-c", "cat > /dev/null"], stdin=f)
        load = os.getloadavg()
        print(f"checkout {args.checkout}")
        print(f"exec true: median {latency * 1000:.0f} ms of {args.runs} (gflowctl's start included)")
        print(f"relay out: {args.mib / out_seconds:.0f} MiB/s ({args.mib} MiB in {out_seconds:.2f} s)")
        print(f"relay in:  {args.mib / in_seconds:.0f} MiB/s ({args.mib} MiB in {in_seconds:.2f} s)")
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    finally:
        (home / "jobs" / "bench.yaml").unlink(missing_ok=True)  # gflowd stops the job
        deadline = time.monotonic() + 30
        while any((home / "run" / "control").rglob("*.sock")) and time.monotonic() < deadline:
            time.sleep(0.1)
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
