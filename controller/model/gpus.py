"""A GPU as the inventory reports it (NVML or the fake-GPU file), and its compute processes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory: int = 0
    name: str = ""
    utilization: int | None = None  # percent of the GPU's SMs this process used lately; None: NVML cannot say
    user: str = ""  # who runs it, from /proc; "" when not visible here
    started: float | None = None  # when it started (epoch seconds), from /proc; None when not visible
    gone: bool = False  # /proc has no such pid, yet the driver still charges it: held until a GPU reset


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int = 0
    utilization: int | None = None
    processes: tuple[GpuProcess, ...] = ()
    healthy: bool = True
    error: str = ""
    minor: int | None = None  # the device node's minor number (/dev/nvidiaN); None: same as index
    numa_node: int | None = None  # the NUMA node the GPU is attached to, when known
    cpus: tuple[int, ...] = ()  # the cores near it, ascending (NVML's CPU affinity); empty: unknown
    vendor: str = "nvidia"  # "nvidia" | "amd": whose runtime, env variables and device nodes it has
    parent: int | None = None  # MIG: the parent GPU's NVML index
    profile: str = ""  # MIG: the instance's profile, e.g. "1g.10gb"
    local_index: int | None = None  # the index the vendor's own runtime uses (MIG: on its parent; AMD: ROCR's)
    mig_ids: tuple[int, int] | None = None  # MIG: (GPU instance id, compute instance id): its nvidia-caps nodes
    xids: tuple[tuple[float, int], ...] = ()  # its recent Xid events (wall time, Xid), oldest first

    @property
    def runtime_index(self) -> int:
        """The index the job's runtime knows it by (``ROCR_VISIBLE_DEVICES`` for AMD)."""
        return self.index if self.local_index is None else self.local_index

    @property
    def display_name(self) -> str:
        """``MIG 1g.10gb (GPU 0)`` for a MIG instance, else the vendor's name."""
        return f"MIG {self.profile} (GPU {self.parent})" if self.profile else self.name

    @property
    def device_minor(self) -> int:
        return self.index if self.minor is None else self.minor


@dataclass(frozen=True)
class Cordon:
    """An admin's hold on a GPU (``gflowctl cordon|drain gpu N``, ``HOME/cordon.yaml``): no new job
    goes there; with ``drain`` the jobs on it also return to Pending, to run elsewhere."""

    by: str = ""
    reason: str = ""
    drain: bool = False

    def text(self) -> str:
        """``drained by root: fan failing``."""
        what = "drained" if self.drain else "cordoned"
        return f"{what}{f' by {self.by}' if self.by else ''}{f': {self.reason}' if self.reason else ''}"
