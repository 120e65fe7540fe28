"""GPU memory nobody owns: the pure decision (controller.decide.gpu_leaks) and the metric of
memory charged to pids that no longer exist. End to end: tests/test_gpu_leaks_e2e.py."""

from __future__ import annotations

from pathlib import Path

from nvml_fixtures import GiB, fake_nvml_lib, gpu, nvml_env, nvml_probe, write_fake_nvml  # noqa: F401

from controller.decide.gpu_leaks import EndedAttempt, GpuProcessFacts, find_leaks
from controller.model.gpus import Gpu, GpuProcess
from controller.model.scheduling import GpuSlot
from controller.sinks.metrics import _SnapshotCollector

TRAIN = EndedAttempt("train", 3, "train.3.9f2c", {5511: 700}, grace=5.0)


def proc(pid: int, **facts) -> GpuProcessFacts:
    base = {"gpu": 1, "pid": pid, "memory": 3 * GiB + GiB // 5, "alive": True, "name": "python", "ticks": 900}
    return GpuProcessFacts(**{**base, **facts})


def test_a_leftover_with_the_attempts_marker_is_killed_and_said():
    verdict = find_leaks([TRAIN], [proc(6000, marker="train.3.9f2c")], 100.0)
    assert [(k.job, k.pid, k.ticks, k.grace) for k in verdict.kills] == [("train", 6000, 900, 5.0)]
    [event] = verdict.events
    assert (event.type, event.reason, event.object, event.kind) == ("Warning", "ReclaimedGPUMemory", "train", "job")
    assert event.message == "GPU 1: killed pid 6000 (python) that held 3.2Gi after train attempt 3 ended"


def test_a_pid_of_the_attempts_tree_is_killed_only_with_the_same_start_time():
    assert find_leaks([TRAIN], [proc(5511, ticks=700)], 1.0).kills
    assert not find_leaks([TRAIN], [proc(5511, ticks=701)], 1.0).kills  # the pid was reused by a stranger


def test_what_gflowd_did_not_start_is_never_killed():
    strangers = [
        proc(7000),  # same user, same window, no marker: a hand-started server
        proc(7001, marker="train.3.forged"),  # a marker that names no attempt
        proc(7002, marker="train.3.9f2c", name="vllm"),  # ignoreProcesses
    ]
    verdict = find_leaks([TRAIN], strangers, 1.0, ignore=frozenset({"vllm"}))
    assert verdict.kills == () and verdict.events == ()


def test_a_running_attempts_processes_are_never_touched():
    running = find_leaks([TRAIN], [proc(6000, marker="train.3.9f2c")], 1.0, running_markers=frozenset({"train.3.9f2c"}))
    managed = find_leaks([TRAIN], [proc(5511, ticks=700)], 1.0, managed_pids=frozenset({5511}))
    assert running.kills == () and managed.kills == ()


def test_a_kill_under_way_is_not_said_again():
    verdict = find_leaks([TRAIN], [proc(5511, ticks=700)], 1.0, killing=frozenset({(5511, 700)}))
    assert len(verdict.kills) == 1 and verdict.events == ()


def test_a_dead_pids_memory_is_held_said_once_and_never_killed():
    gone = proc(8000, alive=False, ticks=None, memory=30 * GiB)
    first = find_leaks([TRAIN], [gone], 1000.0)
    assert first.kills == ()
    assert [(h.gpu, h.pid, h.memory, h.since) for h in first.held] == [(1, 8000, 30 * GiB, 1000.0)]
    [event] = first.events
    assert (event.reason, event.kind, event.object) == ("GPUMemoryHeld", "gpu", "1")
    later = find_leaks([TRAIN], [gone], 1600.0, held_since={(1, 8000): 1000.0})
    assert later.events == () and later.held[0].since == 1000.0


def test_the_orphaned_memory_metric_counts_only_pids_that_no_longer_exist():
    processes = (GpuProcess(8000, 30 * GiB, gone=True), GpuProcess(8001, 2 * GiB, "vllm", user="bob"))
    collector = _SnapshotCollector()
    collector.current = ({}, [GpuSlot(Gpu(0, "GPU-0", "A100", 40 * GiB, processes=processes), "Free")], 0.0, {})
    [family] = [f for f in collector.collect() if f.name == "gflow_gpu_memory_orphaned_bytes"]
    assert [(s.labels, s.value) for s in family.samples] == [({"gpu": "0"}, 30 * GiB)]


def test_nvml_marks_a_charged_pid_that_no_longer_exists_as_gone(nvml_env, nvml_probe):
    """Through the real pynvml path on the stand-in libnvidia-ml: the driver lists a pid that
    exited (its context kept) next to a live one."""
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, {"gpus": [gpu(0)]})
    probe = nvml_probe(nvml_env)
    gone = 2**22 + 4242  # above any pid_max default: no such process
    processes = [{"pid": probe.proc.pid, "usedMemory": GiB}, {"pid": gone, "usedMemory": 30 * GiB}]
    write_fake_nvml(path, {"gpus": [gpu(0, processes=processes)]})
    read = {p["pid"]: p["gone"] for p in probe.call("read")[0]["processes"]}
    assert read == {probe.proc.pid: False, gone: True}
