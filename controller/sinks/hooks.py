"""After-pass hooks: the job history, metrics and webhooks, fed with what each pass did.

After each pass the daemon hands one :class:`PassRecord` to :class:`Sinks` (a single call, the
only hook in the loop). :class:`Digest` turns it into facts -- which jobs started (and how long they
waited in the queue), which changed phase, which attempts ended -- at a cost proportional to what
the pass changed, never to how many jobs exist. Each sink then takes what it needs:

* ``controller.sinks.history.HistoryWriter``: appends finished attempts to ``run/history.jsonl``
  (always on; ``gflowctl stats`` reads it, so statistics survive jobs removed by TTL).
* ``controller.sinks.metrics.MetricsServer``: Prometheus metrics, served from its own thread.
* ``controller.sinks.notify.Notifier``: webhooks, posted from background workers.

A sink must never slow or break the loop: each is called inside its own ``try``, does O(1)
work per fact, and leaves anything slow (HTTP, rendering) to its own threads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.model.reasons import TERMINAL_PHASES

log = logging.getLogger("gflowd.sinks")


@dataclass
class PassRecord:
    """What one pass saw and decided. ``previous``: the job states before it; ``plan``: the
    ``reconcile.Plan`` it acted on (its states are never mutated afterwards)."""

    previous: dict[str, Any]
    plan: Any
    runs: dict[str, Any]
    admission: Any
    now: float
    duration: float
    gpu_usage: dict[str, Any] = field(default_factory=dict)  # running attempts' sampled GPU usage (model.usage)


# slots, not frozen: a pass that admits 10,000 new jobs makes 10,000 of these, and a frozen
# dataclass costs ~5x more to build
@dataclass(slots=True)
class Started:
    name: str
    attempt: int
    wait: float  # seconds from entering the queue (or becoming eligible again) to this start


@dataclass(slots=True)
class Transition:
    """A job whose (phase, reason) changed in this pass; ``state`` is its new ``JobState``."""

    name: str
    old_phase: str | None
    state: Any


@dataclass(slots=True)
class AttemptEnd:
    """A finished attempt, or a job that ended without running (``started`` is None then)."""

    name: str
    attempt: int
    phase: str  # the job's phase after it: Pending (a retry) or a terminal phase
    reason: str
    exit_code: int | None
    started: float | None
    finished: float
    gpus: int
    devices: tuple[int, ...]
    labels: dict[str, str]
    uid: int
    generation: int
    created: float
    wait: float | None
    owner: str | None = None
    usage: dict | None = None  # {cpuSeconds, peakMemoryBytes} from the attempt's cgroup
    gpu_hours_used: float | None = None  # utilization-weighted, when its GPUs were sampled (gpuUsage)

    @property
    def final(self) -> bool:
        return self.phase in TERMINAL_PHASES


@dataclass
class PassFacts:
    record: PassRecord
    started: list[Started] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    ended: list[AttemptEnd] = field(default_factory=list)


def _gpu_hours_used(state, attempt: int) -> float | None:
    usage = state.gpu_usage if state is not None else None
    return usage.get("gpuHoursUsed") if usage and usage.get("attempt") == attempt else None


class Digest:
    """Turns pass records into facts. Remembers, per pending job, when it entered the queue (so a
    start can report its wait) and, per running job, that wait (for the attempt's history line).
    After a controller restart both fall back to what the status says (creation time)."""

    def __init__(self) -> None:
        self.queued_since: dict[str, float] = {}
        self.waits: dict[str, float] = {}

    def digest(self, record: PassRecord) -> PassFacts:
        plan, previous, now = record.plan, record.previous, record.now
        facts = PassFacts(record)
        seen: set[str] = set()
        for event in plan.events:
            name = event.object
            if event.kind != "job" or not name or name in seen:
                continue
            seen.add(name)
            state = plan.states.get(name)
            old = previous.get(name)
            if state is None or (old is not None and (old.phase, old.reason) == (state.phase, state.reason)):
                continue
            facts.transitions.append(Transition(name, old.phase if old is not None else None, state))
            if state.phase == "Pending" and (old is None or old.phase != "Pending"):
                since = state.created if old is None else now
                if state.next_attempt_time:  # a retry waits out its back-off before it queues
                    since = max(since, state.next_attempt_time)
                self.queued_since[name] = since
        for launch in plan.starts:
            state = plan.states.get(launch.name)
            old = previous.get(launch.name)
            since = self.queued_since.pop(launch.name, None)
            if since is None:
                since = max(state.created if state else now, (old.completion_time or 0.0) if old else 0.0)
            wait = max(0.0, now - since)
            self.waits[launch.name] = wait
            facts.started.append(Started(launch.name, launch.attempt, wait))
        uids = record.admission.jobs if record.admission is not None else {}
        consumed = set()
        for name in plan.consumed:
            run = record.runs.get(name)
            if run is None:
                continue
            consumed.add(name)
            state = plan.states.get(name)
            old = previous.get(name) or state
            if state is not None and state.phase == "Running" and state.attempt != run.attempt:
                # ended and started anew within this pass: not the job's outcome
                phase, reason = "Pending", "Completed" if run.exit_code == 0 else "Error"
            elif state is not None:
                phase, reason = state.phase, state.reason
            else:
                phase, reason = "Cancelled", "Deleted"
            job = uids.get(name)
            ref = state or old
            facts.ended.append(
                AttemptEnd(
                    name=name,
                    attempt=run.attempt,
                    phase=phase,
                    reason=reason,
                    exit_code=run.exit_code,
                    started=run.started_at,
                    finished=run.finished_at or now,
                    gpus=len(run.devices),
                    devices=tuple(run.devices),
                    labels=dict(ref.labels) if ref else {},
                    uid=job.owner_uid if job is not None else -1,
                    generation=ref.generation if ref else 0,
                    created=ref.created if ref else 0.0,
                    wait=self.waits.pop(name, None),
                    owner=ref.owner if ref else None,
                    usage=run.usage,
                    gpu_hours_used=_gpu_hours_used(ref, run.attempt),
                )
            )
        for tr in facts.transitions:  # ended without an attempt of its own: cancelled, dependency failed
            state = tr.state
            if state.phase in TERMINAL_PHASES and tr.name not in consumed and tr.old_phase != "Running":
                job = uids.get(tr.name)
                facts.ended.append(
                    AttemptEnd(
                        name=tr.name,
                        attempt=state.attempt,
                        phase=state.phase,
                        reason=state.reason,
                        exit_code=state.exit_code,
                        started=None,
                        finished=state.completion_time or now,
                        gpus=0,
                        devices=(),
                        labels=dict(state.labels),
                        uid=job.owner_uid if job is not None else -1,
                        generation=state.generation,
                        created=state.created,
                        wait=None,
                        owner=state.owner,
                    )
                )
                self.queued_since.pop(tr.name, None)
        for name in plan.removed:
            self.queued_since.pop(name, None)
            self.waits.pop(name, None)
        return facts


class Sink(Protocol):
    def consume(self, facts: PassFacts) -> None: ...

    def close(self) -> None: ...


class Sinks:
    """The loop's one hook: digests each pass once and hands the facts to every sink."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks
        self.digest = Digest()
        self._failed: set[str] = set()

    def after_pass(
        self,
        previous: dict,
        plan,
        runs: dict,
        admission,
        now: float,
        duration: float,
        gpu_usage: dict | None = None,
    ) -> None:
        try:
            facts = self.digest.digest(PassRecord(previous, plan, runs, admission, now, duration, gpu_usage or {}))
        except Exception:  # a bug here must not stop scheduling
            self._complain("digest")
            return
        for sink in self.sinks:
            try:
                sink.consume(facts)
            except Exception:
                self._complain(type(sink).__name__)

    def _complain(self, what: str) -> None:
        if what not in self._failed:  # once per sink: a broken sink must not flood the log
            self._failed.add(what)
            log.exception("sink %s failed; the controller carries on without it", what)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("closing sink %s", type(sink).__name__)


class SinkError(Exception):
    """A sink could not start (e.g. the metrics port is taken): a one-line user error."""


def start_sinks(home, config, clock=time.time) -> Sinks:
    """The sinks ``config`` asks for, started. History is always kept. Imports the metrics
    and webhook modules only when configured, so a plain gflowd pays nothing for them."""
    from controller.sinks.history import HistoryWriter  # lazy: history imports pwd, only gflowd needs it

    sinks: list[Sink] = [HistoryWriter(home)]
    if getattr(config, "metrics_port", None) is not None:
        from controller.sinks.metrics import MetricsServer  # lazy: prometheus_client, only with --metrics-port

        sinks.append(MetricsServer(config.metrics_address, config.metrics_port))
    if getattr(config, "webhooks", None):
        from controller.sinks.notify import Notifier  # lazy: tenacity and urllib, only with webhooks

        sinks.append(Notifier(config.webhooks))
    return Sinks(sinks)
