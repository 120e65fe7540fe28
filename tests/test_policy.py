"""Scheduling policy: EASY backfill (scheduler), aging, fair share and quotas (policy + reconcile)."""

from __future__ import annotations

import math
import os
import pwd
from dataclasses import replace

import pytest
from builders import T0, World, job
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api.config import ConfigError, ControllerConfig, load_config
from controller.decide.policy import (
    UsageLedger,
    decayed_gpu_seconds,
    effective_priority,
    policy_from_config,
    queue_key,
)
from controller.decide.scheduler import (
    Binding,
    Holder,
    QuotaUse,
    Request,
    Wait,
    build_slots,
    schedule,
)
from controller.model.conditions import find_condition
from controller.model.gpus import Gpu
from controller.model.policy import Policy, ReservationLimits
from controller.observe.host import HostFacts

GIB = 2**30
INF = math.inf


def machine(n: int) -> list[Gpu]:
    return [Gpu(i, f"GPU-{i:04d}", "NVIDIA H100 80GB HBM3", 80 * GIB) for i in range(n)]


def run(name: str, devices: tuple[int, ...], ends_at: float = INF) -> Holder:
    return Holder(name, devices, False, 0, ends_at)


def req(name: str, gpus: int, limit: float | None = None, quota: tuple[str, ...] = ()) -> Request:
    return Request(name, gpus, None, None, False, limit, quota)


def outcome(decision) -> str:
    if isinstance(decision, Binding):
        return "bound " + ",".join(map(str, decision.devices))
    return decision.reason


# --- EASY backfill ------------------------------------------------------------------------------------

NOW = 1000.0


@pytest.mark.parametrize(
    ("mode", "holders", "queue", "expected"),
    [
        pytest.param(
            "backfill",
            [run("r", (0, 1, 2), NOW + 100)],
            [req("big", 4, 3600), req("short", 1, 50), req("long", 1, 200), req("nolimit", 1)],
            {"big": "Resources", "short": "bound 3", "long": "Priority", "nolimit": "Priority"},
            id="short-job-backfills-before-the-reservation-long-and-unlimited-ones-wait",
        ),
        pytest.param(
            "backfill",
            [run("r", (0, 1, 2), NOW + 100)],
            [req("big", 4, 3600), req("exact", 1, 100)],
            {"big": "Resources", "exact": "bound 3"},
            id="ending-exactly-at-the-reservation-is-in-time",
        ),
        pytest.param(
            "backfill",
            [run("r", (0, 1), NOW + 100)],
            [req("big", 3, 3600), req("long", 1, 9999), req("long2", 1, 9999)],
            {"big": "Resources", "long": "bound 3", "long2": "Priority"},
            id="a-gpu-the-reservation-does-not-need-is-free-for-a-long-job",
        ),
        pytest.param(
            "backfill",
            [run("r", (0, 1), NOW + 100)],
            [req("big", 3, 3600), req("nolimit", 1), req("short", 1, 10)],
            {"big": "Resources", "nolimit": "bound 3", "short": "bound 2"},
            id="a-job-without-time-limit-takes-only-unneeded-gpus",
        ),
        pytest.param(
            "backfill",
            [run("r", (0, 1, 2))],
            [req("big", 4, 3600), req("short", 1, 10)],
            {"big": "Resources", "short": "Priority"},
            id="reservation-time-unknown-when-a-needed-gpu-runs-without-time-limit",
        ),
        pytest.param(
            "backfill",
            [run("r", (0,), NOW + 50), run("s", (1, 2), NOW + 500)],
            [req("big", 3, 3600), req("mid", 1, 400), req("longer", 1, 600)],
            {"big": "Resources", "mid": "bound 3", "longer": "Priority"},
            id="reservation-waits-for-the-latest-of-the-gpus-it-needs",
        ),
        pytest.param(
            "strict",
            [run("r", (0, 1, 2), NOW + 100)],
            [req("big", 4, 3600), req("short", 1, 10)],
            {"big": "Resources", "short": "Priority"},
            id="strict-priority-holds-everything",
        ),
        pytest.param(
            "firstfit",
            [run("r", (0, 1, 2), NOW + 100)],
            [req("big", 4, 3600), req("nolimit", 1)],
            {"big": "Resources", "nolimit": "bound 3"},
            id="firstfit-holds-nothing",
        ),
    ],
)
def test_backfill(mode, holders, queue, expected):
    slots = build_slots(machine(4), holders, None, set(), GIB)
    result = schedule(queue, slots, mode=mode, now=NOW)
    assert {name: outcome(d) for name, d in result.items()} == expected


def test_backfill_wait_message_says_what_the_gpus_are_held_for():
    slots = build_slots(machine(4), [run("r", (0, 1, 2), NOW + 100)], None, set(), GIB)
    result = schedule([req("big", 4, 3600), req("long", 1, 200)], slots, mode="backfill", now=NOW)
    assert "held for it" in result["long"].message and "big" in result["long"].message
    assert result["long"].message.endswith("; with a timeLimit of at most 1m40s it could start now")


@settings(max_examples=300, deadline=None)
@given(
    running=st.lists(
        st.tuples(st.integers(1, 3), st.one_of(st.none(), st.integers(1, 1000))),
        min_size=0,
        max_size=6,
    ),
    queue=st.lists(
        st.tuples(st.integers(1, 8), st.one_of(st.none(), st.integers(1, 2000))),
        min_size=1,
        max_size=12,
    ),
)
def test_a_backfilled_job_never_delays_the_reservation(running, queue):
    """Whatever runs and waits: the first blocked job can start, once the jobs ahead of it and the
    backfilled ones end by their timeLimit, no later than it could have without any backfill."""
    n = 8
    holders, device = [], 0
    for i, (size, limit) in enumerate(running):
        if device + size > n:
            break
        holders.append(run(f"r{i}", tuple(range(device, device + size)), INF if limit is None else NOW + limit))
        device += size
    requests = [req(f"q{i}", size, limit) for i, (size, limit) in enumerate(queue)]

    def earliest_start(decisions: dict, upto: int | None) -> float:
        """When ``blocked`` fits, by the ends of what runs now plus what this pass bound."""
        ends = [math.inf if h.ends_at == INF else h.ends_at for h in holders for _ in h.devices]
        for r in requests[:upto]:
            if isinstance(decisions.get(r.name), Binding):
                ends += [NOW + r.time_limit if r.time_limit is not None else INF] * r.gpus
        ends += [NOW] * (n - len(ends))
        return sorted(ends)[blocked.gpus - 1]

    result = schedule(requests, build_slots(machine(n), holders, None, set(), GIB), mode="backfill", now=NOW)
    blocked_at = next((i for i, r in enumerate(requests) if isinstance(result[r.name], Wait)), None)
    if blocked_at is None:
        return
    blocked = requests[blocked_at]
    ahead = schedule(
        requests[:blocked_at], build_slots(machine(n), holders, None, set(), GIB), mode="backfill", now=NOW
    )
    without_backfill = earliest_start(ahead, blocked_at)
    with_backfill = earliest_start(result, None)
    assert with_backfill <= without_backfill


# --- aging -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("priority", "waited", "interval", "cap", "expected"),
    [
        (0, 0, 600, 10, 0),
        (0, 599, 600, 10, 0),
        (0, 600, 600, 10, 1),
        (5, 3000, 600, 10, 10),
        (5, 6000, 600, 10, 15),
        (5, 10**6, 600, 10, 15),  # capped
        (-3, 1200, 600, 10, -1),
        (7, 10**6, None, 10, 7),  # no aging
    ],
)
def test_effective_priority(priority, waited, interval, cap, expected):
    assert effective_priority(priority, waited, Policy(aging_interval=interval, aging_max=cap)) == expected


def test_an_aged_low_priority_job_passes_a_fresh_high_priority_one():
    policy = Policy(aging_interval=600, aging_max=10)
    old_low = queue_key(0, 6 * 600, 0.0, policy)
    fresh_high = queue_key(5, 0, 0.0, policy)
    young_low = queue_key(0, 3 * 600, 0.0, policy)
    assert sorted([fresh_high, old_low, young_low]) == [old_low, fresh_high, young_low]


def test_aging_reorders_the_controller_queue_and_shows_in_status():
    world = World(
        job("running", command=["sleep", "1"], resources={"gpus": 4}),
        n_gpus=4,
        policy=Policy(aging_interval=600, aging_max=10),
    )
    world.tick(T0)
    world.put(job("low", resources={"gpus": 4}, priority=0))
    world.tick(T0 + 1)
    world.put(job("high", resources={"gpus": 4}, priority=3))
    world.tick(T0 + 1 + 2 * 600)
    # a newer job of higher priority goes first while the old one has aged less than the gap
    assert (world.state("high").queue_position, world.state("low").effective_priority) == (1, 2)
    world.delete("high")
    world.tick(T0 + 1 + 4 * 600 - 1)
    world.put(job("high", resources={"gpus": 4}, priority=3))
    world.tick(T0 + 1 + 4 * 600)
    assert world.state("low").effective_priority == 4 and world.state("high").effective_priority == 3
    assert world.state("low").to_status()["status"]["effectivePriority"] == 4
    assert world.state("low").queue_position == 1 and world.state("high").queue_position == 2
    world.exit("running", 0, T0 + 1 + 4 * 600 + 1)
    plan = world.tick(T0 + 1 + 4 * 600 + 2)
    assert [s.name for s in plan.starts] == ["low"]
    assert "effectivePriority" not in world.state("low").to_status()["status"]  # Running now


# --- fair share ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "start", "end", "now", "half_life", "expected"),
    [
        (1, 0, 100, 100, 1e12, 100.0),  # no decay to speak of: plain GPU-seconds
        (2, 0, 100, 100, 1e12, 200.0),
        (1, 0, 100, 100 + 3600, 3600, 50.0),  # ended one half-life ago: half counts (~, the run is short)
        (1, 0, 100, 100 + 7200, 3600, 25.0),
        (0, 0, 100, 100, 3600, 0.0),
    ],
)
def test_decayed_gpu_seconds(gpus, start, end, now, half_life, expected):
    assert decayed_gpu_seconds(gpus, start, end, now, half_life) == pytest.approx(expected, rel=0.02)


def test_usage_ledger_matches_the_closed_form():
    ledger = UsageLedger(3600)
    ledger.change("a", 0, 2)  # 2 GPUs from 0..1000
    ledger.change("a", 500, 1)  # +1 GPU from 500..4000
    ledger.change("a", 1000, -2)
    ledger.change("a", 4000, -1)
    expected = decayed_gpu_seconds(2, 0, 1000, 9000, 3600) + decayed_gpu_seconds(1, 500, 4000, 9000, 3600)
    assert ledger.usage("a", 9000) == pytest.approx(expected)
    assert ledger.usage("nobody", 9000) == 0.0


def test_fair_share_orders_users_within_one_priority_never_across():
    policy = Policy(fair_share_half_life=3600)
    heavy_same = queue_key(5, 10, 1e6, policy)
    light_same = queue_key(5, 10, 10.0, policy)
    heavy_higher = queue_key(6, 10, 1e9, policy)
    assert sorted([heavy_same, light_same, heavy_higher]) == [heavy_higher, light_same, heavy_same]


def test_a_job_aged_to_the_cap_is_not_passed_by_fair_share():
    policy = Policy(aging_interval=60, aging_max=5, fair_share_half_life=3600)
    capped_heavy = queue_key(0, 10_000, 1e9, policy)
    capped_heavy_older = queue_key(0, 20_000, 1e9, policy)
    fresh_light = queue_key(5, 0, 0.0, policy)
    assert sorted([fresh_light, capped_heavy, capped_heavy_older]) == [capped_heavy_older, capped_heavy, fresh_light]


def test_fair_share_in_the_controller_lets_the_lighter_user_go_first():
    me, other = os.getuid(), _other_uid()
    world = World(
        replace(job("heavy-run", command=["sleep", "1"], resources={"gpus": 1}), owner_uid=me),
        n_gpus=2,
        policy=Policy(fair_share_half_life=86400),
    )
    world.tick(T0)
    world.exit("heavy-run", 0, T0 + 3600)
    world.tick(T0 + 3600)
    world.put(job("blocker", command=["sleep", "1"], resources={"gpus": 2}))
    world.tick(T0 + 3601)
    world.put(replace(job("from-heavy", resources={"gpus": 2}), owner_uid=me))  # submitted first
    world.tick(T0 + 3602)
    world.put(replace(job("from-light", resources={"gpus": 2}), owner_uid=other))
    world.tick(T0 + 3603)
    assert world.state("from-light").queue_position == 1
    assert world.state("from-heavy").queue_position == 2


def _other_uid() -> int:
    return next(p.pw_uid for p in pwd.getpwall() if p.pw_uid != os.getuid())


# --- quotas ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quotas", "queue", "expected"),
    [
        pytest.param(
            {"user alice": QuotaUse(4, 2)},
            [req("a1", 2, quota=("user alice",)), req("a2", 1, quota=("user alice",)), req("b", 1)],
            {"a1": "bound 0,1", "a2": "Quota", "b": "bound 2"},
            id="user-at-its-quota-waits-others-run",
        ),
        pytest.param(
            {"label team=vision": QuotaUse(2)},
            [
                req("v1", 1, quota=("label team=vision",)),
                req("v2", 1, quota=("label team=vision",)),
                req("v3", 1, quota=("label team=vision",)),
            ],
            {"v1": "bound 0", "v2": "bound 1", "v3": "Quota"},
            id="label-quota-counts-this-pass-bindings",
        ),
        pytest.param(
            {"user alice": QuotaUse(8), "label team=vision": QuotaUse(1)},
            [req("v", 2, quota=("user alice", "label team=vision")), req("w", 1, quota=("user alice",))],
            {"v": "Quota", "w": "bound 0"},
            id="every-group-must-have-room-and-a-quota-wait-holds-nothing",
        ),
    ],
)
def test_quotas(quotas, queue, expected):
    slots = build_slots(machine(4), [], None, set(), GIB)
    result = schedule(queue, slots, quotas=quotas)
    assert {name: outcome(d) for name, d in result.items()} == expected


def test_quota_message_has_the_numbers_and_says_never_when_it_cannot_fit():
    slots = build_slots(machine(8), [], None, set(), GIB)
    result = schedule(
        [req("a", 2, quota=("user alice",)), req("b", 6, quota=("user alice",))],
        slots,
        quotas={"user alice": QuotaUse(4, 3)},
    )
    assert result["a"].message == "needs 2 GPUs; user alice may use 4 GPUs at once and 3 are in use"
    assert "can never start" in result["b"].message


def test_user_quota_in_the_controller_counts_running_jobs_of_the_manifest_owner():
    me = os.getuid()
    name = pwd.getpwuid(me).pw_name
    docs = [replace(job(n, command=["sleep", "1"], resources={"gpus": 2}), owner_uid=me) for n in ("one", "two")]
    # the owner's name is a host fact: observe reads it (pwd) and hands it in with the snapshot
    host = HostFacts(want_user_names=True).read(full=True, owners=docs)
    assert host.user_names == {me: name}
    world = World(*docs, n_gpus=8, policy=Policy(user_quotas={name: 3}), host=host)
    plan = world.tick(T0)
    assert [s.name for s in plan.starts] == ["one"]
    assert world.phase("two") == ("Pending", "Quota")
    assert f"user {name} may use 3 GPUs at once and 2 are in use" in world.state("two").message
    world.exit("one", 0, T0 + 5)
    plan = world.tick(T0 + 6)
    assert [s.name for s in plan.starts] == ["two"]


def test_backfill_through_the_controller_uses_running_jobs_time_limits():
    world = World(job("r", command=["sleep", "1"], resources={"gpus": 3}, timeLimit="1h"), n_gpus=4)
    world.tick(T0)
    world.put(job("big", resources={"gpus": 4}, priority=5))
    world.put(job("short", resources={"gpus": 1}, timeLimit="30m"))
    world.put(job("long", resources={"gpus": 1}, timeLimit="2h"))
    plan = world.tick(T0 + 1)
    assert [s.name for s in plan.starts] == ["short"]
    assert world.phase("long") == ("Pending", "Priority")


# --- config ------------------------------------------------------------------------------------------------


def test_policy_from_config_and_flags(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("schedulingPolicy: firstfit\nagingInterval: 5m\nuserQuotas: {alice: 4}\n")
    config = load_config(path, {"label_quotas": "team=vision:8,team=nlp:2", "preemption_threshold": None})
    policy = policy_from_config(config)
    assert (policy.mode, policy.order, policy.aging_interval) == ("firstfit", "priority", 300.0)
    assert policy.user_quotas == {"alice": 4}
    assert policy.label_quotas == {"team=vision": 8, "team=nlp": 2}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"user_quotas": "alice"}, "--user-quotas: expected NAME:GPUS"),
        ({"scheduling_policy": "lottery"}, "--scheduling-policy"),
        ({"user_quotas": "alice:-1"}, "--user-quotas"),
    ],
)
def test_bad_policy_flags_get_one_line_errors(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "config.yaml", overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_default_policy_is_backfill_with_aging_and_fair_share():
    policy = policy_from_config(ControllerConfig())
    assert policy.mode == "backfill" and policy.aging_interval and policy.fair_share_half_life


# --- builders ------------------------------------------------------------------------------------------------


# --- preemption ------------------------------------------------------------------------------------------


def test_preemption_stops_a_low_priority_job_which_returns_to_pending_without_a_failure():
    world = World(
        job("low", command=["sleep", "1"], resources={"gpus": 4}, priority=0, backoffLimit=0),
        n_gpus=4,
        policy=Policy(preemption_threshold=5),
    )
    world.tick(T0)
    world.put(job("mid", resources={"gpus": 4}, priority=4))  # not enough above low: waits
    plan = world.tick(T0 + 1)
    assert plan.stops == ()
    world.put(job("high", resources={"gpus": 4}, priority=5))
    plan = world.tick(T0 + 2)
    assert [(s.name, s.reason) for s in plan.stops] == [("low", "Preempted")]
    assert "preempting low" in world.state("high").message
    plan = world.tick(T0 + 3)  # the stop is under way: asked again, nobody else preempted
    assert [(s.name, s.reason) for s in plan.stops] == [("low", "Preempted")]
    world.exit("low", 143, T0 + 4, signal=15)
    plan = world.tick(T0 + 5)
    assert [s.name for s in plan.starts] == ["high"]
    low = world.state("low")
    assert (low.phase, low.reason, low.failed) == ("Pending", "Preempted", 0)
    assert "preempted by job high (priority 5 vs 0)" in find_condition(low.conditions, "Preempted")["message"]
    assert low.message.startswith("preempted earlier, waiting to run again: ")
    world.exit("high", 0, T0 + 10)
    world.tick(T0 + 11)
    plan = world.tick(T0 + 12)
    assert {s.name for s in plan.starts} <= {"low", "mid"} and world.phase("high") == ("Succeeded", "Completed")


def test_without_a_threshold_nobody_is_preempted():
    world = World(job("low", command=["sleep", "1"], resources={"gpus": 4}), n_gpus=4)
    world.tick(T0)
    world.put(job("high", resources={"gpus": 4}, priority=1000))
    assert world.tick(T0 + 1).stops == ()


@pytest.mark.parametrize(
    ("running", "gpus", "free", "expected"),
    [
        pytest.param([("a", 0, (0, 1), 1.0), ("b", 0, (2, 3), 2.0)], 2, 0, ["b"], id="youngest-of-the-lowest-first"),
        pytest.param([("a", 0, (0, 1), 1.0), ("b", 3, (2, 3), 2.0)], 2, 0, ["a"], id="lowest-priority-first"),
        pytest.param([("a", 0, (0,), 1.0), ("b", 8, (1, 2, 3), 2.0)], 2, 0, [], id="all-or-nothing"),
        pytest.param([("a", 0, (0, 1, 2), 1.0)], 2, 1, ["a"], id="free-gpus-count"),
        pytest.param([("a", 0, (0, 1), 1.0)], 2, 2, [], id="nothing-needed-when-it-fits"),
    ],
)
def test_preemption_victims(running, gpus, free, expected):
    from controller.decide.scheduler import Running, preemption_victims

    holders = [run(name, devices) for name, _, devices, _ in running]
    slots = build_slots(machine(sum(len(d) for _, _, d, _ in running) + free), holders, None, set(), GIB)
    jobs = [Running(name, prio, devices, started) for name, prio, devices, started in running]
    assert preemption_victims(req("x", gpus), 10, slots, jobs, threshold=5) == expected


def test_gflowd_flags_carry_every_policy_key(tmp_path):
    from controller.daemon.main import build_parser

    args = build_parser().parse_args(
        [
            "--scheduling-policy",
            "priority",
            "--aging-interval",
            "30m",
            "--aging-max",
            "4",
            "--fair-share-half-life",
            "0",
            "--user-quotas",
            "alice:4,bob:2",
            "--label-quotas",
            "team=vision:8",
            "--preemption-threshold",
            "5",
            "--max-running-jobs-per-user",
            "3",
            "--max-running-cpu-jobs",
            "8",
            "--reservations-max-gpus",
            "2",
            "--reservations-horizon",
            "2h",
        ]
    )
    from controller.api.config import flag_fields, flag_overrides

    config = load_config(
        tmp_path / "config.yaml", flag_overrides({path: getattr(args, ".".join(path)) for path, _ in flag_fields()})
    )
    policy = policy_from_config(config)
    assert policy == Policy(
        mode="strict",
        order="priority",
        aging_interval=1800.0,
        aging_max=4,
        fair_share_half_life=None,
        user_quotas={"alice": 4, "bob": 2},
        label_quotas={"team=vision": 8},
        preemption_threshold=5,
        max_pending_per_user=1000,
        max_running_per_user=3,
        max_running_cpu_jobs=8,
        reservations=ReservationLimits(max_gpus=2, horizon=7200.0),
    )
