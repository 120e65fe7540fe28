"""Trace-driven simulation of the scheduler on a virtual clock.

A discrete-event loop (arrivals and completions, in time order) around the *real* scheduler
(``controller.decide.scheduler.schedule``) and queue policy (``controller.decide.policy``): the figures it prints
are what the controller's own code would do with the same jobs on the same number of GPUs.

What it leaves out, on purpose: processes (a job runs exactly ``duration_s``, or is killed at its
``time_limit_s``), foreign processes, GPU types and topology (all GPUs alike). Fair share uses the
incremental :class:`UsageLedger` (same figures as the controller's per-run sum).

Trace: CSV with a header, columns ``submit_s,gpus,duration_s,time_limit_s,priority,user`` and
optionally ``shared,gpu_memory_gib,cpus,gpu_type``. ``gpu_type`` (a MIG profile like ``1g.10gb``, or
part of a GPU's name) picks among the units of a machine given as ``Gpu`` records (``inventory``).
An empty ``time_limit_s`` means none. ``cpus`` (whole
cores) are booked when the simulated machine has cores (``simulate --cpus N``), as gflowd books them.

Reservations (optional): CSV with a header ``start_s,duration_s,devices,users`` (devices and users
separated by spaces), fenced exactly as the controller fences them (``controller.decide.reservations``);
window starts and ends are events too.
"""

from __future__ import annotations

import csv
import heapq
import math
from dataclasses import dataclass, field
from pathlib import Path

from controller.decide.placement.gpus import matches
from controller.decide.policy import UsageLedger, queue_key, quota_keys
from controller.decide.reservations import Window, fence, next_boundary
from controller.decide.scheduler import Binding, GpuSlot, QuotaUse, Request, schedule
from controller.model.gpus import Gpu
from controller.model.plan import Host
from controller.model.policy import Policy
from controller.model.scheduling import CorePool

GIB = 2**30
POLICIES = ("fifo", "priority", "firstfit", "backfill", "default")


class TraceError(Exception):
    """A trace that cannot be simulated; the message names the file, line and what to fix."""


@dataclass
class SimJob:
    index: int
    submit: float
    gpus: int
    duration: float
    time_limit: float | None
    priority: int
    user: str
    shared: bool = False
    gpu_memory: int | None = None
    cpus: int = 0
    gpu_type: str | None = None  # a MIG profile or part of a GPU's name, on a machine from --fake-gpus
    start: float | None = None
    end: float | None = None
    devices: tuple[int, ...] = ()
    line: int = 0  # in the trace file, for messages

    @property
    def run_time(self) -> float:
        """How long it holds its GPUs: its duration, or its timeLimit when that is shorter (killed)."""
        return self.duration if self.time_limit is None else min(self.duration, self.time_limit)

    @property
    def started(self) -> float:
        """When it started: asked only of a finished simulation's jobs, which all ran."""
        if self.start is None:
            raise ValueError(f"job {self.index} never started")
        return self.start

    @property
    def ended(self) -> float:
        if self.end is None:
            raise ValueError(f"job {self.index} never ended")
        return self.end


@dataclass
class Result:
    jobs: list[SimJob]
    gpus: int
    policy: str
    metrics: dict = field(default_factory=dict)


def named_policy(name: str) -> Policy:
    """The policies ``simulate --policy`` knows: four plain baselines, and the controller's default."""
    if name == "default":
        from controller.api.config import ControllerConfig  # lazy: the config model (pydantic) only for a named policy
        from controller.decide.policy import policy_from_config

        return policy_from_config(ControllerConfig())
    return {
        "fifo": Policy(mode="strict", order="fifo"),
        "priority": Policy(mode="strict"),
        "firstfit": Policy(mode="firstfit"),
        "backfill": Policy(mode="backfill"),
    }[name]


# -- trace ------------------------------------------------------------------------------------------

REQUIRED = ("submit_s", "gpus", "duration_s", "time_limit_s", "priority", "user")


def _open_csv(path: Path):
    try:
        return path.open(newline="")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None


def read_trace(path: Path) -> list[SimJob]:
    with _open_csv(path) as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            columns = f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
            raise TraceError(f"{path}: header lacks {columns} (needs {','.join(REQUIRED)})")
        col = {name: header.index(name) for name in header}
        jobs: list[SimJob] = []
        for line_no, row in enumerate(reader, start=2):
            if not row or not any(cell.strip() for cell in row):
                continue
            try:
                jobs.append(_parse_row(row, col, len(jobs), line_no))
            except (ValueError, IndexError) as exc:
                raise TraceError(f"{path} line {line_no}: {exc}") from None
    jobs.sort(key=lambda j: (j.submit, j.index))
    return jobs


def _parse_row(row: list[str], col: dict[str, int], index: int, line: int) -> SimJob:
    def cell(name: str) -> str:
        return row[col[name]].strip() if name in col and col[name] < len(row) else ""

    def number(name: str, minimum: float, integer: bool = False) -> float:
        text = cell(name)
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise ValueError(f"{name}: expected a{'n integer' if integer else ' number'}, got {text!r}") from None
        if not value >= minimum or math.isinf(value):
            raise ValueError(f"{name}: must be >= {minimum:g}, got {text}")
        return value

    limit_text = cell("time_limit_s")
    shared = cell("shared").lower() in ("1", "true", "yes")
    memory = cell("gpu_memory_gib")
    if shared and not memory:
        raise ValueError("gpu_memory_gib: required when shared is true")
    return SimJob(
        index=index,
        submit=number("submit_s", 0),
        gpus=int(number("gpus", 0, integer=True)),
        duration=number("duration_s", 0),
        time_limit=number("time_limit_s", 0) if limit_text else None,
        priority=int(number("priority", -(2**31), integer=True)),
        user=cell("user") or "unknown",
        shared=shared,
        gpu_memory=int(float(memory) * GIB) if memory else None,
        cpus=int(number("cpus", 0, integer=True)) if cell("cpus") else 0,
        gpu_type=cell("gpu_type") or None,
        line=line,
    )


# -- the simulation ----------------------------------------------------------------------------------


def _typed(slots: list[GpuSlot], gpu_type: str | None) -> int:
    """How many units a ``gpu_type`` (None: a whole GPU of any kind) may use, as the scheduler
    matches them."""
    return sum(matches(s, Request("", 1, gpu_type)) for s in slots)


def simulate(
    jobs: list[SimJob],
    gpus: int,
    policy: Policy,
    policy_name: str = "",
    cpus: int | None = None,
    reservations: list[Window] | None = None,
    inventory: list[Gpu] | None = None,
) -> Result:
    """Run the trace to the end; fills each job's start/end/devices and returns the metrics.
    ``cpus``: the machine's cores, booked by the jobs' ``cpus`` (None: not booked). ``inventory``:
    the machine's GPUs (a fake-GPU file's, MIG instances as units) instead of ``gpus`` alike ones."""
    if inventory is not None:
        slots = [GpuSlot(g, "Free") for g in inventory]
        gpus = len(slots)
        typed = next((j for j in jobs if j.gpus > _typed(slots, j.gpu_type or None)), None)
        if typed is not None and typed.gpus <= gpus:  # more than every unit: the general message below
            have = _typed(slots, typed.gpu_type or None)
            what = (
                f"GPUs of type {typed.gpu_type}"
                if typed.gpu_type
                else "whole GPUs (a MIG instance takes its profile's jobs only)"
            )
            raise TraceError(f"trace line {typed.line}: the job needs {typed.gpus} {what}; the machine has {have}")
    else:
        typed = next((j for j in jobs if j.gpu_type), None)
        if typed is not None:  # every simulated GPU is alike: a type would never match
            raise TraceError(f"trace line {typed.line}: gpu_type needs a machine of typed GPUs (an inventory)")
        slots = [GpuSlot(Gpu(i, f"GPU-sim-{i}", "simulated GPU", 80 * GIB), "Free") for i in range(gpus)]
    too_big = next((j for j in jobs if j.gpus > gpus or (cpus is not None and j.cpus > cpus)), None)
    if too_big is not None:
        what = (
            (
                f"{too_big.gpus} GPUs; the machine has {gpus}"
                if inventory is not None
                else f"{too_big.gpus} GPUs; --gpus is {gpus}"
            )
            if too_big.gpus > gpus
            else f"{too_big.cpus} CPUs; --cpus is {cpus}"
        )
        raise TraceError(f"trace line {too_big.line}: the job needs {what}")
    reservations = reservations or []
    ids = {s.index for s in slots}
    outside = next((w for w in reservations if not set(w.devices) <= ids), None)
    if outside is not None:
        missing = max(set(outside.devices) - ids)
        raise TraceError(f"reservation {outside.name}: GPU {missing} does not exist; --gpus is {gpus}")
    cores = CorePool(frozenset(range(cpus))) if cpus is not None else None
    requests = {
        str(j.index): Request(
            str(j.index),
            j.gpus,
            j.gpu_type,
            j.gpu_memory,
            j.shared,
            j.time_limit,
            quota_keys(j.user, {}, policy),
            j.cpus if cores is not None else 0,
        )
        for j in jobs
    }
    ledger = UsageLedger(policy.fair_share_half_life) if policy.fair_share_half_life else None
    quota_used = {f"user {u}": 0 for u in policy.user_quotas}
    completions: list[tuple[float, int]] = []  # (end, job index)
    queue = _Queue(policy, ledger, requests)
    running_on: dict[int, list[SimJob]] = {}  # GPU -> jobs on it
    next_arrival = 0
    now = 0.0
    while next_arrival < len(jobs) or completions or (queue.waiting and next_boundary(reservations, now) < math.inf):
        # advance to the next event; everything at that instant is applied before one pass
        now = max(
            now,
            min(
                jobs[next_arrival].submit if next_arrival < len(jobs) else math.inf,
                completions[0][0] if completions else math.inf,
                next_boundary(reservations, now) if queue.waiting and reservations else math.inf,
            ),
        )
        while completions and completions[0][0] <= now:
            _, index = heapq.heappop(completions)
            _release(jobs[index], slots, running_on, ledger, quota_used, now)
            if cores is not None:
                _release_cores(jobs[index], cores)
        while next_arrival < len(jobs) and jobs[next_arrival].submit <= now:
            queue.add(jobs[next_arrival])
            next_arrival += 1
        if not queue.waiting or not any(s.state in ("Free", "Shared") for s in slots):
            continue
        quotas = {key: QuotaUse(policy.user_quotas[key[5:]], used) for key, used in quota_used.items()}
        free = sum(1 for s in slots if s.state in ("Free", "Shared"))
        offered = queue.ordered(now, free)
        live = [w for w in reservations if now < w.end]
        if live:  # the same fence as the controller's queue: by the job's user
            offered = (fence(r, jobs[int(r.name)].user, -1, live, _HOST, now) for r in offered)
        decisions = schedule(offered, slots, mode=policy.mode, now=now, quotas=quotas, reasons=False, cores=cores)
        for name, decision in decisions.items():
            if not isinstance(decision, Binding):
                continue
            job = jobs[int(name)]
            job.start, job.devices = now, tuple(decision.devices)
            job.end = now + job.run_time
            queue.remove(job)
            heapq.heappush(completions, (job.end, job.index))
            for device in job.devices:
                running_on.setdefault(device, []).append(job)
            if ledger is not None:
                ledger.change(job.user, now, job.gpus)
            key = f"user {job.user}"
            if key in quota_used:
                quota_used[key] += job.gpus
    if queue.waiting:  # nothing running, nothing arriving: they can never start
        raise TraceError(f"{queue.waiting} jobs can never start; check the quotas")
    return Result(jobs, gpus, policy_name, metrics(jobs, gpus))


_HOST = Host()  # the simulator's users are names only


def read_reservations(path: Path) -> list[Window]:
    """``--reservations FILE``: CSV ``start_s,duration_s,devices,users`` (lists separated by spaces)."""
    with _open_csv(path) as handle:
        rows = list(csv.DictReader(handle))
    windows = []
    for line, row in enumerate(rows, start=2):
        try:
            start, duration = float(row["start_s"]), float(row["duration_s"])
            devices = tuple(int(d) for d in (row["devices"] or "").split())
            users = tuple((row["users"] or "").split())
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(
                f"{path} line {line}: needs start_s,duration_s,devices,users as numbers and lists ({exc})"
            ) from None
        if duration <= 0 or not devices or not users:
            raise TraceError(f"{path} line {line}: needs a duration_s > 0, at least one device and one user")
        windows.append(Window(f"line {line}", users, devices, start, start + duration))
    return windows


class _Queue:
    """The pending jobs in the policy's order (``controller.decide.policy.queue_key``), produced lazily.

    Jobs of one user, priority and size keep their relative order under every policy (the older
    is ahead: aging never lets a newer one pass, fair share cannot tell them apart), so each such
    group is a FIFO list and the queue is a merge of the groups' heads. The scheduler stops reading
    once no GPU is left, and jobs larger than the GPUs free at the start of the pass are skipped
    once a larger job has been offered (it takes the reservation, if any, so skipping changes no
    decision): a pass costs what it reads, not the length of the queue."""

    def __init__(self, policy: Policy, ledger: UsageLedger | None, requests: dict[str, Request]) -> None:
        self.policy, self.ledger, self.requests = policy, ledger, requests
        self.groups: dict[tuple[str, int, int], list[SimJob]] = {}
        self.waiting = 0

    def add(self, job: SimJob) -> None:
        self.groups.setdefault((job.user, job.priority, job.gpus), []).append(job)
        self.waiting += 1

    def remove(self, job: SimJob) -> None:
        key = (job.user, job.priority, job.gpus)
        group = self.groups[key]
        group.remove(job)
        if not group:
            del self.groups[key]
        self.waiting -= 1

    def ordered(self, now: float, free: int):
        policy = self.policy
        usage = {user: self.ledger.usage(user, now) for user in {k[0] for k in self.groups}} if self.ledger else {}

        def key(job: SimJob) -> tuple:
            return (*queue_key(job.priority, now - job.submit, usage.get(job.user, 0.0), policy), job.submit, job.index)

        # a job larger than ``free`` cannot start; the first such job offered ends the search for
        # the reservation's owner (firstfit has none), after which such jobs are not offered
        skipping = policy.mode == "firstfit"
        heap = [
            (key(group[0]), size, i, group)
            for i, ((_, _, size), group) in enumerate(self.groups.items())
            if not skipping or size <= free
        ]
        heapq.heapify(heap)
        requests = self.requests
        while heap:
            _, size, i, group = heap[0]
            if skipping and size > free:
                heapq.heappop(heap)
                continue
            position = i >> 32
            job = group[position]
            yield requests[str(job.index)]
            if size > free:
                skipping = True
            position += 1
            if position < len(group):
                heapq.heapreplace(heap, (key(group[position]), size, (position << 32) | (i & 0xFFFFFFFF), group))
            else:
                heapq.heappop(heap)


def _release(
    job: SimJob, slots: list[GpuSlot], running_on: dict[int, list[SimJob]], ledger, quota_used, now: float
) -> None:
    name = str(job.index)
    by_index = {s.index: s for s in slots}  # unit ids: 0..N-1 alike, or a fake-GPU file's (MIG ids skip parents)
    for device in job.devices:
        slot = by_index[device]
        slot.jobs.remove(name)
        others = running_on[device]
        others.remove(job)
        if job.shared:
            slot.shared_reserved -= job.gpu_memory or 0
        if not slot.jobs:
            slot.state, slot.free_at, slot.shared_reserved = "Free", 0.0, 0
        else:
            slot.free_at = max(_ends_at(j) for j in others)
    if ledger is not None:
        ledger.change(job.user, now, -job.gpus)
    key = f"user {job.user}"
    if key in quota_used:
        quota_used[key] -= job.gpus


def _release_cores(job: SimJob, cores: CorePool) -> None:
    for core in [c for c, name in cores.taken.items() if name == str(job.index)]:
        del cores.taken[core]
        cores.free_at.pop(core, None)


def _ends_at(job: SimJob) -> float:
    return job.start + job.time_limit if job.time_limit is not None and job.start is not None else math.inf


# -- figures -----------------------------------------------------------------------------------------


def metrics(jobs: list[SimJob], gpus: int) -> dict:
    """The figures ``simulate -o json`` prints (times in seconds from the first submission)."""
    if not jobs:
        return {
            "jobs": 0,
            "makespan_s": 0.0,
            "lower_bound_s": 0.0,
            "utilization": 0.0,
            "mean_wait_s": 0.0,
            "p95_wait_s": 0.0,
            "max_wait_s": 0.0,
            "mean_slowdown": 0.0,
            "by_gpus": {},
        }
    origin = min(j.submit for j in jobs)
    busy = sum(j.gpus * j.run_time for j in jobs)
    makespan = max(j.ended for j in jobs) - origin
    lower = max(busy / gpus, max(j.submit + j.run_time for j in jobs) - origin)
    waits = sorted(j.started - j.submit for j in jobs)
    by_gpus: dict[str, dict] = {}
    for size in sorted({j.gpus for j in jobs}):
        group = [j.started - j.submit for j in jobs if j.gpus == size]
        by_gpus[str(size)] = {
            "jobs": len(group),
            "mean_wait_s": round(sum(group) / len(group), 1),
            "max_wait_s": round(max(group), 1),
        }
    # slowdown: (wait + run) / run, with runs shorter than 10 s counted as 10 s (bounded slowdown)
    slowdowns = [(j.started - j.submit + j.run_time) / max(j.run_time, 10.0) for j in jobs]
    return {
        "jobs": len(jobs),
        "makespan_s": round(makespan, 1),
        "lower_bound_s": round(lower, 1),
        "utilization": round(busy / (gpus * makespan), 4) if makespan > 0 else 0.0,
        "mean_wait_s": round(sum(waits) / len(waits), 1),
        "p95_wait_s": round(waits[min(len(waits) - 1, math.ceil(0.95 * len(waits)) - 1)], 1),
        "max_wait_s": round(waits[-1], 1),
        "mean_slowdown": round(sum(slowdowns) / len(slowdowns), 3),
        "by_gpus": by_gpus,
    }


def plot(result: Result, out_dir: Path) -> list[Path]:
    """A Gantt chart of GPU occupancy and a wait-time CDF, as PNGs (needs matplotlib)."""
    import matplotlib  # lazy: matplotlib (an extra, ~300 ms) only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    out_dir.mkdir(parents=True, exist_ok=True)
    origin = min((j.submit for j in result.jobs), default=0.0)
    colors = {1: "tab:blue", 2: "tab:green", 4: "tab:orange", 8: "tab:red"}
    fig, ax = plt.subplots(figsize=(14, max(3, result.gpus * 0.12 + 1)))
    hours = 3600.0
    for device in range(result.gpus):
        bars: dict[str, list[tuple[float, float]]] = {}
        for job in result.jobs:
            if device in job.devices:
                color = colors.get(job.gpus, "tab:purple")
                bars.setdefault(color, []).append(((job.started - origin) / hours, job.run_time / hours))
        for color, segments in bars.items():
            ax.broken_barh(segments, (device - 0.4, 0.8), facecolors=color, linewidth=0)
    ax.set_xlabel("hours since first submission")
    ax.set_ylabel("GPU")
    ax.set_title(f"GPU occupancy, policy {result.policy} (blue 1, green 2, orange 4, red 8 GPUs)")
    gantt = out_dir / f"gantt-{result.policy or 'run'}.png"
    fig.tight_layout()
    fig.savefig(gantt, dpi=100)
    plt.close(fig)

    waits = sorted((j.started - j.submit) / hours for j in result.jobs)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    n = len(waits)
    ax.step(waits, [(i + 1) / n for i in range(n)], where="post")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_xlabel("wait (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"Wait-time CDF, policy {result.policy}")
    ax.grid(True, alpha=0.3)
    cdf = out_dir / f"wait-cdf-{result.policy or 'run'}.png"
    fig.tight_layout()
    fig.savefig(cdf, dpi=100)
    plt.close(fig)
    return [gantt, cdf]
