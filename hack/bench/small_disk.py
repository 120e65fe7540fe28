#!/usr/bin/env python3
"""How soon a full 6 MiB home recovers once space is freed (issue 32, hole 8). Needs root (a tmpfs).

    .venv/bin/python hack/bench/small_disk.py [--jobs 150] [--full-seconds 35] [--size 6m]

A real gflowd on a tmpfs home of ``--size`` (spec dir elsewhere, ``--resync 600s`` so no resync
pass retries for it): a burst of ``--jobs`` short jobs, then the disk filled to the last block and 5
more jobs submitted; it stays full ``--full-seconds`` (long enough for the write backoff to reach
its 30 s cap), then the filler is deleted. Prints the seconds from the free until all 5 ran, the
most spare files (``.spare.*``) seen at once and their bytes, and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers import fill_filesystem, job_status, kill_jobs_of_home  # noqa: E402

SPARE = ".spare."


def spares(home: Path) -> tuple[int, int]:
    count = size = 0
    for folder in (home / "status", home / "run" / "attempts"):
        for entry in os.scandir(folder) if folder.is_dir() else ():
            if entry.name.startswith(SPARE):
                try:
                    size += entry.stat(follow_symlinks=False).st_blocks * 512
                    count += 1
                except FileNotFoundError:
                    pass
    return count, size


def submit(spec: Path, names: list[str]) -> None:
    for name in names:
        tmp = spec / f".{name}.new"
        tmp.write_text(f"metadata: {{name: {name}}}\nspec:\n  command: [true]\n")
        os.rename(tmp, spec / f"{name}.yaml")


def wait(predicate, timeout: float, seen: list[tuple[int, int]], home: Path) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        seen.append(spares(home))
        if predicate():
            return time.monotonic() - started
        time.sleep(0.05)
    raise SystemExit(f"timed out after {timeout}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150)
    parser.add_argument("--full-seconds", type=float, default=35.0)
    parser.add_argument("--size", default="6m")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gflow-bench-small-"))
    home, spec = root / "home", root / "jobs"
    home.mkdir()
    spec.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size},mode=0755", "tmpfs", str(home)], check=True)
    daemon = None
    seen: list[tuple[int, int]] = []
    try:
        env = {**os.environ, "GFLOW_HOME": str(home)}
        with open(root / "gflowd.stderr", "wb") as err:
            daemon = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controller.daemon",
                    "--home",
                    str(home),
                    "--spec-dir",
                    str(spec),
                    "--resync",
                    "600s",
                ],
                cwd=str(ROOT),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        burst = [f"burst-{k}" for k in range(args.jobs)]
        submit(spec, burst)
        took = wait(
            lambda: all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in burst), 600, seen, home
        )
        print(f"burst of {args.jobs} short jobs: {took:.1f} s")
        fill_filesystem(home)
        late = [f"late-{k}" for k in range(5)]
        submit(spec, late)
        end = time.monotonic() + args.full_seconds
        while time.monotonic() < end:
            seen.append(spares(home))
            time.sleep(0.2)
        early = sum((job_status(home, n) or {}).get("phase") == "Succeeded" for n in late)
        (home / "filler").unlink()
        (home / "filler2").unlink()
        print(f"jobs that ran on the full disk (before the free): {early}/5")
        recovery = wait(
            lambda: all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in late), 600, seen, home
        )
        most = max(seen, key=lambda s: s[1])
        print(f"recovery after the free: {recovery:.2f} s (disk full for {args.full_seconds:.0f} s)")
        print(f"spares at most: {most[0]} files, {most[1] / 1024:.0f} KiB; load average {os.getloadavg()[0]:.1f}")
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        kill_jobs_of_home(home)
        for _ in range(50):
            if subprocess.run(["umount", str(home)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(home)], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
