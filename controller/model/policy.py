"""The queue policy's settings (``controller.decide.policy`` applies them): scheduler mode,
order, aging, fair share, quotas, preemption. Fixed for a run of gflowd."""

from __future__ import annotations

from dataclasses import dataclass, field


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
