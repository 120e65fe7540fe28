"""The JobStatus model (``status/<name>.yaml``): the shape the controller writes, for the docs and tests.

The controller builds statuses as plain dicts (fast, no validation on the hot path); this model
documents and checks their shape (``crd-schemas/``, tests). The condition semantics live in
``controller.model.conditions``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from controller.api.job import _Model

Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Cancelled", "Rejected"]
PHASES: tuple[str, ...] = ("Pending", "Running", "Succeeded", "Failed", "Cancelled", "Rejected")


class Condition(_Model):
    type: str = Field(description="CamelCase: Admitted, Scheduled, Terminating, SpecOutdated, ...")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(description="CamelCase, one word")
    message: str = ""
    last_transition_time: str = Field(description="RFC 3339, when status last changed")


class StatusMeta(_Model):
    name: str
    creation_timestamp: str | None = Field(default=None, description="When the controller first saw the job")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Controller bookkeeping (gflow.dev/spec-hash, gflow.dev/run-hash)"
    )


class Usage(_Model):
    """What the latest ended attempt used, from its cgroup (docs/cgroups.md); ``gpuUsage`` is apart."""

    cpu_seconds: float | None = Field(
        default=None, description="CPU time of all its processes (cgroup cpuacct / cpu.stat)"
    )
    peak_memory_bytes: int | None = Field(
        default=None, description="Peak memory the kernel charged it (without cgroups: the largest RSS polled)"
    )


class GpuUsageOfGpu(_Model):
    index: int = Field(description="NVML index of a bound GPU")
    util_mean: float = Field(description="Mean utilization by the job's processes over the samples, percent")
    util_peak: int = Field(description="Highest sampled utilization, percent")
    memory_mean: int = Field(description="Mean GPU memory of the job's processes, bytes")
    memory_peak: int = Field(description="Highest sampled GPU memory of the job's processes, bytes")


class GpuUsage(_Model):
    """The latest attempt's GPU usage, sampled from NVML (docs/gpu-usage.md)."""

    attempt: int = Field(description="The attempt these numbers are about")
    sampled_at: str = Field(description="RFC 3339 time of the newest sample counted (refreshed about every minute)")
    samples: int = Field(description="How many samples were taken")
    util_mean: float = Field(description="Mean utilization over the bound GPUs, percent (get jobs -o wide: UTIL)")
    gpu_hours_allocated: float = Field(description="Bound GPUs x hours from the attempt's start")
    gpu_hours_used: float = Field(description="Utilization-weighted GPU-hours: the sum of utilization x sampled time")
    gpus: list[GpuUsageOfGpu] = Field(default_factory=list)


class JobStatusFields(_Model):
    phase: Phase
    reason: str = Field(description="CamelCase, one word: why the job is in this phase")
    message: str = Field(default="", description="One human sentence with the numbers that matter")
    devices: list[int] = Field(
        default_factory=list,
        description="NVML indices assigned (CUDA_VISIBLE_DEVICES); kept after the job ends, to show where it ran",
    )
    device_uuids: list[str] = Field(default_factory=list, alias="deviceUUIDs", description="NVML UUIDs of devices")
    observed_generation: int = Field(description="Bumps when the manifest's spec changes")
    manifest: str | None = Field(default=None, description="The manifest file, relative to GFLOW_HOME")
    priority: int = 0
    gpus: int = 0
    cpus: int | None = Field(default=None, description="spec.resources.cpus: whole cores booked")
    cores: list[int] = Field(default_factory=list, description="The cores the latest attempt is pinned to (its cpuset)")
    usage: Usage | None = Field(default=None, description="CPU time and peak memory of the latest ended attempt")
    depends_on: list[str] = Field(
        default_factory=list,
        alias="dependsOn",
        description="The jobs this one waits for (spec.dependsOn), for get jobs --tree",
    )
    attempt: int = Field(default=0, description="1 for the first run, +1 per retry or rerun")
    failed: int = Field(default=0, description="Failed attempts of this generation")
    ended_attempt: int = Field(
        default=0,
        description="The latest attempt whose end is recorded here (so an exit seen again after a crash is not counted twice)",
    )
    start_time: str | None = None
    completion_time: str | None = None
    next_attempt_time: str | None = Field(default=None, description="When a retry after a failure may start")
    exit_code: int | None = None
    pid: int | None = None
    backend_job_id: str | None = Field(
        default=None, description="A cluster backend (Slurm): its job id of the latest attempt"
    )
    node: str | None = Field(default=None, description="Slurm backend: the node the latest attempt runs or ran on")
    queue_position: int | None = Field(default=None, description="1-based position in the queue, while Pending")
    effective_priority: int | None = Field(
        default=None, description="While Pending: priority plus what aging added (docs/scheduling.md)"
    )
    conditions: list[Condition] = Field(default_factory=list)
    gpu_usage: GpuUsage | None = Field(default=None, description="The latest attempt's GPU usage (jobs with GPUs)")
    idle_warning_time: str | None = Field(
        default=None, description="When the idleTimeout warning of the current idle spell was given"
    )


class JobStatus(_Model):
    """Observed state of one Job, written only by the controller."""

    api_version: Literal["gflow.dev/v1alpha1"] = "gflow.dev/v1alpha1"
    kind: Literal["JobStatus"] = "JobStatus"
    metadata: StatusMeta
    status: JobStatusFields
