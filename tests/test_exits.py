"""An ended attempt -> the job's phase (``decide/exits.py``), one row per case.

The table covers every way an attempt ends: the stop gflowd asked for (each ``StopReason``, from the
Terminating condition or, after a crash, from the supervisor's exit record), the runtime's own
enforcement (time limit, OOM), a lost supervisor, success, and failures with and without retries
left. A stop gflowd asked for is never the job's failure: ``failed`` stays 0.
"""

from __future__ import annotations

import pytest
from builders import T0, exited, state

from controller.decide.exits import STOPPED, record_exit
from controller.model.plan import RunObservation
from controller.model.reasons import StopReason

TERM = {"code": 143, "signal": 15}


def ended(code: int | None = 1, *, signal: int | None = None, **facts) -> RunObservation:
    return exited("a", code, T0 + 10, signal=signal, **facts)


def stop(reason: str, message: str = "why") -> dict[str, str]:
    return {"type": "Terminating", "status": "True", "reason": reason, "message": message, "lastTransitionTime": "t"}


CASES = [
    # (id, run, stop, backoffLimit, failed before) -> (phase, reason, failed after, completion time kept)
    ("success", ended(0), None, 0, 0, ("Succeeded", "Completed", 0, True)),
    ("failure, no retries", ended(3), None, 0, 0, ("Failed", "Error", 1, True)),
    ("failure, a retry left", ended(3), None, 2, 0, ("Pending", "BackOff", 1, False)),
    ("failure, retries used", ended(3), None, 2, 2, ("Failed", "BackoffLimitExceeded", 3, True)),
    ("OOM, a retry left", ended(137, signal=9, reason="OOMKilled"), None, 1, 0, ("Pending", "BackOff", 1, False)),
    ("OOM, no retries", ended(137, signal=9, reason="OOMKilled"), None, 0, 0, ("Failed", "OOMKilled", 1, True)),
    (
        "supervisor's own time limit",
        ended(**TERM, reason="DeadlineExceeded"),
        None,
        3,
        0,
        ("Failed", "DeadlineExceeded", 0, True),
    ),
    ("lost", ended(None, lost=True, error="supervisor vanished"), None, 3, 0, ("Failed", "Lost", 0, True)),
    ("could not start", ended(127, error="command not found: x"), None, 0, 0, ("Failed", "Error", 1, True)),
    ("stopped: suspended", ended(**TERM), stop("Suspended"), 0, 0, ("Pending", "Suspended", 0, False)),
    ("stopped: cancelled", ended(**TERM), stop("UserCancelled"), 0, 0, ("Cancelled", "UserCancelled", 0, True)),
    ("stopped: preempted", ended(**TERM), stop("Preempted"), 0, 0, ("Pending", "Preempted", 0, False)),
    ("stopped: time limit", ended(**TERM), stop("DeadlineExceeded"), 0, 0, ("Failed", "DeadlineExceeded", 0, True)),
    ("stopped: GPU memory", ended(**TERM), stop("GPUMemoryExceeded"), 0, 0, ("Failed", "GPUMemoryExceeded", 0, True)),
    ("stopped: deleted", ended(**TERM), stop("Deleted"), 0, 0, ("Cancelled", "Deleted", 0, True)),
    ("stopped, exit 0 anyway", ended(0), stop("Preempted"), 0, 0, ("Pending", "Preempted", 0, False)),
    ("a retry's preemption", ended(**TERM), stop("Preempted"), 1, 1, ("Pending", "Preempted", 1, False)),
]


@pytest.mark.parametrize(
    ("run", "stop_", "limit", "failed", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_an_ended_attempt_becomes_a_phase(run, stop_, limit, failed, outcome):
    record = state("a", phase="Running", attempt=1, failed=failed, conditions=[stop_] if stop_ else [])
    record_exit(record, run, stop_, limit)
    phase, reason, failed_after, keeps_completion = outcome
    assert (record.phase, record.reason, record.failed) == (phase, reason, failed_after)
    assert (record.completion_time == T0 + 10) is keeps_completion
    assert record.ended_attempt == 1 and record.exit_code == run.exit_code
    assert not any(c["type"] == "Terminating" for c in record.conditions)


def test_every_stop_reason_has_its_own_outcome():
    # a StopReason without a row would fall through to "failure" and count against backoffLimit
    assert set(STOPPED) == set(StopReason)
    for reason in StopReason:
        record = state("a", phase="Running", attempt=1)
        record_exit(record, ended(**TERM), stop(reason), 0)
        assert record.failed == 0, reason


def test_a_preemption_keeps_when_it_happened_and_why():
    record = state("a", phase="Running", attempt=2)
    record_exit(record, exited("a", 143, T0 + 10, attempt=2, signal=15), stop("Preempted", "preempted by job b"), 0)
    condition = next(c for c in record.conditions if c["type"] == "Preempted")
    assert (condition["lastTransitionTime"], condition["reason"]) == ("t", "Preempted")
    assert record.message == "preempted by job b; attempt 2 stopped (killed by SIGTERM (exit code 143))"


def test_back_off_is_counted_from_the_end_of_the_attempt():
    record = state("a", phase="Running", attempt=1, failed=1)
    record_exit(record, ended(1), None, 5)
    assert record.next_attempt_time == T0 + 10 + 2.0  # the second failure waits 2 s
    assert record.message == "attempt 1 failed (exited with code 1); retry 2 of 5 in 2s"
