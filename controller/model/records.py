"""The controller's record of one job, and its round trip to ``status/<name>.yaml``.

The status file *is* the record (as in Kubernetes): a restarted controller rebuilds its memory
from the status files, so every fact the controller needs later (generation, hashes, attempt,
failures, a stop in flight) is written there, visibly. Plain dataclasses: no validation cost on
the hot path; ``controller.api.status.JobStatus`` describes the same shape and tests check it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from controller import API_VERSION

SPEC_HASH = "gflow.dev/spec-hash"
RUN_HASH = "gflow.dev/run-hash"


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def from_rfc3339(text: Any) -> float | None:
    if not text:
        return None
    if isinstance(text, datetime):
        return text.timestamp()
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _shared(value: Any) -> Any:
    """One string object for text most records repeat ("Succeeded", "manifest is valid"): a parser
    makes a new one per file, and at 50,000 jobs the copies cost tens of MiB."""
    return sys.intern(value) if type(value) is str and len(value) <= 80 else value


def _shared_condition(condition: dict[str, Any]) -> dict[str, Any]:
    """A condition read back, its keys and short values shared (lastTransitionTime is the job's own)."""
    return {
        sys.intern(k) if type(k) is str else k: v if k == "lastTransitionTime" else _shared(v)
        for k, v in condition.items()
    }


def _plain(value: Any) -> Any:
    """``value`` with every str subclass (our StrEnums) as a plain, shared str, lists and dicts
    copied: data that ``marshal`` and ``json`` store as they are."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, str):
        return sys.intern(str.__str__(value))
    if kind is list or kind is tuple:
        return [_plain(v) for v in value]
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")


class FrozenConditions:
    """A finished job's conditions as the records journal keeps them: one flat tuple, five values a
    condition in ``CONDITION_KEYS`` order, read as the list of dicts it stands for. At 50,000 jobs
    the dicts cost ~480 bytes a job and this ~180 (their strings are shared either way). Read-only:
    a record is copied (``JobState.copy``: real dicts) before anything changes it, and every
    condition helper builds a new list."""

    __slots__ = ("flat",)

    def __init__(self, flat: tuple[Any, ...]) -> None:
        self.flat = flat

    def __len__(self) -> int:
        return len(self.flat) // 5

    def __bool__(self) -> bool:
        return bool(self.flat)

    def __iter__(self) -> Any:
        flat = self.flat
        for at in range(0, len(flat), 5):
            yield dict(zip(CONDITION_KEYS, flat[at : at + 5]))

    def __getitem__(self, index: int) -> dict[str, Any]:
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenConditions):
            return self.flat == other.flat
        return list(self) == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


def condition_verdicts(conditions: Any, types: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """(status, reason, message) of each condition whose type is one of ``types``, in order. On a
    finished job's ``FrozenConditions`` no dict is built: a restart asks this of 50,000 records."""
    if type(conditions) is FrozenConditions:
        flat = conditions.flat
        return [flat[at + 1 : at + 4] for at in range(0, len(flat), 5) if flat[at] in types]
    return [(c["status"], c["reason"], c["message"]) for c in conditions if c["type"] in types]


class FrozenMapping(Mapping[str, Any]):
    """A finished job's ``usage`` as the records journal keeps it: keys and values in one flat
    tuple (~130 bytes a job, a dict ~190), read as the mapping it stands for. Read-only, as above."""

    __slots__ = ("flat",)

    def __init__(self, flat: tuple[Any, ...]) -> None:
        self.flat = flat

    def __getitem__(self, key: str) -> Any:
        flat = self.flat
        for at in range(0, len(flat), 2):
            if flat[at] == key:
                return flat[at + 1]
        raise KeyError(key)

    def __iter__(self) -> Any:
        return iter(self.flat[::2])

    def __len__(self) -> int:
        return len(self.flat) // 2

    def __repr__(self) -> str:
        return repr(dict(self))


def _flat_conditions(conditions: Any) -> Any:
    """Conditions for a journal row: a flat tuple when each has exactly ``CONDITION_KEYS`` (in that
    order, so they read back as written), a time equal to the one before it the same string (one
    object: marshal stores it once); else the list as it is."""
    if type(conditions) is FrozenConditions:
        return conditions.flat
    flat: list[Any] = []
    for condition in conditions:
        if type(condition) is not dict or tuple(condition) != CONDITION_KEYS:
            return [_plain(c) for c in conditions]
        values = [_plain(v) for v in condition.values()]
        if len(flat) >= 5 and values[4] == flat[-1]:
            values[4] = flat[-1]
        flat.extend(values)
    return tuple(flat)


def _flat_mapping(mapping: Any) -> tuple[Any, ...]:
    if type(mapping) is FrozenMapping:
        return mapping.flat
    return tuple(_plain(x) for item in mapping.items() for x in item)


@dataclass(slots=True)  # no per-record __dict__: ~0.8 KiB less per job (50,000 jobs: ~40 MiB)
class JobState:
    name: str
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    manifest: str | None = None
    created: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    gpus: int = 0
    depends_on: list[str] = field(default_factory=list)  # the parents named in spec.dependsOn
    generation: int = 0
    spec_hash: str = ""
    run_hash: str = ""  # run hash of the spec the latest attempt ran with ("" = never ran)
    attempt: int = 0
    failed: int = 0
    ended_attempt: int = 0  # the latest attempt whose end this record holds: an exit seen again is not recounted
    devices: list[int] = field(default_factory=list)
    device_uuids: list[str] = field(default_factory=list)
    start_time: float | None = None
    completion_time: float | None = None
    next_attempt_time: float | None = None
    exit_code: int | None = None
    pid: int | None = None
    queue_position: int | None = None
    effective_priority: int | None = None  # while Pending: priority plus aging (controller/policy.py)
    conditions: list[dict[str, str]] = field(default_factory=list)
    owner: str | None = None  # the Sweep this job belongs to
    backend_id: str | None = None  # the backend's id of the latest attempt (backendJobId; slurmJobId before)
    node: str | None = None  # where the latest attempt runs or ran, on a cluster backend
    cpus: int = 0  # resources.cpus: whole cores asked for (0: none booked)
    cores: list[int] = field(default_factory=list)  # the cores bound to the latest attempt (its cpuset)
    usage: dict[str, Any] = field(default_factory=dict)  # the latest ended attempt's cgroup counters
    # the latest attempt's GPU usage as the status shows it (decide/gpu_usage.py: usage_summary);
    # replaced whole, never mutated, so copies may share it
    gpu_usage: dict[str, Any] | None = None
    idle_warning: float | None = None  # when the idleTimeout warning was given (once per idle spell)

    def copy(self) -> JobState:
        # runs per waiting job per pass of a flood (~15 a job): slot by slot, in one generated
        # function (_copy_slots), ~1.3 us; a getattr/setattr loop took ~4, dataclasses.replace ~10x that
        new = object.__new__(JobState)
        _copy_slots(self, new)
        new.labels = dict(self.labels)
        new.devices = list(self.devices)
        new.device_uuids = list(self.device_uuids)
        new.cores = list(self.cores)
        new.usage = dict(self.usage)
        new.conditions = [dict(c) for c in self.conditions]
        return new

    # -- records journal round trip (util/records_journal.py) --------------------------------------

    def to_row(self) -> tuple[Any, ...]:
        """Every field, in ``JOB_FIELDS`` order, as plain data (a StrEnum member as its text): the
        record as the journal stores it, no field names repeated; ``conditions`` and ``usage`` as
        flat tuples (``FrozenConditions``, ``FrozenMapping``), the hashes as shared strings (the
        manifest store holds the same ones)."""
        row = [_plain(getattr(self, name)) for name in JOB_FIELDS]
        row[_CONDITIONS] = _flat_conditions(self.conditions)
        row[_USAGE] = _flat_mapping(self.usage)
        row[_SPEC_HASH] = sys.intern(row[_SPEC_HASH])
        row[_RUN_HASH] = sys.intern(row[_RUN_HASH])
        for at in _EMPTY_AT:
            if not row[at]:
                row[at] = None  # read back as the shared empty one: no object to build and free per job
        return tuple(row)  # one allocation when read back (a list is two, its head among the records' strings)

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> JobState:
        """The record ``to_row`` gave (as the journal decoded it: its strings already shared). Empty
        lists and mappings are shared too: a record is never mutated, only copied (``copy``)."""
        if type(row) is not tuple or len(row) != len(JOB_FIELDS):
            raise ValueError(f"a journal row has {len(JOB_FIELDS)} fields")
        state = cls(*row)
        if type(state.conditions) is tuple:
            state.conditions = FrozenConditions(state.conditions) if state.conditions else []
        if type(state.usage) is tuple:
            state.usage = FrozenMapping(state.usage) if state.usage else {}
        for name in _EMPTY_SHARED:
            if not getattr(state, name):
                setattr(state, name, _EMPTY_SHARED[name])
        return state

    # -- status file round trip ----------------------------------------------------------------

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message,
            "devices": list(self.devices),
            "deviceUUIDs": list(self.device_uuids),
            "observedGeneration": self.generation,
            "manifest": self.manifest,
            "priority": self.priority,
            "gpus": self.gpus,
            "cpus": self.cpus or None,
            "cores": list(self.cores),
            "usage": dict(self.usage) or None,
            "dependsOn": list(self.depends_on),
            "attempt": self.attempt,
            "failed": self.failed,
            "endedAttempt": self.ended_attempt or None,
            "startTime": rfc3339(self.start_time),
            "completionTime": rfc3339(self.completion_time),
            "nextAttemptTime": rfc3339(self.next_attempt_time),
            "exitCode": self.exit_code,
            "pid": self.pid,
            "backendJobId": self.backend_id,
            "node": self.node,
            "queuePosition": self.queue_position,
            "effectivePriority": self.effective_priority if self.phase == "Pending" else None,
            "conditions": [dict(c) for c in self.conditions],
            "gpuUsage": self.gpu_usage,
            "idleWarningTime": rfc3339(self.idle_warning),
        }
        status = {k: v for k, v in status.items() if (v is not None and v != []) or k in ("devices", "conditions")}
        meta: dict[str, Any] = {"name": self.name, "creationTimestamp": rfc3339(self.created)}
        if self.labels:
            meta["labels"] = dict(self.labels)
        meta["annotations"] = {SPEC_HASH: self.spec_hash, RUN_HASH: self.run_hash}
        if self.owner:
            meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "Sweep", "name": self.owner}]
        return {"apiVersion": API_VERSION, "kind": "JobStatus", "metadata": meta, "status": status}

    @classmethod
    def from_status(cls, data: dict[str, Any]) -> JobState:
        meta = data.get("metadata") or {}
        status = data.get("status") or {}
        annotations = meta.get("annotations") or {}
        return cls(
            name=str(meta["name"]),
            phase=_shared(status.get("phase", "Pending")),
            reason=_shared(status.get("reason", "")),
            message=_shared(status.get("message", "")),
            manifest=status.get("manifest"),
            created=from_rfc3339(meta.get("creationTimestamp")) or 0.0,
            labels=dict(meta.get("labels") or {}),
            priority=int(status.get("priority", 0)),
            gpus=int(status.get("gpus", 0)),
            cpus=int(status.get("cpus") or 0),
            cores=[int(c) for c in status.get("cores") or []],
            usage=dict(status.get("usage") or {}),
            depends_on=[str(d) for d in status.get("dependsOn") or []],
            generation=int(status.get("observedGeneration", 0)),
            spec_hash=str(annotations.get(SPEC_HASH, "")),
            run_hash=str(annotations.get(RUN_HASH, "")),
            attempt=int(status.get("attempt", 0)),
            failed=int(status.get("failed", 0)),
            ended_attempt=int(status.get("endedAttempt") or 0),
            devices=[int(d) for d in status.get("devices") or []],
            device_uuids=[str(u) for u in status.get("deviceUUIDs") or []],
            start_time=from_rfc3339(status.get("startTime")),
            completion_time=from_rfc3339(status.get("completionTime")),
            next_attempt_time=from_rfc3339(status.get("nextAttemptTime")),
            exit_code=status.get("exitCode"),
            pid=status.get("pid"),
            backend_id=_text_or_none(
                status.get("backendJobId") or status.get("slurmJobId")
            ),  # slurmJobId: written by older gflowds
            node=status.get("node"),
            queue_position=status.get("queuePosition"),
            effective_priority=status.get("effectivePriority"),
            conditions=[_shared_condition(c) for c in status.get("conditions") or []],
            owner=next((o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Sweep"), None),
            gpu_usage=dict(status["gpuUsage"]) if isinstance(status.get("gpuUsage"), dict) else None,
            idle_warning=from_rfc3339(status.get("idleWarningTime")),
        )

    def summary(self) -> dict[str, Any]:
        """The row ``gflowctl get jobs`` shows, kept in the index file."""
        row = {
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message,
            "gpus": self.gpus,
            "cpus": self.cpus or None,
            "devices": self.devices,
            "priority": self.priority,
            "created": self.created,
            "labels": self.labels,
            "manifest": self.manifest,
            "attempt": self.attempt,
            "exitCode": self.exit_code,
            "startTime": self.start_time,
            "completionTime": self.completion_time,
            "generation": self.generation,
            "queuePosition": self.queue_position,
            "effectivePriority": self.effective_priority if self.phase == "Pending" else None,
            "owner": self.owner,
            "dependsOn": self.depends_on or None,
        }
        if self.gpu_usage:  # get jobs -o wide's UTIL, stats' GPU-hours used
            row["gpuUtil"] = self.gpu_usage.get("utilMean")
            row["gpuHoursUsed"] = self.gpu_usage.get("gpuHoursUsed")
        return row


JOB_FIELDS: tuple[str, ...] = JobState.__slots__  # the field order of a journal row


def _slot_copier() -> Callable[[JobState, JobState], None]:
    """``copy_slots(old, new)``: every slot of ``old`` assigned to ``new``, as straight-line code
    generated from ``JOB_FIELDS`` (the way dataclasses generate ``__init__``)."""
    source = "def copy_slots(old, new):\n" + "".join(f"    new.{name} = old.{name}\n" for name in JOB_FIELDS)
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # the source is made of our own field names only
    copier: Callable[[JobState, JobState], None] = namespace["copy_slots"]
    return copier


_copy_slots = _slot_copier()
# One empty container per field for records read back: 50,000 finished jobs need no 250,000 of them.
# Safe because a record is copied (new containers) before anything changes it.
_EMPTY_SHARED: dict[str, Any] = {
    "labels": {},
    "depends_on": [],
    "devices": [],
    "device_uuids": [],
    "cores": [],
    "usage": {},
    "conditions": [],
}
_EMPTY_AT = tuple(JOB_FIELDS.index(name) for name in _EMPTY_SHARED)
_CONDITIONS, _USAGE = JOB_FIELDS.index("conditions"), JOB_FIELDS.index("usage")
_SPEC_HASH, _RUN_HASH = JOB_FIELDS.index("spec_hash"), JOB_FIELDS.index("run_hash")
ROW_AT: dict[str, int] = {name: at for at, name in enumerate(JOB_FIELDS)}  # a field's place in a journal row


def shared_empty(name: str) -> Any:
    """The one empty container records share for field ``name`` (``labels``, ``devices``...), as
    ``from_row`` and ``row_value`` give it."""
    return _EMPTY_SHARED[name]


def row_value(row: tuple[Any, ...], name: str) -> Any:
    """Field ``name`` of a journal row as ``JobState.from_row`` would set it (an empty container
    the shared one), without building the record."""
    value = row[ROW_AT[name]]
    if not value and name in _EMPTY_SHARED:
        return _EMPTY_SHARED[name]
    return value


def _record_document(kind: str, record: Any, own: dict[str, Any]) -> dict[str, Any]:
    """The status document of a Sweep's or a Reservation's record: what every such record has, then ``own``."""
    meta: dict[str, Any] = {"name": record.name, "creationTimestamp": rfc3339(record.created)}
    if record.labels:
        meta["labels"] = dict(record.labels)
    meta["annotations"] = {SPEC_HASH: record.spec_hash}
    status = {
        "phase": record.phase,
        "reason": record.reason,
        "message": record.message,
        "observedGeneration": record.generation,
        "manifest": record.manifest,
        **own,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": meta,
        "status": {k: v for k, v in status.items() if v is not None},
    }


def _record_fields(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields every Sweep or Reservation record has, read back from its status document, and the
    document's ``status`` for the rest."""
    meta = data.get("metadata") or {}
    status = data.get("status") or {}
    common = {
        "name": str(meta["name"]),
        "phase": status.get("phase", "Pending"),
        "reason": status.get("reason", ""),
        "message": status.get("message", ""),
        "manifest": status.get("manifest"),
        "created": from_rfc3339(meta.get("creationTimestamp")) or 0.0,
        "labels": dict(meta.get("labels") or {}),
        "generation": int(status.get("observedGeneration", 0)),
        "spec_hash": str((meta.get("annotations") or {}).get(SPEC_HASH, "")),
    }
    return common, status


def _record_summary(record: Any) -> dict[str, Any]:
    return {
        "phase": record.phase,
        "reason": record.reason,
        "message": record.message,
        "created": record.created,
        "labels": record.labels,
        "manifest": record.manifest,
    }


@dataclass
class SweepState:
    """The record of one Sweep: its children counted by phase (``status/<sweep>.yaml``)."""

    name: str
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    manifest: str | None = None
    created: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    parallelism: int | None = None
    generation: int = 0
    spec_hash: str = ""

    def to_status(self) -> dict[str, Any]:
        return _record_document(
            "SweepStatus",
            self,
            {
                "children": len(self.children),
                "counts": dict(self.counts),
                "parallelism": self.parallelism,
                "childNames": list(self.children),
            },
        )

    @classmethod
    def from_status(cls, data: dict[str, Any]) -> SweepState:
        common, status = _record_fields(data)
        return cls(
            **common,
            children=[str(c) for c in status.get("childNames") or []],
            counts={str(k): int(v) for k, v in (status.get("counts") or {}).items()},
            parallelism=status.get("parallelism"),
        )

    def summary(self) -> dict[str, Any]:
        return {
            **_record_summary(self),
            "children": len(self.children),
            "counts": dict(self.counts),
            "parallelism": self.parallelism,
        }


@dataclass
class ReservationState:
    """The record of one Reservation (``status/<name>.yaml``, kind ReservationStatus): its window as
    resolved (``+1h`` counts from ``created``), the GPUs it holds, and where it stands."""

    name: str
    phase: str = "Pending"  # Pending | Active | Expired | Rejected
    reason: str = ""
    message: str = ""
    manifest: str | None = None
    created: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    users: list[str] = field(default_factory=list)
    devices: list[int] = field(default_factory=list)
    start: float | None = None
    end: float | None = None
    generation: int = 0
    spec_hash: str = ""
    completion_time: float | None = None  # when it expired: its TTL counts from here

    def to_status(self) -> dict[str, Any]:
        return _record_document(
            "ReservationStatus",
            self,
            {
                "users": list(self.users),
                "devices": list(self.devices),
                "start": rfc3339(self.start),
                "end": rfc3339(self.end),
                "completionTime": rfc3339(self.completion_time),
            },
        )

    @classmethod
    def from_status(cls, data: dict[str, Any]) -> ReservationState:
        common, status = _record_fields(data)
        return cls(
            **common,
            users=[str(u) for u in status.get("users") or []],
            devices=[int(d) for d in status.get("devices") or []],
            start=from_rfc3339(status.get("start")),
            end=from_rfc3339(status.get("end")),
            completion_time=from_rfc3339(status.get("completionTime")),
        )

    def summary(self) -> dict[str, Any]:
        """The row ``gflowctl get reservations`` shows, kept in the index file."""
        return {
            **_record_summary(self),
            "users": list(self.users),
            "devices": list(self.devices),
            "start": self.start,
            "end": self.end,
        }
