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

from controller.api.units import parse_cpu_list, parse_quantity
from controller.model.gpus import Gpu, GpuProcess
from controller.model.mig import mig_profile_memory, mig_profile_ok
from controller.observe.gpus.procs import process_alive, process_name, process_started, process_user
from controller.util.yamlio import YAMLSyntaxError, load_one

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
    try:
        data = load_one(text) or {}
    except YAMLSyntaxError as exc:
        raise ValueError(f"YAML syntax error: {exc} (line {exc.line})") from None
    if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
        raise ValueError("expected a mapping with a 'gpus' list")
    node_cpus = _numa_nodes(data.get("numaNodes"))
    gpus = []
    slices: list[tuple[Gpu, object]] = []  # MIG-enabled GPUs and their instance lists, in index order
    for index, item in enumerate(data.get("gpus") or []):
        if not isinstance(item, dict):
            raise ValueError(f"gpus[{index}]: expected a mapping")
        unknown = set(item) - {
            "name",
            "memory",
            "memoryUsed",
            "utilization",
            "processes",
            "health",
            "uuid",
            "numaNode",
            "minor",
            "mig",
        }
        if unknown:
            raise ValueError(f"gpus[{index}]: unknown field {sorted(unknown)[0]}")
        processes = []
        for proc in item.get("processes") or []:
            if not isinstance(proc, dict) or not isinstance(proc.get("pid"), int):
                raise ValueError(f"gpus[{index}].processes: each needs an integer pid")
            utilization = proc.get("utilization")
            if utilization is not None and (not isinstance(utilization, int) or not 0 <= utilization <= 100):
                raise ValueError(f"gpus[{index}].processes: utilization must be an integer percent (0-100)")
            pid = int(proc["pid"])
            processes.append(  # name and user as the file says, else as /proc says of a real pid
                GpuProcess(
                    pid,
                    parse_quantity(proc.get("usedMemory", 0)),
                    str(proc.get("name") or process_name(pid)),
                    utilization,
                    str(proc.get("user") or process_user(pid)),
                    process_started(pid),
                    gone=not process_alive(pid),
                )
            )
        health = item.get("health", "Ok")
        if health not in ("Ok", "Lost"):
            raise ValueError(f"gpus[{index}].health: must be Ok or Lost")
        numa, minor = item.get("numaNode"), item.get("minor")
        for key, value in (("numaNode", numa), ("minor", minor)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"gpus[{index}].{key}: must be an integer >= 0")
        memory = parse_quantity(item.get("memory", "16Gi"))
        used = sum(p.used_memory for p in processes) + parse_quantity(item.get("memoryUsed", 0))
        whole = Gpu(
            index=index,
            uuid=str(item.get("uuid") or f"GPU-fake-{index:04d}-0000-0000-000000000000"),
            name=str(item.get("name", "Fake GPU")),
            memory_total=memory,
            memory_used=used,
            utilization=item.get("utilization"),
            processes=tuple(processes),
            healthy=health == "Ok",
            error="" if health == "Ok" else "GPU is lost (fake-GPU file says health: Lost)",
            minor=minor,
            numa_node=numa,
            cpus=tuple(sorted(node_cpus(numa))) if numa is not None else (),
        )
        if "mig" in item:
            slices.append((whole, item["mig"]))
        else:
            gpus.append(whole)
    count = len(gpus) + len(slices)  # ids of MIG instances continue after every physical GPU
    for parent, instances in slices:
        for instance in _fake_mig(parent, instances):
            gpus.append(dataclasses.replace(instance, index=count))
            count += 1
    return gpus


def _fake_mig(parent: Gpu, instances: object) -> list[Gpu]:
    """The MIG instances a fake GPU's ``mig: [{profile: 1g.10gb}, ...]`` declares: the parent
    GPU is no unit itself; each instance is one (index assigned by the caller)."""
    where = f"gpus[{parent.index}].mig"
    if not isinstance(instances, list):
        raise ValueError(f"{where}: expected a list like [{{profile: 1g.10gb}}]")
    out = []
    for local, item in enumerate(instances):
        if not isinstance(item, dict) or not mig_profile_ok(str(item.get("profile", ""))):
            raise ValueError(f"{where}[{local}]: needs a profile like 1g.10gb")
        unknown = set(item) - {"profile", "memory", "uuid", "gi", "ci"}
        if unknown:
            raise ValueError(f"{where}[{local}]: unknown field {sorted(unknown)[0]}")
        # its GPU- and compute-instance ids (its nvidia-caps nodes); by default numbered as the NVML stand-in does
        ids = (item.get("gi", local + 1), item.get("ci", 0))
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in ids):
            raise ValueError(f"{where}[{local}]: gi and ci must be whole numbers >= 0, not {ids[0]!r}, {ids[1]!r}")
        profile = str(item["profile"]).lower()
        out.append(
            Gpu(
                index=-1,
                uuid=str(item.get("uuid") or f"MIG-fake-{parent.index:04d}-{local:04d}-0000-000000000000"),
                name=parent.name,
                memory_total=parse_quantity(item.get("memory") or mig_profile_memory(profile)),
                healthy=parent.healthy,
                error=parent.error,
                minor=parent.device_minor,  # a MIG job opens its parent's /dev/nvidiaN
                numa_node=parent.numa_node,
                cpus=parent.cpus,
                parent=parent.index,
                profile=profile,
                local_index=local,
                mig_ids=ids,
            )
        )
    return out


def _numa_nodes(declared: object) -> Callable[[int], frozenset[int]]:
    """The cores of a NUMA node: as the fake-GPU file's ``numaNodes: {1: "8-15"}`` declares them
    (so a test can place GPUs on nodes this machine lacks), else this machine's own
    ``/sys/devices/system/node/nodeN/cpulist``."""
    if declared is not None and not isinstance(declared, dict):
        raise ValueError("numaNodes: expected a mapping of node number to a CPU list like 0-7,16")
    table: dict[int, frozenset[int]] = {}
    for node, text in (declared or {}).items():
        try:
            table[int(node)] = parse_cpu_list(str(text))
        except ValueError:
            raise ValueError(f"numaNodes.{node}: expected a CPU list like 0-7,16, not {text!r}") from None

    def cpus_of(node: int) -> frozenset[int]:
        if node in table:
            return table[node]
        try:
            with open(f"/sys/devices/system/node/node{node}/cpulist") as handle:
                return parse_cpu_list(handle.read())
        except (OSError, ValueError):
            return frozenset()

    return cpus_of


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
