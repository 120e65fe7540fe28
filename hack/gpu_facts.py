"""What the GPU acceptance run reads and how it judges it: pure functions (the only I/O: the
host name in the report, and ``device_minor`` reading one /proc file).

``hack/gpu-acceptance.py`` runs the checks; this module parses what ``nvidia-smi`` prints
(``--query-gpu``, ``--query-compute-apps``, ``pmon``), compares it with what gflow says
(``get gpus -o json``, status fields) and with what the probe (``hack/gpu_probe.py``) saw through
the CUDA driver API, and builds the report. tests/test_gpu_acceptance.py covers it with real
sample outputs. Standard library only, like the script.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import socket
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gpu_probe import normalize_bus_id

T = TypeVar("T")

MIB = 1 << 20
GIB = 1 << 30
QUERY_GPU = ("index", "uuid", "name", "memory.total", "pci.bus_id")
QUERY_APPS = ("pid", "gpu_uuid", "used_memory")
QUERY_FREE = ("index", "memory.free")
FREE_TOLERANCE_MIB = 512  # node.yaml rounds to 0.1Gi, and memory moves between the two reads
GPU_MEMORY_EXCEEDED = (
    "GPUMemoryExceeded"  # the stop reason controller/decide/running.py gives a Shared job over gpuMemory
)

# (name, what it proves) in run order; docs/gpu-acceptance.md explains each.
CHECKS: list[tuple[str, str]] = [
    ("venv", "bash hack/setup.sh builds the venv the README describes"),
    ("cuda-driver", "the probe, outside gflow, sees every GPU nvidia-smi lists, in the same order"),
    ("gflowd-nvml", "a private gflowd starts on real NVML (no fake GPUs)"),
    ("inventory", "get gpus matches nvidia-smi: index, UUID, name, memory"),
    ("one-gpu-job", "a 1-GPU job sees one device, the PCI bus id NVML gives its bound index"),
    ("two-gpu-job", "a 2-GPU job sees its two devices, in order"),
    ("concurrent-jobs", "jobs running at once never see the same device; one more waits"),
    ("isolation-gpu-job", "with cgroups, a GPU job that clears CUDA_VISIBLE_DEVICES cannot use another job's GPU"),
    ("isolation-cpu-job", "with cgroups, a CPU job that clears CUDA_VISIBLE_DEVICES cannot use any GPU"),
    ("shared-gpu-memory", f"a Shared job allocating past gpuMemory is stopped ({GPU_MEMORY_EXCEEDED})"),
    ("foreign-process", "a process gflow did not start makes its GPU Unmanaged, and Free when it ends"),
    ("cuda-oom-reason", "a job the driver refuses memory, which exits 1, ends Failed/CUDAOutOfMemory"),
    ("live-free-memory", "get gpus' free memory agrees with nvidia-smi's memory.free"),
    ("gpu-memory-wait", "a gpuMemory job larger than what a foreign probe leaves waits (GPUMemory) naming its pid"),
    (
        "reclaimed-leak",
        "a job's child that escaped its cgroups and holds GPU memory is gone after the job, its memory back",
    ),
    ("gpus-unused", "a job busy on 1 of its 2 GPUs gets the GPUsUnused condition"),
    ("gpu-usage-figures", "status.gpuUsage agrees with nvidia-smi pmon and --query-compute-apps"),
    ("apply-to-first-cuda", "time from gflowctl apply to the job's first CUDA call"),
    ("nvml-sampling-cost", "cost of one NVML sampling pass over all GPUs"),
    ("amd-inventory", "on a machine with /dev/kfd, gflowd's amdsmi reader lists healthy AMD GPUs with render nodes"),
    (
        "amd-job",
        "on a machine with /dev/kfd, a gpuType: amd job gets its GPU in ROCR/HIP_VISIBLE_DEVICES, opens /dev/kfd "
        "and its render node, and (with device isolation) no other AMD GPU's nodes",
    ),
    ("checkpoint-signal", "a job with timeLimit 20s and checkpoint.before 10s gets its signal ~10s in, and confirms"),
    ("mig-instance", "where a GPU has MIG on: a job asking for its profile sees only its instance (MIG-<uuid>)"),
    ("mig-caps-isolation", "a MIG job that clears CUDA_VISIBLE_DEVICES opens only its own 2 nvidia-caps nodes"),
    ("cleanup", "no process or cgroup of the run is left once its jobs are deleted"),
]
CHECK_NAMES = [name for name, _ in CHECKS]


# ------------------------------------------------------------------------------------------------
# Pure parsing
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmiGpu:
    """One row of ``nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id``."""

    index: int
    uuid: str
    name: str
    memory_mib: int | None  # None: nvidia-smi said [N/A] or [Not Supported]
    pci_bus_id: str  # normalized, e.g. 0000:3b:00.0


@dataclass(frozen=True)
class ComputeApp:
    """One row of ``nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory``."""

    pid: int
    gpu_uuid: str
    used_mib: int | None


@dataclass(frozen=True)
class PmonRow:
    """One process row of ``nvidia-smi pmon -c 1 -s um``; None where pmon prints ``-``."""

    gpu: int
    pid: int | None
    kind: str | None  # C, G, C+G
    sm: int | None  # % of the sample period a kernel of this process ran
    mem: int | None  # % memory-controller utilization
    fb_mib: int | None  # frame buffer memory used by the process
    command: str


def _csv_rows(text: str) -> Iterable[tuple[int, list[str]]]:
    for lineno, row in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), 1):
        cells = [c.strip() for c in row]
        if any(cells):
            yield lineno, cells


def _number(cell: str) -> int | None:
    """nvidia-smi's ``nounits`` integer, or None for ``[N/A]``, ``[Not Supported]``, ``N/A``, ``-``."""
    if re.fullmatch(r"\d+", cell):
        return int(cell)
    if re.fullmatch(r"\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]?|-", cell, re.I):
        return None
    raise ValueError(f"not a number: {cell!r}")


def _parse_query(text: str, fields: tuple[str, ...], build: Callable[[list[str]], T]) -> list[T]:
    """The rows of a ``--query-...=FIELDS --format=csv,noheader,nounits`` answer, each built by
    ``build``; ValueError naming every bad line at once."""
    rows, errors = [], []
    for lineno, cells in _csv_rows(text):
        if len(cells) == 1 and cells[0].lower().startswith("no running"):
            continue  # some versions print "No running processes found"
        if len(cells) != len(fields):
            errors.append(
                f"line {lineno}: expected {len(fields)} fields ({','.join(fields)}), got {len(cells)}: {','.join(cells)!r}"
            )
            continue
        try:
            rows.append(build(cells))
        except ValueError as exc:
            errors.append(f"line {lineno}: {exc}")
    if errors:
        raise ValueError("; ".join(errors))
    return rows


def parse_query_gpu_csv(text: str) -> list[SmiGpu]:
    """``nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv,noheader,nounits``."""
    return _parse_query(text, QUERY_GPU, lambda c: SmiGpu(int(c[0]), c[1], c[2], _number(c[3]), normalize_bus_id(c[4])))


def parse_compute_apps_csv(text: str) -> list[ComputeApp]:
    """``nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits``."""
    return _parse_query(text, QUERY_APPS, lambda c: ComputeApp(int(c[0]), c[1], _number(c[2])))


def parse_free_csv(text: str) -> dict[int, int | None]:
    """``nvidia-smi --query-gpu=index,memory.free --format=csv,noheader,nounits``: index -> MiB."""
    return dict(_parse_query(text, QUERY_FREE, lambda c: (int(c[0]), _number(c[1]))))


def parse_pmon(text: str) -> list[PmonRow]:
    """``nvidia-smi pmon -c 1 -s um`` in any driver's column order.

    The columns differ by driver (``sm mem enc dec fb`` on older ones, ``sm mem enc dec jpg ofa fb
    ccpm`` on newer, ``fb`` first with ``-s mu`` on some), so they are read from the header line
    (``# gpu  pid  type  sm ...  command``). Rows with pid ``-`` (a GPU without processes) are
    dropped. Raises ValueError when there is no header or a row does not fit it.
    """
    columns: list[str] | None = None
    rows, errors = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            words = stripped.lstrip("#").split()
            if columns is None and "pid" in words and words and words[-1] == "command":
                columns = words
            continue
        if columns is None:
            errors.append(f"line {lineno}: a row before the '# gpu pid ... command' header: {stripped!r}")
            continue
        cells = stripped.split()
        fixed = len(columns) - 1  # the command name is last and may hold spaces
        if len(cells) < fixed:
            errors.append(f"line {lineno}: {len(cells)} fields, the header has {len(columns)}: {stripped!r}")
            continue
        values = dict(zip(columns[:fixed], cells[:fixed]))
        values["command"] = " ".join(cells[fixed:])
        try:
            pid = _number(values.get("pid", "-"))
            if pid is None:
                continue
            rows.append(
                PmonRow(
                    gpu=int(values["gpu"]),
                    pid=pid,
                    kind=None if values.get("type", "-") == "-" else values["type"],
                    sm=_number(values.get("sm", "-")),
                    mem=_number(values.get("mem", "-")),
                    fb_mib=_number(values.get("fb", "-")),
                    command=values["command"],
                )
            )
        except (KeyError, ValueError) as exc:
            errors.append(f"line {lineno}: {exc}")
    if columns is None and not errors:
        errors.append("no '# gpu pid ... command' header line")
    if errors:
        raise ValueError("; ".join(errors))
    return rows


_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]i?|[kmgtp]i?)?B?\s*$")
_FACTORS = {
    "": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "KI": 1 << 10,
    "MI": 1 << 20,
    "GI": 1 << 30,
    "TI": 1 << 40,
    "PI": 1 << 50,
}


def parse_quantity(value: Any) -> int | None:
    """``"1.5Gi"`` or ``1610612736`` -> bytes; None when it is not a quantity."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    match = _QUANTITY.match(str(value))
    if match is None:
        return None
    return int(float(match.group(1)) * _FACTORS[(match.group(2) or "").upper()])


def format_binary(n_bytes: int) -> str:
    """Bytes as gflow writes them in node.yaml: ``16Gi``, ``79.6Gi`` (one decimal below 100 units)."""
    for unit, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n_bytes >= factor:
            value = n_bytes / factor
            return f"{value:.0f}{unit}" if value == int(value) or value >= 100 else f"{value:.1f}{unit}"
    return str(n_bytes)


# ------------------------------------------------------------------------------------------------
# Pure judging
# ------------------------------------------------------------------------------------------------


def compare_inventory(smi: list[SmiGpu], node_gpus: list[dict[str, Any]]) -> list[str]:
    """Every difference between nvidia-smi and ``get gpus -o json``'s ``gpus``; [] when they match.

    Memory: node.yaml writes it rounded (``79.6Gi``), so nvidia-smi's MiB are formatted the same
    way and the strings compared; a byte count (an integer ``memory`` or ``memoryBytes``) is
    compared exactly.
    """
    problems: list[str] = []
    by_index: dict[int, dict[str, Any]] = {}
    for entry in node_gpus:
        index = entry.get("index")
        if not isinstance(index, int):
            problems.append(f"get gpus has an entry without an integer index: {entry!r}")
        elif index in by_index:
            problems.append(f"get gpus lists GPU {index} twice")
        else:
            by_index[index] = entry
    smi_index_of = {g.uuid: g.index for g in smi}
    for gpu in smi:
        entry = by_index.get(gpu.index)
        if entry is None:
            problems.append(f"GPU {gpu.index} ({gpu.uuid}): nvidia-smi lists it, get gpus does not")
            continue
        uuid = entry.get("uuid")
        if uuid != gpu.uuid:
            elsewhere = smi_index_of.get(uuid) if isinstance(uuid, str) else None
            if elsewhere is not None:
                problems.append(
                    f"GPU {gpu.index}: index order differs: get gpus has {uuid} here, which nvidia-smi calls GPU {elsewhere}"
                )
            else:
                problems.append(f"GPU {gpu.index}: UUID {uuid!r} in get gpus, {gpu.uuid!r} in nvidia-smi")
        if entry.get("name") != gpu.name:
            problems.append(f"GPU {gpu.index}: name {entry.get('name')!r} in get gpus, {gpu.name!r} in nvidia-smi")
        problems.extend(_memory_problem(gpu, entry))
    for index in sorted(set(by_index) - {g.index for g in smi}):
        problems.append(f"GPU {index} ({by_index[index].get('uuid')}): get gpus lists it, nvidia-smi does not")
    return problems


def _memory_problem(gpu: SmiGpu, entry: dict[str, Any]) -> list[str]:
    if gpu.memory_mib is None:
        return [f"GPU {gpu.index}: nvidia-smi gives no memory.total to compare with"]
    exact = entry.get("memoryBytes", entry.get("memory"))
    if isinstance(exact, int) and not isinstance(exact, bool):
        if exact // MIB != gpu.memory_mib:
            return [
                f"GPU {gpu.index}: memory {exact} bytes ({exact // MIB} MiB) in get gpus, {gpu.memory_mib} MiB in nvidia-smi"
            ]
        return []
    expected = format_binary(gpu.memory_mib * MIB)
    if str(entry.get("memory")) != expected:
        return [
            f"GPU {gpu.index}: memory {entry.get('memory')!r} in get gpus, nvidia-smi's {gpu.memory_mib} MiB is {expected}"
        ]
    return []


@dataclass
class Verdict:
    ok: bool
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


def judge_free_memory(
    smi_free: dict[int, int | None], node_gpus: list[dict[str, Any]], tolerance_mib: int = FREE_TOLERANCE_MIB
) -> Verdict:
    """Each GPU's ``memoryFree`` in ``get gpus -o json`` against nvidia-smi's memory.free (MiB)."""
    problems, numbers = [], {}
    for entry in node_gpus:
        index = entry.get("index")
        smi = smi_free.get(index) if isinstance(index, int) else None
        ours = parse_quantity(entry.get("memoryFree"))
        numbers[str(index)] = {"gflowMiB": None if ours is None else ours // MIB, "nvidiaSmiMiB": smi}
        if smi is None:
            continue  # nvidia-smi cannot say (N/A): nothing to compare
        if ours is None:
            problems.append(f"GPU {index}: get gpus shows no memoryFree (feature missing in this build?)")
        elif abs(ours // MIB - smi) > tolerance_mib:
            problems.append(f"GPU {index}: gflow says {ours // MIB} MiB free, nvidia-smi {smi} MiB")
    if not numbers:
        return Verdict(False, "get gpus lists no GPUs")
    if problems:
        return Verdict(False, "; ".join(problems), numbers)
    return Verdict(True, f"within {tolerance_mib} MiB on {len(numbers)} GPU(s)", numbers)


def judge_binding(doc: dict[str, Any] | None, devices: list[int], smi: dict[int, SmiGpu]) -> Verdict:
    """A job bound to ``devices`` (NVML indices) must see exactly those GPUs, in that order, by PCI
    bus id: the proof that CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER=PCI_BUS_ID were honoured."""
    if doc is None:
        return Verdict(False, "the probe wrote no report (see the job log)")
    init = doc.get("init") or {}
    if not init.get("ok"):
        return Verdict(False, f"cuInit failed in the job: {init.get('error')}")
    env = doc.get("env") or {}
    seen = [d["pciBusId"] for d in doc.get("devices") or []]
    want = [smi[i].pci_bus_id for i in devices if i in smi]
    numbers = {"devices": devices, "seen": seen, "expected": want, "env": env}
    if len(want) != len(devices):
        return Verdict(False, f"bound to GPUs {devices}, which nvidia-smi does not list", numbers)
    if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return Verdict(False, f"CUDA_DEVICE_ORDER is {env.get('CUDA_DEVICE_ORDER')!r}, not PCI_BUS_ID", numbers)
    visible = ",".join(str(i) for i in devices)
    if env.get("CUDA_VISIBLE_DEVICES") != visible:
        return Verdict(
            False, f"CUDA_VISIBLE_DEVICES is {env.get('CUDA_VISIBLE_DEVICES')!r}, bound devices are {visible}", numbers
        )
    if len(seen) != len(devices):
        return Verdict(
            False,
            f"bound to {len(devices)} GPU(s) ({visible}) but CUDA sees {len(seen)}: {', '.join(seen) or 'none'}",
            numbers,
        )
    if seen != want:
        return Verdict(False, f"CUDA sees {', '.join(seen)}; NVML gives {', '.join(want)} for GPUs {visible}", numbers)
    errors = [u["error"] for u in doc.get("used") or [] if u.get("error")]
    if errors:
        return Verdict(False, f"sees the right GPUs but cannot use them: {'; '.join(errors)}", numbers)
    return Verdict(True, f"GPUs {visible} -> CUDA sees {', '.join(seen)}", numbers)


def judge_distinct(bound: dict[str, tuple[list[int], dict[str, Any] | None]], smi: dict[int, SmiGpu]) -> Verdict:
    """Jobs running at the same time: each sees its own GPU, and no two see the same one."""
    owners: dict[str, str] = {}
    problems = []
    for name, (devices, doc) in sorted(bound.items()):
        verdict = judge_binding(doc, devices, smi)
        if not verdict.ok:
            problems.append(f"{name}: {verdict.reason}")
            continue
        for bus in verdict.numbers["seen"]:
            if bus in owners:
                problems.append(f"{name} and {owners[bus]} both see {bus}")
            owners[bus] = name
    if problems:
        return Verdict(False, "; ".join(problems))
    return Verdict(True, f"{len(bound)} job(s) at once, each on its own GPU ({len(owners)} distinct)")


def judge_amd(doc: dict[str, Any] | None, render_nodes: set[int]) -> Verdict:
    """gflowd's AMD reader (controller/observe/gpus/amd.py) on real amdsmi: it must be available
    and list at least one GPU, each healthy, named, with a UUID, memory and a render node that
    exists (``render_nodes``: the minors of /dev/dri/renderD*), else device isolation cannot bind it,
    and one card node sysfs pairs with it (``cards``: render minor -> card minors), else another
    job's could open its /dev/dri/cardN."""
    if doc is None:
        return Verdict(False, "gflowd's amdsmi reader printed nothing")
    if not doc.get("available"):
        return Verdict(False, f"gflowd cannot read the AMD GPUs: {doc.get('describe')}")
    gpus = doc.get("gpus") or []
    if not gpus:
        return Verdict(False, "amdsmi lists no GPU although /dev/kfd exists")
    problems = []
    for gpu in gpus:
        what = f"AMD GPU {gpu.get('local_index')}"
        if not gpu.get("healthy"):
            problems.append(f"{what} unhealthy: {gpu.get('error')}")
        if not gpu.get("uuid") or not gpu.get("name") or not gpu.get("memory_total"):
            problems.append(f"{what} lacks a UUID, name or memory: {gpu.get('uuid')!r} {gpu.get('name')!r}")
        if gpu.get("minor") not in render_nodes:
            problems.append(f"{what}: no /dev/dri/renderD{gpu.get('minor')}")
        cards = (doc.get("cards") or {}).get(str(gpu.get("minor")))
        if "cards" in doc and len(cards or []) != 1:
            problems.append(f"{what}: sysfs pairs renderD{gpu.get('minor')} with card nodes {cards or []}, not one")
    if problems:
        return Verdict(False, "; ".join(problems))
    names = sorted({str(g.get("name")) for g in gpus})
    return Verdict(True, f"{len(gpus)} AMD GPU(s): {', '.join(names)}", {"amdGpus": len(gpus)})


def devices_isolated(limits: str | None) -> bool:
    """Does gflowd's ``limits`` line (``get gpus -o json``; ``cgroup v1: memory, devices, ...; no x: why``)
    say the jobs run under the devices cgroup (v1) or the device program (v2)?"""
    head = (limits or "").split(";", 1)[0]
    if not head.startswith("cgroup ") or ":" not in head:
        return False  # "cgroups unavailable: ...", or a build that does not say
    return "devices" in [name.strip() for name in head.split(":", 1)[1].split(",")]


def judge_amd_job(
    doc: dict[str, Any] | None, status: dict[str, Any], gpus: list[dict[str, Any]], limits: str | None = None
) -> Verdict:
    """The amd-job check's job (docs/amd.md): what its program recorded (``doc``: ``env``, the three
    variables or None when unset; ``nodes``, path -> ``ok`` or the errno name of os.open O_RDWR), its
    status, and every AMD GPU of the box (``gpus``: ``id`` gflow's, ``localIndex`` ROCR's, ``render``
    its renderD minor, ``cards`` the card minors sysfs pairs with it). It passes when the job
    Succeeded, ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES name exactly its bound GPUs' ROCm indices,
    CUDA_VISIBLE_DEVICES is set empty, /dev/kfd and its own render nodes open, and, when gflowd's
    ``limits`` line says the devices are isolated, every other AMD GPU's render and card node is EPERM.
    Without isolation the other nodes are not judged, and the reason says so."""
    if doc is None:
        return Verdict(False, "the job's program wrote no report (see the job log)")
    env = doc.get("env") or {}
    nodes: dict[str, str] = doc.get("nodes") or {}
    devices = list(status.get("devices") or [])
    isolated = devices_isolated(limits)
    numbers: dict[str, Any] = {"devices": devices, "env": env, "nodes": nodes, "isolated": isolated}
    if status.get("phase") != "Succeeded":
        return Verdict(
            False, f"the job ended {status.get('phase')}/{status.get('reason')}: {status.get('message')}", numbers
        )
    by_id = {g.get("id"): g for g in gpus}
    foreign = [d for d in devices if d not in by_id]
    if not devices or foreign:
        amd = sorted(i for i in by_id if isinstance(i, int))
        return Verdict(False, f"bound to GPUs {devices or 'none'}, the AMD GPUs are {amd}", numbers)
    own = [by_id[d] for d in devices]
    want = ",".join(str(g.get("localIndex")) for g in own)
    numbers["expected"] = want
    problems = [
        f"{name} is {env.get(name)!r}, not {want!r}"
        for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
        if env.get(name) != want
    ]
    if env.get("CUDA_VISIBLE_DEVICES") != "":
        problems.append(f"CUDA_VISIBLE_DEVICES is {env.get('CUDA_VISIBLE_DEVICES')!r}, not set empty")
    needed = ["/dev/kfd", *(f"/dev/dri/renderD{g.get('render')}" for g in own)]
    problems += [f"cannot open {path}: {nodes.get(path, 'not tried')}" for path in needed if nodes.get(path) != "ok"]
    others = [
        path
        for g in gpus
        if g.get("id") not in devices
        for path in (f"/dev/dri/renderD{g.get('render')}", *(f"/dev/dri/card{c}" for c in g.get("cards") or []))
    ]
    if isolated:
        problems += [
            f"another AMD GPU's {path} is {nodes.get(path, 'not tried')}, not EPERM"
            for path in others
            if nodes.get(path) != "EPERM"
        ]
    if problems:
        return Verdict(False, "; ".join(problems), numbers)
    text = f"GPU {','.join(map(str, devices))} -> ROCR/HIP_VISIBLE_DEVICES={want}, CUDA_VISIBLE_DEVICES empty, opens /dev/kfd"
    if not others:
        return Verdict(True, f"{text}; no other AMD GPU here to be denied", numbers)
    if not isolated:
        opened = [path for path in others if nodes.get(path) == "ok"]
        return Verdict(
            True,
            f"{text}; not isolated: gflowd reports no device isolation ({limits or 'no limits line'}), "
            f"other AMD GPUs' nodes opened: {', '.join(opened) or 'none'}",
            numbers,
        )
    return Verdict(True, f"{text}; other AMD GPUs' nodes EPERM: {', '.join(others)}", numbers)


def judge_isolation(doc: dict[str, Any] | None, own: list[int], smi: dict[int, SmiGpu]) -> Verdict:
    """A job that cleared CUDA_VISIBLE_DEVICES: cuInit fails, or CUDA sees (and uses) only its own
    GPUs; the device nodes of other GPUs cannot be opened (EPERM from the devices cgroup)."""
    if doc is None:
        return Verdict(False, "the probe wrote no report (see the job log)")
    if not doc.get("clearedVisible"):
        return Verdict(False, "the probe did not clear CUDA_VISIBLE_DEVICES (it was not set?)")
    own_bus = {smi[i].pci_bus_id for i in own if i in smi}
    nodes = doc.get("nodes") or {}
    opened = sorted(path for path, result in nodes.items() if result == "ok")
    numbers: dict[str, Any] = {"own": own, "nodes": nodes}
    init = doc.get("init") or {}
    if not init.get("ok"):
        if opened:
            return Verdict(False, f"cuInit failed, but the job could open {', '.join(opened)}", numbers)
        return Verdict(
            True,
            f"cuInit fails once CUDA_VISIBLE_DEVICES is cleared ({init.get('error')}); other GPUs' nodes: {_nodes_text(nodes)}",
            numbers,
        )
    seen = [d["pciBusId"] for d in doc.get("devices") or []]
    used = [u["pciBusId"] for u in doc.get("used") or [] if u.get("allocated")]
    foreign_seen = [b for b in seen if b not in own_bus]
    foreign_used = [b for b in used if b not in own_bus]
    numbers.update(seen=seen, used=used)
    if foreign_used:
        return Verdict(False, f"the job allocated memory on {', '.join(foreign_used)}, not its own GPU", numbers)
    if foreign_seen:
        return Verdict(False, f"CUDA sees {', '.join(foreign_seen)} besides the job's own GPUs", numbers)
    if opened:
        return Verdict(False, f"CUDA sees only the job's GPUs, but it could open {', '.join(opened)}", numbers)
    return Verdict(
        True, f"CUDA sees only {', '.join(seen) or 'no GPU'}; other GPUs' nodes: {_nodes_text(nodes)}", numbers
    )


def judge_mig_caps(doc: dict[str, Any] | None) -> Verdict:
    """A MIG job that cleared CUDA_VISIBLE_DEVICES and tried every /dev/nvidia-caps node (docs/mig.md):
    it opens exactly two, its own GPU instance's and compute instance's caps; the others (a sibling
    instance's, config, monitor) are EPERM; CUDA sees at most its own instance."""
    if doc is None:
        return Verdict(False, "the probe wrote no report (see the job log)")
    nodes = doc.get("nodes") or {}
    opened = sorted(path for path, result in nodes.items() if result == "ok")
    open_wrong = sorted(path for path, result in nodes.items() if result not in ("ok", "EPERM"))
    seen = len(doc.get("devices") or [])
    numbers: dict[str, Any] = {"nodes": nodes, "opened": opened, "cudaDevices": seen}
    if len(opened) != 2:
        return Verdict(False, f"the job opened {len(opened)} caps nodes, not its own 2: {_nodes_text(nodes)}", numbers)
    if open_wrong:
        return Verdict(False, f"caps nodes neither opened nor denied: {', '.join(open_wrong)}", numbers)
    if seen > 1:
        return Verdict(False, f"CUDA sees {seen} devices once CUDA_VISIBLE_DEVICES is cleared", numbers)
    return Verdict(True, f"the job opens its own caps ({', '.join(opened)}), the other {len(nodes) - 2} EPERM", numbers)


def _nodes_text(nodes: dict[str, str]) -> str:
    return (
        ", ".join(f"{path} {result}" for path, result in sorted(nodes.items())) or "not tried (minor numbers unknown)"
    )


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def gpu_usage_entry(gpu_usage: Any, index: int) -> dict[str, float | None] | None:
    """The figures ``status.gpuUsage`` gives for GPU ``index``: util mean/peak (%), memory
    mean/peak (bytes); None when it has no entry for that GPU.

    Issue 19 fixes the field names; this reads them loosely so a rename does not make the check
    lie: a per-GPU list (entries with ``index``/``gpu``/``device``), possibly under ``gpus`` or
    ``devices``, or a mapping keyed by index; keys such as ``utilMean``, ``meanUtilization``,
    ``utilization: {mean, peak}``, ``memoryPeak`` all match.
    """
    entries: Any = gpu_usage
    if isinstance(entries, dict):
        for key in ("gpus", "devices", "perGpu", "byGpu"):
            if key in entries:
                entries = entries[key]
                break
    found: Any = None
    if isinstance(entries, list):
        for item in entries:
            if isinstance(item, dict) and any(item.get(k) == index for k in ("index", "gpu", "device")):
                found = item
    elif isinstance(entries, dict):
        found = entries.get(str(index), entries.get(index))  # type: ignore[call-overload]
    if not isinstance(found, dict):
        return None
    flat = {k: v for k, v in _flatten(found).items() if k not in ("index", "gpu", "device", "uuid")}

    def pick(kind: str, stat: str) -> float | None:
        for key, value in flat.items():
            if _usage_key(key) == (kind, stat):
                if kind == "memory":
                    parsed = parse_quantity(value)
                    return None if parsed is None else float(parsed)
                try:
                    return float(str(value).rstrip("%").strip())
                except ValueError:
                    return None
        return None

    return {
        "utilMean": pick("util", "mean"),
        "utilPeak": pick("util", "peak"),
        "memoryMean": pick("memory", "mean"),
        "memoryPeak": pick("memory", "peak"),
    }


def _usage_key(key: str) -> tuple[str, str] | None:
    """``utilMean``, ``utilization.mean``, ``meanUtilization``, ``sm_util_avg`` -> (util, mean);
    ``memoryPeak``, ``memory.max`` -> (memory, peak). A memory-controller utilization
    (``memUtilMean``) is neither: it is not the figure compared."""
    flat = key.lower().replace(".", "").replace("_", "").replace("-", "")
    stat = "mean" if re.search(r"mean|avg|average", flat) else "peak" if re.search(r"peak|max", flat) else None
    if stat is None:
        return None
    if "util" in flat and not flat.startswith("mem"):
        return ("util", stat)
    if "mem" in flat and "util" not in flat:
        return ("memory", stat)
    return None


def judge_usage(
    busy: dict[str, float | None] | None,
    idle: dict[str, float | None] | None,
    pmon_sm: list[int],
    app_mib: int | None,
    tolerance: float,
) -> Verdict:
    """gflow's figures for the busy GPU within ``tolerance`` points of pmon's mean SM%, its peak
    memory within max(5 %, 64 MiB) of what --query-compute-apps shows for the job's process; the
    GPU it never touched (when there is one) at 0 % and no memory."""
    if busy is None:
        return Verdict(False, "status.gpuUsage has no entry for the busy GPU")
    numbers: dict[str, Any] = {"gflow": busy, "gflowIdleGpu": idle, "pmonSm": pmon_sm, "computeAppsMiB": app_mib}
    problems = []
    if not pmon_sm:
        problems.append("nvidia-smi pmon gave no SM% sample for the job's process")
    elif busy["utilMean"] is None:
        problems.append("status.gpuUsage has no mean utilization for the busy GPU")
    else:
        pmon_mean = statistics.fmean(pmon_sm)
        numbers["pmonMean"] = round(pmon_mean, 1)
        if abs(busy["utilMean"] - pmon_mean) > tolerance:
            problems.append(
                f"mean util {busy['utilMean']:g}% in gflow, {pmon_mean:.1f}% in pmon (tolerance {tolerance:g} points)"
            )
    if app_mib is None:
        problems.append("nvidia-smi --query-compute-apps gave no used_memory for the job's process")
    elif busy["memoryPeak"] is None:
        problems.append("status.gpuUsage has no peak memory for the busy GPU")
    else:
        want = app_mib * MIB
        if abs(busy["memoryPeak"] - want) > max(0.05 * want, 64 * MIB):
            problems.append(f"peak memory {busy['memoryPeak'] / MIB:.0f} MiB in gflow, {app_mib} MiB in nvidia-smi")
    if idle is not None and ((idle["utilMean"] or 0) > tolerance or (idle["memoryPeak"] or 0) > 0):
        problems.append(f"the untouched GPU shows util {idle['utilMean']}% and memory {idle['memoryPeak']}")
    if problems:
        return Verdict(False, "; ".join(problems), numbers)
    return Verdict(
        True,
        f"util {busy['utilMean']:g}% vs pmon {numbers['pmonMean']}%, peak memory "
        f"{(busy['memoryPeak'] or 0) / MIB:.0f} MiB vs {app_mib} MiB",
        numbers,
    )


# ------------------------------------------------------------------------------------------------
# Results and the report
# ------------------------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    outcome: str  # PASS | FAIL | SKIP
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    detail: str = ""  # log tails, a traceback: what a reader needs to act on a FAIL

    def line(self) -> str:
        return f"{self.outcome} {self.name} — {self.reason}"


def summarize(results: list[Result]) -> dict[str, int]:
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for result in results:
        counts[result.outcome] += 1
    return counts


def exit_code(results: list[Result], interrupted: bool) -> int:
    if interrupted:
        return 130
    return 1 if any(r.outcome == "FAIL" for r in results) else 0


def build_report(
    results: list[Result],
    *,
    gpu: dict[str, Any],
    gflowd: dict[str, Any],
    started: float,
    finished: float,
    interrupted: bool,
    run_dir: str,
) -> dict[str, Any]:
    return {
        "kind": "GpuAcceptanceReport",
        "version": 1,
        "host": socket.gethostname(),
        "started": _iso(started),
        "finished": _iso(finished),
        "seconds": round(finished - started, 1),
        "gpu": gpu,
        "gflowd": gflowd,
        "checks": [dataclasses.asdict(r) for r in results],
        "summary": summarize(results),
        "interrupted": interrupted,
        "exitCode": exit_code(results, interrupted),
        "runDir": run_dir,
    }


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def all_skipped(reason: str) -> list[Result]:
    return [Result(name, "SKIP", reason) for name in CHECK_NAMES]


# ------------------------------------------------------------------------------------------------
# Odds and ends the script reads
# ------------------------------------------------------------------------------------------------


def metric_mean_ms(text: str) -> float | None:
    """Mean of a ``*_seconds`` histogram/summary about GPU sampling in Prometheus text, in ms."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(
            r"^(gflow_\w*(?:gpu_sampl|nvml|gpu_usage_sampl|gpu_read)\w*_seconds)_(sum|count)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$",
            line,
        )
        if match:
            (sums if match.group(2) == "sum" else counts)[match.group(1)] = float(match.group(3))
    for name, count in counts.items():
        if count > 0 and name in sums:
            return sums[name] / count * 1000
    return None


def device_minor(bus_id: str, root: Path = Path("/proc/driver/nvidia/gpus")) -> int | None:
    """The driver's minor number for a GPU (``Device Minor:`` in its information file)."""
    try:
        text = (root / bus_id / "information").read_text()
    except OSError:
        return None
    match = re.search(r"^Device Minor:\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else None


def cgroup_mounts(mounts: str) -> dict[str, Path]:
    """Where each cgroup hierarchy is mounted, from /proc/self/mounts: ``""`` for cgroup v2, the
    controller (``memory``, ``devices``, ``name=systemd``...) for each v1 hierarchy."""
    found: dict[str, Path] = {}
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, kind, options = fields[1], fields[2], fields[3].split(",")
        if kind == "cgroup2":
            found.setdefault("", Path(point))
        elif kind == "cgroup":
            for option in options:
                if option not in ("rw", "ro") and not option.startswith(
                    ("relatime", "nosuid", "nodev", "noexec", "clone_children", "release_agent", "xattr", "nsdelegate")
                ):
                    found.setdefault(option, Path(point))
    return found


def cgroup_dirs(lines: Iterable[str], mounts: dict[str, Path]) -> list[Path]:
    """The directories of ``/proc/PID/cgroup`` lines (``4:memory:/a/b``, ``0::/a/b``); the root
    cgroup and hierarchies not mounted here are left out."""
    paths = []
    for line in sorted(lines):
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[2] in ("", "/"):
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            if controller in mounts:
                paths.append(mounts[controller] / parts[2].lstrip("/"))
    return sorted(set(paths))


def judge_checkpoint_timing(
    seen: dict[str, Any] | None, status: dict[str, Any], limit: float, before: float, slack: float
) -> Verdict:
    """The checkpoint signal came ``before`` ahead of the time limit (within ``slack``: the
    supervisor polls, the machine may be busy) and the confirmation is in the status. ``seen``: the
    job's own record, {"started", "signalled"} (wall clock, read in the job)."""
    if not seen or seen.get("signalled") is None:
        return Verdict(False, f"the job never got its checkpoint signal (it recorded {seen!r})", {})
    after = seen["signalled"] - seen["started"]
    want = limit - before
    numbers = {"signalledAfterSeconds": round(after, 2), "wantedSeconds": want, "slackSeconds": slack}
    if not want - slack <= after <= want + slack:
        return Verdict(
            False,
            f"the signal came {after:.1f}s in, not ~{want:g}s (time limit {limit:g}s - before {before:g}s)",
            numbers,
        )
    confirmed = [c for c in status.get("conditions") or [] if c.get("type") == "Checkpointed"]
    if not confirmed:
        return Verdict(False, "the job confirmed, but its status has no Checkpointed condition", numbers)
    return Verdict(True, f"signal {after:.1f}s in (wanted ~{want:g}s), confirmation recorded", numbers)
