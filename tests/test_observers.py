"""The digest of a pass (pure): starts and their queue wait, phase transitions, ended attempts;
and the one hook's promise that a broken observer never breaks the loop."""

from __future__ import annotations

import logging

import pytest

from controller.model.documents import AdmissionResult
from controller.model.plan import Event, Launch, Plan, RunObservation
from controller.model.records import JobState
from controller.sinks.hooks import Digest, PassRecord, Sinks


def st(name: str, phase: str, reason: str = "", **kw) -> JobState:
    return JobState(name=name, phase=phase, reason=reason, created=kw.pop("created", 100.0), **kw)


def plan_of(states: list[JobState], events=(), starts=(), consumed=(), removed=()) -> Plan:
    return Plan(
        states={s.name: s for s in states},
        events=tuple(Event("Normal", reason, name, "") for name, reason in events),
        starts=tuple(Launch(name, attempt, 1, None, [], []) for name, attempt in starts),
        consumed=tuple(consumed),
        removed=tuple(removed),
    )


def test_wait_runs_from_creation_then_from_requeue():
    digest = Digest()
    new = st("a", "Pending", "Resources", created=100.0)
    facts = digest.digest(
        PassRecord({}, plan_of([new], events=[("a", "Resources")]), {}, AdmissionResult(), 100.0, 0.01)
    )
    assert [t.name for t in facts.transitions] == ["a"] and facts.transitions[0].old_phase is None
    running = st("a", "Running", "Started", attempt=1, labels={"team": "vision"})
    facts = digest.digest(
        PassRecord(
            {"a": new},
            plan_of([running], events=[("a", "Started")], starts=[("a", 1)]),
            {},
            AdmissionResult(),
            130.0,
            0.01,
        )
    )
    assert [(s.name, s.attempt, s.wait) for s in facts.started] == [("a", 1, 30.0)]
    # the attempt fails and is retried after a 2 s back-off: its wait counts from then
    retry = st("a", "Pending", "BackOff", attempt=1, next_attempt_time=202.0, labels={"team": "vision"})
    run = RunObservation("a", 1, 42, started_at=130.0, running=False, exit_code=3, finished_at=200.0, devices=(0, 1))
    facts = digest.digest(
        PassRecord(
            {"a": running},
            plan_of([retry], events=[("a", "BackOff")], consumed=["a"]),
            {"a": run},
            AdmissionResult(),
            200.0,
            0.01,
        )
    )
    [end] = facts.ended
    assert (end.attempt, end.phase, end.final, end.exit_code, end.gpus, end.wait) == (1, "Pending", False, 3, 2, 30.0)
    assert end.labels == {"team": "vision"}
    again = st("a", "Running", "Started", attempt=2)
    facts = digest.digest(
        PassRecord(
            {"a": retry},
            plan_of([again], events=[("a", "Started")], starts=[("a", 2)]),
            {},
            AdmissionResult(),
            210.0,
            0.01,
        )
    )
    assert facts.started[0].wait == 8.0


def test_after_a_restart_wait_falls_back_to_the_status_and_unchanged_jobs_are_not_transitions():
    digest = Digest()
    old = st("b", "Pending", "Resources", created=50.0)
    same = st("c", "Succeeded", "Completed")
    running = st("b", "Running", "Started", attempt=1, created=50.0)
    plan = plan_of([running, same], events=[("b", "Started"), ("c", "Completed")], starts=[("b", 1)])
    facts = digest.digest(PassRecord({"b": old, "c": same}, plan, {}, AdmissionResult(), 80.0, 0.01))
    assert facts.started[0].wait == 30.0
    assert [t.name for t in facts.transitions] == ["b"]


def test_a_job_that_ends_without_running_is_an_ended_record():
    digest = Digest()
    old = st("d", "Pending", "Dependency")
    failed = st("d", "Cancelled", "DependencyFailed", completion_time=300.0)
    facts = digest.digest(
        PassRecord({"d": old}, plan_of([failed], events=[("d", "DependencyFailed")]), {}, AdmissionResult(), 300.0, 0.0)
    )
    [end] = facts.ended
    assert (end.phase, end.reason, end.started, end.finished, end.final) == (
        "Cancelled",
        "DependencyFailed",
        None,
        300.0,
        True,
    )


def test_a_broken_sink_is_reported_once_and_the_others_still_run(caplog):
    seen = []

    class Broken:
        def consume(self, facts):
            raise RuntimeError("boom")

        def close(self):
            pass

    class Counting:
        def consume(self, facts):
            seen.append(facts)

        def close(self):
            pass

    sinks = Sinks([Broken(), Counting()])
    with caplog.at_level(logging.ERROR, logger="gflowd.sinks"):
        for _ in range(3):
            sinks.after_pass({}, plan_of([]), {}, AdmissionResult(), 1.0, 0.0)
    assert len(seen) == 3
    assert sum("sink Broken failed" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.e2e
def test_a_plain_gflowd_does_not_import_prometheus_or_tenacity(tmp_path):
    """Metrics and webhooks cost nothing unless configured (gflowd start-up stays lean)."""
    import subprocess
    import sys

    program = f"""
import sys
from controller.api.config import ControllerConfig
from controller.sinks.hooks import start_sinks
from controller.paths import Home
home = Home.resolve({str(tmp_path)!r}); home.ensure()
sinks = start_sinks(home, ControllerConfig())
assert [type(o).__name__ for o in sinks.sinks] == ["HistoryWriter"], sinks.sinks
print(sorted(m for m in ("prometheus_client", "tenacity", "urllib.request") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
