"""The pure reconcile(Snapshot, now) -> Plan: job life cycles driven pass by pass.

``World`` (tests/builders.py) plays gflowd's part: it keeps the manifests and the job records,
feeds them to ``reconcile`` and carries each plan out with the real act code on a fake runtime
(the one fake: processes are kept in memory). Nothing else of the project is mocked.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta, timezone

import pytest
from builders import GIB, T0, World, condition, invalid, job, started

from controller.decide.exits import backoff_delay
from controller.decide.reconcile import reconcile
from controller.model.plan import Host, RunObservation, Stop
from controller.model.records import JobState

# --- start and finish ------------------------------------------------------------------------------


def test_new_job_is_started():
    world = World(job("a", resources={"gpus": 2}))
    plan = world.tick(T0)
    (launch,) = plan.starts
    assert (launch.name, launch.attempt, launch.generation, launch.devices) == ("a", 1, 1, [0, 1])
    assert launch.device_uuids == ["GPU-0000", "GPU-0001"]
    st = world.state()
    assert (st.phase, st.reason, st.message) == ("Running", "Started", "bound to GPUs 0,1")
    assert (st.devices, st.attempt, st.generation, st.start_time, st.created) == ([0, 1], 1, 1, T0, T0)
    assert st.manifest == "jobs/a.yaml"
    assert condition(st, "Admitted")["status"] == "True"
    assert condition(st, "Scheduled")["reason"] == "Bound"
    assert [(e.type, e.reason, e.object) for e in plan.events] == [("Normal", "Started", "a")]


def test_cpu_job_is_started_without_devices():
    world = World(job("a"))
    plan = world.tick(T0)
    assert plan.starts[0].devices == []
    assert world.state().message == "started (CPU job)"


def test_running_job_is_left_alone():
    world = World(job("a"))
    world.tick(T0)
    plan = world.tick(T0 + 5)
    assert plan.starts == () and plan.stops == () and plan.events == ()
    assert world.phase() == ("Running", "Started")
    assert world.state().pid == world.runs["a"].pid


def test_exit_zero_succeeds():
    world = World(job("a", resources={"gpus": 1}))
    world.tick(T0)
    world.exit("a", 0, T0 + 10)
    plan = world.tick(T0 + 11)
    st = world.state()
    assert (st.phase, st.reason, st.exit_code, st.completion_time) == ("Succeeded", "Completed", 0, T0 + 10)
    assert st.devices == [0]  # kept: where it ran
    assert plan.consumed == ("a",)
    world.put(job("b", resources={"gpus": 4}))
    assert started(world.tick(T0 + 11.5)) == ["b"]  # ...but the GPU is free again
    assert plan.starts == ()
    assert world.tick(T0 + 12).starts == ()  # finished stays finished


def test_nonzero_exit_fails_with_the_exit_code():
    world = World(job("a"))
    world.tick(T0)
    world.exit("a", 3, T0 + 1)
    plan = world.tick(T0 + 2)
    st = world.state()
    assert (st.phase, st.reason, st.exit_code) == ("Failed", "Error", 3)
    assert "exit" in st.message and "3" in st.message
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Error")]


def test_killed_by_a_signal_names_the_signal():
    world = World(job("a"))
    world.tick(T0)
    world.exit("a", 137, T0 + 1, signal=9)
    world.tick(T0 + 2)
    assert world.phase() == ("Failed", "Error")
    assert "SIGKILL" in world.state().message


def test_process_that_could_not_start_fails_with_its_error():
    world = World(job("a"))
    world.tick(T0)
    world.runs["a"] = replace(
        world.runs["a"], running=False, exit_code=None, finished_at=T0, error="command not found: nope"
    )
    world.tick(T0 + 1)
    assert world.phase() == ("Failed", "Error")
    assert world.state().message == "command not found: nope"


# --- retries ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 256.0), (10, 300.0), (50, 300.0)]
)
def test_backoff_delay_doubles_from_one_second_up_to_five_minutes(failures, delay):
    assert backoff_delay(failures) == delay


def test_backoff_limit_retries_with_doubling_delay_then_gives_up():
    world = World(job("a", backoffLimit=2))
    world.tick(T0)

    # attempt 1 fails: retry 1 of 2 after 1 s
    world.exit("a", 1, T0 + 10)
    plan = world.tick(T0 + 10)
    st = world.state()
    assert (st.phase, st.reason, st.failed, st.next_attempt_time) == ("Pending", "BackOff", 1, T0 + 11)
    assert st.message == "attempt 1 failed (exited with code 1); retry 1 of 2 in 1s"
    assert plan.wake_at == T0 + 11
    assert plan.starts == ()
    assert world.tick(T0 + 10.5).starts == ()  # still backing off
    assert world.phase() == ("Pending", "BackOff")

    plan = world.tick(T0 + 11)
    assert [(launch.name, launch.attempt) for launch in plan.starts] == [("a", 2)]
    assert world.state().next_attempt_time is None

    # attempt 2 fails: retry 2 of 2 after 2 s
    world.exit("a", 1, T0 + 20)
    plan = world.tick(T0 + 20)
    assert world.phase() == ("Pending", "BackOff")
    assert world.state().next_attempt_time == T0 + 22
    assert plan.wake_at == T0 + 22
    assert world.tick(T0 + 21.9).starts == ()
    assert [launch.attempt for launch in world.tick(T0 + 22).starts] == [3]

    # attempt 3 fails: no retries left
    world.exit("a", 1, T0 + 30)
    plan = world.tick(T0 + 30)
    st = world.state()
    assert (st.phase, st.reason, st.failed) == ("Failed", "BackoffLimitExceeded", 3)
    assert st.message == "attempt 3 failed (exited with code 1); all 2 retries used"
    assert plan.starts == () and plan.wake_at is None


def test_success_after_a_retry():
    world = World(job("a", backoffLimit=1))
    world.tick(T0)
    world.exit("a", 1, T0 + 1)
    world.tick(T0 + 1)
    world.tick(T0 + 2)
    world.exit("a", 0, T0 + 3)
    world.tick(T0 + 4)
    assert world.phase() == ("Succeeded", "Completed")
    assert world.state().attempt == 2


# --- stops: cancel, suspend, time limit, delete ----------------------------------------------------


def test_cancel_while_running_stops_then_ends_cancelled():
    world = World(job("a", resources={"gpus": 1}))
    world.tick(T0)
    world.put(job("a", resources={"gpus": 1}, cancelled=True))
    plan = world.tick(T0 + 1)
    assert plan.stops == (Stop("a", "UserCancelled", 10.0),)
    st = world.state()
    assert (st.phase, st.reason) == ("Running", "Terminating")
    assert condition(st, "Terminating")["reason"] == "UserCancelled"
    assert st.devices == [0]  # the GPUs stay held until the process tree is gone

    assert world.tick(T0 + 2).stops == (Stop("a", "UserCancelled", 10.0),)  # level-triggered: asked again

    world.exit("a", 143, T0 + 3, signal=15)
    plan = world.tick(T0 + 4)
    st = world.state()
    assert (st.phase, st.reason, st.devices) == ("Cancelled", "UserCancelled", [0])  # devices: where it ran
    assert condition(st, "Terminating") is None
    assert plan.stops == () and plan.starts == ()
    assert world.tick(T0 + 5).starts == ()


@pytest.mark.parametrize(
    ("stop_reason", "edit", "outcome"),
    [
        ("UserCancelled", {"cancelled": True}, ("Cancelled", "UserCancelled")),
        ("Suspended", {"suspend": True}, ("Pending", "Suspended")),
    ],
)
def test_stop_whose_terminating_record_was_lost_in_a_crash_keeps_its_reason(stop_reason, edit, outcome):
    # gflowd sent the stop, then died before writing the Terminating condition; the supervisor's
    # exit record says why it was stopped, so the TERM exit is not taken for a failure
    world = World(job("a", resources={"gpus": 1}))
    world.tick(T0)
    world.put(job("a", resources={"gpus": 1}, **edit))
    world.states["a"] = world.last.states["a"]  # as recorded before the stop: Running, no Terminating
    world.tick(T0 + 1)
    world.states["a"].conditions = [c for c in world.states["a"].conditions if c["type"] != "Terminating"]
    world.exit("a", 143, T0 + 2, signal=15)
    world.runs["a"] = replace(world.runs["a"], stop_reason=stop_reason)
    world.tick(T0 + 3)
    assert world.phase() == outcome
    assert world.state().failed == 0


@pytest.mark.parametrize(
    ("stop_reason", "outcome"),
    [
        ("Preempted", ("Pending", "Preempted")),
        ("DeadlineExceeded", ("Failed", "DeadlineExceeded")),
        ("GPUMemoryExceeded", ("Failed", "GPUMemoryExceeded")),
    ],
)
def test_a_stop_sent_just_before_a_crash_is_never_counted_against_backoff_limit(stop_reason, outcome):
    # gflowd sent the stop (a preemption, a time limit, GPU memory) and died before any status
    # said so: the supervisor's exit record carries the reason, and the TERM exit is not the
    # job's failure (with backoffLimit 0 a miscounted failure would end the job for good)
    world = World(job("a", resources={"gpus": 1}, backoffLimit=0), n_gpus=1)
    world.tick(T0)
    world.put(job("b", resources={"gpus": 1}, priority=5))  # what the GPU was freed for
    world.tick(T0 + 1)
    world.exit("a", 143, T0 + 2, signal=15)
    world.runs["a"] = replace(world.runs["a"], stop_reason=stop_reason)
    world.tick(T0 + 3)
    assert world.phase() == outcome
    assert world.state().failed == 0
    assert world.phase("b") == ("Running", "Started")


def test_a_term_exit_without_any_stop_request_is_a_failure():
    world = World(job("a"))
    world.tick(T0)
    world.exit("a", 143, T0 + 2, signal=15)
    world.tick(T0 + 3)
    assert world.phase() == ("Failed", "Error")


def test_an_exit_seen_again_after_a_crash_is_not_counted_twice():
    # the failure was recorded (BackOff, 1 of 1 retries), then gflowd died before the runtime
    # dropped the attempt's exit record; the restarted gflowd observes the same exit again
    world = World(job("a", backoffLimit=1))
    world.tick(T0)
    world.exit("a", 1, T0 + 1)
    ended = world.runs["a"]
    world.tick(T0 + 1.5)
    assert world.phase() == ("Pending", "BackOff") and world.state().failed == 1
    world.runs["a"] = ended
    plan = world.tick(T0 + 1.8)
    assert plan.consumed == ("a",)
    assert world.phase() == ("Pending", "BackOff") and world.state().failed == 1
    plan = world.tick(T0 + 3)
    assert [(launch.name, launch.attempt) for launch in plan.starts] == [("a", 2)]  # the retry still comes


def test_a_retry_whose_start_went_unrecorded_is_recorded_as_that_attempt():
    # attempt 2 was launched, then gflowd died before writing Running/attempt 2; the retry ran
    # and failed meanwhile: the status must say attempt 2 with its pid, not attempt 1
    world = World(job("a", backoffLimit=1, resources={"gpus": 1}))
    world.tick(T0)
    world.exit("a", 1, T0 + 1)
    world.tick(T0 + 1.5)
    assert world.phase() == ("Pending", "BackOff") and world.state().attempt == 1
    world.runs["a"] = RunObservation(
        "a", 2, 777, T0 + 2.5, False, 1, None, T0 + 3, devices=(3,), device_uuids=("GPU-0003",)
    )
    world.tick(T0 + 4)
    st = world.state()
    assert world.phase() == ("Failed", "BackoffLimitExceeded")
    assert (st.attempt, st.pid, st.start_time, st.devices, st.failed) == (2, 777, T0 + 2.5, [3], 2)
    assert st.next_attempt_time is None


def test_stop_uses_the_jobs_termination_grace_period():
    world = World(job("a", terminationGracePeriod="30s"))
    world.tick(T0)
    world.put(job("a", terminationGracePeriod="30s", cancelled=True))
    assert world.tick(T0 + 1).stops == (Stop("a", "UserCancelled", 30.0),)


def test_cancelled_before_start_never_starts():
    world = World(job("a", cancelled=True))
    plan = world.tick(T0)
    assert plan.starts == ()
    assert world.phase() == ("Cancelled", "UserCancelled")


def test_suspend_stops_then_returns_to_pending_and_resume_starts_again():
    world = World(job("a"))
    world.tick(T0)
    world.put(job("a", suspend=True))
    assert world.tick(T0 + 1).stops == (Stop("a", "Suspended", 10.0),)
    world.exit("a", 143, T0 + 2, signal=15)
    plan = world.tick(T0 + 3)
    assert world.phase() == ("Pending", "Suspended")
    assert plan.starts == ()
    assert world.tick(T0 + 4).starts == ()  # stays held
    world.put(job("a"))
    plan = world.tick(T0 + 5)
    assert [(launch.name, launch.attempt) for launch in plan.starts] == [("a", 2)]


def test_suspended_before_start_is_held():
    world = World(job("a", suspend=True))
    assert world.tick(T0).starts == ()
    assert world.phase() == ("Pending", "Suspended")


def test_time_limit_stops_with_deadline_exceeded_then_fails():
    world = World(job("a", timeLimit="1m"))
    world.tick(T0)
    plan = world.tick(T0 + 30)
    assert plan.stops == ()
    assert plan.wake_at == T0 + 60  # the controller wakes itself for the deadline
    plan = world.tick(T0 + 60)
    assert plan.stops == (Stop("a", "DeadlineExceeded", 10.0),)
    assert "time limit of 1m" in world.state().message
    world.exit("a", 143, T0 + 61, signal=15)
    world.tick(T0 + 62)
    assert world.phase() == ("Failed", "DeadlineExceeded")


def test_time_limit_raised_on_a_running_job_takes_effect():
    world = World(job("a", timeLimit=60))
    world.tick(T0)
    world.put(job("a", timeLimit=3600))
    assert world.tick(T0 + 120).stops == ()


def test_deleted_manifest_of_a_running_job_stops_then_is_removed():
    world = World(job("a", resources={"gpus": 1}), job("b"))
    world.tick(T0)
    world.delete("a")
    plan = world.tick(T0 + 1)
    assert plan.stops == (Stop("a", "Deleted", 10.0),)
    assert world.phase() == ("Running", "Terminating")
    assert plan.removed == ()
    world.exit("a", 143, T0 + 2, signal=15)
    plan = world.tick(T0 + 3)
    assert plan.removed == ("a",)
    assert plan.consumed == ("a",)
    assert "a" not in plan.states
    assert "b" in plan.states  # other jobs untouched


def test_deleted_manifest_of_a_pending_job_is_removed_at_once():
    world = World(job("a", resources={"gpus": 8}))
    world.tick(T0)
    world.delete("a")
    plan = world.tick(T0 + 1)
    assert plan.removed == ("a",) and plan.stops == ()
    assert plan.states == {}


# --- rejected manifests ----------------------------------------------------------------------------


def test_rejected_manifest_is_reported_and_becomes_pending_when_fixed():
    world = World(invalid("a", resources={"gpus": -1}))
    plan = world.tick(T0)
    st = world.state()
    assert (st.phase, st.reason) == ("Rejected", "Invalid")
    assert st.message == "spec.resources.gpus: must be >= 0 (jobs/a.yaml)"
    assert condition(st, "Admitted")["status"] == "False"
    assert plan.starts == ()
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Invalid")]

    world.put(job("a", resources={"gpus": 8}))  # fixed, but cannot start right now
    world.tick(T0 + 1)
    st = world.state()
    assert st.phase == "Pending"
    assert condition(st, "Admitted")["status"] == "True"
    assert st.generation == 1


def test_fixed_manifest_is_started():
    world = World(invalid("a", resources={"gpus": -1}))
    world.tick(T0)
    world.put(job("a"))
    assert started(world.tick(T0 + 1)) == ["a"]
    assert world.phase() == ("Running", "Started")


def test_manifest_broken_while_running_does_not_stop_the_job():
    world = World(job("a"))
    world.tick(T0)
    world.put(invalid("a", resources={"gpus": -1}))
    plan = world.tick(T0 + 1)
    assert plan.stops == ()
    assert world.state().phase == "Running"
    assert condition(world.state(), "Admitted")["status"] == "False"


# --- spec changes ----------------------------------------------------------------------------------


def test_finished_job_with_a_changed_command_runs_again_as_a_new_generation():
    world = World(job("a"))
    world.tick(T0)
    world.exit("a", 0, T0 + 1)
    world.tick(T0 + 2)
    assert (world.phase(), world.state().generation) == (("Succeeded", "Completed"), 1)
    world.put(job("a", command=["python", "v2.py"]))
    plan = world.tick(T0 + 3)
    (launch,) = plan.starts
    # attempts count on across generations, so the first run's log (a.1.log) is kept
    assert (launch.attempt, launch.generation, launch.job.spec.command) == (2, 2, ["python", "v2.py"])
    assert world.state().generation == 2
    assert world.state().exit_code is None


def test_failed_job_with_a_changed_spec_runs_again():
    world = World(job("a"))
    world.tick(T0)
    world.exit("a", 1, T0 + 1)
    world.tick(T0 + 2)
    world.put(job("a", command=["fixed"]))
    assert started(world.tick(T0 + 3)) == ["a"]


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"priority": 7}, id="priority"),
        pytest.param({"labels": {"team": "x"}}, id="labels"),
        pytest.param({"suspend": True}, id="suspend"),
    ],
)
def test_finished_job_with_only_control_changes_stays_finished(edit):
    world = World(job("a"))
    world.tick(T0)
    world.exit("a", 0, T0 + 1)
    world.tick(T0 + 2)
    world.put(job("a", **edit))
    plan = world.tick(T0 + 3)
    assert plan.starts == ()
    assert world.phase() == ("Succeeded", "Completed")


def test_rerun_annotation_runs_a_finished_job_again():
    world = World(job("a", annotations={"gflow.dev/rerun": "1"}))
    world.tick(T0)
    world.exit("a", 0, T0 + 1)
    world.tick(T0 + 2)
    world.put(job("a", annotations={"gflow.dev/rerun": "2"}))
    assert started(world.tick(T0 + 3)) == ["a"]


def test_spec_change_while_running_keeps_the_attempt_and_runs_again_after():
    world = World(job("a"))
    world.tick(T0)
    world.put(job("a", command=["v2"]))
    plan = world.tick(T0 + 1)
    assert plan.stops == () and plan.starts == ()
    assert condition(world.state(), "SpecOutdated")["status"] == "True"
    assert world.state().generation == 2
    world.exit("a", 0, T0 + 2)
    plan = world.tick(T0 + 3)
    assert [(launch.generation, launch.job.spec.command) for launch in plan.starts] == [(2, ["v2"])]
    assert condition(world.state(), "SpecOutdated") is None


def test_priority_edit_on_a_running_job_is_recorded_without_a_warning():
    world = World(job("a"))
    world.tick(T0)
    world.put(job("a", priority=9))
    world.tick(T0 + 1)
    assert world.state().priority == 9
    assert condition(world.state(), "SpecOutdated") is None


def test_job_that_ended_without_running_runs_when_its_spec_changes():
    """A job Cancelled by DependencyFailed never ran (its run hash is empty); editing its spec is a
    re-submission (SPEC.md section 3: a finished job whose spec changes runs again), so it must leave
    the terminal phase like any other finished job."""
    world = World(job("p"), job("c", dependsOn=["p"]))
    world.tick(T0)
    world.exit("p", 1, T0 + 1)
    world.tick(T0 + 2)
    assert world.phase("c") == ("Cancelled", "DependencyFailed")
    world.put(job("c", dependsOn=[{"job": "p", "condition": "Finished"}]))
    plan = world.tick(T0 + 3)
    assert started(plan) == ["c"], f"job c stays {world.phase('c')} after its spec changed"


# --- dependencies ----------------------------------------------------------------------------------


def test_dependency_waits_then_starts_when_the_parent_succeeds():
    world = World(job("parent"), job("child", dependsOn=["parent"]))
    plan = world.tick(T0)
    assert started(plan) == ["parent"]
    assert world.phase("child") == ("Pending", "Dependency")
    assert "parent" in world.state("child").message
    world.exit("parent", 0, T0 + 1)
    plan = world.tick(T0 + 2)
    assert started(plan) == ["child"]  # in the same pass that recorded the parent's exit


def test_dependency_on_a_missing_job_waits():
    world = World(job("child", dependsOn=["ghost"]))
    world.tick(T0)
    assert world.phase("child") == ("Pending", "Dependency")
    assert world.state("child").message == "waits for job ghost (does not exist yet)"


def test_dependency_failed_cancels_the_child():
    world = World(job("parent"), job("child", dependsOn=["parent"]))
    world.tick(T0)
    world.exit("parent", 2, T0 + 1)
    plan = world.tick(T0 + 2)
    assert world.phase("child") == ("Cancelled", "DependencyFailed")
    assert world.state("child").message == "job parent ended Failed; this job needed it to be Succeeded"
    assert plan.again is True
    assert plan.starts == ()
    assert ("Warning", "DependencyFailed") in [(e.type, e.reason) for e in plan.events]


@pytest.mark.parametrize(
    ("condition_", "exit_code", "starts"),
    [
        ("Succeeded", 0, True),
        ("Succeeded", 1, False),
        ("Failed", 1, True),
        ("Failed", 0, False),
        ("Finished", 0, True),
        ("Finished", 1, True),
    ],
)
def test_dependency_conditions(condition_, exit_code, starts):
    world = World(job("p"), job("c", dependsOn=[{"job": "p", "condition": condition_}]))
    world.tick(T0)
    world.exit("p", exit_code, T0 + 1)
    plan = world.tick(T0 + 2)
    assert ("c" in started(plan)) is starts
    if not starts:
        assert world.phase("c") == ("Cancelled", "DependencyFailed")


def test_dependency_parent_retrying_keeps_the_child_waiting():
    world = World(job("p", backoffLimit=1), job("c", dependsOn=["p"]))
    world.tick(T0)
    world.exit("p", 1, T0 + 1)
    world.tick(T0 + 1)
    assert world.phase("p") == ("Pending", "BackOff")
    assert world.phase("c") == ("Pending", "Dependency")


@pytest.mark.parametrize(
    "deps",
    [
        pytest.param({"a": ["a"]}, id="self"),
        pytest.param({"a": ["b"], "b": ["a"]}, id="two-cycle"),
        pytest.param({"a": ["b"], "b": ["c"], "c": ["a"]}, id="three-cycle"),
    ],
)
def test_dependency_cycle_is_reported_not_queued_forever(deps):
    """SPEC.md section 7: never silently queued forever; api/job.py leaves dependency cycles to
    admission. Jobs in a cycle can never start, so they must not sit in Pending/Dependency."""
    world = World(*(job(name, dependsOn=parents) for name, parents in deps.items()))
    world.tick(T0)
    world.tick(T0 + 1)
    stuck = [name for name in deps if world.phase(name) == ("Pending", "Dependency")]
    assert stuck == [], f"{stuck} wait on a dependency cycle: {[world.state(n).message for n in stuck]}"


# --- startAfter, queueing --------------------------------------------------------------------------


def test_start_after_in_the_future_waits_and_sets_wake_at():
    world = World(job("a", startAfter="2030-01-01T00:00:00Z"))
    plan = world.tick(T0)
    assert world.phase() == ("Pending", "StartAfter")
    when = 1893456000.0  # 2030-01-01T00:00:00Z
    assert plan.wake_at == when
    assert world.state().message.startswith("starts after 2030-01-01T00:00:00.000Z (in ")
    assert world.tick(when - 1).starts == ()
    assert started(world.tick(when)) == ["a"]


@pytest.mark.parametrize("hours", [0, 2, -5])
def test_a_start_after_without_an_offset_is_read_in_the_snapshots_time_zone(hours):
    # the machine's time zone is a host fact observe hands in; deciding never asks the process
    zone = timezone(timedelta(hours=hours))
    world = World(job("a", startAfter="2030-01-01T00:00:00"), host=Host(local_tz=zone))
    plan = world.tick(T0)
    assert plan.wake_at == 1893456000.0 - hours * 3600  # 2030-01-01T00:00:00 in that zone


def test_start_after_relative_delay_counts_from_first_sight():
    world = World(job("a", startAfter="+2h"))
    plan = world.tick(T0)
    assert plan.wake_at == T0 + 7200
    assert world.tick(T0 + 3600).starts == ()
    assert started(world.tick(T0 + 7200)) == ["a"]


def test_start_after_in_the_past_starts_now():
    world = World(job("a", startAfter="2020-01-01T00:00:00Z"))
    assert started(world.tick(T0)) == ["a"]


def test_higher_priority_runs_first_and_the_rest_queue_in_order():
    world = World(
        job("low", resources={"gpus": 4}, priority=1),
        job("high", resources={"gpus": 3}, priority=5),
        job("mid", resources={"gpus": 2}, priority=3),
        job("tiny", resources={"gpus": 1}, priority=0),
    )
    plan = world.tick(T0)
    # mid is next in line and holds the free GPU, so tiny (lowest priority) may not take it
    assert started(plan) == ["high"]
    assert world.phase("mid") == ("Pending", "Priority")
    assert world.phase("tiny") == ("Pending", "Priority")
    assert [world.state(n).queue_position for n in ("mid", "low", "tiny")] == [1, 2, 3]
    assert world.state("high").queue_position is None


def test_waiting_for_gpus_held_by_running_jobs_is_resources():
    world = World(job("a", resources={"gpus": 3}))
    world.tick(T0)
    world.put(job("b", resources={"gpus": 2}))
    world.tick(T0 + 1)
    assert world.phase("b") == ("Pending", "Resources")
    assert world.state("b").message.startswith("needs 2 GPUs, 1 free")
    world.exit("a", 0, T0 + 2)
    assert started(world.tick(T0 + 3)) == ["b"]


def test_request_that_can_never_fit_is_unschedulable():
    world = World(job("a", resources={"gpus": 8}))
    plan = world.tick(T0)
    assert world.phase() == ("Pending", "Unschedulable")
    assert world.state().message == "needs 8 GPUs, this machine has 4"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Unschedulable")]


# --- restart and crash recovery --------------------------------------------------------------------


def test_running_record_without_a_run_observation_is_lost():
    world = World(job("a", resources={"gpus": 1}))
    world.tick(T0)
    world.runs.clear()  # the controller restarted and nothing is known of the process
    plan = world.tick(T0 + 60)
    st = world.state()
    assert (st.phase, st.reason) == ("Failed", "Lost")
    assert f"pid {st.pid}" in st.message
    assert (st.devices, st.completion_time) == ([0], T0 + 60)  # devices: where it ran
    assert plan.starts == ()
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Lost")]


def test_lost_run_observation_is_failed_lost():
    world = World(job("a"))
    world.tick(T0)
    world.runs["a"] = replace(
        world.runs["a"], running=False, lost=True, error="supervisor vanished", finished_at=T0 + 5
    )
    world.tick(T0 + 6)
    assert world.phase() == ("Failed", "Lost")


def test_restarted_controller_readopts_a_running_job_from_its_status_file():
    from controller.util.yamlio import dump, load_one

    world = World(job("a", resources={"gpus": 2}))
    world.tick(T0)
    # the controller restarts: its memory is rebuilt from the status files
    world.states = {n: JobState.from_status(load_one(dump(s.to_status()))) for n, s in world.states.items()}
    plan = world.tick(T0 + 30)
    assert plan.starts == () and plan.stops == ()
    assert world.phase() == ("Running", "Started")
    assert world.state().devices == [0, 1]
    assert world.state().generation == 1


# --- level-triggered -------------------------------------------------------------------------------


def busy_world() -> World:
    world = World(
        job("a", resources={"gpus": 2}, priority=1, timeLimit=50),
        job("b", resources={"gpus": 3}),
        job("c", resources={"gpus": 1}, priority=-1),
        job("d", dependsOn=["a"]),
        job("e", backoffLimit=3),
        job("f", startAfter="+1h"),
        invalid("g", priority="high"),
    )
    world.tick(T0)
    world.exit("e", 1, T0 + 1)
    world.put(job("a", resources={"gpus": 2}, priority=1, timeLimit=50, cancelled=True))
    return world


def test_reconcile_twice_on_the_same_snapshot_plans_the_same():
    world = busy_world()
    snapshot = world.snapshot()
    first = reconcile(snapshot, T0 + 1.5)
    second = reconcile(snapshot, T0 + 1.5)
    assert first == second
    assert first.stops and first.states  # a non-trivial plan


def test_reconcile_does_not_mutate_the_snapshot():
    world = busy_world()
    snapshot = world.snapshot()
    before = {n: s.copy() for n, s in snapshot.states.items()}
    reconcile(snapshot, T0 + 1.5)
    assert snapshot.states == before


def test_a_pass_with_nothing_new_changes_nothing():
    world = World(job("a", resources={"gpus": 2}), job("b", resources={"gpus": 4}), job("c", dependsOn=["a"]))
    world.tick(T0)
    world.tick(T0)  # b waited on Priority (a took GPUs this pass); from now on a runs: Resources
    assert world.phase("b") == ("Pending", "Resources")
    settled = {n: s.copy() for n, s in world.states.items()}
    plan = world.tick(T0)
    assert plan.starts == () and plan.stops == () and plan.events == ()
    assert world.states == settled


# --- GPUs under running jobs --------------------------------------------------------------------------


def _with_process(world: World, index: int, pid: int, gib: float) -> None:
    from controller.model.gpus import GpuProcess

    world.gpus[index] = replace(world.gpus[index], processes=(GpuProcess(pid, int(gib * GIB)),))


def test_shared_job_over_its_gpu_memory_is_stopped_and_fails_gpu_memory_exceeded():
    world = World(job("s", resources={"gpus": 1, "gpuMemory": "10Gi"}, sharing="Shared"))
    world.tick(T0)
    pid = world.runs["s"].pid
    _with_process(world, 0, pid, 4)
    snap = world.snapshot()
    snap = replace(snap, job_pids={"s": {pid}})
    plan = reconcile(snap, T0 + 1)
    assert plan.stops == ()  # within budget
    _with_process(world, 0, pid, 12)
    snap = world.snapshot()
    snap = replace(snap, job_pids={"s": {pid}})
    plan = reconcile(snap, T0 + 2)
    assert [(s.name, s.reason) for s in plan.stops] == [("s", "GPUMemoryExceeded")]
    world.states = dict(plan.states)
    world.exit("s", 143, T0 + 3, signal=15)
    world.tick(T0 + 3)
    assert world.phase("s") == ("Failed", "GPUMemoryExceeded")
    assert "12Gi" in world.state("s").message and "10Gi" in world.state("s").message


def test_exclusive_job_is_not_limited_by_gpu_memory_accounting():
    world = World(job("e", resources={"gpus": 1}))
    world.tick(T0)
    pid = world.runs["e"].pid
    _with_process(world, 0, pid, 70)
    snap = world.snapshot()
    snap = replace(snap, job_pids={"e": {pid}})
    assert reconcile(snap, T0 + 1).stops == ()


def test_gpu_lost_under_a_running_job_is_reported_and_nothing_new_lands_on_it():
    world = World(job("a", resources={"gpus": 1}), n_gpus=2)
    world.tick(T0)
    assert world.state("a").devices == [0]
    world.gpus[0] = replace(world.gpus[0], healthy=False, error="GPU is lost")
    world.gpus[1] = replace(world.gpus[1], healthy=False, error="GPU is lost")
    world.put(job("b", resources={"gpus": 1}))
    plan = world.tick(T0 + 1)
    assert plan.starts == ()
    cond = condition(world.state("a"), "GPUUnhealthy")
    assert cond is not None and cond["status"] == "True" and "GPU 0: GPU is lost" in cond["message"]
    assert [e.reason for e in plan.events if e.object == "a"] == ["GPUUnhealthy"]
    assert world.phase("b") == ("Pending", "Unschedulable")
    assert world.tick(T0 + 2).events == ()  # reported once


def test_reprioritizing_a_pending_job_reorders_the_queue():
    world = World(job("first", resources={"gpus": 4}))
    world.tick(T0)
    world.put(job("x", resources={"gpus": 2}, priority=1))
    world.put(job("y", resources={"gpus": 2}, priority=2))
    world.tick(T0 + 1)
    assert [world.state(n).queue_position for n in ("y", "x")] == [1, 2]
    world.put(job("x", resources={"gpus": 2}, priority=9))
    world.tick(T0 + 2)
    assert [world.state(n).queue_position for n in ("x", "y")] == [1, 2]
    world.exit("first", 0, T0 + 3)
    plan = world.tick(T0 + 3)
    assert sorted(started(plan)) == ["x", "y"]


# --- removing finished jobs ---------------------------------------------------------------------------


def test_ttl_after_finished_expires_the_job_and_wakes_on_time():
    world = World(job("a", ttlSecondsAfterFinished="30s"), job("keep"))
    world.tick(T0)
    world.exit("a", 0, T0 + 1)
    world.exit("keep", 0, T0 + 1)
    plan = world.tick(T0 + 2)
    assert plan.expired == () and plan.wake_at == T0 + 31
    plan = world.tick(T0 + 31)
    assert [j.name for j in plan.expired] == ["a"]
    assert ("Normal", "Expired") in [(e.type, e.reason) for e in plan.events]


def test_finished_history_keeps_the_newest_finished_jobs():
    world = World(*(job(f"j{i}") for i in range(5)))
    world.tick(T0)
    for i in range(5):
        world.exit(f"j{i}", 0, T0 + 1 + i)
    snap = world.snapshot()
    snap = replace(snap, finished_history=2)
    plan = reconcile(snap, T0 + 10)
    assert sorted(j.name for j in plan.expired) == ["j0", "j1", "j2"]


# --- work proportional to what changed -------------------------------------------------------------


def test_an_unchanged_finished_job_is_kept_as_is_and_a_changed_one_is_reconciled():
    world = World(job("done"), job("edited"))
    world.tick(T0)
    world.exit("done", 0, T0 + 1)
    world.exit("edited", 0, T0 + 1)
    world.tick(T0 + 1)
    first = world.snapshot()
    plan = reconcile(first, T0 + 2)
    world.states = dict(plan.states)
    # next pass: "done" is the very same document, "edited" got a new command
    world.put(job("edited", command=["python", "v2.py"]))
    snap = world.snapshot()
    snap = replace(
        snap, previous=replace(first.admission, jobs={**first.admission.jobs, "done": snap.admission.jobs["done"]})
    )
    plan = reconcile(snap, T0 + 3)
    assert plan.states["done"] is world.states["done"]  # skipped: no copy, no work
    assert [launch.name for launch in plan.starts] == ["edited"]  # re-run with the new spec


def test_a_flood_of_jobs_starts_over_several_passes():
    world = World(*(job(f"j{i:03d}") for i in range(80)))
    plan = world.tick(T0)
    assert len(plan.starts) == 32 and plan.again
    assert world.phase("j079") == ("Pending", "Queued")
    # the same words whatever the batch size, so a waiting job's status is not rewritten every pass
    assert world.state("j079").message == "starts in a moment: a flood of jobs is started in batches, one per pass"
    plan = world.tick(T0)
    assert len(plan.starts) == 32
    plan = world.tick(T0)
    assert len(plan.starts) == 16 and not plan.again


@pytest.mark.parametrize("code, expected", [(0, ("Succeeded", "Completed", 0)), (1, ("Pending", "BackOff", 1))])
def test_an_exit_seen_again_after_a_crash_is_not_recorded_twice(code, expected):
    # gflowd recorded the end, then died before the runtime purged the exit record: the restarted
    # controller observes the same ended attempt again. It must be consumed, not counted again.
    world = World(job("a", backoffLimit=2))
    world.tick(T0)
    world.exit("a", code, T0 + 10)
    ended = world.runs["a"]
    world.tick(T0 + 10)
    recorded = world.state()
    assert (recorded.phase, recorded.reason, recorded.failed) == expected
    world.runs["a"] = ended  # observed again, as after a restart
    plan = world.tick(T0 + 10.5)
    assert plan.consumed == ("a",)
    assert world.state().to_status() == recorded.to_status()
    assert plan.starts == ()


def test_an_attempt_that_ended_before_a_pass_saw_its_pid_keeps_the_pid_its_exit_record_gives():
    # a local launch's pid arrives with the supervisor's news; a stop (suspend) can end the attempt
    # before any pass has seen it running: the status keeps the pid the exit record names
    world = World(job("a"))
    world.tick(T0)
    pid = world.runs["a"].pid
    world.state().pid = None  # gflowd's record, as before the supervisor's first news
    world.exit("a", 0, T0 + 1)
    world.tick(T0 + 1.5)
    assert world.phase() == ("Succeeded", "Completed")
    assert world.state().pid == pid is not None


@pytest.mark.parametrize("retry_ended", [True, False], ids=["retry-ended-meanwhile", "retry-still-running"])
def test_a_retry_decided_before_a_crash_keeps_the_failures_counted_before_it(retry_ended):
    # gflowd recorded attempt 1's failure only in memory, decided the retry (its launch record on
    # disk), and died before any status said either: the status a restart reads says Running,
    # attempt 1, no failures. The retry's own failure must use up the last retry, not grant a
    # third attempt (seen in the torture run under load: 3 attempts with backoffLimit 1).
    world = World(job("a", backoffLimit=1))
    world.tick(T0)
    on_disk = world.state().copy()  # the last status written: attempt 1 Running
    world.exit("a", 3, T0 + 1)
    world.tick(T0 + 1.5)
    assert world.phase() == ("Pending", "BackOff") and world.state().failed == 1
    plan = world.tick(T0 + 3)
    assert [(launch.name, launch.attempt, launch.failed) for launch in plan.starts] == [("a", 2, 1)]
    world.states = {**world.states, "a": on_disk}  # the restart
    if not retry_ended:
        world.tick(T0 + 4)  # re-adopted while it runs
        assert world.phase() == ("Running", "Started") and world.state().attempt == 2
        assert world.state().failed == 1
    world.exit("a", 3, T0 + 5)
    plan = world.tick(T0 + 6)
    st = world.state()
    assert (st.phase, st.reason, st.attempt, st.failed) == ("Failed", "BackoffLimitExceeded", 2, 2)
    assert world.tick(T0 + 30).starts == ()


def test_an_attempt_held_by_a_full_disk_and_forgotten_in_a_restart_starts_under_its_own_number():
    # the launch record could not be written (DiskFull): the runtime held the attempt in memory and
    # the status said Pending/DiskFull, attempt 1. gflowd restarted: nothing of it is left but that
    # status. It never began, so it starts as attempt 1, not 2.
    world = World(job("a"))
    world.tick(T0)
    world.runs["a"] = replace(world.runs["a"], pid=None, queued="DiskFull", message="No space left on device")
    world.tick(T0 + 1)
    assert world.phase() == ("Pending", "DiskFull") and world.state().attempt == 1
    del world.runs["a"]  # the restart: the held launch lived in the old gflowd's memory only
    plan = world.tick(T0 + 2)
    assert [(launch.name, launch.attempt) for launch in plan.starts] == [("a", 1)]
    assert world.phase() == ("Running", "Started") and world.state().attempt == 1
