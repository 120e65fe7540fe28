"""What one pass sees and what it decides: the :class:`Snapshot` observe builds, the :class:`Plan`
decide returns, and the records between them (a run as the runtime sees it, a launch, a stop, an
event). Plain data; the phases that make and read them are ``observe``, ``decide``, ``act``,
``record``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from types import MappingProxyType
from typing import Any

from controller.model.documents import AdmissionResult, AdmittedJob, AdmittedReservation, Rejection
from controller.model.gpus import Cordon, Gpu
from controller.model.policy import Policy
from controller.model.records import JobState, ReservationState, SweepState
from controller.model.scheduling import CorePool, GpuSlot
from controller.model.usage import AttemptUsage, UsageSettings

DEFAULT_GRACE = 10.0
GIB = 2**30


@dataclass(frozen=True)
class RunObservation:
    """What the runtime knows about a job's current process (one attempt)."""

    name: str
    attempt: int
    pid: int | None
    started_at: float
    running: bool
    exit_code: int | None = None  # 128+N when killed by signal N
    signal: int | None = None
    finished_at: float | None = None
    error: str = ""  # the process could not be started at all (e.g. command not found)
    lost: bool = False  # it ended unobserved: its exit code is unknown
    reason: str = ""  # the runtime's own enforcement: DeadlineExceeded | OOMKilled
    devices: tuple[int, ...] = ()  # as bound at the decision: survives a controller crash
    device_uuids: tuple[str, ...] = ()
    run_hash: str = ""  # the spec this attempt runs, as admission hashed it
    # the job's failed attempts when this one was decided: a gflowd killed after the launch record and
    # before the status adopts this attempt with the retries used before it, not with the older count
    failed_before: int = 0
    # A cluster backend (Slurm) only: the attempt is handed over but waits in the cluster's queue
    # (``queued``: why, e.g. Resources, Priority; ``message``: the cluster's words), or runs on ``node``.
    queued: str = ""
    message: str = ""
    node: str = ""
    external_id: str = ""  # the cluster's id of the attempt (a Slurm job id)
    stop_reason: str = ""  # the stop request the supervisor acted on (a StopReason)
    # The local runtime could not record the launch (a full disk: ``queued`` says DiskFull) and
    # retries it: nothing runs yet. Shown Pending, like a cluster's queue, keeping its GPUs.
    held: bool = False
    last_input: float | None = None  # a tty job: wall time of its terminal's last input (idleTimeout)
    # an ended attempt's cgroup counters: {cpuSeconds, peakMemoryBytes} (peak polled without cgroups)
    usage: dict[str, Any] | None = None
    # spec.checkpoint's handshake, as the supervisor recorded it (shim/checkpoint.py: Handshake.record)
    checkpoint: dict[str, Any] | None = None
    # a failed attempt's facts for its classification (``model/failures.py``): its cgroup's OOM kill
    # count, the last lines of its log (``log_first_line``: the first's number in the log, 0 unknown)
    oom_kills: int | None = None
    log_tail: tuple[str, ...] = ()
    log_first_line: int = 1
    python: str = ""  # the python the job ran (its command's, else its PATH's): named when a module is missing


@dataclass(frozen=True)
class Launch:
    name: str
    attempt: int
    generation: int
    job: AdmittedJob
    devices: list[int]
    device_uuids: list[str]
    cpus: tuple[int, ...] = ()  # the cores bound to it (resources.cpus): its cpuset
    device_minors: tuple[int, ...] = ()  # the bound GPUs' /dev/nvidiaN minor numbers (devices cgroup)
    gpu_minors: tuple[int, ...] = ()  # every GPU's minor in the inventory: the others are denied
    failed: int = 0  # the job's failed attempts when this one was decided (kept with the launch: see RunObservation)
    vendor: str = "nvidia"  # its GPUs' vendor (one job never mixes them): which runtime variables it gets
    local_devices: tuple[int, ...] = ()  # its GPUs' indices in the vendor's runtime (ROCR_VISIBLE_DEVICES)
    amd_minors: tuple[int, ...] = ()  # its AMD GPUs' /dev/dri/renderD<minor> minors (devices cgroup)
    amd_gpu_minors: tuple[int, ...] = ()  # every AMD GPU's render minor: the others are denied
    resume: bool = False  # an earlier attempt confirmed a checkpoint (condition Checkpointed): GFLOW_RESUME=1
    mig_ids: tuple[tuple[int, int, int], ...] = ()  # its MIG instances' (parent minor, GI id, CI id): their caps
    mig_known: tuple[tuple[int, int, int], ...] = ()  # every MIG instance's: the others' caps are denied


@dataclass(frozen=True)
class Stop:
    name: str
    reason: str  # a controller.model.reasons.StopReason
    grace: float


@dataclass(frozen=True)
class Event:
    type: str  # EventType: Normal | Warning
    reason: str
    object: str
    message: str
    kind: str = "job"


@dataclass(frozen=True)
class Notice:
    """A line for the people at a job's terminal (a tty job's attached viewers), e.g. an idle warning."""

    name: str
    text: str


@dataclass(frozen=True)
class Manifests:
    """The spec dir's documents as observe found them, for admission."""

    documents: Iterable[AdmittedJob | Rejection] = ()  # every document (iterated only for a full admission)
    gone: list[AdmittedJob | Rejection] = field(default_factory=list)  # since the previous pass...
    came: list[AdmittedJob | Rejection] = field(default_factory=list)  # ...left and came
    full: bool = True  # a resync: admit every document afresh


@dataclass(frozen=True)
class Host:
    """What decide needs to know about the machine, read by observe (``controller.observe.host``),
    so that deciding never asks the system itself."""

    controller_uid: int | None = None  # gflowd's euid: not root runs only its own user's manifests
    conda_available: bool = True  # whether ``condaEnv`` can work here
    user_names: dict[int, str] = field(default_factory=dict)  # manifest owner uid -> name (quotas)
    local_tz: tzinfo = UTC  # how a ``startAfter`` without an offset is read
    cores: frozenset[int] = frozenset()  # the CPU cores jobs may be pinned to (gflowd's affinity); empty: not booked
    capacity: dict[str, int] = field(default_factory=dict)  # counted kind -> the machine's amount (model/resources.py)
    # user names a Reservation lists -> uid; None: no such user (Rejected). A name not looked up is absent.
    user_ids: dict[str, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueMemo:
    """What the last pass's queue decided and from what (``decide/queue.py``): while nothing the
    queue reads has moved, the next pass carries these waiting jobs' records over instead of
    deciding 10,000 of them again."""

    records: Mapping[str, JobState]  # each waiting job's record, as that pass left it
    slots: Sequence[GpuSlot]  # the GPUs and their holders the queue saw
    inputs: tuple[object, ...]  # the snapshot's settings the queue reads (policy, GPUs, host, ...)
    wake_at: float | None  # a time gate (startAfter, backoff, aging) opens: decide again
    # A flood's tail instead (``decide/queue.py`` ``carried_tail``): ``records`` are then the waiting
    # jobs held back only by maxRunningCpuJobs, ``tail`` their queue entries (``QueueEntry``) in
    # queue order, valid until ``tail_until`` (aging); ``tail_priority``: owner uid -> their one
    # effective priority. Empty: ``records`` are the whole queue, as above.
    tail: tuple[Any, ...] = ()
    tail_until: float = math.inf
    tail_priority: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """Everything one pass decides from. ``admission`` is None when gflowd builds it: decide then
    admits ``manifests`` first; tests and benchmarks of the later steps may hand one in. Frozen:
    a variant is ``dataclasses.replace(snap, ...)``."""

    admission: AdmissionResult | None
    states: Mapping[str, JobState]  # a dict, or an Overlay of the previous pass's (model/overlay.py)
    runs: Mapping[str, RunObservation]
    gpus: Sequence[Gpu] = ()
    allowed_gpus: AbstractSet[int] | None = None
    cordoned: Mapping[int, Cordon] = field(default_factory=dict)  # GPU index -> an admin's cordon or drain
    job_pids: Mapping[str, AbstractSet[int]] = field(default_factory=dict)  # running job -> its process tree
    strategy: str = "sequential"
    topology: Mapping[tuple[int, int], int] = field(default_factory=dict)
    unmanaged_threshold: int = GIB
    ignore_processes: frozenset[str] = frozenset()
    default_grace: float = DEFAULT_GRACE
    sweep_states: Mapping[str, SweepState] = field(default_factory=dict)
    previous: AdmissionResult | None = None  # the last pass's admission: unchanged finished jobs are skipped
    unsettled: AbstractSet[str] | None = None  # the last plan's ``unsettled`` for these states; None: find them
    max_starts: int = 32  # per pass: a flood of jobs starts over several passes, each recorded and interruptible
    default_ttl: float | None = None  # seconds a finished job is kept, when its spec does not say
    finished_history: int | None = None  # at most this many finished jobs are kept
    bind_gpus: bool = True  # False: a cluster backend (Slurm) allocates GPUs; admitted jobs go to it unbound
    policy: Policy = field(default_factory=Policy)  # backfill, aging, fair share, quotas (decide/policy.py)
    manifests: Manifests = field(default_factory=Manifests)
    host: Host = field(default_factory=Host)
    serial: int = 0  # the pass's number: names its admission, so the next pass knows what it patched
    gpu_usage: Mapping[str, AttemptUsage] = field(default_factory=dict)  # running attempts' sampled GPU usage
    usage_settings: UsageSettings = field(default_factory=UsageSettings)  # windows of GPUsUnused, GPUIdle, idleTimeout
    reservation_states: Mapping[str, ReservationState] = field(default_factory=dict)
    queue_memo: QueueMemo | None = None  # the last plan's: waiting jobs nothing has moved are carried over
    parked: Mapping[int, frozenset[str]] | None = None  # the last plan's: each owner's backlog beyond its queue head
    reclaimed: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # job -> gpu_leaks.Reclaim killed now

    @property
    def admitted(self) -> AdmissionResult:
        """The admission every step after ``decide()``'s first reads (it admits the snapshot first)."""
        if self.admission is None:
            raise ValueError("this snapshot is not admitted yet: decide() admits it first")
        return self.admission


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Plan:
    """What one pass decided, as ``decide`` returns it: frozen, its lists tuples and its tables
    read-only, so act and record carry it out and write it down without changing it. What act
    learns (the pids its starts got, a held launch) comes back as an :class:`ActResult`, which
    ``decide/acted.py`` folds into a new Plan for record. ``states``, ``unsettled`` and
    ``looked_at`` are typed read-only but are the dict (or Overlay) and sets the pass built, not
    copies: they hold every waiting name (copying two sets of 10,000 cost ~2 ms, ~5 % of a pass),
    nothing else holds them once decide returns, and the next pass layers its own over them."""

    states: Mapping[str, JobState] = field(default_factory=_empty)  # every job that still exists
    starts: tuple[Launch, ...] = ()
    stops: tuple[Stop, ...] = ()
    consumed: tuple[str, ...] = ()  # exited runs now recorded: runtime may forget them
    time_limits: Mapping[str, float | None] = field(default_factory=_empty)  # running job -> current timeLimit
    removed: tuple[str, ...] = ()  # jobs whose manifest is gone: drop their status
    events: tuple[Event, ...] = ()
    notices: tuple[Notice, ...] = ()  # shown on tty jobs' terminals (Runtime.notify)
    slots: tuple[GpuSlot, ...] = ()  # GPUs as this pass leaves them (node.yaml)
    cores: CorePool | None = None  # CPU cores as this pass leaves them (node.yaml); None: not booked
    sweeps: Mapping[str, SweepState] = field(default_factory=_empty)  # every sweep that still exists
    removed_sweeps: tuple[str, ...] = ()
    # finished jobs (and expired reservations) whose manifests to delete
    expired: tuple[AdmittedJob | AdmittedReservation, ...] = ()
    wake_at: float | None = None  # the next time a pass is due even if nothing changes
    again: bool = False  # a decision here unblocks others (e.g. a dependency ended): pass again now
    unsettled: AbstractSet[str] = frozenset()  # jobs not finished or rejected: the next Snapshot's
    looked_at: AbstractSet[str] = frozenset()  # every other record is carried over unchanged
    admission: AdmissionResult | None = None  # what this pass admitted: the next Snapshot's ``previous``
    reservations: Mapping[str, ReservationState] = field(default_factory=_empty)  # every reservation that still exists
    removed_reservations: tuple[str, ...] = ()
    queue_memo: QueueMemo | None = None  # the waiting jobs this pass decided: the next Snapshot's
    parked: Mapping[int, frozenset[str]] = field(
        default_factory=_empty
    )  # owner uid -> waiting jobs carried as they are


@dataclass(eq=False)  # never compared: one less generated method at gflowd's start
class PlanDraft:
    """The :class:`Plan` decide builds step by step (its steps append and update in place), frozen
    by :meth:`freeze` when ``decide`` returns. Decide's own: nothing after decide sees a draft."""

    states: MutableMapping[str, JobState] = field(
        default_factory=dict
    )  # every job that still exists (a dict or an Overlay)
    starts: list[Launch] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)
    time_limits: dict[str, float | None] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    slots: list[GpuSlot] = field(default_factory=list)
    cores: CorePool | None = None
    sweeps: dict[str, SweepState] = field(default_factory=dict)
    removed_sweeps: list[str] = field(default_factory=list)
    expired: list[AdmittedJob | AdmittedReservation] = field(default_factory=list)
    wake_at: float | None = None
    again: bool = False
    unsettled: set[str] = field(default_factory=set)
    looked_at: set[str] = field(default_factory=set)
    admission: AdmissionResult | None = None
    reservations: dict[str, ReservationState] = field(default_factory=dict)
    removed_reservations: list[str] = field(default_factory=list)
    queue_memo: QueueMemo | None = None
    parked: dict[int, frozenset[str]] = field(default_factory=dict)

    def wake(self, when: float) -> None:
        self.wake_at = when if self.wake_at is None else min(self.wake_at, when)

    def freeze(self) -> Plan:
        """The plan as decide returns it: lists become tuples (what one pass decided: small), tables
        are wrapped read-only; ``states`` and the two name sets are handed on as they are (see
        :class:`Plan`)."""
        return Plan(
            states=self.states,
            starts=tuple(self.starts),
            stops=tuple(self.stops),
            consumed=tuple(self.consumed),
            time_limits=MappingProxyType(self.time_limits),
            removed=tuple(self.removed),
            events=tuple(self.events),
            notices=tuple(self.notices),
            slots=tuple(self.slots),
            cores=self.cores,
            sweeps=MappingProxyType(self.sweeps),
            removed_sweeps=tuple(self.removed_sweeps),
            expired=tuple(self.expired),
            wake_at=self.wake_at,
            again=self.again,
            unsettled=self.unsettled,
            looked_at=self.looked_at,
            admission=self.admission,
            reservations=MappingProxyType(self.reservations),
            removed_reservations=tuple(self.removed_reservations),
            queue_memo=self.queue_memo,
            parked=MappingProxyType(self.parked),
        )


@dataclass(frozen=True)
class StartFact:
    """What the runtime said of one start right after it, as act reports it: the pid (and a
    cluster's job id) the attempt got, or ``held``: its launch could not be recorded, nothing runs
    (``reason`` and ``message``: the runtime's why, e.g. DiskFull). ``decide/acted.py`` folds it
    into the job's record."""

    name: str
    pid: int | None = None
    backend_id: str | None = None
    failed: bool = False  # it could not start at all (an exited observation already)
    held: bool = False
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class ActResult:
    """What act did and learned while carrying a plan out: nothing in the plan is changed."""

    started: tuple[StartFact, ...] = ()  # per start, in the plan's order (a start the runtime did not report: none)
    again: bool = False  # a start failed at once, or manifests were removed: pass again now
    pruned: tuple[str, ...] = ()  # manifest files changed (expired jobs cut out)
    starts_began: float = 0.0  # perf_counter when the starts began: what came before was deciding
    start_cost: float | None = None  # seconds per start in this pass (None: nothing started)


@dataclass
class Memory:
    """What the loop keeps from one pass for the next: the records as decided, and what they were
    decided from (the next pass patches that admission and looks only at what may have moved)."""

    states: Mapping[str, JobState] = field(default_factory=dict)
    sweep_states: Mapping[str, SweepState] = field(default_factory=dict)
    admission: AdmissionResult | None = None
    unsettled: AbstractSet[str] | None = None
    reservation_states: Mapping[str, ReservationState] = field(default_factory=dict)
    queue_memo: QueueMemo | None = None
    parked: Mapping[int, frozenset[str]] | None = None

    @classmethod
    def loaded(
        cls,
        states: Mapping[str, JobState],
        sweeps: dict[str, SweepState],
        reservations: dict[str, ReservationState],
    ) -> Memory:
        """What a starting gflowd knows: the records its status files hold."""
        return cls(states, sweeps, reservation_states=reservations)

    @classmethod
    def after(cls, plan: Plan) -> Memory:
        return cls(
            plan.states, plan.sweeps, plan.admission, plan.unsettled, plan.reservations, plan.queue_memo, plan.parked
        )
