"""Queue policy: in which order pending jobs are offered to the scheduler, and which quota groups
each job counts against. Shared by the controller (``reconcile``) and the simulator, so what the
simulator measures is what the controller does.

Pure functions of job facts and an injected clock:
- **order**: ``priority`` (higher first, then arrival) or ``fifo`` (arrival only);
- **aging**: the effective priority is ``priority + min(agingMax, waited // agingInterval)``, so a
  low-priority job climbs past a stream of newer higher ones and never waits forever;
- **across users** (:func:`order_queue`): the admin's classes first (higher rank first), then the
  part of ``priority`` the class's ``priorityRange`` lets count across users (none by default),
  then aging and **fair share**: the user with fewer recent GPU-seconds goes first. Usage decays
  exponentially with a half-life: a GPU-second used one half-life ago counts half;
- **a user's own priority** orders only that user's jobs: they are sorted by it (with aging), then
  take the user's arrival slots in that order, so 60 jobs at priority 2147483647 are offered no
  earlier than 60 jobs at priority 0 would be;
- **quotas**: per user and per label (``team=vision``), the most GPUs its running jobs may hold at once.

A job's *user* is the Unix owner of its manifest file (the uid it runs as), by name; the names
come in with the snapshot (``controller.observe.host``), so nothing here asks the system.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.model.policy import Policy, ReservationLimits, UserClass
from controller.model.scheduling import QuotaUse

if TYPE_CHECKING:  # the config model, for annotations only
    from controller.api.config import ControllerConfig

LN2 = math.log(2)


def policy_from_config(config: ControllerConfig, controller_uid: int | None = None) -> Policy:
    """The policy part of a :class:`controller.api.config.ControllerConfig`. ``controller_uid``: the
    user gflowd runs as, an admin of its instance (root's, or a user's own ``gflowd up``)."""
    mode, order = {
        "fifo": ("strict", "fifo"),
        "priority": ("strict", "priority"),
        "firstfit": ("firstfit", "priority"),
        "backfill": ("backfill", "priority"),
    }[config.scheduling_policy]
    return Policy(
        mode=mode,
        order=order,
        aging_interval=config.aging_interval or None,
        aging_max=config.aging_max,
        fair_share_half_life=config.fair_share_half_life or None,
        user_quotas=dict(config.user_quotas),
        label_quotas=dict(config.label_quotas),
        preemption_threshold=config.preemption_threshold,
        admins=tuple(str(a) for a in config.admins) + ((str(controller_uid),) if controller_uid else ()),
        classes=tuple(
            UserClass(
                name,
                c.rank,
                (c.priority_range[0], c.priority_range[1]),
                c.max_pending_jobs_per_user,
                c.max_running_jobs_per_user,
            )
            for name, c in config.classes.items()
        ),
        class_members={str(user): name for name, c in config.classes.items() for user in c.users},
        max_pending_per_user=config.max_pending_jobs_per_user or None,
        max_running_per_user=config.max_running_jobs_per_user or None,
        max_running_cpu_jobs=config.max_running_cpu_jobs or None,
        reservations=ReservationLimits(
            tuple(str(u) for u in config.reservations.users),
            config.reservations.max_gpus,
            config.reservations.max_duration,
            config.reservations.max_start_ahead,
            config.reservations.horizon,
        ),
    )


def effective_priority(priority: int, waited: float, policy: Policy) -> int:
    """``priority`` plus one point per ``aging_interval`` waited, at most ``aging_max`` points."""
    if policy.order == "fifo":
        return 0
    if not policy.aging_interval or waited <= 0:
        return priority
    return priority + min(policy.aging_max, int(waited // policy.aging_interval))


def queue_key(priority: int, waited: float, usage: float, policy: Policy) -> tuple[float, ...]:
    """Sort key of a pending job (ascending = offered first); ties are broken by the caller
    (arrival, then name). Fair share orders jobs of one effective priority, except jobs that have
    aged to the cap: those go first, oldest first, so a heavy user's job cannot be passed forever."""
    if policy.order == "fifo":
        return (0, 0, 0.0)
    effective = effective_priority(priority, waited, policy)
    if policy.aging_interval and waited >= policy.aging_max * policy.aging_interval:
        return (-effective, 0, -waited)
    return (-effective, 1, usage if policy.fair_share_half_life else 0.0)


@dataclass(frozen=True)
class QueueEntry:
    """A pending job as the queue order sees it."""

    name: str
    owner: int  # manifest owner's uid: a user's jobs are ordered among themselves
    priority: int
    created: float
    usage: float = 0.0  # the owner's decayed GPU-seconds (fair share)
    rank: int = 0  # the owner's class rank
    clamped: int = 0  # the part of priority that counts across users
    class_name: str = "default"
    sort_name: tuple[int | str, ...] = field(default=(), compare=False)


def order_queue(entries: list[QueueEntry], policy: Policy, now: float) -> list[QueueEntry]:
    """Pending jobs in the order they are offered to the scheduler (see the module docstring)."""
    if policy.order == "fifo":
        return sorted(entries, key=lambda e: (e.created, e.sort_name, e.name))
    by_owner: dict[int, list[QueueEntry]] = {}
    for entry in entries:
        by_owner.setdefault(entry.owner, []).append(entry)
    slot: dict[str, tuple[float, tuple[int | str, ...], str]] = {}
    for jobs in by_owner.values():  # the user's priority permutes the user's own arrival slots
        own = sorted(
            jobs,
            key=lambda e: (-effective_priority(e.priority, now - e.created, policy), e.created, e.sort_name, e.name),
        )
        arrivals = sorted((e.created, e.sort_name, e.name) for e in jobs)
        slot.update((e.name, arrival) for e, arrival in zip(own, arrivals))
    fair = bool(policy.fair_share_half_life) and len(by_owner) > 1

    def key(e: QueueEntry) -> tuple[object, ...]:
        arrival = slot[e.name]
        waited = now - arrival[0]
        head = (-e.rank, -e.clamped)
        if policy.aging_interval and waited >= policy.aging_max * policy.aging_interval:
            return (*head, 0, -waited, 0.0, *arrival)  # aged to the cap: oldest first, whoever's
        aged = (
            min(policy.aging_max, int(waited // policy.aging_interval)) if policy.aging_interval and waited > 0 else 0
        )
        return (*head, 1, -aged, e.usage if fair else 0.0, *arrival)

    return sorted(entries, key=key)


def order_reasons(waiting: list[QueueEntry]) -> dict[str, str]:
    """Why each waiting job (in queue order) stands where it does: on what grounds jobs wait ahead
    of it (the owner's own priority, a higher class, fair share, longer waits). No counts: the line
    changes when the grounds do, not at every start, so a moving queue rewrites no status for it
    (``queuePosition`` has the number)."""
    reasons: dict[str, str] = {}
    seen: Counter[int] = Counter()  # jobs ahead per owner
    rank_of: dict[int, int] = {}
    usage_of: dict[int, float] = {}
    for e in waiting:
        grounds = []
        if seen[e.owner]:
            grounds.append("the same user (its priority orders only its own jobs)")
        others = [owner for owner in seen if owner != e.owner]
        if any(rank_of[o] > e.rank for o in others):
            grounds.append("higher-ranked classes")
        same = [o for o in others if rank_of[o] <= e.rank]
        if any(usage_of[o] < e.usage for o in same):
            grounds.append("users with less recent GPU use (fair share)")
        if any(usage_of[o] >= e.usage for o in same):
            grounds.append("users whose jobs waited longer or have a class-granted priority")
        where = f"class {e.class_name} (rank {e.rank})"
        reasons[e.name] = f"{where}; behind jobs of {', '.join(grounds)}" if grounds else f"{where}; first in the queue"
        seen[e.owner] += 1
        rank_of[e.owner], usage_of[e.owner] = e.rank, e.usage
    return reasons


def decayed_gpu_seconds(gpus: int, start: float, end: float, now: float, half_life: float) -> float:
    """GPU-seconds of one run over [start, end], each second weighted 2^-(age / half_life)."""
    if gpus <= 0 or end <= start:
        return 0.0
    k = LN2 / half_life
    return gpus * (math.exp(-k * max(now - end, 0.0)) - math.exp(-k * max(now - start, 0.0))) / k


class UsageLedger:
    """Per-user decayed GPU-seconds, updated incrementally as jobs start and end: what the
    simulator uses instead of re-summing every run (same number as ``decayed_gpu_seconds``)."""

    def __init__(self, half_life: float) -> None:
        self.k = LN2 / half_life
        self._value: dict[str, float] = {}  # decayed usage at ``_at``
        self._at: dict[str, float] = {}
        self._running: dict[str, int] = {}  # GPUs the user's running jobs hold

    def usage(self, user: str, now: float) -> float:
        value = self._value.get(user, 0.0)
        at = self._at.get(user, now)
        gpus = self._running.get(user, 0)
        decay = math.exp(-self.k * (now - at))
        return value * decay + gpus * (1.0 - decay) / self.k

    def change(self, user: str, now: float, gpus: int) -> None:
        """The user's running jobs now hold ``gpus`` more (or fewer, when negative) GPUs."""
        self._value[user] = self.usage(user, now)
        self._at[user] = now
        self._running[user] = self._running.get(user, 0) + gpus


def quota_keys(user: str, labels: dict[str, str], policy: Policy) -> tuple[str, ...]:
    """The quota groups a job counts against, named as its ``Quota`` message shows them."""
    keys = []
    if user in policy.user_quotas:
        keys.append(f"user {user}")
    for key, value in labels.items():
        if f"{key}={value}" in policy.label_quotas:
            keys.append(f"label {key}={value}")
    return tuple(keys)


def quota_table(policy: Policy) -> dict[str, QuotaUse]:
    """Every configured quota group with nothing in use yet; count running jobs with :func:`charge`."""
    table = {f"user {user}": QuotaUse(limit) for user, limit in policy.user_quotas.items()}
    table.update({f"label {label}": QuotaUse(limit) for label, limit in policy.label_quotas.items()})
    return table


def charge(table: dict[str, QuotaUse], keys: tuple[str, ...], gpus: int) -> None:
    for key in keys:
        if key in table:
            table[key].used += gpus


def user_of(uid: int, names: Mapping[int, str]) -> str:
    """A manifest owner as quotas name it: its user name (``names`` come with the snapshot),
    ``uid 1234`` when the system has no name for it, ``unknown`` when the owner is unknown."""
    if uid < 0:
        return "unknown"
    return names.get(uid) or f"uid {uid}"
