"""Prometheus metrics: ``gflowd --metrics-port N`` (``--metrics-address``, default 127.0.0.1).

Imported only when a metrics port is set (``prometheus_client`` is not free to import). The
reconcile loop never waits for a scrape: after each pass it *publishes* a reference to that
pass's job states and GPU slots (both immutable once recorded) and bumps the counters and
histograms of what the pass did (a few microseconds). The HTTP server runs in its own thread and
computes the gauges from the last published snapshot when scraped.

Metrics (all prefixed ``gflow_``):

=============================================  =========  ==================================================
name                                           type       labels / meaning
=============================================  =========  ==================================================
``gflow_jobs``                                 gauge      ``phase``: jobs in each phase
``gflow_jobs_pending``                         gauge      ``reason``: pending jobs by why they wait
``gflow_gpus``                                 gauge      ``state``: GPUs by state (Free, Allocated, ...)
``gflow_gpu_memory_used_bytes``                gauge      ``gpu``, ``uuid``, ``name``
``gflow_gpu_memory_total_bytes``               gauge      ``gpu``, ``uuid``, ``name``
``gflow_gpu_utilization_percent``              gauge      ``gpu``, ``uuid``, ``name`` (absent when unknown)
``gflow_gpu_allocated_jobs``                   gauge      ``gpu``: how many jobs hold it
``gflow_gpu_memory_orphaned_bytes``            gauge      ``gpu``: memory charged to pids that no longer exist
``gflow_gpu_job_info``                         gauge      ``gpu``, ``job_name``: 1 for each job on each GPU
``gflow_job_gpu_utilization_percent``         gauge      ``gpu``, ``job_name``: the job's processes' share, latest sample
``gflow_job_gpu_memory_used_bytes``           gauge      ``gpu``, ``job_name``: the job's processes' GPU memory, latest sample
``gflow_job_gpu_busy_seconds``                gauge      ``job_name``: utilization-weighted GPU-seconds of the running attempt
``gflow_queue_wait_seconds``                   histogram  time from queueing to start, per started attempt
``gflow_reconcile_duration_seconds``           histogram  duration of each reconcile pass
``gflow_jobs_started_total``                   counter    attempts started
``gflow_jobs_finished_total``                  counter    ``phase``: jobs that reached Succeeded/Failed/Cancelled
``gflow_job_failures_total``                   counter    ``reason``: jobs that reached Failed, by why (CUDAOutOfMemory, ...)
``gflow_reconcile_last_pass_timestamp_seconds``  gauge    when the last pass ended (alert when stale)
``gflow_cpu_cores``                            gauge      ``state``: free or bound CPU cores (``resources.cpus``)
``gflow_attempt_cpu_seconds_total``            counter    CPU time of ended attempts, from their cgroups
``gflow_attempt_peak_memory_bytes``            histogram  peak memory of each ended attempt, from its cgroup
``gflow_build_info``                           gauge      ``version``, ``python``: 1 (which gflowd answers)
=============================================  =========  ==================================================

Where GPUs are split into MIG instances (docs/mig.md), `gflow_gpu_mig_info` (gauge; labels
``gpu``, ``parent``, ``profile``) is 1 for each instance: join on ``gpu`` for a profile.

No label is named ``job`` or ``instance``: Prometheus gives every scraped series those two (the
scrape job and the target) and would store ours as ``exported_job``. Every phase and every known
pending reason is served from the first scrape, at 0, so ``rate()`` and alerts see a series
before its first job.
"""

from __future__ import annotations

import logging
import sys
import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import start_http_server

from controller import __version__
from controller.model.lean_records import phases_and_reasons
from controller.model.reasons import PENDING_REASONS, Phase, Reason
from controller.model.scheduling import GPU_STATES
from controller.sinks.hooks import SinkError

log = logging.getLogger("gflowd.metrics")
disable_created_metrics()  # the *_created series only add noise for a long-running controller

PHASES = tuple(Phase)
FINISHED = tuple(p for p in Phase if p.terminal)
# served at 0 from the first scrape: PENDING_REASONS, every reason whose row in model/reasons.py
# has the phase Pending (a cluster's reasons of its own are served once they occur)
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, float("inf"))
MEMORY_BUCKETS = tuple(float(2**n) for n in range(24, 42, 2)) + (float("inf"),)  # 16 MiB .. 2 TiB
PASS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))


class _SnapshotCollector:
    """Gauges computed at scrape time from the last snapshot the loop published."""

    def __init__(self) -> None:
        # (job states, GPU slots, time, GPU usage) of the last pass: replaced whole, so a scrape reads one pass
        self.current: tuple[dict, list, float, dict] = ({}, [], 0.0, {})
        self.cores = None  # the last pass's CorePool (None: cores are not booked)

    def collect(self):
        states, slots, last_pass, usage = self.current
        for _ in range(3):
            try:  # finished jobs a start read back are counted off their facts, not built (model/lean_records.py)
                values = phases_and_reasons(states)
                break
            except RuntimeError:  # never expected (published dicts are not mutated); retry anyway
                continue
        else:
            values = []
        phases: dict[str, int] = dict.fromkeys(PHASES, 0)
        pending: dict[str, int] = dict.fromkeys(PENDING_REASONS, 0)
        for phase, why in values:
            phases[phase] = phases.get(phase, 0) + 1
            if phase == "Pending":
                reason = why or "Pending"
                pending[reason] = pending.get(reason, 0) + 1
        jobs = GaugeMetricFamily("gflow_jobs", "Jobs by phase.", labels=["phase"])
        for phase, count in phases.items():
            jobs.add_metric([phase], count)
        yield jobs
        waiting = GaugeMetricFamily("gflow_jobs_pending", "Pending jobs by the reason they wait.", labels=["reason"])
        for reason, count in pending.items():
            waiting.add_metric([reason], count)
        yield waiting

        by_state = dict.fromkeys(GPU_STATES, 0)
        gpu_labels = ["gpu", "uuid", "name"]
        used = GaugeMetricFamily("gflow_gpu_memory_used_bytes", "GPU memory in use (all processes).", labels=gpu_labels)
        total = GaugeMetricFamily("gflow_gpu_memory_total_bytes", "GPU memory.", labels=gpu_labels)
        util = GaugeMetricFamily(
            "gflow_gpu_utilization_percent", "GPU utilization as NVML reports it.", labels=gpu_labels
        )
        orphaned = GaugeMetricFamily(
            "gflow_gpu_memory_orphaned_bytes",
            "GPU memory charged to pids that no longer exist: held until a GPU reset.",
            labels=["gpu"],
        )
        holders = GaugeMetricFamily("gflow_gpu_allocated_jobs", "Jobs holding each GPU.", labels=["gpu"])
        info = GaugeMetricFamily("gflow_gpu_job_info", "1 for each job on each GPU.", labels=["gpu", "job_name"])
        mig = GaugeMetricFamily(  # a MIG instance's profile, joined on gpu: the per-GPU series keep their labels
            "gflow_gpu_mig_info",
            "1 for each MIG instance: its parent GPU and profile.",
            labels=["gpu", "parent", "profile"],
        )
        for slot in slots:
            gpu = slot.gpu
            by_state[slot.state] = by_state.get(slot.state, 0) + 1
            key = [str(gpu.index), gpu.uuid, gpu.name]
            used.add_metric(key, gpu.memory_used)
            total.add_metric(key, gpu.memory_total)
            if gpu.utilization is not None:
                util.add_metric(key, gpu.utilization)
            holders.add_metric([str(gpu.index)], len(slot.jobs))
            orphaned.add_metric([str(gpu.index)], sum(p.used_memory for p in gpu.processes if p.gone))
            if gpu.profile:
                mig.add_metric([str(gpu.index), str(gpu.parent), gpu.profile], 1)
            for job in slot.jobs:
                info.add_metric([str(gpu.index), job], 1)
        gpus = GaugeMetricFamily("gflow_gpus", "GPUs by state.", labels=["state"])
        for state, n in by_state.items():
            gpus.add_metric([state], n)
        yield gpus
        yield from (used, total, util, holders, orphaned, info, mig)
        cores = self.cores
        if cores is not None:
            bound = len(cores.taken)
            family = GaugeMetricFamily("gflow_cpu_cores", "CPU cores jobs may book, free or bound.", labels=["state"])
            family.add_metric(["free"], len(cores.cores) - bound)
            family.add_metric(["bound"], bound)
            yield family
        yield from _job_usage(usage)
        last = GaugeMetricFamily(
            "gflow_reconcile_last_pass_timestamp_seconds", "Unix time the last reconcile pass ended."
        )
        last.add_metric([], last_pass)
        yield last


def _job_usage(usage: dict):
    """Per running job and bound GPU, the latest sample (``controller.model.usage.AttemptUsage``)."""
    util = GaugeMetricFamily(
        "gflow_job_gpu_utilization_percent",
        "GPU utilization by the job's processes (latest sample).",
        labels=["gpu", "job_name"],
    )
    memory = GaugeMetricFamily(
        "gflow_job_gpu_memory_used_bytes",
        "GPU memory of the job's processes (latest sample).",
        labels=["gpu", "job_name"],
    )
    busy = GaugeMetricFamily(
        "gflow_job_gpu_busy_seconds", "Utilization-weighted GPU-seconds of the running attempt.", labels=["job_name"]
    )
    for name, attempt in usage.items():
        for gpu in attempt.gpus:
            util.add_metric([str(gpu.index), name], gpu.util_last)
            memory.add_metric([str(gpu.index), name], gpu.memory_last)
        busy.add_metric([name], sum(g.busy_seconds for g in attempt.gpus))
    yield from (util, memory, busy)


class MetricsServer:
    """Sink (``controller.sinks.hooks``) that serves Prometheus text over HTTP from a thread."""

    def __init__(self, address: str, port: int):
        self.registry = CollectorRegistry(auto_describe=False)
        self.snapshot = _SnapshotCollector()
        self.registry.register(self.snapshot)
        build = Gauge(
            "gflow_build_info",
            "1, labelled with the gflow version and Python this gflowd runs.",
            ["version", "python"],
            registry=self.registry,
        )
        build.labels(__version__, ".".join(map(str, sys.version_info[:3]))).set(1)
        self.queue_wait = Histogram(
            "gflow_queue_wait_seconds",
            "Time from entering the queue to starting, per attempt.",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.pass_duration = Histogram(
            "gflow_reconcile_duration_seconds",
            "Duration of a reconcile pass.",
            buckets=PASS_BUCKETS,
            registry=self.registry,
        )
        self.started = Counter("gflow_jobs_started", "Attempts started.", registry=self.registry)
        self.finished = Counter(
            "gflow_jobs_finished", "Jobs that finished, by phase.", ["phase"], registry=self.registry
        )
        for phase in FINISHED:
            self.finished.labels(phase)  # present at 0 from the start: rate() needs a first sample
        self.failures = Counter(
            "gflow_job_failures", "Jobs that failed, by reason.", ["reason"], registry=self.registry
        )
        for reason in Reason:
            if Phase.Failed in reason.phases:
                self.failures.labels(reason)  # each at 0 from the start, as the phases
        self.cpu_seconds = Counter(
            "gflow_attempt_cpu_seconds", "CPU time of ended attempts, from their cgroups.", registry=self.registry
        )
        self.peak_memory = Histogram(
            "gflow_attempt_peak_memory_bytes",
            "Peak memory of each ended attempt, from its cgroup.",
            buckets=MEMORY_BUCKETS,
            registry=self.registry,
        )
        try:
            self.server, self.thread = start_http_server(port, address, registry=self.registry)
        except OSError as exc:
            raise SinkError(
                f"--metrics-port {port}: cannot listen on {address}:{port}: {exc.strerror or exc}"
            ) from None
        except ValueError as exc:  # e.g. an address that is not one
            raise SinkError(f"--metrics-address {address!r}: {exc}") from None
        self.port = self.server.server_port
        host = f"[{address}]" if ":" in address else address
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    def consume(self, facts) -> None:
        record = facts.record
        self.snapshot.current = (record.plan.states, record.plan.slots, time.time(), record.gpu_usage)
        self.snapshot.cores = record.plan.cores
        for end in facts.ended:
            usage = end.usage or {}
            if usage.get("cpuSeconds") is not None:
                self.cpu_seconds.inc(usage["cpuSeconds"])
            if usage.get("peakMemoryBytes") is not None:
                self.peak_memory.observe(usage["peakMemoryBytes"])
        self.pass_duration.observe(record.duration)
        for started in facts.started:
            self.started.inc()
            self.queue_wait.observe(started.wait)
        for tr in facts.transitions:
            if tr.state.phase in FINISHED and tr.old_phase not in FINISHED:
                self.finished.labels(tr.state.phase).inc()
                if tr.state.phase == Phase.Failed:
                    self.failures.labels(tr.state.reason or "Error").inc()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
