"""What a running attempt does with its GPUs, as sampled from NVML (``controller.observe.gpu_usage``)
and judged by ``controller.decide.gpu_usage``: per bound GPU, the job's own processes' utilization
and memory, summed up since the attempt's first sample. Plain data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.model.records import rfc3339


@dataclass(frozen=True)
class GpuUse:
    """One bound GPU of one attempt. Utilization is the job's processes' share (percent); memory is
    what NVML charges to the job's processes (bytes). Times are wall-clock seconds."""

    index: int
    util_mean: float = 0.0
    util_peak: int = 0
    util_last: int = 0
    memory_mean: float = 0.0
    memory_peak: int = 0
    memory_last: int = 0
    has_process: bool = False  # the latest sample found a process of the job on this GPU
    last_process: float | None = None  # the newest sample that found one
    last_busy: float | None = None  # the newest sample with utilization > 0
    busy_seconds: float = 0.0  # utilization-weighted seconds: sum of util/100 x sample interval


@dataclass(frozen=True)
class AttemptUsage:
    """Every bound GPU of one running attempt, since its first sample (``since``)."""

    name: str
    attempt: int
    since: float
    sampled_at: float
    samples: int
    gpus: tuple[GpuUse, ...] = ()

    @property
    def last_busy(self) -> float | None:
        """The newest sample with activity on any of the attempt's GPUs."""
        times = [g.last_busy for g in self.gpus if g.last_busy is not None]
        return max(times) if times else None


def summary(usage: AttemptUsage, start: float, end: float) -> dict[str, Any]:
    """The status's ``gpuUsage`` (and ``run/gpu-usage.json``'s live copy): per bound GPU mean/peak
    utilization and memory; GPU-hours allocated (GPUs x ``start``..``end``) and used
    (utilization-weighted)."""
    return {
        "attempt": usage.attempt,
        "sampledAt": rfc3339(usage.sampled_at),
        "samples": usage.samples,
        "utilMean": round(sum(g.util_mean for g in usage.gpus) / max(len(usage.gpus), 1), 1),
        "gpuHoursAllocated": round(len(usage.gpus) * max(0.0, end - start) / 3600, 4),
        "gpuHoursUsed": round(sum(g.busy_seconds for g in usage.gpus) / 3600, 4),
        "gpus": [
            {
                "index": g.index,
                "utilMean": g.util_mean,
                "utilPeak": g.util_peak,
                "memoryMean": int(g.memory_mean),
                "memoryPeak": g.memory_peak,
            }
            for g in usage.gpus
        ],
    }


@dataclass(frozen=True)
class UsageSettings:
    """gflowd's settings for judging usage (config keys of the same names, in seconds)."""

    unused_gpu_window: float = 600.0  # a bound GPU with no process of the job and 0 % this long: GPUsUnused
    idle_gpu_window: float = 1800.0  # no activity on any of the job's GPUs this long: GPUIdle
    idle_timeout: float | None = None  # the default idleTimeout of tty jobs that set none (None: off)
    memory_near: float = 0.9  # a Shared job past this share of its gpuMemory: GPUMemoryNearLimit
