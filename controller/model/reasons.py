"""The words of statuses, events and stop requests: phases, reasons and condition types.

StrEnums: a member *is* its text (it compares, hashes, prints and serialises as the string), so
status files, the index and events read exactly as before, and a typo is an AttributeError
instead of a status nobody matches.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    Pending = "Pending"
    Running = "Running"
    Succeeded = "Succeeded"
    Failed = "Failed"
    Cancelled = "Cancelled"
    Rejected = "Rejected"


TERMINAL_PHASES = frozenset({Phase.Succeeded, Phase.Failed, Phase.Cancelled})
SETTLED_PHASES = TERMINAL_PHASES | {Phase.Rejected}  # nothing about the job moves on its own


class StopReason(StrEnum):
    """Why gflowd asked an attempt to stop: the Terminating condition's reason, ``stop-N.json``,
    and the supervisor's exit record (``stopReason``), which survives a crash of gflowd."""

    UserCancelled = "UserCancelled"
    Suspended = "Suspended"
    Deleted = "Deleted"
    DeadlineExceeded = "DeadlineExceeded"
    GPUMemoryExceeded = "GPUMemoryExceeded"
    Preempted = "Preempted"
    IdleTimeout = "IdleTimeout"


STOP_REASONS = frozenset(StopReason)


class Reason(StrEnum):
    """A job's ``status.reason`` (and the reason of the event that announces it)."""

    # running and ending
    Started = "Started"
    Terminating = "Terminating"
    Completed = "Completed"
    Error = "Error"
    BackOff = "BackOff"
    BackoffLimitExceeded = "BackoffLimitExceeded"
    OOMKilled = "OOMKilled"
    Lost = "Lost"
    Rerun = "Rerun"
    Admitted = "Admitted"
    # the stop reasons, as outcomes
    UserCancelled = "UserCancelled"
    Suspended = "Suspended"
    Deleted = "Deleted"
    DeadlineExceeded = "DeadlineExceeded"
    GPUMemoryExceeded = "GPUMemoryExceeded"
    Preempted = "Preempted"
    IdleTimeout = "IdleTimeout"
    # waiting: the queue's gates, then the scheduler's answers
    Queued = "Queued"
    StartAfter = "StartAfter"
    Dependency = "Dependency"
    DependencyFailed = "DependencyFailed"
    Parallelism = "Parallelism"
    Resources = "Resources"
    Priority = "Priority"
    Unschedulable = "Unschedulable"
    GPUMemory = "GPUMemory"
    Quota = "Quota"
    JobLimit = "JobLimit"  # maxRunningJobsPerUser or maxRunningCpuJobs reached (controller/decide/limits.py)
    QueueLimit = "QueueLimit"  # Rejected: maxPendingJobsPerUser reached; a Sweep's child waits instead
    Reserved = "Reserved"  # the free GPUs are held by a Reservation for other users
    DiskFull = "DiskFull"  # the launch could not be recorded: held, retried
    DiskError = "DiskError"
    # a manifest gflowd cannot run
    Invalid = "Invalid"
    YAMLError = "YAMLError"
    DuplicateName = "DuplicateName"
    Forbidden = "Forbidden"
    DependencyCycle = "DependencyCycle"
    # events only
    Expired = "Expired"
    SpecOutdated = "SpecOutdated"
    GPUUnhealthy = "GPUUnhealthy"


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
    """Condition types of a job's status (``status.conditions[].type``)."""

    Admitted = "Admitted"
    Scheduled = "Scheduled"
    Terminating = "Terminating"
    SpecOutdated = "SpecOutdated"
    DuplicateName = "DuplicateName"
    Preempted = "Preempted"
    GPUUnhealthy = "GPUUnhealthy"
    GPUsUnused = "GPUsUnused"  # some bound GPUs have no process of the job
    GPUIdle = "GPUIdle"  # no GPU activity on the job's GPUs for the idle window
    GPUMemoryNearLimit = "GPUMemoryNearLimit"  # a Shared job past 90 % of its gpuMemory
    QueueOrder = "QueueOrder"  # while it waits in the queue: why it stands where it does


class EventType(StrEnum):
    Normal = "Normal"
    Warning = "Warning"
