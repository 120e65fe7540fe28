#!/usr/bin/env python3
"""One GPU usage sample at 8 GPUs and 50 running jobs, in gflowd's CPU time (thread time, median):
``gpu_sample_ms`` the whole of it in the steady state; its parts ``gpu_sample_split_ms`` (splitting
an inventory read by job: ``UsageSampler.sample`` plus the per-job totals decide reads) and
``gpu_usage_write_ms`` (``run/gpu-usage.json`` with full ring buffers: ``dump`` plus an atomic
write without fsync). Apart: ``job_pids_ms``, one walk of 50 real process trees of 3 processes
(``SupervisorRuntime.job_pids``: /proc/PID/task/TID/children), which a sample reuses
(``observe.gpu_usage.JobPids``) until a new process shows on a GPU, the running jobs change, or
30 s pass; so a sample that walks costs ``gpu_sample_ms + job_pids_ms``.
The inventory read itself (one NVML sweep) happens every 2 s with or without sampling.

    .venv/bin/python hack/bench/gpu_sample.py [--jobs 50] [--gpus 8] [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from controller.act.runtime.shim.procfs import descendants
from controller.model.gpus import Gpu, GpuProcess
from controller.model.plan import RunObservation
from controller.observe.gpu_usage import SERIES_LEN, UsageSampler
from controller.util.fsutil import atomic_write

GIB = 2**30


def machine(n_jobs: int, n_gpus: int) -> tuple[list[Gpu], dict[str, RunObservation], dict[str, set[int]]]:
    """Jobs spread over the GPUs (Shared: several per GPU), each with 2 processes per GPU; every
    eighth job holds two GPUs; a few foreign processes too."""
    runs, pids, per_gpu = {}, {}, {i: [] for i in range(n_gpus)}
    for k in range(n_jobs):
        devices = (k % n_gpus, (k + 1) % n_gpus) if k % 8 == 0 else (k % n_gpus,)
        name = f"job-{k:03d}"
        mine = {10_000 + 10 * k + j for j in range(3)}  # supervisor, launcher shell, python
        runs[name] = RunObservation(name, 1, 10_000 + 10 * k, 0.0, True, devices=devices)
        pids[name] = mine
        for device in devices:
            per_gpu[device] += [
                GpuProcess(10_000 + 10 * k + 2, GIB, "python", 30 + k % 50),
                GpuProcess(10_000 + 10 * k + 1, GIB // 4, "python", 5),
            ]
    gpus = []
    for index in range(n_gpus):
        procs = tuple(per_gpu[index]) + (GpuProcess(99_000 + index, GIB // 8, "Xorg", 0),)
        gpus.append(
            Gpu(
                index,
                f"GPU-{index:04d}",
                "NVIDIA H100 80GB HBM3",
                80 * GIB,
                sum(p.used_memory for p in procs),
                80,
                procs,
            )
        )
    return gpus, runs, pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    gpus, runs, pids = machine(args.jobs, args.gpus)
    sampler = UsageSampler(5.0)
    now = time.time()
    for k in range(SERIES_LEN):  # full ring buffers: the file at its largest
        sampler.sample(gpus, pids, runs, now + 5 * k)
        sampler.usage()
    trees = [
        subprocess.Popen(["sh", "-c", "sleep 120 & sleep 120 & wait"], start_new_session=True) for _ in range(args.jobs)
    ]
    try:
        time.sleep(0.3)  # let each shell fork its two children
        walk_ms = []
        for _ in range(20):
            began = time.thread_time()
            walked = {tree.pid: {tree.pid, *descendants(tree.pid)} for tree in trees}
            walk_ms.append((time.thread_time() - began) * 1000)
        assert all(len(found) == 3 for found in walked.values()), walked
    finally:
        for tree in trees:  # each tree is its own process group: the shell and its two sleeps
            os.killpg(tree.pid, signal.SIGKILL)
            tree.wait()
    sample_ms, write_ms = [], []
    with tempfile.TemporaryDirectory(prefix="gflow-bench-gpu-sample-") as folder:
        target = Path(folder) / "gpu-usage.json"
        for k in range(args.runs):
            began = time.thread_time()
            sampler.sample(gpus, pids, runs, now + 5 * (SERIES_LEN + k))
            sampler.usage()
            middle = time.thread_time()
            atomic_write(target, sampler.dump(), durable=False)
            sample_ms.append((middle - began) * 1000)
            write_ms.append((time.thread_time() - middle) * 1000)
        size = target.stat().st_size
    tag = f"{args.jobs}x{args.gpus}"
    print(f"gpu_sample_ms_{tag}: {statistics.median(a + b for a, b in zip(sample_ms, write_ms)):.3f} ms")
    print(f"job_pids_ms_{tag}: {statistics.median(walk_ms):.3f} ms")
    print(f"gpu_sample_split_ms_{tag}: {statistics.median(sample_ms):.3f} ms")
    print(f"gpu_usage_write_ms_{tag}: {statistics.median(write_ms):.3f} ms")
    print(f"gpu_usage_file_kib_{tag}: {size / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
