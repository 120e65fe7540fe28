"""GPU usage end to end: a real gflowd on fake GPUs whose file carries the job's real pid, with
per-process utilization and memory, edited live (the fake-GPU file is re-read when it changes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import job_status, wait_for, wait_phase, write_manifest

from controller.client.read.usage import job_series

GPU = "{name: NVIDIA H100 80GB HBM3, memory: 80Gi}"


def write_gpus(path: Path, *processes_per_gpu: list[dict]) -> None:
    """The fake-GPU file, one GPU per argument with those processes; replaced atomically."""
    lines = ["gpus:"]
    for processes in processes_per_gpu:
        procs = ", ".join("{" + ", ".join(f"{k}: {v}" for k, v in p.items()) + "}" for p in processes)
        lines.append(f"  - {{name: NVIDIA H100 80GB HBM3, memory: 80Gi, processes: [{procs}]}}")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def waiting_job(name: str, gpus: int, release: Path, extra: str = "") -> str:
    return f"""\
metadata: {{name: {name}}}
spec:
  resources: {{gpus: {gpus}}}
{extra}  command: [bash, -c, 'while [ ! -e {release} ]; do sleep 0.05; done']
"""


def running_with_pid(home: Path, name: str) -> dict:
    """The status once the job runs and its pid is recorded (the job's process, in its process tree)."""
    return wait_for(
        lambda: (s := job_status(home, name)) and s.get("phase") == "Running" and s.get("pid") and s,
        message=lambda: f"{name} to run with a pid; status {job_status(home, name)}",
    )


def condition(home: Path, name: str, type_: str) -> dict | None:
    status = job_status(home, name) or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def events(home: Path, reason: str) -> list[dict]:
    try:
        lines = (home / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [e for e in map(json.loads, lines) if e["reason"] == reason]


def test_a_two_gpu_job_using_one_gpu_gets_gpus_unused_and_loses_it_when_both_are_used(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    write_gpus(fake, [], [])
    release = tmp_path / "release"
    daemon = gflowd("--fake-gpus", fake, "--gpu-sample-interval", "0.5s", "--unused-gpu-window", "3s")
    write_manifest(home / "jobs", "ddp.yaml", waiting_job("ddp", 2, release))
    status = running_with_pid(home, "ddp")
    assert status["devices"] == [0, 1]
    pid = status["pid"]
    write_gpus(fake, [{"pid": pid, "usedMemory": "10Gi", "utilization": 60}], [])
    found = wait_for(
        lambda: condition(home, "ddp", "GPUsUnused"),
        timeout=20,
        message=lambda: f"GPUsUnused on ddp; status {job_status(home, 'ddp')}\n{daemon.stderr()[-2000:]}",
    )
    assert found["status"] == "True"
    assert found["message"].startswith("job ddp uses 1 of its 2 GPUs (GPU 1: no process, 0% for 3s)")
    assert [e["type"] for e in events(home, "GPUsUnused")] == ["Warning"]
    # what gflowctl top reads: the ring buffer of samples, per bound GPU (util %, MiB)
    usage = json.loads((home / "run" / "gpu-usage.json").read_text())
    assert usage["jobs"]["ddp"]["devices"] == [0, 1]
    assert [(60, 10240), (0, 0)] in [point for _, point in job_series(usage, "ddp", attempt=1)]
    write_gpus(
        fake,
        [{"pid": pid, "usedMemory": "10Gi", "utilization": 60}],
        [{"pid": pid, "usedMemory": "9Gi", "utilization": 55}],
    )
    wait_for(lambda: condition(home, "ddp", "GPUsUnused") is None, timeout=20, message="GPUsUnused to clear")
    assert len(events(home, "GPUsUnused")) == 1  # reported once, not once per pass
    assert condition(home, "ddp", "GPUIdle") is None
    # a restarted gflowd carries the samples on (run/gpu-usage.json), not from zero
    before = json.loads((home / "run" / "gpu-usage.json").read_text())["jobs"]["ddp"]
    assert daemon.terminate() == 0
    daemon = gflowd("--fake-gpus", fake, "--gpu-sample-interval", "0.5s", "--unused-gpu-window", "3s")

    def resumed():
        after = json.loads((home / "run" / "gpu-usage.json").read_text())["jobs"].get("ddp") or {}
        return after.get("samples", 0) > before["samples"] and after

    after = wait_for(resumed, timeout=20, message="samples to go on after a restart")
    assert after["since"] == before["since"]
    live = after["summary"]  # what describe shows while it runs
    assert [g["utilPeak"] for g in live["gpus"]] == [60, 55] and live["samples"] == after["samples"]
    release.touch()
    status = wait_phase(home, "ddp", "Succeeded", timeout=20, daemon=daemon)
    assert status["gpuUsage"]["gpus"][0]["utilPeak"] == 60 and status["gpuUsage"]["gpus"][1]["utilPeak"] == 55
    assert status["gpuUsage"]["gpuHoursAllocated"] > status["gpuUsage"]["gpuHoursUsed"] > 0
    assert not any(c["type"] in ("GPUsUnused", "GPUIdle") for c in status["conditions"])


def test_a_job_whose_gpus_stay_idle_is_warned_then_stopped_with_idle_timeout(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    write_gpus(fake, [])
    release = tmp_path / "release"
    daemon = gflowd("--fake-gpus", fake, "--gpu-sample-interval", "0.5s")
    write_manifest(home / "jobs", "nb.yaml", waiting_job("nb", 1, release, extra="  idleTimeout: 5s\n"))
    pid = running_with_pid(home, "nb")["pid"]
    write_gpus(fake, [{"pid": pid, "usedMemory": "3Gi", "utilization": 0}])  # holds memory, computes nothing
    status = wait_phase(home, "nb", "Failed", reason="IdleTimeout", timeout=30, daemon=daemon)
    assert "idleTimeout is 5s" in status["message"] and "no GPU activity on GPU 0" in status["message"]
    warned = events(home, "IdleWarning")
    assert len(warned) == 1 and "it will be stopped in" in warned[0]["message"]
    assert not release.exists()  # it was stopped, it did not end by itself
