"""Per-job GPU usage, sampled: every ``gpuSampleInterval`` seconds, the GPU inventory that gflowd
reads anyway (one NVML sweep: processes with their memory and utilization) is split by job -- for
each running attempt, its bound GPUs and its process tree (the runtime's ``job_pids``) -- into
utilization and memory per GPU.

Observes only: :class:`UsageSampler` keeps, per attempt, running totals (``model.usage``, what
decide judges) and a bounded time series (a ring buffer of the last ``SERIES_LEN`` samples, for
``gflowctl top``, ``describe`` and the dashboard). ``dump``/``load`` carry both across a gflowd
restart through ``run/gpu-usage.json`` (the recorder writes it after each sample); what it cannot
carry (samples while gflowd was down) is simply missing: totals count observed time only.

The file, per running attempt: its totals per GPU, and the ring buffer packed
(``util/packed.py``): ``series.t`` the sample times in tenths of a second after ``since``,
``series.util[i]`` and ``series.mem[i]`` the utilization (%) and memory (MiB) on the i-th bound
GPU. Packed, 50 jobs on 8 GPUs with full buffers write in ~1 ms instead of ~16 ms as JSON lists.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.model.gpus import Gpu
from controller.model.plan import RunObservation
from controller.model.usage import AttemptUsage, GpuUse, summary
from controller.util.packed import pack, unpack

SERIES_LEN = 120  # samples kept per attempt: 10 minutes at the default 5 s
PIDS_REFRESH = 30.0  # seconds a walk of the jobs' process trees is trusted when nothing new shows
MIB = 1 << 20


@dataclass
class _GpuTrack:
    index: int
    util_sum: float = 0.0
    util_peak: int = 0
    util_last: int = 0
    memory_sum: float = 0.0
    memory_peak: int = 0
    memory_last: int = 0
    has_process: bool = False
    last_process: float | None = None
    last_busy: float | None = None
    busy_seconds: float = 0.0
    util_series: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))  # %, one per sample
    mem_series: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))  # MiB, one per sample

    def add(self, now: float, util: int, memory: int, has_process: bool, interval: float) -> None:
        self.util_sum += util
        self.util_peak = max(self.util_peak, util)
        self.util_last = util
        self.memory_sum += memory
        self.memory_peak = max(self.memory_peak, memory)
        self.memory_last = memory
        self.has_process = has_process
        if has_process:
            self.last_process = now
        if util > 0:
            self.last_busy = now
        self.busy_seconds += util / 100 * interval
        self.util_series.append(util)
        self.mem_series.append(memory // MIB)

    def use(self, samples: int) -> GpuUse:
        n = max(samples, 1)
        return GpuUse(
            self.index,
            round(self.util_sum / n, 1),
            self.util_peak,
            self.util_last,
            round(self.memory_sum / n),
            self.memory_peak,
            self.memory_last,
            self.has_process,
            self.last_process,
            self.last_busy,
            round(self.busy_seconds, 1),
        )


@dataclass
class _Track:
    name: str
    attempt: int
    devices: tuple[int, ...]
    since: float
    sampled_at: float = 0.0
    samples: int = 0
    gpus: list[_GpuTrack] = field(default_factory=list)
    times: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))  # tenths of a second after ``since``
    started: float | None = None  # the attempt's start (the runtime's), for GPU-hours allocated

    def usage(self) -> AttemptUsage:
        return AttemptUsage(
            self.name,
            self.attempt,
            self.since,
            self.sampled_at,
            self.samples,
            tuple(g.use(self.samples) for g in self.gpus),
        )


def job_share(gpu: Gpu, pids: set[int]) -> tuple[int, int, bool]:
    """(utilization %, memory bytes, has a process) of the processes ``pids`` on ``gpu``. The
    processes' own utilization where NVML reports it per process; else the device's (a GPU the job
    has to itself shows the job's work; on a shared one it over-counts, so idleness is never
    claimed wrongly)."""
    mine = [p for p in gpu.processes if p.pid in pids]
    if not mine:
        return 0, 0, False
    memory = sum(p.used_memory for p in mine)
    if all(p.utilization is not None for p in mine):
        util = sum(p.utilization or 0 for p in mine)
    else:
        util = gpu.utilization or 0
    return min(util, 100), memory, True


class UsageSampler:
    """Running attempts' GPU usage; one :meth:`sample` per inventory read that is due."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.tracks: dict[str, _Track] = {}
        self._usage: dict[str, AttemptUsage] | None = {}
        self._flags: dict[str, tuple] = {}

    def due(self, now: float) -> bool:
        last = max((t.sampled_at for t in self.tracks.values()), default=0.0)
        return now - last >= self.interval * 0.95  # the inventory's own cadence jitters a little

    def sample(
        self, gpus: list[Gpu], job_pids: Mapping[str, set[int]], runs: Mapping[str, RunObservation], now: float
    ) -> bool:
        """Add one sample for every running attempt with GPUs; attempts the runtime forgot are dropped.
        True when a GPU of some job started or stopped having a process of it or being busy (what
        decide's findings turn on), so the loop passes at once instead of at the next timer."""
        by_index = {g.index: g for g in gpus}
        live: set[str] = set()
        flipped = False
        for name, run in runs.items():
            ended = self.tracks.get(name)
            if not run.running and ended is not None and ended.attempt == run.attempt:
                live.add(name)  # kept, without new samples, until decide has recorded the end
                continue
            if not run.running or not run.devices or run.held or run.queued:
                continue
            live.add(name)
            track = self.tracks.get(name)
            if track is None or track.attempt != run.attempt or track.devices != tuple(run.devices):
                track = self.tracks[name] = _Track(
                    name, run.attempt, tuple(run.devices), since=now, started=run.started_at
                )
                track.gpus = [_GpuTrack(index) for index in run.devices]
            # a gap (gflowd was down, NVML hung) counts as one interval, not as busy or idle time
            interval = min(now - track.sampled_at, 2 * self.interval) if track.samples else 0.0
            pids = job_pids.get(name, set())
            for gpu_track in track.gpus:
                gpu = by_index.get(gpu_track.index)
                util, memory, has = job_share(gpu, pids) if gpu is not None else (0, 0, False)
                gpu_track.add(now, util, memory, has, interval)
            track.samples += 1
            track.sampled_at = now
            track.times.append(max(0, round((now - track.since) * 10)))
            flags = tuple((g.has_process, g.util_last > 0) for g in track.gpus)
            flipped |= self._flags.get(name) != flags
            self._flags[name] = flags
        for gone in set(self.tracks) - live:
            del self.tracks[gone]
            self._flags.pop(gone, None)
        self._usage = None
        return flipped

    def usage(self) -> dict[str, AttemptUsage]:
        """Every tracked attempt's totals (the same dict until the next sample)."""
        if self._usage is None:
            self._usage = {name: track.usage() for name, track in self.tracks.items()}
        return self._usage

    # -- across a restart: run/gpu-usage.json ------------------------------------------------------

    def dump(self) -> str:
        """The whole state as compact JSON (the ring buffers packed: see the module docstring)."""
        jobs = {}
        for name, t in self.tracks.items():
            jobs[name] = {
                "attempt": t.attempt,
                "devices": list(t.devices),
                "since": round(t.since, 3),
                "sampledAt": round(t.sampled_at, 3),
                "samples": t.samples,
                "gpus": [
                    [
                        g.index,
                        g.util_sum,
                        g.util_peak,
                        g.util_last,
                        g.memory_sum,
                        g.memory_peak,
                        g.memory_last,
                        g.has_process,
                        g.last_process,
                        g.last_busy,
                        round(g.busy_seconds, 2),
                    ]
                    for g in t.gpus
                ],
                "started": t.started,
                "summary": summary(self.usage()[name], t.started or t.since, t.sampled_at),  # what describe shows live
                "series": {
                    "t": pack(t.times, "I"),
                    "util": [pack(g.util_series, "B") for g in t.gpus],
                    "mem": [pack(g.mem_series, "I") for g in t.gpus],
                },
            }
        return json.dumps({"interval": self.interval, "jobs": jobs}, separators=(",", ":"))

    def load(self, text: str) -> None:
        """Restore what ``dump`` wrote; anything malformed is dropped (it is only statistics)."""
        try:
            jobs = json.loads(text).get("jobs") or {}
            for name, data in jobs.items():
                track = _Track(
                    str(name),
                    int(data["attempt"]),
                    tuple(int(d) for d in data["devices"]),
                    float(data["since"]),
                    float(data["sampledAt"]),
                    int(data["samples"]),
                    started=data.get("started"),
                )
                track.gpus = [_GpuTrack(*row) for row in data["gpus"]]
                if [g.index for g in track.gpus] != list(track.devices):
                    continue
                series = data["series"]
                track.times.extend(unpack(series["t"], "I"))
                for gpu, util, mem in zip(track.gpus, series["util"], series["mem"], strict=True):
                    gpu.util_series = deque(unpack(util, "B"), maxlen=SERIES_LEN)
                    gpu.mem_series = deque(unpack(mem, "I"), maxlen=SERIES_LEN)
                self.tracks[track.name] = track
        except (ValueError, KeyError, TypeError, AttributeError):
            self.tracks = {}
        self._usage = None


class JobPids:
    """The running jobs' process trees for sampling. Walking them (``Runtime.job_pids``: /proc, a
    few reads per process) costs more than the sample itself, so a walk is reused until a GPU shows
    a process that no walk has seen (a job started one, or a new job runs), the running jobs change,
    or PIDS_REFRESH seconds pass. A pass's own walk is handed in (``fresh``) and reused too."""

    def __init__(self, walk: Callable[[], dict[str, set[int]]]) -> None:
        self.walk = walk
        self.trees: dict[str, set[int]] | None = None
        self.names: frozenset[str] = frozenset()
        self.known: set[int] = set()  # every pid seen on a GPU or in a tree at the last walk
        self.at = 0.0

    def get(
        self, gpus: list[Gpu], runs: Mapping[str, RunObservation], now: float, fresh: dict[str, set[int]] | None = None
    ) -> dict[str, set[int]]:
        on_gpus = {p.pid for g in gpus for p in g.processes}
        if not on_gpus:
            return {}
        names = frozenset(n for n, r in runs.items() if r.running)
        if (
            fresh is None
            and self.trees is not None
            and names == self.names
            and now - self.at < PIDS_REFRESH
            and on_gpus <= self.known
        ):
            return self.trees
        trees = fresh if fresh is not None else self.walk()
        self.trees, self.names, self.at = trees, names, now
        self.known = on_gpus.union(*trees.values())  # a foreign process stays foreign until the next walk
        return trees
