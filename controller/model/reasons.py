"""The words of statuses, events and stop requests: phases, reasons and condition types.

StrEnums: a member *is* its text (it compares, hashes, prints and serialises as the string), so
status files, the index and events read exactly as before, and a typo is an AttributeError
instead of a status nobody matches.

``Phase``, ``Reason`` and ``Condition`` are also *the* tables of what each word means, one row
per member: a phase says whether it is terminal; a reason says in which phases a job shows it,
whether gflowd stops an attempt for it (``StopReason`` is that subset, derived), whether it is one
of the queue's answers or announced as a Warning, the fix a user needs (the explanation of a
waiting job, ``client/explain.py``); each has its line in docs/reasons.md. Everything else is
derived from these rows: ``TERMINAL_PHASES``, the reasons ``gflow_jobs_pending`` serves from the
first scrape (``sinks/metrics.py``), the recorder's and the event folding's queue answers, the
hints, and the docs (``hack/gen_reasons.py``, checked for drift by tests/test_reasons.py). A new
reason is one row here plus the code that gives it.
"""

from __future__ import annotations

from enum import StrEnum

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (checkers take it as True)


class Phase(StrEnum):
    """A job's ``status.phase``. Row: text, terminal (the job is over until its spec changes or it
    is rerun), squeue's short code (``get jobs --phase PD,R``), the docs line."""

    terminal: bool
    code: str
    doc: str

    def __new__(cls, text: str, terminal: bool, code: str, doc: str) -> Phase:
        member = str.__new__(cls, text)
        member._value_ = text
        member.terminal, member.code, member.doc = terminal, code, doc
        return member

    Pending = "Pending", False, "PD", "admitted, waiting to start: its reason says what it waits for"
    Running = "Running", False, "R", "an attempt runs (or is being stopped: reason `Terminating`)"
    Succeeded = "Succeeded", True, "CD", "the last attempt exited with code 0"
    Failed = "Failed", True, "F", "the last attempt failed and no retry is left, or gflowd stopped it for a limit"
    Cancelled = (
        "Cancelled",
        True,
        "CA",
        "stopped for good: cancelled, its manifest deleted, or a dependency ended the wrong way",
    )
    Rejected = (
        "Rejected",
        False,
        "RJ",
        "gflowd cannot run the manifest as written; fix the file and the job is admitted",
    )


TERMINAL_PHASES = frozenset(p for p in Phase if p.terminal)
SETTLED_PHASES = TERMINAL_PHASES | {Phase.Rejected}  # nothing about the job moves on its own


class Facts:
    """One reason's row: the phases a job shows it in (none: events and conditions only), the docs
    line, the fix a user needs; whether gflowd stops an attempt for it (a ``StopReason``); whether
    it is one of the queue's answers to a waiting job, which may change every pass (``queue``: a
    status lagging only in those is not rewritten, their events are folded per owner); whether a
    job taking it is announced as a Warning event though its phase is not Failed or Rejected."""

    __slots__ = ("doc", "hint", "phases", "queue", "stop", "warns")

    def __init__(
        self,
        phases: tuple[Phase, ...],
        doc: str,
        hint: str,
        *,
        stop: bool = False,
        queue: bool = False,
        warns: bool = False,
    ) -> None:
        self.phases, self.doc, self.hint = phases, doc, hint
        self.stop, self.queue, self.warns = stop, queue, warns


_P, _R, _S, _F, _C, _J = Phase.Pending, Phase.Running, Phase.Succeeded, Phase.Failed, Phase.Cancelled, Phase.Rejected


class Reason(StrEnum):
    """A job's ``status.reason`` (and the reason of the event that announces it), with its facts."""

    phases: tuple[Phase, ...]
    doc: str
    hint: str
    stop: bool
    queue: bool
    warns: bool

    def __new__(cls, text: str, facts: Facts) -> Reason:
        member = str.__new__(cls, text)
        member._value_ = text
        member.phases, member.doc, member.hint = facts.phases, facts.doc, facts.hint
        member.stop, member.queue, member.warns = facts.stop, facts.queue, facts.warns
        return member

    # running and ending
    Started = (
        "Started",
        Facts(
            (_R,),
            "an attempt runs; the message names its GPUs (or the cluster's job)",
            "it runs: `gflowctl logs -f NAME` follows its output",
        ),
    )
    Terminating = (
        "Terminating",
        Facts(
            (_R,),
            "gflowd is stopping the attempt (TERM, then KILL after the grace period); the `Terminating` condition says why",
            "it ends when its processes are gone; the Terminating condition says why it was stopped",
        ),
    )
    Completed = (
        "Completed",
        Facts((_S,), "the attempt exited with code 0", "nothing to do; `gflowctl rerun NAME` runs it again"),
    )
    Error = (
        "Error",
        Facts(
            (_F,),
            "the attempt failed (its exit code or signal in the message) and `backoffLimit` allows no retry",
            "read its log (`gflowctl logs NAME`), fix the cause and `gflowctl rerun NAME`; `backoffLimit` retries a flaky job",
        ),
    )
    BackOff = (
        "BackOff",
        Facts(
            (_P,),
            "an attempt failed; the next one waits 1 s, doubling each attempt, at most 5 min",
            "it failed and waits before its next retry",
        ),
    )
    BackoffLimitExceeded = (
        "BackoffLimitExceeded",
        Facts(
            (_F,),
            "every attempt `backoffLimit` allows failed",
            "read its logs (earlier attempts are `logs/NAME.N.log`), fix the cause and `gflowctl rerun NAME`",
        ),
    )
    OOMKilled = (
        "OOMKilled",
        Facts(
            (_F,),
            "the job's processes used more host memory than `resources.memory`",
            "raise `resources.memory` (or make the job use less), then `gflowctl rerun NAME`",
        ),
    )
    CUDAOutOfMemory = (
        "CUDAOutOfMemory",
        Facts(
            (_F,),
            "the job ran out of GPU memory (its log ends in a CUDA/cuBLAS/JAX out-of-memory error)",
            "lower the batch size or ask for a larger GPU; `gflowctl triage NAME` shows the evidence",
        ),
    )
    NCCLTimeout = (
        "NCCLTimeout",
        Facts(
            (_F,),
            "a collective operation timed out (torch.distributed's NCCL watchdog): a rank died or hung",
            "read every rank's log, rerun with NCCL_DEBUG=INFO; `gflowctl triage NAME` shows the evidence",
        ),
    )
    NCCLError = (
        "NCCLError",
        Facts(
            (_F,),
            "NCCL failed (its log ends in an NCCL error)",
            "rerun with NCCL_DEBUG=INFO; on one machine try NCCL_P2P_DISABLE=1; `gflowctl triage NAME`",
        ),
    )
    GPUXid = (
        "GPUXid",
        Facts(
            (_F,),
            "a GPU of the job reported an Xid error (NVML) while it ran; the message says which and what it means",
            "rerun it; if the Xid repeats, reset the GPU or check the driver; `gflowctl triage NAME`",
        ),
    )
    Segfault = (
        "Segfault",
        Facts(
            (_F,),
            "the job crashed in native code (SIGSEGV, exit code 139)",
            "check the CUDA, driver and library versions; rerun with PYTHONFAULTHANDLER=1; `gflowctl triage NAME`",
        ),
    )
    MissingModule = (
        "MissingModule",
        Facts(
            (_F,),
            "the job's python could not import a module (ModuleNotFoundError, ImportError)",
            "install it in the job's environment or run the job with the python that has it; `gflowctl triage NAME`",
        ),
    )
    Lost = (
        "Lost",
        Facts(
            (_F,),
            "the attempt's supervisor vanished without an exit record (a crash or a reboot while it ran)",
            "run it again (`gflowctl rerun NAME`); gflowd's log may say what happened",
            warns=True,
        ),
    )
    Rerun = (
        "Rerun",
        Facts(
            (_P,),
            "a finished job runs again: its spec changed, or `gflowctl rerun`",
            "it was queued again, as a new generation; it starts like a new job",
        ),
    )
    Admitted = (
        "Admitted",
        Facts(
            (_P,),
            "a Rejected manifest was fixed and admitted",
            "its manifest was fixed; the scheduler looks at it in its next pass",
        ),
    )
    # the stop reasons, as outcomes
    UserCancelled = (
        "UserCancelled",
        Facts(
            (_C,),
            "cancelled (`spec.cancelled: true`, `gflowctl cancel`); a running attempt was stopped",
            "set `cancelled: false` in its manifest to run it again",
            stop=True,
        ),
    )
    Suspended = (
        "Suspended",
        Facts(
            (_P,),
            "suspended (`spec.suspend: true`, `gflowctl suspend`): it does not start; a running attempt was stopped",
            "it is suspended: resume it",
            stop=True,
        ),
    )
    Deleted = (
        "Deleted",
        Facts(
            (_C,),
            "its manifest was deleted: a running attempt is stopped, then the status removed (logs stay)",
            "nothing to do: apply the manifest again to run it anew",
            stop=True,
        ),
    )
    DeadlineExceeded = (
        "DeadlineExceeded",
        Facts(
            (_F,),
            "the attempt ran past its `timeLimit` and was stopped",
            "raise `timeLimit` (or checkpoint and resume), then `gflowctl rerun NAME`",
            stop=True,
        ),
    )
    GPUMemoryExceeded = (
        "GPUMemoryExceeded",
        Facts(
            (_F,),
            "a Shared job used more GPU memory than its `gpuMemory` and was stopped",
            "raise `resources.gpuMemory` (or make the job use less), then `gflowctl rerun NAME`",
            stop=True,
        ),
    )
    Preempted = (
        "Preempted",
        Facts(
            (_P,),
            "stopped to make room for a job of higher priority; it waits to run again (not counted against `backoffLimit`)",
            "a job of higher priority took its GPUs; it starts again when GPUs free up",
            stop=True,
        ),
    )
    IdleTimeout = (
        "IdleTimeout",
        Facts(
            (_F,),
            "no GPU activity on its GPUs (for a tty job, no terminal input either) for its `idleTimeout`; stopped",
            "use the GPUs it holds, or raise or drop `idleTimeout`, then `gflowctl rerun NAME`",
            stop=True,
        ),
    )
    # waiting: the queue's gates, then the scheduler's answers
    Queued = (
        "Queued",
        Facts(
            (_P,),
            "bound and about to start: a flood of jobs is started in batches, one per pass (or a cluster queued it)",
            "it was just queued; the scheduler looks at it in its next pass",
            queue=True,
        ),
    )
    StartAfter = (
        "StartAfter",
        Facts(
            (_P,), "its `startAfter` time is in the future", "it has a startAfter time in the future; it starts then"
        ),
    )
    Dependency = (
        "Dependency",
        Facts(
            (_P,),
            "a job in its `dependsOn` has not reached its condition yet",
            "it starts when the jobs it depends on reach their condition (see depends_on)",
        ),
    )
    DependencyFailed = (
        "DependencyFailed",
        Facts(
            (_C,),
            "a job in its `dependsOn` ended the wrong way; the message names it",
            "a job it depends on ended the wrong way; it will not start",
            warns=True,
        ),
    )
    Parallelism = (
        "Parallelism",
        Facts(
            (_P,),
            "its Sweep already runs `parallelism` children",
            "its sweep runs at most `parallelism` children at once; it starts when a sibling ends",
        ),
    )
    Resources = (
        "Resources",
        Facts(
            (_P,),
            "not enough free GPUs (or cores) now; the message has the numbers and who holds them",
            "it starts when enough GPUs free up: when the jobs holding them end, or sooner if you cancel "
            "or suspend one of them",
            queue=True,
        ),
    )
    Priority = (
        "Priority",
        Facts(
            (_P,),
            "it would fit, but jobs ahead of it in the queue take the GPUs first",
            "jobs of higher priority wait ahead of it; raise its priority (set_priority) to move it up",
            queue=True,
        ),
    )
    Unschedulable = (
        "Unschedulable",
        Facts(
            (_P,),
            "it can never fit on this machine (more GPUs or cores than it has, no GPU of its `gpuType`), with the numbers",
            "it can never start on this machine as written: ask for fewer GPUs or another gpuType",
            warns=True,
        ),
    )
    GPUMemory = (
        "GPUMemory",
        Facts(
            (_P,),
            "a Shared job: no GPU has its `gpuMemory` free now",
            "no GPU has the gpuMemory it asks for free; it starts when a Shared job on a GPU ends",
            queue=True,
        ),
    )
    Quota = (
        "Quota",
        Facts(
            (_P,),
            "its user or label group is at its GPU quota (`userQuotas`, `labelQuotas`)",
            "its user or label group is at its quota of GPUs; it starts when one of their jobs ends",
            queue=True,
        ),
    )
    JobLimit = (
        "JobLimit",
        Facts(
            (_P,),
            "its user is at `maxRunningJobsPerUser`, or CPU-only jobs at `maxRunningCpuJobs`",
            "its user (or CPU-only jobs) runs as many jobs as config.yaml allows; it starts when one of them ends",
        ),
    )
    QueueLimit = (
        "QueueLimit",
        Facts(
            (_J, _P),
            "refused: its user already has `maxPendingJobsPerUser` jobs waiting (a Sweep's child waits instead)",
            "too many of its user's jobs wait; change its manifest once fewer wait (a Sweep's child joins the queue by itself)",
        ),
    )
    Reserved = (
        "Reserved",
        Facts(
            (_P,),
            "the free GPUs it needs are held by a Reservation for other users",
            "the GPUs it needs are held by a reservation; it starts when the reservation ends or "
            "when its timeLimit would end before the reservation starts",
        ),
    )
    DiskFull = (
        "DiskFull",
        Facts(
            (_P,),
            "the launch could not be recorded (the disk is full): nothing runs; held and retried",
            "the controller could not record its start (disk full); free space on the gflow home",
            warns=True,
        ),
    )
    DiskError = (
        "DiskError",
        Facts(
            (_P,),
            "the launch could not be recorded (another write error): nothing runs; held and retried",
            "the controller could not record its start (a write error, in the message); gflowd retries it",
            warns=True,
        ),
    )
    Held = (
        "Held",
        Facts(
            (_P,),
            "a cluster holds it (Slurm `JobHeldUser`/`JobHeldAdmin`)",
            "the cluster holds it: release it there (`scontrol release`), or ask its admin",
        ),
    )
    # a manifest gflowd cannot run
    Invalid = (
        "Invalid",
        Facts(
            (_J,),
            "the manifest is not a valid Job (or not readable text); the message names the field and line",
            "fix what the message names; the job is admitted as soon as the file is valid",
        ),
    )
    YAMLError = (
        "YAMLError",
        Facts(
            (_J,),
            "the file is not valid YAML; the message has the line",
            "fix the YAML syntax at the line the message names",
        ),
    )
    DuplicateName = (
        "DuplicateName",
        Facts(
            (_J,),
            "another manifest already defines this name; the message names both files",
            "rename one of the two (`metadata.name`) or delete one",
        ),
    )
    Forbidden = (
        "Forbidden",
        Facts(
            (_J,),
            "the manifest's owner is not gflowd's user, and gflowd (not root) runs only its own user's jobs",
            "submit to your own gflowd, or run gflowd as root to serve several users",
        ),
    )
    DependencyCycle = (
        "DependencyCycle",
        Facts((_J,), "its `dependsOn` forms a cycle; the message shows it", "break the cycle in `spec.dependsOn`"),
    )
    # events only
    Expired = (
        "Expired",
        Facts(
            (),
            "event: gflowd removed a finished job's manifest (`ttlSecondsAfterFinished`, `finishedJobsHistory`), "
            "or forgot an expired Reservation whose manifest was deleted",
            "nothing to do: its logs stay; keep a job longer with a larger `ttlSecondsAfterFinished`",
        ),
    )
    SpecOutdated = (
        "SpecOutdated",
        Facts(
            (),
            "event and condition: the spec changed while it ran; the attempt goes on, the new spec runs when it ends",
            "to run the new spec now, stop the attempt (`gflowctl suspend NAME`, then `resume`)",
        ),
    )
    GPUUnhealthy = (
        "GPUUnhealthy",
        Facts(
            (),
            "event and condition: a GPU of a running job failed",
            "check the GPU (`gflowctl get gpus`, nvidia-smi); the job may need a rerun",
        ),
    )
    Checkpointed = (
        "Checkpointed",
        Facts(
            (_P,),
            "event and condition: the job confirmed a checkpoint (spec.checkpoint, docs/checkpoint.md); as a Pending "
            "reason: stopped at its time limit (`requeue: true`) or for idleness after one, it waits to resume",
            "it resumes from its checkpoint when it starts again (GFLOW_RESUME=1)",
        ),
    )
    CheckpointTimeout = (
        "CheckpointTimeout",
        Facts(
            (),
            "event (Warning): the checkpoint signal went out but the job did not confirm within `checkpoint.grace` "
            "(or before its time limit); it was stopped anyway",
            "trap the signal, write the checkpoint, then run `gflowctl checkpoint done` (or write $GFLOW_CHECKPOINT_FILE)",
        ),
    )
    ReclaimedGPUMemory = (
        "ReclaimedGPUMemory",
        Facts(
            (),
            "event (Warning) and condition on an ended job: gflowd killed a process the attempt left holding GPU memory "
            "(GPU, pid, command, memory; docs/gpu-memory.md)",
            "nothing for the GPU; make the job stop its own children (a daemonized helper, a server it started)",
        ),
    )
    GPUMemoryHeld = (
        "GPUMemoryHeld",
        Facts(
            (),
            "event (Warning) on a GPU: a pid that no longer exists still holds GPU memory; it counts as in use",
            "`nvidia-smi --gpu-reset -i N` when the GPU is idle, or reboot (only that frees it)",
        ),
    )


if TYPE_CHECKING:  # a checker sees every member; at run time only the stop reasons are in it
    StopReason = Reason
else:
    StopReason = StrEnum("StopReason", [(r.name, r.value) for r in Reason if r.stop])
    StopReason.__doc__ = """Why gflowd asked an attempt to stop: the Terminating condition's reason, ``stop-N.json``,
    and the supervisor's exit record (``stopReason``), which survives a crash of gflowd. The reasons
    whose row says ``stop=True``."""
    StopReason.__module__ = __name__

STOP_REASONS = frozenset(StopReason)
PENDING_REASONS = tuple(r for r in Reason if Phase.Pending in r.phases)  # what gflow_jobs_pending serves from the start
QUEUE_REASONS = frozenset(r for r in Reason if r.queue)
WARNING_REASONS = frozenset(r for r in Reason if r.warns)


def facts_of(reason: str | None) -> Reason | None:
    """The row of a reason read from a file (a cluster may give reasons of its own: None)."""
    return Reason.__members__.get(reason) if reason else None


class SweepReason(StrEnum):
    NoChildren = "NoChildren"
    AllSucceeded = "AllSucceeded"
    ChildFailed = "ChildFailed"
    ChildCancelled = "ChildCancelled"
    ChildrenRunning = "ChildrenRunning"
    InProgress = "InProgress"
    ChildrenPending = "ChildrenPending"


class ReservationPhase(StrEnum):
    Pending = "Pending"  # the window has not opened yet
    Active = "Active"
    Expired = "Expired"  # the window has closed: kept like a finished job, never blocks anything
    Rejected = "Rejected"


class ReservationReason(StrEnum):
    Upcoming = "Upcoming"
    WindowOpen = "WindowOpen"
    WindowClosed = "WindowClosed"
    Overlap = "Overlap"  # a GPU it needs is reserved for others in an overlapping window
    Unsatisfiable = "Unsatisfiable"  # more GPUs than the machine has, a GPU it lacks, an unknown user
    Forbidden = "Forbidden"  # beyond what config.yaml's reservations policy lets its owner ask


class Condition(StrEnum):
    """Condition types of a job's status (``status.conditions[].type``). Row: text, the docs line."""

    doc: str

    def __new__(cls, text: str, doc: str) -> Condition:
        member = str.__new__(cls, text)
        member._value_ = text
        member.doc = doc
        return member

    Admitted = (
        "Admitted",
        (
            "`True` (reason `Valid`): the manifest is valid; `False`: its last edit is invalid (the last valid spec is kept) "
            "or it was refused (`QueueLimit`)"
        ),
    )
    Scheduled = "Scheduled", "`True` (reason `Bound`): the job was bound to GPUs; the message names them"
    Terminating = (
        "Terminating",
        "a stop is under way; its reason is the stop reason (`UserCancelled`, `Suspended`, `Deleted`, ...)",
    )
    SpecOutdated = (
        "SpecOutdated",
        "the spec changed while it ran: the attempt goes on, the job runs again with the new spec when it ends",
    )
    DuplicateName = (
        "DuplicateName",
        "another manifest also defines this job's name and is ignored; the message names it",
    )
    Preempted = "Preempted", "it was preempted (when and why); kept while it waits to run again"
    GPUUnhealthy = "GPUUnhealthy", "a GPU of the running job failed (reason `GPULost`)"
    GPUsUnused = "GPUsUnused", "some bound GPUs have no process of the job (docs/gpu-usage.md)"
    GPUIdle = "GPUIdle", "no GPU activity on the job's GPUs for the idle window (docs/gpu-usage.md)"
    GPUMemoryNearLimit = (
        "GPUMemoryNearLimit",
        "a Shared job past 90 % of its `gpuMemory` on a GPU; at 100 % it is stopped (`GPUMemoryExceeded`)",
    )
    Checkpointed = (
        "Checkpointed",
        "the last checkpoint a job confirmed: the attempt, the time (lastTransitionTime) and the path, if given",
    )
    ReclaimedGPUMemory = (
        "ReclaimedGPUMemory",
        "gflowd killed what an ended attempt left holding GPU memory: the attempt, each process's GPU, pid, "
        "command and MiB (docs/gpu-memory.md)",
    )
    QueueOrder = (
        "QueueOrder",
        "while it waits in the queue: why it stands where it does (`gflowctl describe`: Queue Order)",
    )


class EventType(StrEnum):
    Normal = "Normal"
    Warning = "Warning"
