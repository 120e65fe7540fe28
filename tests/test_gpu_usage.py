"""GPU usage findings, pure: the real sampler (``observe.gpu_usage``) fed GPU inventories, the real
``reconcile`` judging them with an injected clock (``decide.gpu_usage``): GPUsUnused, GPUIdle,
GPUMemoryNearLimit, the idleTimeout warning and stop, and the status's ``gpuUsage`` summary."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from builders import GIB, T0, World, condition, job
from builders import running as running_run

from controller.client.read.usage import job_series
from controller.model.gpus import GpuProcess
from controller.model.records import JobState
from controller.model.usage import UsageSettings
from controller.observe.gpu_usage import SERIES_LEN, UsageSampler

STEP = 5.0  # seconds between samples, as gflowd's default


class UsageWorld(World):
    """A World whose every tick first takes a usage sample of its GPUs, as gflowd's observe does."""

    def __init__(self, *docs, settings: UsageSettings | None = None, **fields) -> None:
        super().__init__(*docs, usage_settings=settings or UsageSettings(), **fields)
        self.sampler = UsageSampler(STEP)

    def place(self, gpu: int, name: str, util: int | None, gib: float = 1.0) -> None:
        """The job's process on GPU ``gpu`` (replacing what was there)."""
        pid = self.runs[name].pid
        self.gpus[gpu] = replace(self.gpus[gpu], processes=(GpuProcess(pid, int(gib * GIB), "python", util),))

    def clear(self, gpu: int) -> None:
        self.gpus[gpu] = replace(self.gpus[gpu], processes=())

    def tick(self, now: float):
        self.sampler.sample(self.gpus, self.runtime.job_pids(), self.runtime.observe(), now)
        self.snapshot_fields["gpu_usage"] = self.sampler.usage()
        return super().tick(now)

    def run_until(self, start: float, end: float) -> list:
        """Ticks every STEP seconds from ``start`` through ``end``; the events of them all."""
        events, now = [], start
        while now <= end:
            events += self.tick(now).events
            now += STEP
        return events


def warnings(events, name: str = "ddp") -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in events if e.object == name and e.type == "Warning"]


def test_a_gpu_without_a_process_of_its_job_is_reported_after_the_window_once_and_cleared():
    world = UsageWorld(job("ddp", resources={"gpus": 2}), n_gpus=2)
    world.tick(T0)
    world.place(0, "ddp", util=80)
    # the first sample is at T0 + 5 (the pass at T0 started the job): observed time counts from there
    before = world.run_until(T0 + STEP, T0 + 600)
    assert condition(world.state("ddp"), "GPUsUnused") is None and warnings(before) == []
    assert world.last.wake_at == T0 + 605  # the pass that will find it is scheduled
    events = world.run_until(T0 + 605, T0 + 900)
    cond = condition(world.state("ddp"), "GPUsUnused")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "NoProcess"
    assert cond["message"].startswith("job ddp uses 1 of its 2 GPUs (GPU 1: no process, 0% for 10m)")
    assert "DistributedDataParallel" in cond["message"] and "CUDA_VISIBLE_DEVICES" in cond["message"]
    assert [reason for reason, _ in warnings(events)] == ["GPUsUnused"]  # once, not every pass
    world.place(1, "ddp", util=70)
    world.tick(T0 + 905)
    assert condition(world.state("ddp"), "GPUsUnused") is None


def test_no_activity_on_any_gpu_for_the_idle_window_is_gpu_idle_and_activity_clears_it():
    settings = UsageSettings(idle_gpu_window=1800)
    world = UsageWorld(job("ddp", resources={"gpus": 2}), n_gpus=2, settings=settings)
    world.tick(T0)
    world.place(0, "ddp", util=0)  # processes hold the GPUs and do nothing
    world.place(1, "ddp", util=0)
    events = world.run_until(T0 + STEP, T0 + 1800)
    assert condition(world.state("ddp"), "GPUIdle") is None and warnings(events) == []
    events = world.run_until(T0 + 1805, T0 + 1900)
    cond = condition(world.state("ddp"), "GPUIdle")
    assert cond is not None and cond["message"] == "no GPU activity on GPUs 0,1 for 30m"
    assert warnings(events) == [("GPUIdle", "job ddp: no GPU activity on GPUs 0,1 for 30m")]
    assert condition(world.state("ddp"), "GPUsUnused") is None  # both have a process: not unused
    world.place(1, "ddp", util=3)
    world.tick(T0 + 1905)
    assert condition(world.state("ddp"), "GPUIdle") is None


def test_a_shared_job_past_ninety_percent_of_its_gpu_memory_is_warned_and_cleared_below():
    world = UsageWorld(job("s", resources={"gpus": 1, "gpuMemory": "10Gi"}, sharing="Shared"), n_gpus=1)
    world.tick(T0)
    world.place(0, "s", util=50, gib=8.9)
    world.tick(T0 + 5)
    assert condition(world.state("s"), "GPUMemoryNearLimit") is None
    world.place(0, "s", util=50, gib=9.5)
    plan = world.tick(T0 + 10)
    cond = condition(world.state("s"), "GPUMemoryNearLimit")
    assert cond is not None and "over 90% of its gpuMemory of 10Gi on GPU 0" in cond["message"]
    assert [e.reason for e in plan.events if e.object == "s"] == ["GPUMemoryNearLimit"]
    assert plan.stops == ()  # near, not over
    world.place(0, "s", util=50, gib=4)
    world.tick(T0 + 15)
    assert condition(world.state("s"), "GPUMemoryNearLimit") is None


def test_an_exclusive_job_is_never_near_a_gpu_memory_limit():
    world = UsageWorld(job("e", resources={"gpus": 1}), n_gpus=1)
    world.tick(T0)
    world.place(0, "e", util=50, gib=79)
    world.tick(T0 + 5)
    assert condition(world.state("e"), "GPUMemoryNearLimit") is None


def test_an_idle_gpu_job_is_warned_at_ninety_percent_then_stopped_with_idle_timeout():
    world = UsageWorld(job("nb", resources={"gpus": 1}, idleTimeout="10m"), n_gpus=1)
    world.tick(T0)
    world.place(0, "nb", util=40)
    world.run_until(T0 + 5, T0 + 100)  # busy for a while: the idle clock starts at the last activity
    world.place(0, "nb", util=0)
    events = world.run_until(T0 + 105, T0 + 100 + 535)
    assert warnings(events, "nb") == [] and world.runtime.stops == {}
    events = world.run_until(T0 + 100 + 540, T0 + 100 + 595)
    assert [reason for reason, _ in warnings(events, "nb")] == ["IdleWarning"]  # once
    assert "stopped in 1m" in warnings(events, "nb")[0][1]
    assert world.runtime.notices == []  # not a tty job: no terminal to tell
    assert world.state("nb").idle_warning == T0 + 640
    world.tick(T0 + 700)
    assert world.runtime.stops == {"nb": "IdleTimeout"}
    world.exit("nb", 143, T0 + 701, signal=15)
    world.tick(T0 + 702)
    assert world.phase("nb") == ("Failed", "IdleTimeout")
    assert "idle for 10m" in world.state("nb").message and "idleTimeout is 10m" in world.state("nb").message
    assert world.state("nb").failed == 0  # our stop, not the job's failure


def test_activity_after_the_warning_resets_the_idle_clock_and_warns_anew_later():
    world = UsageWorld(job("nb", resources={"gpus": 1}, idleTimeout="100s"), n_gpus=1)
    world.tick(T0)
    world.place(0, "nb", util=0)
    events = world.run_until(T0 + 5, T0 + 95)
    assert [r for r, _ in warnings(events, "nb")] == ["IdleWarning"]
    world.place(0, "nb", util=10)
    world.tick(T0 + 96)
    world.place(0, "nb", util=0)
    events = world.run_until(T0 + 100, T0 + 190)
    assert world.runtime.stops == {}  # the activity at +96 moved the clock
    assert [r for r, _ in warnings(events, "nb")] == ["IdleWarning"]  # a new idle spell, a new warning
    world.tick(T0 + 197)
    assert world.runtime.stops == {"nb": "IdleTimeout"}


def test_a_tty_job_takes_the_default_idle_timeout_and_terminal_input_keeps_it_alive():
    settings = UsageSettings(idle_timeout=100.0)
    world = UsageWorld(job("shell", tty=True), settings=settings)  # a CPU tty job: input is what counts
    world.tick(T0)
    world.runs["shell"] = replace(world.runs["shell"], last_input=T0 + 80)
    world.run_until(T0 + 5, T0 + 165)
    assert world.runtime.stops == {} and world.runtime.notices == []
    events = world.run_until(T0 + 170, T0 + 175)
    assert [r for r, _ in warnings(events, "shell")] == ["IdleWarning"]
    assert len(world.runtime.notices) == 1 and world.runtime.notices[0][0] == "shell"
    assert "no terminal input" in world.runtime.notices[0][1] and "idleTimeout 1m40s" in world.runtime.notices[0][1]
    world.tick(T0 + 180)
    assert world.runtime.stops == {"shell": "IdleTimeout"}


def test_a_cpu_job_without_a_terminal_is_never_idle_stopped():
    world = UsageWorld(job("cpu", idleTimeout="1m"))
    world.tick(T0)
    events = world.run_until(T0 + 5, T0 + 600)
    assert world.runtime.stops == {} and warnings(events, "cpu") == []
    assert world.phase("cpu") == ("Running", "Started")


def test_a_gpu_job_whose_gpus_were_never_sampled_is_not_judged_idle():
    world = World(job("nb", resources={"gpus": 1}, idleTimeout="1m"), n_gpus=1)  # no usage: NVML cannot say
    world.tick(T0)
    for now in (T0 + 60, T0 + 600, T0 + 6000):
        world.tick(now)
    assert world.runtime.stops == {} and condition(world.state("nb"), "GPUIdle") is None


def test_idle_timeout_is_off_by_default_even_for_idle_gpus():
    world = UsageWorld(job("nb", resources={"gpus": 1}), n_gpus=1)
    world.tick(T0)
    world.place(0, "nb", util=0)
    world.run_until(T0 + 5, T0 + 4000)
    assert world.runtime.stops == {}
    assert condition(world.state("nb"), "GPUIdle") is not None  # reported, never acted on


def test_gpu_usage_summary_counts_gpu_hours_used_and_allocated():
    world = UsageWorld(job("t", resources={"gpus": 2}), n_gpus=2)
    world.tick(T0)
    world.place(0, "t", util=50, gib=4)
    world.place(1, "t", util=100, gib=8)
    world.run_until(T0 + 5, T0 + 3600)
    world.exit("t", 0, T0 + 3600)
    world.tick(T0 + 3601)
    usage = world.state("t").gpu_usage
    assert world.phase("t") == ("Succeeded", "Completed")
    assert usage["attempt"] == 1 and usage["gpuHoursAllocated"] == pytest.approx(2.0)
    # observed from the first sample at T0 + 5: 0.5 + 1.0 GPU-hours less those 5 s
    assert usage["gpuHoursUsed"] == pytest.approx(1.5 - 1.5 * 5 / 3600, abs=1e-3)
    by_gpu = {g["index"]: g for g in usage["gpus"]}
    assert by_gpu[0]["utilPeak"] == 50 and by_gpu[1]["utilPeak"] == 100
    assert by_gpu[1]["memoryPeak"] == 8 * GIB and by_gpu[0]["memoryMean"] == pytest.approx(4 * GIB, rel=0.01)
    assert usage["utilMean"] == pytest.approx(75, abs=0.2)
    # the summary survives the status file round trip, and the index row carries UTIL
    again = JobState.from_status(world.state("t").to_status())
    assert again.gpu_usage == usage and again.summary()["gpuUtil"] == usage["utilMean"]


def test_a_running_jobs_summary_is_refreshed_about_once_a_minute_not_every_sample():
    world = UsageWorld(job("t", resources={"gpus": 1}), n_gpus=1)
    world.tick(T0)
    world.place(0, "t", util=30)
    world.tick(T0 + 5)
    first = world.state("t").gpu_usage
    world.run_until(T0 + 10, T0 + 60)
    assert world.state("t").gpu_usage is first  # the same object: the status is not rewritten
    world.tick(T0 + 70)
    assert world.state("t").gpu_usage is not first and world.state("t").gpu_usage["samples"] > first["samples"]


def test_the_sampler_keeps_a_bounded_series_and_survives_a_restart_through_its_file():
    world = UsageWorld(job("t", resources={"gpus": 1}), n_gpus=1)
    world.tick(T0)
    world.place(0, "t", util=60, gib=2)
    world.run_until(T0 + 5, T0 + 5 * (SERIES_LEN + 30))
    track = world.sampler.tracks["t"]
    assert len(track.times) == len(track.gpus[0].util_series) == SERIES_LEN and track.samples == SERIES_LEN + 30
    assert track.times[-1] == 5 * (SERIES_LEN + 30 - 1) * 10  # tenths of a second after the first sample
    text = world.sampler.dump()
    restored = UsageSampler(STEP)
    restored.load(text)
    assert restored.usage() == world.sampler.usage()
    assert list(restored.tracks["t"].times) == list(track.times)
    assert list(restored.tracks["t"].gpus[0].mem_series) == [2048] * SERIES_LEN
    # what gflowctl top, describe and the dashboard read back from the file
    points = job_series(json.loads(text), "t", attempt=1)
    assert len(points) == SERIES_LEN and points[-1] == (T0 + 5 * (SERIES_LEN + 30), [(60, 2048)])
    assert job_series(json.loads(text), "t", attempt=2) == []  # another attempt's samples are not this one's
    restored.load("{not json")  # a torn or foreign file is dropped, never fatal
    assert restored.tracks == {}


def test_the_fake_gpu_file_takes_a_per_process_utilization_and_says_what_is_wrong_with_a_bad_one():
    from controller.observe.gpus.inventory import parse_fake_gpus

    [gpu] = parse_fake_gpus(
        "gpus:\n  - {memory: 80Gi, processes: [{pid: 7, usedMemory: 2Gi, utilization: 45}, {pid: 8}]}\n"
    )
    assert [(p.pid, p.used_memory, p.utilization) for p in gpu.processes] == [(7, 2 * GIB, 45), (8, 0, None)]
    with pytest.raises(ValueError, match=r"gpus\[0\]\.processes: utilization must be an integer percent \(0-100\)"):
        parse_fake_gpus("gpus:\n  - {processes: [{pid: 7, utilization: 150}]}\n")


def test_a_process_without_per_process_utilization_counts_the_devices_and_a_foreign_one_nothing():
    from controller.model.gpus import Gpu
    from controller.observe.gpu_usage import job_share

    gpu = Gpu(
        0,
        "GPU-0",
        "H100",
        80 * GIB,
        utilization=70,
        processes=(GpuProcess(5, GIB, "python", None), GpuProcess(6, 3 * GIB, "other", 20)),
    )
    assert job_share(gpu, {5}) == (70, GIB, True)  # NVML cannot say per process: the device's
    assert job_share(gpu, {6}) == (20, 3 * GIB, True)
    assert job_share(gpu, {9}) == (0, 0, False)  # no process of the job: 0 %, whatever the device does


def test_the_jobs_process_trees_are_walked_again_only_when_something_new_shows():
    from controller.model.gpus import Gpu
    from controller.observe.gpu_usage import PIDS_REFRESH, JobPids

    walks = []
    trees = {"a": {10, 11}}

    def walk():
        walks.append(1)
        return {name: set(pids) for name, pids in trees.items()}

    cache = JobPids(walk)
    runs = {"a": running_run("a")}

    def on_gpu(*pids: int) -> list[Gpu]:
        return [Gpu(0, "GPU-0", "H100", GIB, processes=tuple(GpuProcess(p) for p in pids))]

    assert cache.get(on_gpu(), runs, T0) == {} and walks == []  # nothing on the GPUs: nothing to attribute
    assert cache.get(on_gpu(11, 99), runs, T0) == {"a": {10, 11}} and len(walks) == 1
    assert cache.get(on_gpu(11, 99), runs, T0 + 5) == {"a": {10, 11}} and len(walks) == 1  # 99 is foreign: known
    trees["a"].add(12)
    assert cache.get(on_gpu(11, 12), runs, T0 + 10)["a"] == {10, 11, 12} and len(walks) == 2  # a new process: walked
    cache.get(on_gpu(11, 12), {**runs, "b": runs["a"]}, T0 + 11)
    assert len(walks) == 3  # the running jobs changed
    cache.get(on_gpu(11, 12), {**runs, "b": runs["a"]}, T0 + 11 + PIDS_REFRESH)
    assert len(walks) == 4  # and at least every PIDS_REFRESH seconds
    assert (
        cache.get(on_gpu(11), runs, T0 + 50, fresh={"a": {10, 11}}) == {"a": {10, 11}} and len(walks) == 4
    )  # a pass's walk
