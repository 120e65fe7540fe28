"""What the scheduler is asked and what it answers: requests in queue order, GPU slots, bindings,
waits with a reason, and the holds of running jobs (``controller.decide.scheduler`` decides)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from controller.model.gpus import Gpu, GpuProcess
from controller.model.resources import EMPTY, ResourceVector


class GpuState(StrEnum):
    """A GPU's state as a pass leaves it (``GpuSlot.state``; ``node.yaml``, ``gflowctl get gpus``,
    the ``gflow_gpus`` metric, docs/scheduling.md), one row per state in the order the metric
    serves them. Row: text, whether jobs are ever placed on it (``schedulable``: now, or once the
    jobs holding it end), the meaning."""

    schedulable: bool
    doc: str

    def __new__(cls, text: str, schedulable: bool, doc: str) -> GpuState:
        member = str.__new__(cls, text)
        member._value_ = text
        member.schedulable, member.doc = schedulable, doc
        return member

    Free = "Free", True, "healthy, allowed, nobody on it"
    Allocated = "Allocated", True, "an Exclusive job holds it"
    Shared = "Shared", True, "one or more Shared jobs hold it"
    Unmanaged = "Unmanaged", False, "compute processes gflow did not start use >= unmanagedMemoryThreshold"
    Restricted = "Restricted", False, "outside gflowd --gpus / config gpus"
    Unhealthy = "Unhealthy", False, "NVML reports errors for it, or the fake-GPU file says it is lost"


GPU_STATES = tuple(GpuState)
UNSCHEDULABLE = frozenset(s.value for s in GpuState if not s.schedulable)  # plain texts, as GpuSlot.state holds


@dataclass(frozen=True)
class Request:
    name: str
    gpus: int
    gpu_type: str | None = None
    gpu_memory: int | None = None
    shared: bool = False
    time_limit: float | None = None  # seconds; None: unknown, so never backfilled into a reservation
    quota_keys: tuple[str, ...] = ()  # quota groups it counts against, e.g. ``user alice``
    cpus: int = 0  # whole cores (resources.cpus); 0: none booked
    fenced: frozenset[int] = frozenset()  # GPUs a Reservation keeps from it now (decide/reservations.py)...
    fenced_why: str = ""  # ...and the message naming them, their users and window
    preferred: frozenset[int] = frozenset()  # reserved GPUs it may use: taken first, the others stay open
    amounts: ResourceVector = EMPTY  # counted kinds (resources.shm ...): controller.model.resources.COUNTED


@dataclass
class QuotaUse:
    """A quota group's limit and the GPUs its running jobs hold (updated as the pass binds)."""

    limit: int
    used: int = 0


@dataclass
class GpuSlot:
    """A GPU as the scheduler sees it: its hardware facts plus who holds it."""

    gpu: Gpu
    state: str  # a GpuState's text
    jobs: list[str] = field(default_factory=list)
    shared_reserved: int = 0  # gpuMemory promised to Shared jobs here
    foreign_memory: int = 0  # memory used by processes we did not start
    foreign_pids: tuple[int, ...] = ()
    free_at: float = 0.0  # when our jobs on it end (start + timeLimit); inf: one has no timeLimit
    # live memory, as NVML reads it now (0 where nothing was read: the simulator, old callers)
    used_memory: int = 0  # in use on the GPU, by anyone (at least what its processes hold)
    our_memory: int = 0  # of that, held by our jobs' processes
    unclaimed: int = 0  # gpuMemory promised to Shared jobs here that they do not use yet
    occupants: tuple[GpuProcess, ...] = ()  # processes we did not start, ignoreProcesses' too
    cordon: str = ""  # Restricted by an admin's cordon or drain: what it says (``cordoned by root: fan``)

    @property
    def index(self) -> int:
        return self.gpu.index

    def shared_room(self) -> int:
        """What the promises leave: memory less Shared jobs' gpuMemory and foreign processes' use."""
        return self.gpu.memory_total - self.shared_reserved - self.foreign_memory

    def memory_room(self) -> int:
        """What a job that declares gpuMemory can count on here now: the promises' room, and no
        more than NVML says is free less what Shared jobs were promised and have not taken yet
        (memory held by processes NVML cannot name, or a Shared job past its gpuMemory, count)."""
        return min(self.shared_room(), self.gpu.memory_total - self.used_memory - self.unclaimed)

    def not_ours(self) -> int:
        """Memory held by others, which our jobs' ends will not free: foreign processes (ignored
        ones too) and memory in use that no process of ours holds."""
        return max(self.foreign_memory, self.used_memory - self.our_memory)


@dataclass
class CorePool:
    """The machine's CPU cores as the scheduler sees them (``resources.cpus``): every core jobs
    may use, and who holds which until when. Updated by a pass as it binds, like the GPU slots."""

    cores: frozenset[int]
    taken: dict[int, str] = field(default_factory=dict)  # core -> the job bound to it
    free_at: dict[int, float] = field(default_factory=dict)  # core -> when its job's timeLimit ends

    def free(self) -> list[int]:
        return sorted(c for c in self.cores if c not in self.taken)


@dataclass
class CountPool:
    """A counted kind (``resources.shm``) as the scheduler sees it: the machine's capacity of it, and
    what each running job booked until when. Updated by a pass as it binds."""

    kind: str  # a name in controller.model.resources.COUNTED
    capacity: int
    used: dict[str, int] = field(default_factory=dict)  # job -> the amount it booked
    free_at: dict[str, float] = field(default_factory=dict)  # job -> when its timeLimit ends

    def free(self) -> int:
        return max(0, self.capacity - sum(self.used.values()))


@dataclass(frozen=True)
class Binding:
    devices: list[int]
    uuids: list[str]
    cpus: tuple[int, ...] = ()  # the cores it is pinned to (its cpuset)


@dataclass(frozen=True)
class Wait:
    reason: str  # Resources | Priority | Unschedulable | GPUMemory
    message: str


@dataclass(frozen=True)
class Holder:
    """A running job's hold on GPUs."""

    name: str
    devices: tuple[int, ...]
    shared: bool
    gpu_memory: int = 0
    ends_at: float = math.inf  # start + timeLimit; inf: no timeLimit, its end is unknown
    cpus: tuple[int, ...] = ()  # the cores it is pinned to


@dataclass(frozen=True)
class Running:
    """A running job as preemption sees it."""

    name: str
    priority: int
    devices: tuple[int, ...]
    started: float
