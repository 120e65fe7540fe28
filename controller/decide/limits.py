"""What one user may take: the admin's bounds from config.yaml (docs/scheduling.md, "Limits").

- **who**: admins (root always) are exempt from the per-user limits and the reservation policy;
  every other user is in the class config.yaml puts them in, else the default class (rank 0);
- **waiting jobs**: at most ``maxPendingJobsPerUser`` of a user's jobs wait to start. A job that
  arrives beyond it is Rejected/``QueueLimit`` (as gflow's ``max_queued_jobs`` refuses a submit) and
  stays so until its manifest changes; a Sweep's child beyond it waits instead (the Sweep is the
  user's one submission), offered to no one. Jobs already waiting are never rejected, so lowering
  the limit or restarting gflowd takes nothing back;
- **running jobs**: at most ``maxRunningJobsPerUser`` of a user's and ``maxRunningCpuJobs`` CPU-only
  jobs on the machine (each one costs a root supervisor); the rest wait, reason ``JobLimit``;
- **reservations**: who may reserve and how many GPUs, how long, how far ahead.

Pure functions of plain facts; the queue (``controller.decide.queue``) and the reservations
(``controller.decide.reservations``) feed them and apply the verdicts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from controller.api.units import format_duration
from controller.model.policy import DEFAULT_CLASS, Policy, UserClass


def is_admin(policy: Policy, user: str, uid: int) -> bool:
    """Root, or a user config.yaml's ``admins`` names (by name or uid)."""
    return uid == 0 or user in policy.admins or (uid >= 0 and str(uid) in policy.admins)


def user_class(policy: Policy, user: str, uid: int) -> UserClass:
    """The class config.yaml puts the user in (by name, else by uid), else the default class."""
    name = policy.class_members.get(user) or (policy.class_members.get(str(uid)) if uid >= 0 else None)
    if name is None:
        return DEFAULT_CLASS
    return next((c for c in policy.classes if c.name == name), DEFAULT_CLASS)


def clamp(priority: int, cls: UserClass) -> int:
    """The part of ``priority`` that counts across users: clamped to the class's range."""
    low, high = cls.priority_range
    return min(max(priority, low), high)


def pending_limit(policy: Policy, user: str, uid: int) -> int | None:
    if is_admin(policy, user, uid):
        return None
    cls = user_class(policy, user, uid)
    return cls.max_pending if cls.max_pending is not None else policy.max_pending_per_user


def running_limit(policy: Policy, user: str, uid: int) -> int | None:
    if is_admin(policy, user, uid):
        return None
    cls = user_class(policy, user, uid)
    return cls.max_running if cls.max_running is not None else policy.max_running_per_user


# -- waiting jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiting:
    """A job that waits to start, as the queue limit sees it."""

    name: str
    user: str
    uid: int
    created: float
    established: bool  # it already waited in the queue before this pass (never rejected)
    sort_name: tuple[int | str, ...] = ()  # tie-break among jobs first seen together (``job-2`` before ``job-10``)


def over_queue_limit(waiting: Iterable[Waiting], policy: Policy) -> dict[str, str]:
    """The arrivals beyond their user's ``maxPendingJobsPerUser``, each with the one-line why.
    Established jobs count first; arrivals are taken oldest first, then by name."""
    by_user: dict[tuple[str, int], list[Waiting]] = {}
    for job in waiting:
        by_user.setdefault((job.user, job.uid), []).append(job)
    over: dict[str, str] = {}
    for (user, uid), jobs in by_user.items():
        limit = pending_limit(policy, user, uid)
        if limit is None or len(jobs) <= limit:
            continue
        count = sum(job.established for job in jobs)
        for job in sorted((j for j in jobs if not j.established), key=lambda j: (j.created, j.sort_name, j.name)):
            if count < limit:
                count += 1
                continue
            over[job.name] = (
                f"user {user} already has {limit} jobs waiting to start, the most maxPendingJobsPerUser allows; "
                "delete this manifest and submit it again once fewer of yours wait"
            )
    return over


# -- running jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Offer:
    """A job the queue would offer to the scheduler, in queue order."""

    name: str
    user: str
    uid: int
    cpu_only: bool


def over_running_limits(
    offers: Iterable[Offer],
    running_by_user: Counter[tuple[str, int]],
    running_cpu_jobs: int,
    policy: Policy,
) -> dict[str, str]:
    """The offers that would take their user past ``maxRunningJobsPerUser`` or the machine past
    ``maxRunningCpuJobs``, each with why (reason JobLimit). Earlier offers count as started: the
    first N in queue order are offered, the rest wait, so the limit holds whatever binds."""
    by_user = Counter(running_by_user)
    cpu = running_cpu_jobs
    cpu_cap = policy.max_running_cpu_jobs
    over: dict[str, str] = {}
    for offer in offers:
        limit = running_limit(policy, offer.user, offer.uid)
        key = (offer.user, offer.uid)
        if limit is not None and by_user[key] >= limit:
            over[offer.name] = (
                f"user {offer.user} has {by_user[key]} jobs running or starting, the most maxRunningJobsPerUser "
                f"allows ({limit}); starts when one of them ends"
            )
            continue
        if offer.cpu_only and cpu_cap is not None and cpu >= cpu_cap:
            over[offer.name] = (
                f"{cpu} CPU-only jobs are running or starting, the most maxRunningCpuJobs allows ({cpu_cap}); "
                "starts when one of them ends"
            )
            continue
        by_user[key] += 1
        cpu += offer.cpu_only
    return over


# -- reservations ---------------------------------------------------------------------------------


def reservation_violations(
    policy: Policy,
    owner: str,
    uid: int,
    users: list[str],
    gpus: int,
    start: float,
    duration: float,
    now: float,
) -> list[str]:
    """Every bound a non-admin's Reservation breaks, each naming the config.yaml key; empty for
    admins and when config.yaml sets no bounds. ``start`` is the window's start (epoch seconds)."""
    limits = policy.reservations
    if limits is None or is_admin(policy, owner, uid):
        return []
    problems = []
    if "*" not in limits.users and owner not in limits.users and str(uid) not in limits.users:
        problems.append(f"user {owner} may not reserve GPUs (reservations.users in config.yaml; ask an admin)")
    others = [u for u in users if u != owner and u != str(uid)]
    if others:
        problems.append(f"spec.users: only an admin may reserve GPUs for others ({', '.join(others)})")
    if gpus > limits.max_gpus:
        problems.append(f"spec.gpus: {gpus} GPUs, at most {limits.max_gpus} (reservations.maxGpus)")
    if duration > limits.max_duration:
        problems.append(
            f"spec.duration: {format_duration(duration)}, at most {format_duration(limits.max_duration)} (reservations.maxDuration)"
        )
    if start - now > limits.max_start_ahead:
        problems.append(
            f"spec.start: {format_duration(start - now)} ahead, at most {format_duration(limits.max_start_ahead)} "
            "(reservations.maxStartAhead)"
        )
    return problems
