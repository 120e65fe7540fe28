"""Reservations in the pure core: admission (rejections with the numbers), the window's phases, and
the queue before, inside and after a window (backfill into the gap only when the timeLimit fits;
listed users vs others; ``devices`` vs ``gpus: N``). Real admission, reconcile and scheduler code,
driven by ``World`` on a fixed clock (T0 = 2027-01-15 08:00 UTC)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.decide.reservations import window_text
from controller.model.plan import Host
from controller.model.records import rfc3339
from tests.builders import T0, World, documents, job

HOUR = 3600.0
ALICE, BOB = 1000, 1001
HOST = Host(user_names={ALICE: "alice", BOB: "bob"})


def reservation(
    name: str = "r", *, users=("alice",), start: str | float = T0 + HOUR, duration: str = "2h", **form
) -> object:
    form = form or {"devices": [0, 1]}
    when = start if isinstance(start, str) else rfc3339(start)
    body = "\n".join(f"  {k}: {v}" for k, v in form.items())
    text = (
        f"kind: Reservation\nmetadata: {{name: {name}}}\nspec:\n  users: [{', '.join(users)}]\n{body}\n"
        f"  start: '{when}'\n  duration: {duration}\n"
    )
    (doc,) = documents(text, stem=name)
    return doc


def owned(doc, uid: int):
    return replace(doc, owner_uid=uid)


# -- the queue: before, inside and after the window -----------------------------------------------

WINDOW = "09:00-11:00"  # T0 + 1h .. T0 + 3h, UTC


@pytest.mark.parametrize(
    "now, owner, time_limit, runs, message",
    [
        # before the window: others only when their timeLimit ends by its start
        (
            T0,
            BOB,
            None,
            False,
            f"needs 1 GPU, none free for it: GPUs 0,1 reserved for alice {WINDOW} "
            "(with a timeLimit of at most 1h it could use them now)",
        ),
        (T0, BOB, "30m", True, None),
        (T0, BOB, "1h", True, None),  # ends exactly as the window opens
        (
            T0,
            BOB,
            "2h",
            False,
            f"needs 1 GPU, none free for it: GPUs 0,1 reserved for alice {WINDOW} "
            "(with a timeLimit of at most 1h it could use them now)",
        ),
        (T0 + HOUR - 600, BOB, "20m", False, "(with a timeLimit of at most 10m it could use them now)"),
        (T0, ALICE, None, True, None),  # the listed user may always use her GPUs
        # inside the window: only the listed users
        (T0 + HOUR, BOB, "1m", False, f"needs 1 GPU, none free for it: GPUs 0,1 reserved for alice {WINDOW}"),
        (T0 + 2 * HOUR, BOB, None, False, f"GPUs 0,1 reserved for alice {WINDOW}"),
        (T0 + 2 * HOUR, ALICE, None, True, None),
        # after it: nothing is reserved
        (T0 + 3 * HOUR, BOB, None, True, None),
        (T0 + 5 * HOUR, BOB, None, True, None),
    ],
)
def test_a_window_fences_others_off_its_gpus(now, owner, time_limit, runs, message):
    spec = {"resources": {"gpus": 1}}
    if time_limit:
        spec["timeLimit"] = time_limit
    world = World(reservation(), owned(job("j", **spec), owner), n_gpus=2, host=HOST)
    world.tick(now)
    phase, reason = world.phase("j")
    if runs:
        assert (phase, reason) == ("Running", "Started")
    else:
        assert (phase, reason) == ("Pending", "Reserved")
        assert message in world.state("j").message


def test_listed_users_jobs_run_while_others_wait_and_the_window_end_frees_the_gpus():
    world = World(
        reservation(),
        owned(job("bob", resources={"gpus": 1}), BOB),
        owned(job("alice", resources={"gpus": 2}), ALICE),
        n_gpus=2,
        host=HOST,
    )
    plan = world.tick(T0 + HOUR)
    assert world.phase("alice") == ("Running", "Started") and world.state("alice").devices == [0, 1]
    assert world.phase("bob") == ("Pending", "Resources")  # alice holds both GPUs
    assert plan.wake_at == T0 + 3 * HOUR  # the window's end re-runs the queue
    world.exit("alice", 0, T0 + HOUR + 60)
    world.tick(T0 + HOUR + 60)
    assert world.phase("bob") == ("Pending", "Reserved")  # free, but still alice's
    world.tick(T0 + 3 * HOUR)
    assert world.phase("bob") == ("Running", "Started")
    assert world.memory.reservation_states["r"].phase == "Expired"


def test_a_job_with_a_timelimit_backfills_into_the_gap_before_the_window_only():
    world = World(
        reservation(),
        owned(job("short", resources={"gpus": 2}, timeLimit="50m"), BOB),
        owned(job("long", resources={"gpus": 2}, timeLimit="3h"), BOB),
        n_gpus=2,
        host=HOST,
    )
    plan = world.tick(T0)
    assert world.phase("short") == ("Running", "Started")
    assert world.phase("long")[1] in ("Reserved", "Priority", "Resources")
    assert plan.wake_at == T0 + HOUR  # the window's start
    world.exit("short", 0, T0 + 50 * 60)
    world.tick(T0 + 50 * 60)
    assert world.phase("long") == ("Pending", "Reserved")
    assert "at most 10m" in world.state("long").message


def test_gpus_n_takes_the_lowest_free_gpus_and_leaves_the_rest_to_anyone():
    world = World(
        reservation(gpus=1),
        owned(job("one", resources={"gpus": 1}), BOB),
        owned(job("two", resources={"gpus": 2}), BOB),
        n_gpus=2,
        host=HOST,
    )
    world.tick(T0 + HOUR)
    assert world.memory.reservation_states["r"].devices == [0]
    assert world.phase("one") == ("Running", "Started") and world.state("one").devices == [1]
    assert world.phase("two")[0] == "Pending"
    world.exit("one", 0, T0 + HOUR + 1)
    world.tick(T0 + HOUR + 1)
    assert world.phase("two") == ("Pending", "Reserved")
    assert world.state("two").message == f"needs 2 GPUs, 1 free for it: GPU 0 reserved for alice {WINDOW}"


def test_devices_form_reserves_exactly_those_gpus():
    world = World(reservation(devices=[1]), owned(job("j", resources={"gpus": 1}), BOB), n_gpus=2, host=HOST)
    world.tick(T0 + HOUR)
    assert world.state("j").devices == [0]
    assert world.memory.reservation_states["r"].devices == [1]


def test_a_listed_user_is_matched_by_uid_when_the_owner_has_no_name_in_the_snapshot():
    host = Host(user_ids={"alice": ALICE})
    world = World(reservation(), owned(job("j", resources={"gpus": 1}), ALICE), n_gpus=2, host=host)
    world.tick(T0 + HOUR)
    assert world.phase("j") == ("Running", "Started")


# -- the reservation's own record -------------------------------------------------------------------


def test_phases_follow_the_window_and_the_status_round_trips():
    from controller.model.records import ReservationState

    world = World(reservation(), n_gpus=2, host=HOST)
    world.tick(T0)
    record = world.memory.reservation_states["r"]
    assert (record.phase, record.reason, record.devices) == ("Pending", "Upcoming", [0, 1])
    assert record.message == f"GPUs 0,1 reserved for alice {WINDOW}"
    assert ReservationState.from_status(record.to_status()) == record
    world.tick(T0 + 60)
    assert world.memory.reservation_states["r"] == record  # nothing moved: the status file is not rewritten
    world.tick(T0 + HOUR)
    assert world.memory.reservation_states["r"].phase == "Active"
    world.tick(T0 + 3 * HOUR)
    record = world.memory.reservation_states["r"]
    assert (record.phase, record.reason, record.completion_time) == ("Expired", "WindowClosed", T0 + 3 * HOUR)


def test_a_relative_start_counts_from_when_the_controller_first_saw_it():
    world = World(reservation(start="+1h"), n_gpus=2, host=HOST)
    world.tick(T0)
    world.tick(T0 + 1800)  # a later pass does not move the window
    record = world.memory.reservation_states["r"]
    assert (record.start, record.end) == (T0 + HOUR, T0 + 3 * HOUR)


def test_an_expired_reservation_is_kept_until_its_ttl_then_its_manifest_goes():
    world = World(reservation(), owned(job("j", resources={"gpus": 2}), BOB), n_gpus=2, host=HOST, default_ttl=HOUR)
    world.tick(T0 + 3 * HOUR)
    assert world.memory.reservation_states["r"].phase == "Expired"
    assert world.phase("j") == ("Running", "Started")  # an expired reservation blocks nothing
    plan = world.tick(T0 + 4 * HOUR)
    assert [r.name for r in plan.expired] == ["r"] and world.pruned == ["r"]
    world.tick(T0 + 4 * HOUR + 1)
    assert "r" not in world.memory.reservation_states


# -- rejections, with the numbers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "form, users, host, message",
    [
        ({"gpus": 3}, ("alice",), HOST, "spec.gpus: reserves 3 GPUs, this machine has 2 (jobs/r.yaml)"),
        (
            {"devices": [1, 5]},
            ("alice",),
            HOST,
            "spec.devices: GPU 5 not on this machine (it has GPUs 0,1 to reserve) (jobs/r.yaml)",
        ),
        (
            {"devices": [0]},
            ("alice", "zed"),
            Host(user_ids={"alice": ALICE, "zed": None}),
            "spec.users: no such user zed (jobs/r.yaml)",
        ),
    ],
)
def test_an_impossible_reservation_is_rejected_with_the_numbers(form, users, host, message):
    world = World(reservation(users=users, **form), n_gpus=2, host=host)
    world.tick(T0)
    record = world.memory.reservation_states["r"]
    assert (record.phase, record.reason, record.message) == ("Rejected", "Unsatisfiable", message)


def test_an_overlapping_reservation_is_rejected_and_the_first_keeps_its_gpus():
    first = reservation("a", devices=[0], start=T0 + HOUR, duration="2h")
    second = reservation("b", devices=[0, 1], start=T0 + 2 * HOUR, duration="2h")
    world = World(first, second, owned(job("j", resources={"gpus": 1}), BOB), n_gpus=2, host=HOST)
    world.tick(T0 + 2 * HOUR)
    b = world.memory.reservation_states["b"]
    assert (b.phase, b.reason) == ("Rejected", "Overlap")
    assert (
        b.message
        == "spec.devices: GPU 0 reserved by a for alice 09:00-11:00, overlapping this window 10:00-12:00 (jobs/b.yaml)"
    )
    assert world.memory.reservation_states["a"].phase == "Active"
    assert world.state("j").devices == [1]  # a rejected reservation holds nothing


def test_gpus_n_overlapping_is_rejected_with_what_is_left():
    world = World(reservation("a", devices=[0]), reservation("b", gpus=2, start=T0 + 2 * HOUR), n_gpus=2, host=HOST)
    world.tick(T0)
    b = world.memory.reservation_states["b"]
    assert (b.phase, b.reason) == ("Rejected", "Overlap")
    assert (
        b.message
        == "spec.gpus: reserves 2 GPUs 10:00-12:00, 1 not reserved by others then (GPU 0 by a 09:00-11:00) (jobs/b.yaml)"
    )


def test_back_to_back_windows_do_not_overlap_and_an_accepted_one_keeps_its_gpus_against_newcomers():
    world = World(reservation("b", gpus=1, start=T0 + HOUR), n_gpus=2, host=HOST)
    world.tick(T0)
    assert world.memory.reservation_states["b"].devices == [0]
    world.put(reservation("a", devices=[0], start=T0 + 2 * HOUR))  # "a" sorts first, but came later
    world.put(reservation("c", devices=[0], start=T0 + 3 * HOUR))  # starts as b ends
    world.tick(T0 + 60)
    states = world.memory.reservation_states
    assert (states["b"].phase, states["b"].devices) == ("Pending", [0])
    assert states["a"].reason == "Overlap" and states["c"].phase == "Pending"


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "users: [alice]\n  gpus: 1\n  devices: [0]\n  start: '+1h'\n  duration: 1h",
            "spec: exactly one of gpus and devices is required",
        ),
        (
            "users: [alice]\n  gpus: 1\n  start: '+1h'\n  duration: 0s",
            "spec.duration: must be > 0.0 (jobs/r.yaml line 7)",
        ),
        ("users: []\n  gpus: 1\n  start: '+1h'\n  duration: 1h", "spec.users: needs at least one user"),
        ("users: [alice]\n  gpus: 1\n  start: tomorrow\n  duration: 1h", "spec.start: 'tomorrow' is not a time"),
        (
            "users: [alice]\n  gpus: 1\n  start: '+1h'\n  duration: 1h\n  gpu: 2",
            "spec.gpu: unknown field; did you mean gpus?",
        ),
    ],
)
def test_a_malformed_reservation_is_rejected_invalid(body, message):
    (doc,) = documents(f"kind: Reservation\nmetadata: {{name: r}}\nspec:\n  {body}\n", stem="r")
    assert doc.reason == "Invalid" and message in doc.message


def test_window_text_adds_the_date_when_not_today():
    assert window_text(T0 + HOUR, T0 + 3 * HOUR, HOST.local_tz, T0) == "09:00-11:00"
    assert window_text(T0 + 30 * HOUR, T0 + 50 * HOUR, HOST.local_tz, T0) == "2027-01-16 14:00-2027-01-17 10:00"


@pytest.mark.parametrize(
    "now, owner, time_limit",
    [
        (T0 + HOUR, ALICE, None),  # inside her window: her job takes her reserved GPU...
        (T0, BOB, "30m"),  # before it: a job that ends in time backfills onto the reserved GPU
    ],
)
def test_a_job_allowed_on_reserved_gpus_takes_them_first_and_leaves_the_others_open(now, owner, time_limit):
    spec = {"resources": {"gpus": 1}, **({"timeLimit": time_limit} if time_limit else {})}
    world = World(
        reservation(devices=[1]),
        owned(job("first", **spec), owner),
        owned(job("other", resources={"gpus": 1}), BOB),
        n_gpus=2,
        host=HOST,
    )
    world.tick(now)
    assert world.state("first").devices == [1]
    assert world.phase("other") == ("Running", "Started") and world.state("other").devices == [
        0
    ]  # ...so bob's runs too


def test_explain_reservation_reads_the_model(capsys):
    from controller.cli.main import main

    assert main(["explain", "reservation.spec"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("KIND:     Reservation\n") and "users\t<[]string> -required-" in out and "devices\t<" in out
    assert main(["explain", "reservation.spec.gpu"]) == 1
    assert "field Reservation.spec.gpu does not exist" in capsys.readouterr().err


def test_a_gflowd_that_is_not_root_refuses_another_users_reservation():
    from controller.decide.admission import admit

    result = admit(
        [owned(reservation("theirs"), BOB), owned(reservation("mine", devices=[2], start=T0), ALICE)],
        controller_uid=ALICE,
    )
    assert list(result.reservations) == ["mine"]
    assert result.rejected["theirs"].reason == "Forbidden" and "owned by uid 1001" in result.rejected["theirs"].message
