"""GPU scheduling end to end on fake GPUs: a real gflowd, real jobs, the fake-GPU file edited live."""

from __future__ import annotations

import itertools
from pathlib import Path

from helpers import job_status, read_log, wait_for, wait_phase, write_manifest

FOUR_GPUS = "".join("  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" for _ in range(4))


def gpu_job(name: str, gpus: int, release: Path, record: Path, priority: int = 0) -> str:
    return f"""\
metadata: {{name: {name}}}
spec:
  priority: {priority}
  resources: {{gpus: {gpus}}}
  script: |
    echo "devices=$CUDA_VISIBLE_DEVICES"
    echo "$CUDA_VISIBLE_DEVICES $(date +%s.%N) start" >> {record}
    while [ ! -e {release}/{name} ]; do sleep 0.02; done
    echo "$CUDA_VISIBLE_DEVICES $(date +%s.%N) end" >> {record}
"""


def test_jobs_see_their_devices_and_exclusive_jobs_never_share_a_gpu(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n" + FOUR_GPUS)
    release = tmp_path / "release"
    release.mkdir()
    record = tmp_path / "intervals.txt"
    daemon = gflowd("--fake-gpus", fake)
    jobs = {f"one-{i}": 1 for i in range(6)} | {f"two-{i}": 2 for i in range(3)}
    for name, count in jobs.items():
        write_manifest(home / "jobs", f"{name}.yaml", gpu_job(name, count, release, record, priority=count))
    finished: set[str] = set()

    def step():
        for name in set(jobs) - finished:
            status = job_status(home, name) or {}
            if status.get("phase") == "Succeeded":
                finished.add(name)
            elif status.get("phase") == "Running" and "devices=" in read_log(home, name):
                seen = read_log(home, name).split("devices=")[1].split()[0]
                assert seen == ",".join(str(d) for d in status["devices"]), (name, seen, status)
                assert len(status["devices"]) == jobs[name]
                (release / name).touch()
        return finished == set(jobs)

    wait_for(
        step, timeout=60, message=lambda: f"all jobs to finish; done: {sorted(finished)}\n{daemon.stderr()[-2000:]}"
    )
    intervals: dict[str, list[tuple[float, float]]] = {}
    opened: dict[tuple[str, str], float] = {}
    for line in record.read_text().splitlines():
        devices, when, what = line.split()
        for device in devices.split(","):
            if what == "start":
                opened[(device, devices)] = float(when)
            else:
                intervals.setdefault(device, []).append((opened.pop((device, devices)), float(when)))
    assert sum(len(v) for v in intervals.values()) == sum(jobs.values())
    for device, spans in intervals.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two exclusive jobs overlapped on GPU {device}: {spans}"


def test_foreign_process_and_lost_gpu_appearing_mid_run(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n" + FOUR_GPUS)
    release = tmp_path / "release"
    release.mkdir()
    record = tmp_path / "intervals.txt"
    daemon = gflowd("--fake-gpus", fake)
    write_manifest(home / "jobs", "resident.yaml", gpu_job("resident", 1, release, record))
    assert wait_phase(home, "resident", "Running", daemon=daemon)["devices"] == [0]
    # GPU 1 gets a foreign 4Gi process, GPU 0 (under the running job) is lost
    lines = FOUR_GPUS.splitlines()
    lines[0] = "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi, health: Lost}"
    lines[1] = "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi, processes: [{pid: 4242, usedMemory: 4Gi}]}"
    tmp = tmp_path / ".gpus.tmp"
    tmp.write_text("gpus:\n" + "\n".join(lines) + "\n")
    tmp.rename(fake)

    def node_states():
        from controller.util.yamlio import load_one

        try:
            node = load_one((home / "node.yaml").read_text())
        except Exception:
            return None
        return [g["state"] for g in node["gpus"]]

    wait_for(
        lambda: node_states() == ["Unhealthy", "Unmanaged", "Free", "Free"],
        message=lambda: f"node states {node_states()}",
    )
    status = wait_for(
        lambda: (s := job_status(home, "resident")) and any(c["type"] == "GPUUnhealthy" for c in s["conditions"]) and s,
        message="the running job to report its lost GPU",
    )
    assert status["phase"] == "Running"
    write_manifest(home / "jobs", "next.yaml", gpu_job("next", 2, release, record))
    status = wait_phase(home, "next", "Running", daemon=daemon)
    assert status["devices"] == [2, 3]  # not the lost GPU 0, not the unmanaged GPU 1
    write_manifest(home / "jobs", "third.yaml", gpu_job("third", 1, release, record))
    status = wait_phase(home, "third", "Pending", reason="Resources", daemon=daemon)
    assert "GPU 1 unmanaged: pid 4242 (4Gi)" in status["message"] and "GPU 0 unhealthy" in status["message"]
    for name in ("resident", "next"):
        (release / name).touch()


def test_policy_flags_reach_the_controller_user_quota_and_effective_priority(home, gflowd, tmp_path):
    import os
    import pwd

    user = pwd.getpwuid(os.getuid()).pw_name  # the manifests' owner
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n" + FOUR_GPUS)
    release = tmp_path / "release"
    release.mkdir()
    record = tmp_path / "intervals.txt"
    gflowd("--fake-gpus", fake, "--user-quotas", f"{user}:2", "--aging-interval", "1h")
    write_manifest(home / "jobs", "first.yaml", gpu_job("first", 2, release, record, priority=5))
    wait_phase(home, "first", "Running", timeout=30)
    write_manifest(home / "jobs", "second.yaml", gpu_job("second", 1, release, record, priority=3))
    status = wait_phase(home, "second", "Pending", reason="Quota", timeout=30)
    assert f"user {user} may use 2 GPUs at once and 2 are in use" in status["message"]
    assert status["effectivePriority"] == 3
    (release / "first").touch()
    wait_phase(home, "second", "Running", timeout=30)
    (release / "second").touch()
    wait_phase(home, "second", "Succeeded", timeout=30)


def test_preemption_end_to_end(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n" + FOUR_GPUS)
    release = tmp_path / "release"
    release.mkdir()
    record = tmp_path / "intervals.txt"
    daemon = gflowd("--fake-gpus", fake, "--preemption-threshold", "5")
    write_manifest(home / "jobs", "low.yaml", gpu_job("low", 4, release, record, priority=0))
    wait_phase(home, "low", "Running", timeout=30, daemon=daemon)
    write_manifest(home / "jobs", "high.yaml", gpu_job("high", 4, release, record, priority=5))
    wait_phase(home, "high", "Running", timeout=60, daemon=daemon)
    low = wait_phase(home, "low", "Pending", reason="Preempted", timeout=30, daemon=daemon)
    assert low["failed"] == 0  # backoffLimit 0: a counted attempt would have made it Failed
    preempted = next(c for c in low["conditions"] if c["type"] == "Preempted")
    assert "preempted by job high (priority 5 vs 0)" in preempted["message"]
    (release / "high").touch()
    low = wait_phase(home, "low", "Running", timeout=30, daemon=daemon)
    assert low["attempt"] == 2 and not any(c["type"] == "Preempted" for c in low["conditions"])
    (release / "low").touch()
    wait_phase(home, "low", "Succeeded", timeout=30, daemon=daemon)
