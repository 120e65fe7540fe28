"""What one user may take (issue 32 holes 4, 5, 6's limits, 10's CPU-only flood), in the pure core:
the queue order across users (class rank, fair share, arrival; a user's own priority orders only
that user's jobs), the per-user pending and running limits, the machine's CPU-only job limit, and
the reservation policy. Real config loading, admission, reconcile and scheduler code, driven by
``World`` on a fixed clock; the attacks as ordinary users against a root gflowd are in
tests/test_user_policy_e2e.py."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from controller.api.config import ConfigError, ControllerConfig, load_config
from controller.decide.limits import Offer, Waiting, over_queue_limit, over_running_limits, reservation_violations
from controller.decide.policy import QueueEntry, order_queue, order_reasons, policy_from_config
from controller.model.plan import Host
from controller.model.policy import Policy, ReservationLimits, UserClass
from controller.model.records import rfc3339
from tests.builders import T0, World, condition, documents, job, started

HOUR, DAY = 3600.0, 86400.0
ALICE, MALLORY, CAROL = 1000, 1001, 1002
HOST = Host(user_names={ALICE: "alice", MALLORY: "mallory", CAROL: "carol"})
MAX_PRIORITY = 2**31 - 1
DEFAULTS = policy_from_config(ControllerConfig())  # what config.yaml gives when it says nothing


def owned(doc, uid: int):
    return replace(doc, owner_uid=uid)


def entry(
    name: str, owner: int, priority: int = 0, created: float = T0, usage: float = 0.0, cls: UserClass | None = None
):
    cls = cls or UserClass()
    low, high = cls.priority_range
    return QueueEntry(name, owner, priority, created, usage, cls.rank, min(max(priority, low), high), cls.name)


def names(entries) -> list[str]:
    return [e.name for e in entries]


# -- the order across users ----------------------------------------------------------------------


def test_a_users_priority_orders_only_that_users_own_jobs():
    """mallory's 3 jobs at the highest priority, submitted after alice's first job: alice's first job
    still goes first; mallory's priority only chose which of her jobs takes her earliest slot."""
    queue = [
        entry("alice-1", ALICE, 0, T0),
        entry("mallory-low", MALLORY, 0, T0 + 1),
        entry("mallory-1", MALLORY, MAX_PRIORITY, T0 + 2),
        entry("alice-2", ALICE, 0, T0 + 3),
        entry("mallory-2", MALLORY, MAX_PRIORITY, T0 + 4),
    ]
    assert names(order_queue(queue, DEFAULTS, T0 + 10)) == [
        "alice-1",
        "mallory-1",
        "mallory-2",
        "alice-2",
        "mallory-low",
    ]


def test_fair_share_puts_the_lighter_user_first_whatever_the_heavier_ones_priority():
    policy = Policy(fair_share_half_life=DAY)
    queue = [entry(f"m{i}", MALLORY, MAX_PRIORITY, T0, usage=1e6) for i in range(60)] + [entry("a", ALICE, 0, T0 + 5)]
    assert names(order_queue(queue, policy, T0 + 10))[0] == "a"


def test_a_higher_class_goes_first_and_a_granted_range_counts_across_users():
    staff = UserClass("staff", rank=10)
    granted = UserClass("granted", priority_range=(0, 5))
    queue = [
        entry("alice", ALICE, 0, T0),
        entry("mallory", MALLORY, MAX_PRIORITY, T0 + 1, cls=granted),  # counts as 5 across users
        entry("carol", CAROL, -3, T0 + 2, cls=staff),
    ]
    assert names(order_queue(queue, DEFAULTS, T0 + 10)) == ["carol", "mallory", "alice"]


def test_fifo_is_arrival_only():
    queue = [entry("late", ALICE, 9, T0 + 1), entry("early", MALLORY, 0, T0)]
    assert names(order_queue(queue, Policy(order="fifo"), T0 + 5)) == ["early", "late"]


def test_the_order_reason_says_what_stands_ahead():
    staff = UserClass("staff", rank=10)
    waiting = [entry("c", CAROL, cls=staff), entry("a1", ALICE), entry("a2", ALICE), entry("m", MALLORY, usage=5.0)]
    why = order_reasons(waiting)
    assert why["c"] == "class staff (rank 10); first in the queue"
    assert why["a1"] == "class default (rank 0); behind jobs of higher-ranked classes"
    assert why["a2"] == (
        "class default (rank 0); behind jobs of the same user (its priority orders only its own jobs), "
        "higher-ranked classes"
    )
    assert (
        why["m"]
        == "class default (rank 0); behind jobs of higher-ranked classes, users with less recent GPU use (fair share)"
    )


def test_in_the_controller_mallorys_60_top_priority_jobs_do_not_pass_alices():
    blocker = owned(job("blocker", resources={"gpus": 2}), CAROL)
    world = World(blocker, n_gpus=2, host=HOST, policy=DEFAULTS)
    world.tick(T0)
    world.put(owned(job("alice", resources={"gpus": 1}), ALICE))
    world.tick(T0 + 1)
    for i in range(60):
        world.put(owned(job(f"m{i}", resources={"gpus": 1}, priority=MAX_PRIORITY), MALLORY))
    world.tick(T0 + 2)
    assert world.state("alice").queue_position == 1
    order = condition(world.state("m0"), "QueueOrder")
    assert order is not None and order["message"].endswith(
        "behind jobs of users whose jobs waited longer or have a class-granted priority"
    )
    world.exit("blocker", 0, T0 + 3)
    plan = world.tick(T0 + 3)
    assert "alice" in started(plan)  # and one of mallory's beside it: two GPUs
    assert condition(world.state("alice"), "QueueOrder") is None  # Running: no queue order any more


def test_a_users_priority_never_preempts_another_users_job():
    policy = replace(DEFAULTS, preemption_threshold=1)
    world = World(owned(job("alice", resources={"gpus": 1}), ALICE), n_gpus=1, host=HOST, policy=policy)
    world.tick(T0)
    world.put(owned(job("mallory", resources={"gpus": 1}, priority=MAX_PRIORITY), MALLORY))
    world.tick(T0 + 1)
    assert world.phase("alice") == ("Running", "Started")
    assert world.state("mallory").reason == "Resources"
    # her own lower-priority job she may preempt
    world.put(owned(job("mallory-own", resources={"gpus": 1}, priority=5), MALLORY))
    world.delete("alice")
    world.exit("alice", 0, T0 + 2)
    world.tick(T0 + 2)
    assert world.phase("mallory") == ("Running", "Started")


# -- waiting jobs per user ------------------------------------------------------------------------


def test_queue_limit_rejects_only_arrivals_beyond_it():
    policy = Policy(max_pending_per_user=3)
    waiting = [Waiting(f"m{i}", "mallory", MALLORY, T0, established=i < 2, sort_name=(i,)) for i in range(5)]
    waiting += [Waiting("a", "alice", ALICE, T0, established=False)]
    over = over_queue_limit(waiting, policy)
    assert sorted(over) == ["m3", "m4"]
    assert over["m3"] == (
        "user mallory already has 3 jobs waiting to start, the most maxPendingJobsPerUser allows; "
        "delete this manifest and submit it again once fewer of yours wait"
    )
    # established jobs are never taken back, even over a lowered limit
    assert over_queue_limit([Waiting(f"m{i}", "mallory", MALLORY, T0, True) for i in range(5)], policy) == {}
    # admins (root always) and a class's own limit
    assert over_queue_limit([Waiting(f"r{i}", "root", 0, T0, False) for i in range(5)], policy) == {}
    roomy = replace(policy, classes=(UserClass("big", max_pending=10),), class_members={"mallory": "big"})
    assert over_queue_limit(waiting, roomy) == {}


def test_the_1001st_waiting_job_is_rejected_and_stays_so_until_its_manifest_changes():
    world = World(n_gpus=0, host=HOST, policy=DEFAULTS)
    for i in range(1001):
        world.put(owned(job(f"m-{i}", resources={"gpus": 1}, startAfter="+1d"), MALLORY))
    world.put(owned(job("alice", resources={"gpus": 1}, startAfter="+1d"), ALICE))
    for i in range(1001, 1010):
        world.put(owned(job(f"m-{i}", resources={"gpus": 1}, startAfter="+1d"), MALLORY))
    plan = world.tick(T0)
    rejected = sorted((n for n, s in world.states.items() if s.phase == "Rejected"), key=lambda n: int(n[2:]))
    assert rejected == [f"m-{i}" for i in range(1000, 1010)]
    refusals = [e for e in plan.events if e.reason == "QueueLimit"]
    assert [(e.object, e.message.split(":")[0]) for e in refusals] == [("m-1000", "m-1000 and 9 more (last m-1009)")]
    assert world.state("m-1000").reason == "QueueLimit" and "maxPendingJobsPerUser" in world.state("m-1000").message
    assert world.phase("alice") == ("Pending", "StartAfter")
    world.delete("m-0")  # room again: the refusal stands (as a refused submit would), until a change
    plan = world.tick(T0 + 1)
    assert world.phase("m-1000") == ("Rejected", "QueueLimit")
    assert not [e for e in plan.events if e.reason == "QueueLimit"]  # told once
    world.put(owned(job("m-1000", resources={"gpus": 1}, startAfter="+2d"), MALLORY))
    world.tick(T0 + 2)
    assert world.phase("m-1000") == ("Pending", "StartAfter")


def test_a_retry_is_never_refused_by_the_queue_limit():
    world = World(
        owned(job("a", resources={"gpus": 1}, backoffLimit=1), MALLORY),
        n_gpus=1,
        host=HOST,
        policy=Policy(max_pending_per_user=1),
    )
    world.tick(T0)
    world.put(owned(job("b", resources={"gpus": 1}), MALLORY))
    world.tick(T0 + 1)
    assert world.phase("a") == ("Running", "Started") and world.state("b").phase == "Pending"
    world.exit("a", 1, T0 + 2)
    world.tick(T0 + 2)  # a waits to retry beside b: two waiting, over the limit of one, yet not refused
    assert world.phase("a") == ("Pending", "BackOff")
    assert world.phase("b") == ("Running", "Started")


def test_sweep_children_count_and_wait_beyond_the_limit():
    text = (
        "kind: Sweep\nmetadata: {name: sw}\nspec:\n  indices: 0-4\n"
        "  template: {command: [sleep, '1'], resources: {gpus: 1}}\n"
    )
    docs = [owned(d, MALLORY) for d in documents(text, stem="sw")]
    world = World(*docs, n_gpus=1, host=HOST, policy=Policy(max_pending_per_user=2))
    world.tick(T0)  # five arrive: two may wait (one of them starts at once)
    world.tick(T0 + 1)  # one waits now: one more may
    phases = Counter(
        world.phase(f"sw-{i}")[0] if world.phase(f"sw-{i}")[1] != "QueueLimit" else "QueueLimit" for i in range(5)
    )
    assert phases == {"Running": 1, "Pending": 2, "QueueLimit": 2}  # a child waits, never Rejected


# -- running jobs ---------------------------------------------------------------------------------


def test_running_limits_per_user_and_for_cpu_only_jobs():
    policy = Policy(max_running_per_user=2, max_running_cpu_jobs=3)
    offers = [Offer(f"m{i}", "mallory", MALLORY, cpu_only=False) for i in range(3)]
    offers += [Offer(f"a{i}", "alice", ALICE, cpu_only=True) for i in range(3)]
    over = over_running_limits(offers, Counter({("mallory", MALLORY): 1}), running_cpu_jobs=2, policy=policy)
    assert sorted(over) == ["a1", "a2", "m1", "m2"]
    assert over["m1"].startswith(
        "user mallory has 2 jobs running or starting, the most maxRunningJobsPerUser allows (2)"
    )
    assert over["a1"].startswith("3 CPU-only jobs are running or starting, the most maxRunningCpuJobs allows (3)")


def test_300_cpu_only_jobs_run_at_most_64_at_once():
    world = World(*(owned(job(f"c{i}"), MALLORY) for i in range(300)), n_gpus=0, host=HOST, policy=DEFAULTS)
    for second in range(12):  # starts come in batches of max_starts per pass
        world.tick(T0 + second)
    phases = Counter(world.phase(f"c{i}") for i in range(300))
    assert phases[("Running", "Started")] == 64
    assert phases[("Pending", "JobLimit")] == 236
    world.exit("c0", 0, T0 + 20)
    world.tick(T0 + 20)
    assert Counter(world.phase(f"c{i}")[0] for i in range(300))["Running"] == 64


# -- reservations ---------------------------------------------------------------------------------


def reservation(name: str, users: tuple[str, ...], start: float, duration: str, gpus: int):
    text = (
        f"kind: Reservation\nmetadata: {{name: {name}}}\nspec:\n  users: [{', '.join(users)}]\n  gpus: {gpus}\n"
        f"  start: '{rfc3339(start)}'\n  duration: {duration}\n"
    )
    (doc,) = documents(text, stem=name)
    return doc


def test_reservation_violations_name_every_bound_and_spare_admins():
    limits = Policy(reservations=ReservationLimits())
    problems = reservation_violations(
        limits, "mallory", MALLORY, ["mallory", "alice"], 4, T0 + 3650 * DAY, 36500 * DAY, T0
    )
    assert problems == [
        "spec.users: only an admin may reserve GPUs for others (alice)",
        "spec.gpus: 4 GPUs, at most 1 (reservations.maxGpus)",
        "spec.duration: 36500d, at most 1d (reservations.maxDuration)",
        "spec.start: 3650d ahead, at most 7d (reservations.maxStartAhead)",
    ]
    assert reservation_violations(limits, "root", 0, ["alice"], 4, T0 + 3650 * DAY, 36500 * DAY, T0) == []
    admins = replace(limits, admins=("carol",))
    assert reservation_violations(admins, "carol", CAROL, ["alice"], 4, T0, 36500 * DAY, T0) == []
    nobody = replace(limits, reservations=ReservationLimits(users=()))
    assert reservation_violations(nobody, "alice", ALICE, ["alice"], 1, T0, HOUR, T0) == [
        "user alice may not reserve GPUs (reservations.users in config.yaml; ask an admin)"
    ]


def test_mallorys_decade_reservation_is_forbidden_and_fences_nothing():
    hog = owned(reservation("hog", ("mallory",), T0 + 3650 * DAY, "36500d", 2), MALLORY)
    world = World(hog, owned(job("alice", resources={"gpus": 2}), ALICE), n_gpus=2, host=HOST, policy=DEFAULTS)
    world.tick(T0)
    record = world.memory.reservation_states["hog"]
    assert (record.phase, record.reason) == ("Rejected", "Forbidden")
    assert "reservations.maxGpus" in record.message and "reservations.maxDuration" in record.message
    assert world.phase("alice") == ("Running", "Started")


def test_a_window_beyond_the_horizon_fences_nothing_yet():
    admin_far = owned(reservation("far", ("carol",), T0 + 2 * DAY, "2h", 2), 0)  # root's: no bounds but the horizon
    world = World(admin_far, owned(job("alice", resources={"gpus": 1}), ALICE), n_gpus=2, host=HOST, policy=DEFAULTS)
    plan = world.tick(T0)
    assert world.memory.reservation_states["far"].phase == "Pending"
    assert world.phase("alice") == ("Running", "Started")
    assert T0 + DAY in (plan.wake_at,) or plan.wake_at <= T0 + DAY  # wakes when the window starts to fence
    world.put(owned(job("late", resources={"gpus": 1}), MALLORY))
    world.tick(T0 + DAY + 1)  # inside the horizon now: a job without a timeLimit waits
    assert world.phase("late") == ("Pending", "Reserved")


# -- config.yaml ----------------------------------------------------------------------------------


def test_config_carries_classes_admins_limits_and_reservations(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        "admins: [carol, 1003]\nmaxPendingJobsPerUser: 50\nmaxRunningJobsPerUser: 8\nmaxRunningCpuJobs: 0\n"
        "classes:\n  staff: {users: [carol], rank: 10, priorityRange: [0, 100], maxRunningJobsPerUser: 16}\n"
        "reservations: {users: [alice], maxGpus: 2, maxDuration: 2d, maxStartAhead: 14d, horizon: 12h}\n"
    )
    policy = policy_from_config(load_config(path, {}))
    assert policy.admins == ("carol", "1003")
    assert policy.classes == (UserClass("staff", 10, (0, 100), None, 16),)
    assert policy.class_members == {"carol": "staff"}
    assert (policy.max_pending_per_user, policy.max_running_per_user, policy.max_running_cpu_jobs) == (50, 8, None)
    assert policy.reservations == ReservationLimits(("alice",), 2, 2 * DAY, 14 * DAY, 12 * HOUR)


def test_whoever_runs_gflowd_is_an_admin_of_its_instance():
    own = policy_from_config(ControllerConfig(), controller_uid=ALICE)  # alice's own gflowd up
    assert own.admins == (str(ALICE),)
    waiting = [Waiting(f"a{i}", "alice", ALICE, T0, False) for i in range(1500)]
    assert over_queue_limit(waiting, own) == {}
    assert len(over_queue_limit(waiting, DEFAULTS)) == 500


def test_defaults_are_conservative():
    assert (DEFAULTS.max_pending_per_user, DEFAULTS.max_running_per_user, DEFAULTS.max_running_cpu_jobs) == (
        1000,
        None,
        64,
    )
    assert DEFAULTS.reservations == ReservationLimits(("*",), 1, DAY, 7 * DAY, DAY)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "classes: {staff: {priorityRange: [5, 1]}}",
            "config.yaml: classes.staff.priorityRange: expected [LOW, HIGH] with LOW <= HIGH, got [5, 1]",
        ),
        ("maxPendingJobsPerUser: -1", "config.yaml: maxPendingJobsPerUser: Input should be greater than or equal to 0"),
        ("reservations: {maxGpu: 2}", "config.yaml: reservations.maxGpu: Extra inputs are not permitted"),
        (
            "classes: {a: {users: [carol]}, b: {users: [carol, dave]}}",
            "config.yaml: classes: a user belongs to one class: carol is in a and b",
        ),
    ],
)
def test_a_bad_policy_setting_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, {})
    assert str(err.value) == message
