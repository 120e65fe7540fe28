"""Counted kinds (``resources.shm``) through the one placement interface: the resource vector's
arithmetic, a counted kind's booking (reasons with numbers, never-fits, backfill) as pure
scheduling, a job bound only when every kind it needs fits, and the whole loop (admission ->
queue -> start -> exit -> the next starts) with the builders' World."""

from __future__ import annotations

import math
import os
import subprocess
import tempfile

import pytest
from builders import GIB, T0, World, invalid, job, started

from controller.decide.scheduler import Binding, Wait, build_slots, schedule
from controller.model.gpus import Gpu
from controller.model.plan import Host
from controller.model.resources import COUNTED, KINDS, ResourceVector, count
from controller.model.scheduling import CorePool, CountPool, Request
from controller.observe.host import machine_capacity

MIB = 2**20


def shm(name: str, gib: float, gpus: int = 0, time_limit: float | None = None, cpus: int = 0) -> Request:
    return Request(name, gpus, time_limit=time_limit, cpus=cpus, amounts=ResourceVector(shm=int(gib * GIB)))


def pool(gib: float, **booked: tuple[float, float]) -> dict[str, CountPool]:
    """/dev/shm of ``gib``; ``booked``: job -> (GiB, when its timeLimit ends)."""
    return {
        "shm": CountPool(
            "shm",
            int(gib * GIB),
            {n: int(g * GIB) for n, (g, _) in booked.items()},
            {n: end for n, (_, end) in booked.items()},
        )
    }


def one_gpu() -> list:
    return build_slots([Gpu(0, "GPU-0", "H100", 80 * GIB)], [], None, set(), GIB)


# -- the vector ------------------------------------------------------------------------------------------


def test_the_vector_adds_subtracts_and_says_which_kinds_do_not_fit():
    a, b = ResourceVector(gpus=2, shm=GIB), ResourceVector(shm=GIB, cpus=4)
    assert a + b == ResourceVector(gpus=2, cpus=4, shm=2 * GIB)
    assert (a + b) - b == a
    assert ResourceVector(gpus=0) == ResourceVector() and len(ResourceVector(gpus=0)) == 0  # absent is 0
    assert a.fits_in({"gpus": 4, "shm": GIB}) and not a.fits_in({"gpus": 1, "shm": GIB})
    assert (a + b).over({"gpus": 4, "cpus": 2}) == ["cpus", "shm"]
    assert hash(ResourceVector(shm=1, gpus=2)) == hash(ResourceVector(gpus=2, shm=1))  # keys a cache


def test_every_kind_is_a_field_of_spec_resources_and_a_job_asks_one_vector():
    from controller.api.job import Resources

    assert set(KINDS) <= set(Resources.model_fields)  # a row in KINDS without its field fails here
    asked = job("a", resources={"gpus": 2, "cpus": 4, "shm": "1Gi", "memory": "4Gi"}).spec.resources
    assert asked.requests() == ResourceVector(gpus=2, cpus=4, shm=GIB, memory=4 * GIB)
    assert asked.counted() == ResourceVector(shm=GIB)
    assert asked.requests().fits_in({"gpus": 4, "cpus": 8, "shm": GIB, "memory": 8 * GIB})


def test_every_kind_has_one_name_and_counts_are_spelled_in_one_place():
    assert COUNTED == ("shm",)
    assert {k.placement for k in KINDS.values()} == {"devices", "cores", "counted", "limit"}
    assert count(1, KINDS["gpus"].noun) == "1 GPU" and count(4, KINDS["cpus"].noun) == "4 CPUs"


# -- a counted kind, as pure scheduling -------------------------------------------------------------------

CASES = [
    # (what the machine has and who booked it, the requests in queue order, what each gets)
    pytest.param(pool(4), [shm("a", 3), shm("b", 1)], {"a": Binding([], []), "b": Binding([], [])}, id="fits-exactly"),
    pytest.param(
        pool(4, x=(3, math.inf)),
        [shm("a", 2)],
        {"a": Wait("Resources", "needs 2Gi of /dev/shm, 1Gi free (booked by x)")},
        id="waits-with-numbers",
    ),
    pytest.param(
        pool(4),
        [shm("big", 8)],
        {"big": Wait("Unschedulable", "needs 8Gi of /dev/shm, this machine has 4Gi")},
        id="never-fits",
    ),
    pytest.param(
        pool(4, x=(4, math.inf)),
        [shm("a", 0.5)],
        {"a": Wait("Resources", "needs 512Mi of /dev/shm, 0 free (booked by x)")},
        id="none-free",
    ),
    pytest.param(
        # a waits for x (ends at T0+100); b ends before then: it backfills; c would outlive it: waits
        pool(4, x=(3, T0 + 100)),
        [shm("a", 2), shm("b", 1, time_limit=50), shm("c", 1, time_limit=500)],
        {
            "a": Wait("Resources", "needs 2Gi of /dev/shm, 1Gi free (booked by x)"),
            "b": Binding([], []),
            "c": Wait("Resources", "needs 1Gi of /dev/shm, 0 free (booked by b, x)"),
        },
        id="backfill",
    ),
    pytest.param(
        # once x ends, a takes 3 of the 4: 1Gi is spare even then, so a job that runs longer may take it
        pool(4, x=(3, T0 + 100)),
        [shm("a", 3), shm("b", 1, time_limit=500)],
        {"a": Wait("Resources", "needs 3Gi of /dev/shm, 1Gi free (booked by x)"), "b": Binding([], [])},
        id="spare-past-the-reservation",
    ),
    pytest.param(
        # a needs all 4 once x ends: nothing is spare, the free 1Gi is held for it
        pool(4, x=(3, T0 + 100)),
        [shm("a", 4), shm("b", 1, time_limit=500)],
        {
            "a": Wait("Resources", "needs 4Gi of /dev/shm, 1Gi free (booked by x)"),
            "b": Wait(
                "Priority", "waiting behind higher-priority job a: needs 1Gi of /dev/shm, 1Gi free but held for it"
            ),
        },
        id="held-for-the-first",
    ),
    pytest.param(pool(4), [Request("cpu", 0)], {"cpu": Binding([], [])}, id="asks-none"),
]


@pytest.mark.parametrize("pools, requests, expected", CASES)
def test_a_counted_kind_is_booked_against_the_machines_capacity(pools, requests, expected):
    assert schedule(requests, [], mode="backfill", now=T0, counted=pools) == expected


def test_firstfit_holds_nothing_for_a_waiting_job():
    out = schedule(
        [shm("a", 3), shm("b", 1, time_limit=500)], [], mode="firstfit", now=T0, counted=pool(4, x=(3, T0 + 100))
    )
    assert isinstance(out["a"], Wait) and out["b"] == Binding([], [])


def test_a_kind_the_machine_reports_no_capacity_of_is_not_booked():
    assert schedule([shm("a", 64)], [], counted={}) == {"a": Binding([], [])}


def test_a_gpu_job_binds_only_when_every_kind_it_needs_fits():
    slots, pools = one_gpu(), pool(4, x=(3, math.inf))
    out = schedule([shm("a", 2, gpus=1), shm("b", 1, gpus=1)], slots, counted=pools)
    assert out["a"] == Wait("Resources", "needs 2Gi of /dev/shm, 1Gi free (booked by x)")
    assert out["b"] == Binding([0], ["GPU-0"])  # a took nothing: the GPU and the shm stayed free for b
    assert pools["shm"].used == {"x": 3 * GIB, "b": GIB} and slots[0].jobs == ["b"]


def test_cores_and_shm_together_commit_both_or_neither():
    cores, pools = CorePool(frozenset(range(4))), pool(4)
    out = schedule([shm("a", 3, cpus=2), shm("b", 2, cpus=1), shm("c", 1, cpus=3)], [], counted=pools, cores=cores)
    assert out["a"] == Binding([], [], (0, 1))
    assert out["b"] == Wait("Resources", "needs 2Gi of /dev/shm, 1Gi free (booked by a)")
    assert out["c"] == Wait("Resources", "needs 3 CPUs, 2 free (cores 0-1 bound to a)")
    assert cores.taken == {0: "a", 1: "a"} and pools["shm"].used == {"a": 3 * GIB}


def test_the_apply_review_warns_of_more_shm_than_the_machine_has():
    from controller.decide.scheduler import never_fits

    assert never_fits(shm("big", 8), [], None, {"shm": 4 * GIB}) == "needs 8Gi of /dev/shm, this machine has 4Gi"
    assert never_fits(shm("ok", 4), [], None, {"shm": 4 * GIB}) is None
    assert never_fits(shm("unbooked", 8), [], None, {}) is None


# -- the whole loop ------------------------------------------------------------------------------------


def test_a_job_waits_for_shm_until_the_job_holding_it_ends():
    world = World(
        job("a", resources={"shm": "3Gi"}),
        job("b", resources={"shm": "2Gi"}),
        host=Host(capacity={"shm": 4 * GIB}),
    )
    plan = world.tick(T0)
    assert started(plan) == ["a"]
    assert world.phase("b") == ("Pending", "Resources")
    assert world.state("b").message == "needs 2Gi of /dev/shm, 1Gi free (booked by a)"
    world.tick(T0 + 1)
    world.exit("a", 0, T0 + 2)
    world.tick(T0 + 3)
    plan = world.tick(T0 + 4)
    assert world.phase("b") == ("Running", "Started")


def test_more_shm_than_the_machine_has_is_unschedulable_and_unknown_capacity_books_nothing():
    world = World(job("a", resources={"shm": "8Gi"}), host=Host(capacity={"shm": 4 * GIB}))
    world.tick(T0)
    assert world.phase("a") == ("Pending", "Unschedulable")
    assert world.state("a").message == "needs 8Gi of /dev/shm, this machine has 4Gi"
    world = World(job("a", resources={"shm": "8Gi"}), host=Host())
    assert started(world.tick(T0)) == ["a"]


def test_shm_is_a_quantity_and_a_bad_one_is_rejected_naming_the_field():
    assert job("a", resources={"shm": "512Mi"}).spec.resources.counted() == ResourceVector(shm=512 * MIB)
    assert job("a").spec.resources.counted() == ResourceVector()
    rejected = invalid("a", resources={"shm": "lots"})
    assert "spec.resources.shm" in rejected.message and "\n" not in rejected.message


# -- the capacity, as observe reads it -------------------------------------------------------------------


@pytest.mark.e2e  # runs a process
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_the_capacity_is_the_size_of_the_shm_filesystem():
    with tempfile.TemporaryDirectory() as where:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "gflow-test-shm", where], check=True)
        try:
            assert machine_capacity(where) == {"shm": 64 * MIB}
        finally:
            subprocess.run(["umount", where], check=True)
    assert machine_capacity("/nonexistent/shm") == {}
