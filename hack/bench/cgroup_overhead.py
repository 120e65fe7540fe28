#!/usr/bin/env python3
"""What a cgroup per attempt costs, and what it buys against today's RSS polling. Needs root (or a
delegated cgroup) and a usable memory controller.

    .venv/bin/python hack/bench/cgroup_overhead.py [--runs 200] [--oom-runs 10] [--json FILE]

1. Per-job overhead: fork + exec of /bin/true + wait, bare, against create (memory, one core,
   pids, a CPU job's device allow-list) + the child joining itself before exec + remove. Also the
   parts: create, join (of a live process), kill_all of an empty cgroup, remove.
2. OOM detection latency: a child allocates 1 MiB chunks (touched) and reports the time and its
   RSS after each. With cgroups: from its last report (alive, at the limit) until it is dead and
   ``oom_kill`` is visible. Polling, as the supervisor does today (the whole tree's RSS from
   /proc every 100 ms, then SIGKILL): from the first report over the limit until it is dead; and
   how far past the limit the job got meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from controller.act.runtime.cgroups import CgroupError, Cgroups, Limits, probe  # noqa: E402
from controller.act.runtime.shim.procfs import descendants, tree_rss  # noqa: E402
from controller.act.runtime.shim.supervisor import MEMORY_POLL  # noqa: E402

MI = 1 << 20
RECORD = struct.Struct("dq")  # monotonic time, RSS bytes

# Allocate touched 1 MiB chunks up to argv[2] MiB, reporting (time, RSS) on fd argv[1] after each,
# then hold the memory until killed.
ALLOCATOR = r"""
import os, struct, sys, time
fd, target, page = int(sys.argv[1]), int(sys.argv[2]), os.sysconf("SC_PAGE_SIZE")
record = struct.Struct("dq")
chunks = []
for _ in range(target):
    chunks.append(bytearray(b"x" * (1 << 20)))
    with open("/proc/self/statm", "rb") as handle:
        rss = int(handle.read().split()[1]) * page
    os.write(fd, record.pack(time.monotonic(), rss))
time.sleep(60)
"""


def spawn_true(join=None) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            if join is not None:
                join()
            os.execv("/bin/true", ["true"])
        finally:
            os._exit(127)
    os.waitpid(pid, 0)


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


def overhead(cgroups: Cgroups, runs: int) -> dict:
    limits = Limits(
        memory=256 * MI,
        cpus={max(os.sched_getaffinity(0))},
        pids=256,
        deny_devices=[] if cgroups.probe.features["devices"].available else None,
    )
    bare, full, create, join, kill, remove = [], [], [], [], [], []
    for i in range(runs):
        start = time.perf_counter()
        spawn_true()
        bare.append(time.perf_counter() - start)

        start = time.perf_counter()
        attempt = cgroups.create(f"bench-{i}", limits)
        spawn_true(lambda: attempt.join(0))
        attempt.remove()
        full.append(time.perf_counter() - start)

        start = time.perf_counter()
        attempt = cgroups.create(f"parts-{i}", limits)
        create.append(time.perf_counter() - start)
        sleeper = subprocess.Popen(["sleep", "60"])
        start = time.perf_counter()
        attempt.join(sleeper.pid)
        join.append(time.perf_counter() - start)
        sleeper.kill()
        sleeper.wait()
        start = time.perf_counter()
        attempt.kill_all()
        kill.append(time.perf_counter() - start)
        start = time.perf_counter()
        attempt.remove()
        remove.append(time.perf_counter() - start)
    return {
        "runs": runs,
        "limits": repr(limits),
        "spawn_bare": ms(bare),
        "spawn_with_cgroup": ms(full),
        "create": ms(create),
        "join": ms(join),
        "kill_all_empty": ms(kill),
        "remove": ms(remove),
    }


def _reports(fd: int, until: float) -> list[tuple[float, int]]:
    """Read (time, RSS) records until EOF or ``until``."""
    data = b""
    while time.monotonic() < until:
        ready, _, _ = select.select([fd], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    usable = len(data) - len(data) % RECORD.size
    return [RECORD.unpack_from(data, offset) for offset in range(0, usable, RECORD.size)]


def _allocator(limit_join, target_mib: int) -> tuple[subprocess.Popen, int]:
    read_fd, write_fd = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", ALLOCATOR, str(write_fd), str(target_mib)],
        pass_fds=(write_fd,),
        preexec_fn=limit_join,
    )
    os.close(write_fd)
    return child, read_fd


def oom_with_cgroup(cgroups: Cgroups, limit: int, target_mib: int, index: int) -> dict:
    attempt = cgroups.create(f"oom-{index}", Limits(memory=limit))
    try:
        child, fd = _allocator(lambda: attempt.join(0), target_mib)
        child.wait(timeout=60)
        dead = time.monotonic()
        while not attempt.stats().oom_kills:
            if time.monotonic() > dead + 10:
                raise SystemExit("oom_kill never became visible")
        visible = time.monotonic()
        reports = _reports(fd, time.monotonic() + 5)
        os.close(fd)
        last_time, _ = reports[-1]
        return {
            "latency_ms": (visible - last_time) * 1000,
            "dead_after_ms": (dead - last_time) * 1000,
            "peak_rss_mib": max(r for _, r in reports) / MI,
            "kernel_peak_mib": attempt.stats().memory_peak / MI,
            "alloc_rate_mib_s": _rate(reports),
            "returncode": child.returncode,
        }
    finally:
        attempt.remove()


def oom_with_polling(limit: int, target_mib: int) -> dict:
    """The supervisor's loop: every MEMORY_POLL, RSS of every descendant; over the limit: SIGKILL."""
    child, fd = _allocator(None, target_mib)
    reports: list[tuple[float, int]] = []
    poll_costs = []
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline:
        reports += _reports(fd, time.monotonic() + MEMORY_POLL)  # sleeps MEMORY_POLL meanwhile
        start = time.perf_counter()
        tree = descendants(os.getpid())
        rss = tree_rss(tree)
        poll_costs.append(time.perf_counter() - start)
        if rss > limit:
            for pid in tree:
                os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
    child.wait(timeout=60)
    dead = time.monotonic()
    reports += _reports(fd, time.monotonic() + 1)
    os.close(fd)
    over = [t for t, rss in reports if rss > limit]
    crossed = over[0] if over else killed
    return {
        "latency_ms": (dead - crossed) * 1000,
        "peak_rss_mib": max(r for _, r in reports) / MI,
        "alloc_rate_mib_s": _rate(reports),
        "poll_cost_us": statistics.median(poll_costs) * 1e6,
        "returncode": child.returncode,
    }


def _rate(reports: list[tuple[float, int]]) -> float:
    """MiB per second the child allocated at (a polling loop lets it run ahead by rate x period)."""
    (t0, r0), (t1, r1) = reports[0], reports[-1]
    return (r1 - r0) / MI / (t1 - t0) if t1 > t0 else 0.0


def summarize(rows: list[dict], key: str) -> dict[str, float]:
    values = sorted(row[key] for row in rows)
    return {"median": round(statistics.median(values), 2), "max": round(values[-1], 2), "min": round(values[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--oom-runs", type=int, default=10)
    parser.add_argument("--limit-mib", type=int, default=100)
    parser.add_argument("--target-mib", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    found = probe()
    if not found.usable:
        print(f"cannot measure: {found.summary()}", file=sys.stderr)
        return 1
    cgroups = Cgroups(found, f"gflow-bench-{os.getpid()}")
    cgroups.prepare()
    result: dict = {"probe": found.summary(), "kernel": os.uname().release, "cpus": os.cpu_count()}
    try:
        result["overhead"] = overhead(cgroups, args.runs)
        limit = args.limit_mib * MI
        with_cgroup = [oom_with_cgroup(cgroups, limit, args.target_mib, i) for i in range(args.oom_runs)]
        polling = [oom_with_polling(limit, args.target_mib) for _ in range(args.oom_runs)]
        result["oom"] = {
            "limit_mib": args.limit_mib,
            "target_mib": args.target_mib,
            "cgroup": {
                "latency_ms": summarize(with_cgroup, "latency_ms"),
                "dead_after_ms": summarize(with_cgroup, "dead_after_ms"),
                "peak_rss_mib": summarize(with_cgroup, "peak_rss_mib"),
                "kernel_peak_mib": summarize(with_cgroup, "kernel_peak_mib"),
                "alloc_rate_mib_s": summarize(with_cgroup, "alloc_rate_mib_s"),
                "killed_by_sigkill": all(r["returncode"] == -9 for r in with_cgroup),
            },
            "polling": {
                "latency_ms": summarize(polling, "latency_ms"),
                "peak_rss_mib": summarize(polling, "peak_rss_mib"),
                "alloc_rate_mib_s": summarize(polling, "alloc_rate_mib_s"),
                "poll_cost_us": summarize(polling, "poll_cost_us"),
                "killed_by_sigkill": all(r["returncode"] == -9 for r in polling),
            },
        }
    finally:
        for name in cgroups.names():
            attempt = cgroups.adopt(name)
            try:
                attempt.kill_all()
                attempt.remove()
            except CgroupError as exc:
                print(f"cleanup: {exc}", file=sys.stderr)
        cgroups.remove_group()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
