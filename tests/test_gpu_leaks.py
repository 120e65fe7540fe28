"""GPU memory nobody owns: the pure decision (controller.decide.gpu_leaks) and the metric of
memory charged to pids that no longer exist. End to end: tests/test_gpu_leaks_e2e.py."""

from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from builders import T0, World, condition, job
from nvml_fixtures import GiB, fake_nvml_lib, gpu, nvml_env, nvml_probe, write_fake_nvml  # noqa: F401

from controller.decide.gpu_leaks import EndedAttempt, GpuProcessFacts, Reclaim, find_leaks, note_reclaimed
from controller.decide.reconcile import reconcile
from controller.model.gpus import Gpu, GpuProcess
from controller.model.records import JobState
from controller.model.scheduling import GpuSlot
from controller.observe.gpu_leaks import LeakWatch
from controller.observe.gpus.procs import process_ticks
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


# -- the job's status says what was killed -------------------------------------------------------------

KILL = Reclaim("train", 3, 1, 5511, 700, "python", 3 * GiB + GiB // 5, 5.0)


def test_the_newly_said_kills_are_the_jobs_and_a_kill_under_way_is_not_again():
    verdict = find_leaks([TRAIN], [proc(5511, ticks=700), proc(6000, marker="train.3.9f2c")], 1.0)
    assert {name: [k.pid for k in kills] for name, kills in verdict.reclaimed.items()} == {"train": [5511, 6000]}
    again = find_leaks([TRAIN], [proc(5511, ticks=700)], 2.0, killing=frozenset({(5511, 700)}))
    assert again.kills and not again.reclaimed


def test_the_reclaimed_condition_names_gpu_pid_command_and_mib_and_adds_up_per_attempt():
    before = JobState(name="train", phase="Failed")
    first = note_reclaimed(before, [KILL], "2026-11-29T02:00:00Z")
    assert before.conditions == []  # a copy: the previous pass's record is never changed
    said = condition(first, "ReclaimedGPUMemory")
    assert said == {
        "type": "ReclaimedGPUMemory",
        "status": "True",
        "reason": "ReclaimedGPUMemory",
        "message": "killed what attempt 3 left holding GPU memory: GPU 1 pid 5511 (python) 3277 MiB",
        "lastTransitionTime": "2026-11-29T02:00:00Z",
    }
    later = replace(KILL, gpu=0, pid=5600, name="", memory=512 << 20)
    second = note_reclaimed(first, [later, KILL], "2026-11-29T02:05:00Z")
    assert condition(second, "ReclaimedGPUMemory")["message"] == (
        "killed what attempt 3 left holding GPU memory: GPU 1 pid 5511 (python) 3277 MiB, GPU 0 pid 5600 512 MiB"
    )
    assert condition(second, "ReclaimedGPUMemory")["lastTransitionTime"] == "2026-11-29T02:00:00Z"
    next_attempt = note_reclaimed(second, [replace(KILL, attempt=4, pid=7000)], "2026-11-29T03:00:00Z")
    assert condition(next_attempt, "ReclaimedGPUMemory")["message"] == (
        "killed what attempt 4 left holding GPU memory: GPU 1 pid 7000 (python) 3277 MiB"
    )


def test_a_finished_job_carried_over_gains_the_condition_and_is_written():
    world = World(job("train", resources={"gpus": 1}))
    world.tick(T0)
    world.exit("train", 0, T0 + 5)
    plan = world.tick(T0 + 6)
    assert world.phase("train") == ("Succeeded", "Completed")
    # the next pass patches nothing: the finished job is carried over as it was...
    snap = world.snapshot()
    snap = replace(snap, previous=snap.admission, unsettled=plan.unsettled)
    assert "train" not in reconcile(snap, T0 + 7).looked_at
    # ...unless gflowd killed what it left: then its record gains the condition, and is written
    reclaimed = reconcile(replace(snap, reclaimed={"train": (replace(KILL, attempt=1),)}), T0 + 7)
    assert "train" in reclaimed.looked_at
    assert reclaimed.states["train"].phase == "Succeeded"
    said = condition(reclaimed.states["train"], "ReclaimedGPUMemory")
    assert said["message"] == "killed what attempt 1 left holding GPU memory: GPU 1 pid 5511 (python) 3277 MiB"
    assert condition(world.state("train"), "ReclaimedGPUMemory") is None


# -- what a restarted gflowd still knows ---------------------------------------------------------------


def attempt(name: str, number: int, marker: str, devices=(0,), result=None, **facts) -> SimpleNamespace:
    """An attempt of the local runtime, as LeakWatch reads it."""
    base = {"job_pid": None, "job_ticks": None, "spec": {"bootId": "boot-a"}, "grace": 5.0, "held": None}
    return SimpleNamespace(
        name=name, attempt=number, marker=marker, devices=devices, result=result, **{**base, **facts}
    )


def test_a_gpu_attempts_pids_and_its_end_outlive_gflowd(tmp_path):
    path = tmp_path / "gpu-leftovers.json"
    child = os.getpid()  # a live process: its start time is read from /proc, as a tree's
    ticks = process_ticks(child)
    old = LeakWatch(path, "boot-a")
    runtime = SimpleNamespace(
        attempts={"train": attempt("train", 1, "m-train"), "cpu": attempt("cpu", 1, "m-cpu", devices=())}
    )
    old.attempts(runtime, {"train": {child, 2**22 + 7}, "cpu": {child}}, 100.0)
    old.save()
    saved = json.loads(path.read_text())
    assert [(a["name"], a["pids"], a["endedAt"]) for a in saved["attempts"]] == [
        ("train", {str(child): ticks}, None)  # the GPU attempt only; a pid not alive is none
    ]
    assert path.stat().st_mode & 0o777 == 0o600
    # gflowd is killed; the job ends while it is down; a new gflowd loads what the old one saw
    new = LeakWatch(path, "boot-a")
    assert new.load(200.0) == 1
    ended = SimpleNamespace(exit_code=0)
    new.attempts(SimpleNamespace(attempts={"train": attempt("train", 1, "m-train", result=ended)}), {}, 200.0)
    [found] = new.ended_attempts()
    assert (found.name, found.marker, dict(found.pids), found.devices) == ("train", "m-train", {child: ticks}, (0,))
    verdict = find_leaks(new.ended_attempts(), [proc(child, gpu=0, ticks=ticks)], 200.0)
    assert [(k.job, k.pid) for k in verdict.kills] == [("train", child)]
    new.save()
    assert json.loads(path.read_text())["attempts"][0]["endedAt"] == 200.0
    # another boot: its pids and start times may name anything now
    assert LeakWatch(path, "boot-b").load(200.0) == 0


def test_an_attempt_that_ended_before_gflowd_saw_it_run_is_known_by_its_marker_and_first_process():
    watch = LeakWatch(None, "boot-a")
    ended = SimpleNamespace(exit_code=1)
    runtime = SimpleNamespace(
        attempts={
            "train": attempt("train", 2, "m-train", result=ended, job_pid=4321, job_ticks=99),
            "old": attempt("old", 1, "m-old", result=ended, job_pid=4322, job_ticks=98, spec={"bootId": "boot-0"}),
        }
    )
    watch.attempts(runtime, {}, 10.0)
    found = {a.name: (a.marker, dict(a.pids)) for a in watch.ended_attempts()}
    assert found == {"train": ("m-train", {4321: 99}), "old": ("m-old", {})}  # a pid of another boot: none
    # the job deleted and made again: its attempt 2 is another attempt, with another marker
    again = SimpleNamespace(
        attempts={"train": attempt("train", 2, "m-train-2", result=ended, job_pid=5000, job_ticks=7)}
    )
    watch.attempts(again, {}, 20.0)
    assert {a.name: a.marker for a in watch.ended_attempts()} == {"train": "m-train-2", "old": "m-old"}


def test_a_file_torn_or_of_another_boot_is_ignored(tmp_path):
    path = tmp_path / "gpu-leftovers.json"
    path.write_text('{"bootId": "boot-a", "attempts": [{"name": ')
    assert LeakWatch(path, "boot-a").load(1.0) == 0


@contextmanager
def _within(seconds: int):
    """Fail, not hang, should the code under test loop for good."""

    def stop(*_):
        raise AssertionError(f"still running after {seconds} s: an endless loop?")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_beyond_the_cap_the_attempts_that_ended_first_are_forgotten_ties_in_the_order_seen():
    """GPU attempts (a change to save): the eviction once popped nothing after the first change
    (``changed or bool(pop(...))``) and looped for good, hanging gflowd past 512 ended attempts."""
    from controller.observe.gpu_leaks import MAX_ENDED

    watch = LeakWatch(None, "boot-a")
    ended = SimpleNamespace(exit_code=0)
    # MAX_ENDED - 2 attempts end at t=1; then 5 at t=2, seen in this order; then MAX_ENDED - 1 at t=3
    first = {f"a{i}": attempt(f"a{i}", 1, f"m-a{i}", result=ended) for i in range(MAX_ENDED - 2)}
    burst = {f"b{i}": attempt(f"b{i}", 1, f"m-b{i}", result=ended) for i in (4, 0, 3, 1, 2)}
    late = {f"c{i}": attempt(f"c{i}", 1, f"m-c{i}", result=ended) for i in range(MAX_ENDED - 1)}
    with _within(60):
        watch.attempts(SimpleNamespace(attempts=first), {}, 1.0)
        watch.attempts(SimpleNamespace(attempts=burst), {}, 2.0)  # 3 over the cap: the 3 oldest of t=1 go
        names = [a.name for a in watch.ended_attempts()]
        assert len(names) == MAX_ENDED and names[:2] == ["a3", "a4"]
        assert names[-5:] == ["b4", "b0", "b3", "b1", "b2"]
        # every one of t=1 goes, then 4 of t=2's, ties in the order they were seen
        watch.attempts(SimpleNamespace(attempts=late), {}, 3.0)
    assert [a.name for a in watch.ended_attempts()] == ["b2"] + [f"c{i}" for i in range(MAX_ENDED - 1)]


def test_an_ended_gpu_attempt_is_forgotten_after_a_day_though_others_changed_meanwhile():
    from controller.observe.gpu_leaks import KEEP

    watch = LeakWatch(None, "boot-a")
    ended = SimpleNamespace(exit_code=0)
    watch.attempts(SimpleNamespace(attempts={"old": attempt("old", 1, "m-old", result=ended)}), {}, 0.0)
    later = {"new": attempt("new", 1, "m-new", result=ended)}  # another GPU attempt: a change to save
    watch.attempts(SimpleNamespace(attempts=later), {}, KEEP + 1.0)
    assert [a.name for a in watch.ended_attempts()] == ["new"]
