"""The typed objects the Python client returns: a Job, a Sweep, a GPU, made from the same rows
and status documents ``gflowctl get`` prints (``controller.client.read.state`` reads them). Plain
dataclasses, standard library only; times are epoch seconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FINISHED = ("Succeeded", "Failed", "Cancelled")


@dataclass(frozen=True)
class Job:
    """One job as the controller last recorded it (``status/<name>.yaml``)."""

    name: str
    phase: str
    reason: str = ""
    message: str = ""
    gpus: int = 0
    devices: list[int] = field(default_factory=list)
    priority: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    attempt: int = 0
    exit_code: int | None = None
    created: float | None = None
    start_time: float | None = None
    completion_time: float | None = None
    queue_position: int | None = None
    sweep: str | None = None  # the Sweep that owns it
    manifest: str | None = None
    depends_on: list[str] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)  # with get(); list() leaves it empty

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @classmethod
    def from_row(cls, name: str, row: dict[str, Any], conditions: list[dict[str, Any]] | None = None) -> Job:
        """From the summary row of the index (``gflowctl get jobs``' row)."""
        return cls(
            name=name,
            phase=str(row.get("phase") or "Pending"),
            reason=str(row.get("reason") or ""),
            message=str(row.get("message") or ""),
            gpus=int(row.get("gpus") or 0),
            devices=[int(d) for d in row.get("devices") or []],
            priority=int(row.get("priority") or 0),
            labels=dict(row.get("labels") or {}),
            attempt=int(row.get("attempt") or 0),
            exit_code=row.get("exitCode"),
            created=row.get("created"),
            start_time=row.get("startTime"),
            completion_time=row.get("completionTime"),
            queue_position=row.get("queuePosition"),
            sweep=row.get("owner"),
            manifest=row.get("manifest"),
            depends_on=[str(d) for d in row.get("dependsOn") or []],
            conditions=list(conditions or []),
        )

    @classmethod
    def from_status(cls, document: dict[str, Any]) -> Job:
        """From a whole status document (conditions included)."""
        from controller.model.records import JobState  # lazy: only get() reads a whole status

        state = JobState.from_status(document)
        return cls.from_row(state.name, state.summary(), state.conditions)


@dataclass(frozen=True)
class Sweep:
    """A Sweep: its children counted by phase."""

    name: str
    phase: str
    reason: str = ""
    message: str = ""
    children: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    parallelism: int | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @classmethod
    def from_status(cls, document: dict[str, Any]) -> Sweep:
        from controller.model.records import SweepState  # lazy: only get() of a sweep reads one

        state = SweepState.from_status(document)
        return cls(
            state.name,
            state.phase,
            state.reason,
            state.message,
            list(state.children),
            dict(state.counts),
            state.parallelism,
            dict(state.labels),
        )


@dataclass(frozen=True)
class Gpu:
    """One GPU of ``node.yaml``; ``state`` is Free, Allocated, Shared, Unmanaged, Restricted or Unhealthy."""

    index: int
    name: str
    state: str
    memory: str | None = None
    memory_used: str | None = None
    utilization: int | None = None
    uuid: str | None = None
    jobs: list[str] = field(default_factory=list)

    @classmethod
    def from_node(cls, gpu: dict[str, Any]) -> Gpu:
        return cls(
            index=int(gpu.get("index", -1)),
            name=str(gpu.get("name") or ""),
            state=str(gpu.get("state") or ""),
            memory=gpu.get("memory"),
            memory_used=gpu.get("memoryUsed"),
            utilization=gpu.get("utilization"),
            uuid=gpu.get("uuid"),
            jobs=[str(j) for j in gpu.get("jobs") or []],
        )


@dataclass(frozen=True)
class Submitted:
    """What ``apply``/``submit``/``sweep`` wrote: ``verb`` is created, configured or unchanged;
    ``warning`` e.g. that the job can never start on this machine."""

    kind: str  # job | sweep
    name: str
    verb: str
    warning: str | None = None
