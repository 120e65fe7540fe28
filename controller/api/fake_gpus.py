"""The fake-GPU file (``--fake-gpus FILE``: the demo, the tests, ``gflowctl simulate``) read into
:class:`Gpu` records. Pure: what it would look up about this machine (a listed pid's name, user,
start and whether it lives; a NUMA node's cores not declared in the file) comes in as functions,
which gflowd's inventory passes (``observe/gpus/inventory.py``) and the simulator does not."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from controller.api.units import parse_cpu_list, parse_quantity
from controller.model.gpus import Gpu, GpuProcess
from controller.model.mig import mig_profile_memory, mig_profile_ok
from controller.util.yamlio import YAMLSyntaxError, load_one


class ProcessFacts(NamedTuple):
    """What this machine says of a pid the file lists (``name``, ``user``, when it started, alive)."""

    name: str
    user: str
    started: float | None
    alive: bool


def no_process_facts(pid: int) -> ProcessFacts:
    """A machine that is not this one (the simulator's): a listed process is as the file says."""
    return ProcessFacts("", "", None, True)


def no_node_cpus(node: int) -> frozenset[int]:
    return frozenset()


def parse_fake_gpus(
    text: str,
    process_facts: Callable[[int], ProcessFacts] = no_process_facts,
    node_cpus: Callable[[int], frozenset[int]] = no_node_cpus,
) -> list[Gpu]:
    """The file's GPUs (MIG instances as units, after every physical GPU), or ValueError naming
    the field to fix. ``process_facts`` and ``node_cpus`` answer what the file leaves out."""
    try:
        data = load_one(text) or {}
    except YAMLSyntaxError as exc:
        raise ValueError(f"YAML syntax error: {exc} (line {exc.line})") from None
    if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
        raise ValueError("expected a mapping with a 'gpus' list")
    cpus_of = _numa_nodes(data.get("numaNodes"), node_cpus)
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
            facts = process_facts(pid)
            processes.append(  # name and user as the file says, else as this machine says of the pid
                GpuProcess(
                    pid,
                    parse_quantity(proc.get("usedMemory", 0)),
                    str(proc.get("name") or facts.name),
                    utilization,
                    str(proc.get("user") or facts.user),
                    facts.started,
                    gone=not facts.alive,
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
            cpus=tuple(sorted(cpus_of(numa))) if numa is not None else (),
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


def _numa_nodes(declared: object, node_cpus: Callable[[int], frozenset[int]]) -> Callable[[int], frozenset[int]]:
    """The cores of a NUMA node: as the fake-GPU file's ``numaNodes: {1: "8-15"}`` declares them
    (so a test can place GPUs on nodes this machine lacks), else ``node_cpus``'s answer."""
    if declared is not None and not isinstance(declared, dict):
        raise ValueError("numaNodes: expected a mapping of node number to a CPU list like 0-7,16")
    table: dict[int, frozenset[int]] = {}
    for node, text in (declared or {}).items():
        try:
            table[int(node)] = parse_cpu_list(str(text))
        except ValueError:
            raise ValueError(f"numaNodes.{node}: expected a CPU list like 0-7,16, not {text!r}") from None

    def cpus_of(node: int) -> frozenset[int]:
        return table[node] if node in table else node_cpus(node)

    return cpus_of
