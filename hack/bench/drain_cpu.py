"""Where a drained job's CPU goes: N `true` jobs dropped at once into a fresh gflowd, and per job
the CPU of gflowd, of its launcher and supervisors, and the supervisor processes forked.

    python hack/bench/drain_cpu.py --jobs 1000 [--dir DIR] [--churn 30000] [--profile FILE] [--keep]

``--churn N`` creates and deletes N files in the fresh home before gflowd starts (as
``hack/bench.py``'s churned drain does); ``--profile FILE`` runs gflowd under cProfile and writes
its stats to FILE when it stops (the CPU figures then include the profiler's cost).

gflowd starts in a cpuacct cgroup of its own (cgroup v1, root), so the cgroup's usage counts
gflowd, the launcher, the supervisors and each job until it joins its attempt's cgroup; gflowd's
own share comes from /proc/PID/stat. Without a writable cpuacct hierarchy only gflowd's share and
the machine's are printed. Also printed: the status files written per job (the index's
``statusWrites``), the drain rate (from the index's ``updated``, as
``hack/bench.py`` measures it), the whole machine's busy and idle CPU seconds meanwhile, and how
long gflowd's main thread ran, waited for a CPU, and slept (``/proc/PID/schedstat``): a sleeping
coordinator with idle CPUs is a pipeline stall, not a lack of CPU.

Uses the interpreter running it and the checkout's code. The cgroup is removed at the end; the
temp home too unless ``--keep`` (deleting thousands of files slows later file creations on ext4
without a journal: docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runtime_overhead import wait_for  # the sibling bench's polling

ROOT = Path(__file__).resolve().parents[2]
POLL = 0.25  # seconds between looks: parsing a 1,000-job index more often takes CPU from gflowd
CPUACCT = "/sys/fs/cgroup/cpuacct"
GPUS = "gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 8
HZ = os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs in the burst (default 1000)")
    parser.add_argument("--dir", default=None, help="where the temp home goes (default $TMPDIR or /tmp)")
    parser.add_argument("--churn", type=int, default=0, help="files created and deleted in the home first")
    parser.add_argument("--profile", default=None, help="run gflowd under cProfile, stats written to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temp home (its path is printed)")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.dir is not None and not os.path.isdir(args.dir):
        parser.error(f"--dir {args.dir}: no such folder")
    root = Path(tempfile.mkdtemp(prefix="gflow-drain-cpu-", dir=args.dir))
    acct = _own_cpuacct()
    try:
        return _measure(root, args.jobs, acct, args.churn, args.profile)
    finally:
        if acct is not None:
            _remove_when_empty(acct)
        if args.keep:
            print(f"# kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _measure(root: Path, jobs: int, acct: str | None, churned: int = 0, profile: str | None = None) -> int:
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    if churned:
        from churn_disk import churn, create_us  # the sibling bench's churn

        took = churn(home, churned)
        print(f"churned {churned} files in {took:.1f} s; creating a file now costs {create_us(home):.0f} us of CPU")
    gpus = root / "gpus.yaml"
    gpus.write_text(GPUS)
    argv = [
        sys.executable,
        *(["-m", "cProfile", "-o", os.path.abspath(profile)] if profile else []),
        "-m",
        "controller.daemon",
        "--home",
        str(home),
        "--fake-gpus",
        str(gpus),
        "--log-level",
        "warning",
    ]
    env = dict(os.environ, GFLOW_HOME=str(home), PYTHONPATH=str(ROOT))
    join = (lambda: Path(acct, "cgroup.procs").write_text("0")) if acct else None
    with open(root / "gflowd.stderr", "wb") as err:
        daemon = subprocess.Popen(argv, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stderr=err, preexec_fn=join)
    try:
        wait_for(
            lambda: ((_index(home) or {}).get("controller") or {}).get("pid") == daemon.pid, 60, POLL, "gflowd to start"
        )
        stage = root / "stage"
        stage.mkdir()
        for k in range(jobs):
            (stage / f"d-{k:05d}.yaml").write_text(f"metadata: {{name: d-{k:05d}}}\nspec:\n  command: ['true']\n")
        before = _sample(daemon.pid, acct)
        began = time.time()
        for k in range(jobs):
            os.rename(stage / f"d-{k:05d}.yaml", home / "jobs" / f"d-{k:05d}.yaml")
        index = wait_for(lambda: _all_done(home, jobs), 120 + jobs / 10, POLL, f"{jobs} jobs to succeed")
        after = _sample(daemon.pid, acct)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    elapsed = index["updated"] - began
    per = lambda seconds: f"{seconds / jobs * 1000:.2f} ms"
    gflowd = after["gflowd"] - before["gflowd"]
    print(f"drain: {jobs} jobs in {elapsed:.2f} s = {jobs / elapsed:.1f} jobs/s")
    info = index.get("controller") or {}
    if "statusWrites" in info:  # each one a status file's YAML, a new inode unless a spare was ready
        writes = info["statusWrites"]
        print(f"recorder: {writes} status writes ({writes / jobs:.2f} a job) in {info.get('passes', '?')} passes")
    print(
        f"machine: busy {after['busy'] - before['busy']:.2f} s, idle {after['idle'] - before['idle']:.2f} s "
        f"(of {elapsed * os.cpu_count():.2f} CPU-seconds)"
    )
    print(f"per job: gflowd {per(gflowd)}", end="")
    if acct is not None:
        print(f", launcher + supervisors {per(after['group'] - before['group'] - gflowd)}", end="")
    print(f"; supervisors forked {after['forks'] - before['forks'] - jobs} (processes made, less one per job)")
    ran, waited = (after["main"][i] - before["main"][i] for i in (0, 1))
    print(
        f"gflowd's main thread: ran {ran:.2f} s, waited for a CPU {waited:.2f} s, slept {max(0.0, elapsed - ran - waited):.2f} s"
    )
    return 0


def _own_cpuacct() -> str | None:
    """A fresh cpuacct cgroup to start gflowd in; None where there is none we may make."""
    path = os.path.join(CPUACCT, f"gflow-drain-cpu-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError:
        return None
    return path


def _remove_when_empty(path: str) -> None:
    def empty() -> bool:
        try:
            return not Path(path, "cgroup.procs").read_text().split()
        except OSError:
            return True

    try:
        wait_for(empty, 30, POLL, "the supervisors to leave the measuring cgroup")  # reused ones linger up to 30 s
        os.rmdir(path)
    except (SystemExit, OSError) as exc:
        print(f"# could not remove {path}: {exc}", file=sys.stderr)


def _sample(pid: int, acct: str | None) -> dict:
    with open("/proc/stat") as stat:
        cpu = stat.readline().split()[1:]
        forks = next(int(line.split()[1]) for line in stat if line.startswith("processes"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {
        "busy": sum(int(cpu[i]) for i in (0, 1, 2, 5, 6)) / HZ,
        "idle": (int(cpu[3]) + int(cpu[4])) / HZ,
        "forks": forks,
        "gflowd": (int(fields[11]) + int(fields[12])) / HZ,
        "group": int(Path(acct, "cpuacct.usage").read_text()) / 1e9 if acct else 0.0,
        "main": [int(x) / 1e9 for x in Path(f"/proc/{pid}/schedstat").read_text().split()[:2]],
    }


def _index(home: Path) -> dict | None:
    try:
        return json.loads((home / "run" / "index.json").read_text())
    except (OSError, ValueError):
        return None


def _all_done(home: Path, jobs: int) -> dict | None:
    index = _index(home) or {}
    done = sum(1 for row in (index.get("jobs") or {}).values() if row.get("phase") == "Succeeded")
    return index if done >= jobs else None


if __name__ == "__main__":
    sys.exit(main())
