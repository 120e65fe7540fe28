"""GPU memory nobody owns: what deciding about it reads and returns (``controller.decide.gpu_leaks``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.model.plan import Event


@dataclass(frozen=True)
class EndedAttempt:
    """An attempt that is over, as gflowd knew it while it ran."""

    name: str
    attempt: int
    marker: str  # its GFLOW_ATTEMPT_ID ("" when unknown)
    pids: Mapping[int, int] = field(default_factory=dict)  # pid -> kernel start ticks, as last seen running
    grace: float = 10.0  # seconds between TERM and KILL (the job's terminationGracePeriod)
    devices: tuple[int, ...] = ()  # the GPUs it was bound to (only those are remembered across a restart)


@dataclass(frozen=True)
class GpuProcessFacts:
    """A process NVML lists on a GPU, with what /proc says of it now."""

    gpu: int
    pid: int
    memory: int  # bytes NVML charges to it
    alive: bool  # /proc/PID exists
    name: str = ""
    ticks: int | None = None  # kernel start time (with the pid, its identity)
    marker: str = ""  # its GFLOW_ATTEMPT_ID, "" when it has none (or it is not readable)


@dataclass(frozen=True)
class Reclaim:
    """A leftover of an ended attempt, to stop: TERM, then KILL after ``grace``."""

    job: str
    attempt: int
    gpu: int
    pid: int
    ticks: int
    name: str
    memory: int
    grace: float


@dataclass(frozen=True)
class Held:
    """Memory NVML charges to a pid that no longer exists."""

    gpu: int
    pid: int
    memory: int
    since: float  # when gflowd first saw it so


@dataclass(frozen=True)
class LeakVerdict:
    kills: tuple[Reclaim, ...] = ()
    held: tuple[Held, ...] = ()
    events: tuple[Event, ...] = ()
    reclaimed: Mapping[str, tuple[Reclaim, ...]] = field(default_factory=dict)  # job -> kills said now (its condition)
