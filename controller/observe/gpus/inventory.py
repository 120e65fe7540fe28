"""GPU inventory: the Protocol every reader implements, and the fake-GPU file reader. The records
are ``controller.model.gpus``; the NVML reader lives in ``nvml.py``.

Observes only: returns :class:`Gpu` records; deciding what a GPU may be used for is the
scheduler's job. No NVML (no driver, no GPU) is normal and yields zero GPUs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from controller.api import fake_gpus
from controller.api.units import parse_cpu_list
from controller.model.gpus import Gpu
from controller.observe.gpus.procs import process_alive, process_name, process_started, process_user
from controller.util.yamlio import load_one

log = logging.getLogger("gflowd.gpus")


class Inventory(Protocol):
    def read(self) -> list[Gpu]: ...

    def describe(self) -> str: ...


@dataclass
class FakeInventory:
    """GPUs described by a YAML file (SPEC.md section 5); re-read when the file changes.

    With ``simulateLoad: true`` in the file (the demo's), a GPU that ``node_file`` (gflowd's
    ``node.yaml``, as the last pass recorded it) shows held by a job reports utilization and memory
    use that move (:func:`simulated_load`), so dashboards of a demo are not flat lines."""

    path: Path
    node_file: Path | None = None
    clock: Callable[[], float] = time.time
    _key: tuple[int, int, int] | None = None
    _gpus: list[Gpu] = field(default_factory=list)
    _simulate: bool = False
    _node_key: tuple[int, int, int] | None = None
    _held: dict[int, int] = field(default_factory=dict)
    error: str = ""

    def describe(self) -> str:
        return f"fake GPUs from {self.path}"

    def read(self) -> list[Gpu]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._set_error(f"cannot read fake-GPU file {self.path}: {exc.strerror}")
            return self._loaded(self._gpus)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._key:
            self._key = key
            try:
                text = self.path.read_text()
                gpus, simulate = parse_fake_gpus(text), _simulates_load(text)
                self._gpus, self._simulate = gpus, simulate
                self.error = ""
            except (OSError, ValueError) as exc:
                self._set_error(f"fake-GPU file {self.path}: {exc}")
        return self._loaded(self._gpus)

    def _loaded(self, gpus: list[Gpu]) -> list[Gpu]:
        if not self._simulate or self.node_file is None:
            return gpus
        held = self._jobs_per_gpu(self.node_file)
        now = self.clock()
        return [simulated_load(gpu, held.get(gpu.index, 0), now) for gpu in gpus]

    def _jobs_per_gpu(self, node_file: Path) -> dict[int, int]:
        """GPU index -> jobs holding it, from the node file (re-read only when it changed)."""
        try:
            st = os.stat(node_file)
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key != self._node_key:
                node = load_one(node_file.read_text()) or {}
                self._held = {int(g["index"]): len(g.get("jobs") or ()) for g in node.get("gpus") or ()}
                self._node_key = key
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            self._held = {}  # no pass recorded yet, or a file being replaced: idle until the next read
        return self._held

    def _set_error(self, message: str) -> None:
        if message != self.error:
            log.warning("%s (keeping the last good inventory)", message)
        self.error = message


def simulated_load(gpu: Gpu, jobs: int, now: float) -> Gpu:
    """``gpu`` as a demo shows it at ``now``: idle (the file's utilization, else 0%, and its
    memoryUsed) when no job holds it;
    when ``jobs`` hold it, a utilization between 45% and 95% and memory between 30% and 60% of the
    GPU's (on top of the file's memoryUsed) that drift smoothly, each GPU out of phase with the
    others. A pure function of its arguments, so tests give the time."""
    if not jobs:
        return dataclasses.replace(gpu, utilization=gpu.utilization or 0)
    phase = gpu.index * 1.7
    utilization = round(70 + 25 * math.sin(now / 15 + phase))
    share = 0.45 + 0.15 * math.sin(now / 40 + phase)
    memory = min(gpu.memory_total, gpu.memory_used + int(gpu.memory_total * share))
    return dataclasses.replace(gpu, utilization=utilization, memory_used=memory)


def _simulates_load(text: str) -> bool:
    value = (load_one(text) or {}).get("simulateLoad", False)
    if not isinstance(value, bool):
        raise ValueError("simulateLoad: must be true or false")
    return value


def parse_fake_gpus(text: str) -> list[Gpu]:
    """The fake-GPU file's GPUs (``api/fake_gpus.py``), a listed pid looked up in this machine's
    /proc and an undeclared NUMA node's cores in its sysfs."""
    return fake_gpus.parse_fake_gpus(text, _process_facts, _node_cpus)


def _process_facts(pid: int) -> fake_gpus.ProcessFacts:
    return fake_gpus.ProcessFacts(process_name(pid), process_user(pid), process_started(pid), process_alive(pid))


def _node_cpus(node: int) -> frozenset[int]:
    try:
        with open(f"/sys/devices/system/node/node{node}/cpulist") as handle:
            return parse_cpu_list(handle.read())
    except (OSError, ValueError):
        return frozenset()


def merge(nvidia: list[Gpu], amd: list[Gpu]) -> list[Gpu]:
    """One box's units, every vendor's, with the ids docs/amd.md gives: NVIDIA's as NVML numbers
    them, then AMD's in amdsmi's (ROCR's) order, continuing after every NVIDIA unit."""
    first = max((g.index for g in nvidia), default=-1) + 1
    return [*nvidia, *(dataclasses.replace(g, index=first + n) for n, g in enumerate(amd))]


class VendorInventory:
    """The NVIDIA inventory and, on a machine with AMD GPUs, the AMD one, read as one
    (:func:`merge`); implements ``Inventory``. Topology is NVML's (its indices are the units')."""

    def __init__(self, nvidia: Inventory, amd: Inventory):
        self.nvidia, self.amd = nvidia, amd

    def read(self) -> list[Gpu]:
        return merge(self.nvidia.read(), self.amd.read())

    def describe(self) -> str:
        return f"{self.nvidia.describe()}; {self.amd.describe()}"

    def topology(self) -> dict[tuple[int, int], int]:
        reader = getattr(self.nvidia, "topology", None)
        return reader() if reader is not None else {}

    def close(self) -> None:
        for inventory in (self.nvidia, self.amd):
            getattr(inventory, "close", lambda: None)()

    @property
    def available(self) -> bool:
        return bool(getattr(self.nvidia, "available", False) or getattr(self.amd, "available", False))
