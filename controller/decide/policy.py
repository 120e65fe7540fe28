"""Queue policy: in which order pending jobs are offered to the scheduler, and which quota groups
each job counts against. Shared by the controller (``reconcile``) and the simulator, so what the
simulator measures is what the controller does.

Pure functions of job facts and an injected clock:
- **order**: ``priority`` (higher first, then arrival) or ``fifo`` (arrival only);
- **aging**: the effective priority is ``priority + min(agingMax, waited // agingInterval)``, so a
  low-priority job climbs past a stream of newer higher ones and never waits forever;
- **fair share**: within one effective priority, the user with fewer recent GPU-seconds goes first.
  Usage decays exponentially with a half-life: a GPU-second used one half-life ago counts half;
- **quotas**: per user and per label (``team=vision``), the most GPUs its running jobs may hold at once.

A job's *user* is the Unix owner of its manifest file (the uid it runs as), by name; the names
come in with the snapshot (``controller.observe.host``), so nothing here asks the system.
"""

from __future__ import annotations

import math
from typing import Mapping

from controller.model.policy import Policy
from controller.model.scheduling import QuotaUse

LN2 = math.log(2)


def policy_from_config(config) -> Policy:
    """The policy part of a :class:`controller.api.config.ControllerConfig`."""
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
    )


def effective_priority(priority: int, waited: float, policy: Policy) -> int:
    """``priority`` plus one point per ``aging_interval`` waited, at most ``aging_max`` points."""
    if policy.order == "fifo":
        return 0
    if not policy.aging_interval or waited <= 0:
        return priority
    return priority + min(policy.aging_max, int(waited // policy.aging_interval))


def queue_key(priority: int, waited: float, usage: float, policy: Policy) -> tuple:
    """Sort key of a pending job (ascending = offered first); ties are broken by the caller
    (arrival, then name). Fair share orders jobs of one effective priority, except jobs that have
    aged to the cap: those go first, oldest first, so a heavy user's job cannot be passed forever."""
    if policy.order == "fifo":
        return (0, 0, 0.0)
    effective = effective_priority(priority, waited, policy)
    if policy.aging_interval and waited >= policy.aging_max * policy.aging_interval:
        return (-effective, 0, -waited)
    return (-effective, 1, usage if policy.fair_share_half_life else 0.0)


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
