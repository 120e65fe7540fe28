"""What an ended attempt's checkpoint record makes of the job (decide/exits.py, pure): the
Checkpointed condition and event, CheckpointTimeout, and which stops return to Pending."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import T0, World, condition, exited, job, state

from controller.decide.exits import record_checkpoint, record_exit


def stop(reason: str) -> dict[str, str]:
    return {"type": "Terminating", "status": "True", "reason": reason, "message": "why", "lastTransitionTime": "t"}


CONFIRMED = {
    "signal": "USR1",
    "signalledAt": T0 + 5,
    "why": "x",
    "confirmed": True,
    "timedOut": False,
    "confirmedAt": T0 + 6,
    "path": "/ckpt/7",
}
UNCONFIRMED = {"signal": "USR1", "signalledAt": T0 + 5, "why": "Suspended", "confirmed": False, "timedOut": True}


def end(stop_reason: str, checkpoint: dict | None, requeue: bool = False):
    record = state("a", phase="Running", attempt=1)
    run = exited("a", 143, T0 + 10, signal=15, checkpoint=checkpoint)
    record_exit(record, run, stop(stop_reason), 0)
    return record, record_checkpoint(record, run, requeue)


@pytest.mark.parametrize(
    "reason, requeue, phase",
    [
        ("IdleTimeout", False, ("Pending", "Checkpointed")),
        ("DeadlineExceeded", True, ("Pending", "Checkpointed")),
        ("DeadlineExceeded", False, ("Failed", "DeadlineExceeded")),  # requeue not asked: the limit fails it
        ("Preempted", False, ("Pending", "Preempted")),
        ("Suspended", False, ("Pending", "Suspended")),
        ("UserCancelled", False, ("Cancelled", "UserCancelled")),
    ],
)
def test_a_confirmed_checkpoint_and_what_each_stop_becomes(reason, requeue, phase):
    record, events = end(reason, CONFIRMED, requeue)
    assert (record.phase, record.reason) == phase
    condition = next(c for c in record.conditions if c["type"] == "Checkpointed")
    assert condition["message"].startswith("attempt 1 confirmed a checkpoint at /ckpt/7")
    assert [(e.type, e.reason) for e in events] == [("Normal", "Checkpointed")]


def test_an_unconfirmed_signal_is_a_warning_and_an_idle_stop_still_fails():
    record, events = end("IdleTimeout", UNCONFIRMED)
    assert (record.phase, record.reason) == ("Failed", "IdleTimeout")
    assert [(e.type, e.reason) for e in events] == [("Warning", "CheckpointTimeout")]
    assert "SIGUSR1 sent (Suspended)" in events[0].message
    assert not [c for c in record.conditions if c["type"] == "Checkpointed"]


def test_no_checkpoint_record_changes_nothing():
    record, events = end("IdleTimeout", None)
    assert (record.phase, record.reason, events) == ("Failed", "IdleTimeout", [])


def test_the_next_attempt_resumes_and_a_rerun_starts_afresh():
    checkpoint = {"signal": "USR1", "before": "1m"}
    world = World(job("a", backoffLimit=1, checkpoint=checkpoint))
    world.tick(T0)
    world.exit("a", 1, T0 + 1)
    world.runs["a"] = replace(world.runs["a"], checkpoint=CONFIRMED)
    starts = [*world.tick(T0 + 2).starts, *world.tick(T0 + 10).starts]  # failed, retried after back-off
    assert [launch.resume for launch in starts] == [True]  # the retry resumes from the checkpoint
    world.exit("a", 0, T0 + 11)
    world.tick(T0 + 12)
    assert world.phase() == ("Succeeded", "Completed")
    world.put(job("a", backoffLimit=1, checkpoint=checkpoint, annotations={"gflow.dev/rerun": "1"}))
    plan = world.tick(T0 + 13)
    assert [launch.resume for launch in plan.starts] == [False]  # a new run: nothing to resume
    assert condition(world.state(), "Checkpointed") is None


def test_gflowd_and_the_supervisor_agree_on_the_stops_a_checkpoint_precedes():
    from controller.act.runtime.shim.checkpoint import CHECKPOINT_STOPS as SUPERVISOR_STOPS
    from controller.decide.running import CHECKPOINT_STOPS

    assert set(SUPERVISOR_STOPS) == {str(reason) for reason in CHECKPOINT_STOPS}


def test_the_stopping_message_says_the_stop_waits_for_the_checkpoint():
    world = World(job("a", checkpoint={"signal": "USR1", "grace": "2m"}))
    world.tick(T0)
    world.put(job("a", checkpoint={"signal": "USR1", "grace": "2m"}, suspend=True))
    world.tick(T0 + 1)
    assert "SIGUSR1 sent to pid 1001 for a checkpoint, waiting up to 2m for it; then TERM" in world.state().message


def test_a_confirmation_seen_while_running_is_shown_once_and_not_announced_again_at_the_end():
    world = World(job("a", checkpoint={"signal": "USR1"}))
    world.tick(T0)
    published = {"confirmedAt": T0 + 3, "path": "/ckpt/epoch-1"}  # what the supervisor publishes while it runs
    world.runtime.runs["a"] = replace(world.runtime.runs["a"], checkpoint=published)
    plan = world.tick(T0 + 4)
    assert world.phase() == ("Running", "Started")
    assert condition(world.state(), "Checkpointed")["message"].startswith("attempt 1 confirmed a checkpoint at /ckpt")
    assert [e.reason for e in plan.events] == ["Checkpointed"]
    assert not [e for e in world.tick(T0 + 5).events if e.reason == "Checkpointed"]  # the same one: said once
    newer = {"confirmedAt": T0 + 6, "path": "/ckpt/epoch-2"}
    world.runtime.runs["a"] = replace(world.runtime.runs["a"], checkpoint=newer)
    assert [e.reason for e in world.tick(T0 + 7).events] == ["Checkpointed"]
    assert "/ckpt/epoch-2" in condition(world.state(), "Checkpointed")["message"]
    world.runtime.exit("a", 1, T0 + 8, checkpoint={**newer, "signal": "USR1", "signalledAt": None, "confirmed": None})
    plan = world.tick(T0 + 9)
    assert world.phase() == ("Failed", "Error")
    assert not [e for e in plan.events if e.reason == "Checkpointed"]  # its end reports the one already shown
