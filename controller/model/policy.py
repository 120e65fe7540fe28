"""The queue policy's settings (``controller.decide.policy`` and ``controller.decide.limits`` apply
them): scheduler mode, order, aging, fair share, quotas, preemption, and the admin's bounds on what
one user may take (classes, per-user limits, reservations). Fixed for a run of gflowd."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserClass:
    """An admin-set class of users: its rank orders the queue across users (higher first); the
    part of a member's ``priority`` inside ``priority_range`` also counts across users (default
    (0, 0): a user's priority orders only that user's jobs); its limits replace the global ones."""

    name: str = "default"
    rank: int = 0
    priority_range: tuple[int, int] = (0, 0)
    max_pending: int | None = None  # None: the global maxPendingJobsPerUser
    max_running: int | None = None  # None: the global maxRunningJobsPerUser


DEFAULT_CLASS = UserClass()


@dataclass(frozen=True)
class ReservationLimits:
    """What a non-admin's Reservation may ask (admins are exempt)."""

    users: tuple[str, ...] = ("*",)  # who may reserve ("*": every user); admins always may
    max_gpus: int = 1
    max_duration: float = 86400.0
    max_start_ahead: float = 7 * 86400.0
    horizon: float = 86400.0  # a window further off than this fences nothing yet (applies to all)


@dataclass(frozen=True)
class Policy:
    mode: str = "backfill"  # scheduler mode: strict | backfill | firstfit
    order: str = "priority"  # priority | fifo
    aging_interval: float | None = None  # seconds of waiting per priority point; None: no aging
    aging_max: int = 0  # at most this many points
    fair_share_half_life: float | None = None  # seconds; None: no fair share
    user_quotas: dict[str, int] = field(default_factory=dict)  # user name -> max GPUs at once
    label_quotas: dict[str, int] = field(default_factory=dict)  # "key=value" -> max GPUs at once
    preemption_threshold: int | None = None  # priority gap that lets a job preempt; None: never
    admins: tuple[str, ...] = ()  # user names or uids (root always is one): exempt from the limits below
    classes: tuple[UserClass, ...] = ()
    class_members: dict[str, str] = field(default_factory=dict)  # user name or uid -> class name
    max_pending_per_user: int | None = None  # jobs waiting to start; over: Rejected/QueueLimit
    max_running_per_user: int | None = None  # over: Pending/JobLimit
    max_running_cpu_jobs: int | None = None  # running CPU-only jobs on the machine; over: Pending/JobLimit
    reservations: ReservationLimits | None = None  # None: no bounds (config.yaml always sets them)
