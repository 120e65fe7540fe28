"""``resources.cpus``: whole cores booked like GPUs, as pure scheduling (decide/cores.py through
``schedule``): reasons with numbers, never-fits, placement on the GPUs' NUMA node, backfill."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from controller.api.units import parse_cpu_list
from controller.decide.scheduler import Binding, Wait, build_slots, schedule
from controller.model.gpus import Gpu
from controller.model.scheduling import CorePool, Request

GIB = 2**30


def gpus(*near: frozenset[int]) -> list:
    """GPUs whose NUMA node holds these cores, one GPU per argument."""
    listed = [Gpu(i, f"GPU-{i}", "H100", 80 * GIB, cpus=tuple(sorted(cores))) for i, cores in enumerate(near)]
    return build_slots(listed, [], None, set(), GIB)


def req(name: str, cpus: int, gpus: int = 0, time_limit: float | None = None) -> Request:
    return Request(name, gpus, None, None, False, time_limit, (), cpus)


def pool(n: int, taken: dict[int, str] | None = None, free_at: dict[int, float] | None = None) -> CorePool:
    return CorePool(frozenset(range(n)), dict(taken or {}), dict(free_at or {}))


def test_a_cpu_job_gets_exactly_its_cores_and_the_next_waits_with_the_numbers():
    cores = pool(4)
    out = schedule([req("a", 3), req("b", 2)], [], cores=cores)
    assert out["a"] == Binding([], [], (0, 1, 2))
    assert isinstance(out["b"], Wait) and out["b"].reason == "Resources"
    assert out["b"].message == "needs 2 CPUs, 1 free (cores 0-2 bound to a)"
    assert cores.taken == {0: "a", 1: "a", 2: "a"}


def test_more_cores_than_the_machine_has_is_unschedulable_for_gpu_and_cpu_jobs():
    out = schedule([req("big", 8), req("gpu", 8, gpus=1)], gpus(frozenset({0})), cores=pool(2))
    assert out["big"] == Wait("Unschedulable", "needs 8 CPUs, this machine has 2")
    assert out["gpu"] == Wait("Unschedulable", "needs 8 CPUs, this machine has 2")


def test_cores_come_from_the_bound_gpus_numa_node_first():
    slots = gpus(frozenset({4, 5, 6, 7}), frozenset({0, 1, 2, 3}))
    out = schedule([req("a", 2, gpus=1), req("b", 3, gpus=1)], slots, cores=pool(8))
    assert out["a"] == Binding([0], ["GPU-0"], (4, 5))
    assert out["b"] == Binding([1], ["GPU-1"], (0, 1, 2))


def test_a_gpu_job_short_of_cores_where_its_node_is_full_takes_any_free_core():
    slots = gpus(frozenset({0, 1}))
    out = schedule([req("a", 3, gpus=1)], slots, cores=pool(4, taken={0: "x"}))
    assert out["a"] == Binding([0], ["GPU-0"], (1, 2, 3))


def test_a_gpu_job_with_free_gpus_but_no_free_cores_waits_and_takes_no_gpu():
    slots = gpus(frozenset(), frozenset())
    out = schedule([req("a", 2, gpus=1), req("b", 0, gpus=1)], slots, cores=pool(2, taken={0: "x", 1: "x"}))
    assert out["a"] == Wait("Resources", "needs 2 CPUs, 0 free (cores 0-1 bound to x)")
    assert out["b"] == Binding([0], ["GPU-0"], ())  # the GPU a could not use is still free for b
    assert slots[1].state == "Free"


def test_without_a_core_pool_cpus_are_not_booked():
    assert schedule([req("a", 64)], [])["a"] == Binding([], [])


def test_backfill_a_short_job_takes_cores_held_for_the_blocked_one_a_long_job_does_not():
    # 4 cores; x holds 3 until t=100. "big" needs 4: reserved at t=100 (1 free now, 3 freed then).
    now = 0.0
    cores = pool(4, taken={0: "x", 1: "x", 2: "x"}, free_at={0: 100.0, 1: 100.0, 2: 100.0})
    out = schedule(
        [req("big", 4), req("long", 1, time_limit=500), req("short", 1, time_limit=50)], [], now=now, cores=cores
    )
    assert out["big"].reason == "Resources"
    assert out["long"] == Wait(
        "Priority", "waiting behind higher-priority job big: needs 1 CPU, 1 free but held for it"
    )
    assert out["short"] == Binding([], [], (3,))


def test_backfill_cores_spare_even_at_the_reservation_go_to_anyone():
    # 6 cores, x holds 4 until t=100; big needs 3: at t=100 it needs 3 of 6, so 3 are spare.
    cores = pool(6, taken={i: "x" for i in range(4)}, free_at={i: 100.0 for i in range(4)})
    out = schedule([req("big", 3), req("endless", 1)], [], cores=cores)
    assert isinstance(out["big"], Wait)
    assert out["endless"] == Binding([], [], (4,))  # no timeLimit, but a spare core: it delays nobody


def test_strict_mode_holds_cores_against_jobs_without_spare_room():
    cores = pool(4, taken={0: "x", 1: "x", 2: "x"}, free_at={0: 100.0, 1: 100.0, 2: 100.0})
    out = schedule([req("big", 4), req("short", 1, time_limit=5)], [], mode="strict", cores=cores)
    assert isinstance(out["short"], Wait) and out["short"].reason == "Priority"


def test_firstfit_holds_nothing():
    cores = pool(4, taken={0: "x", 1: "x", 2: "x"}, free_at={0: math.inf, 1: math.inf, 2: math.inf})
    out = schedule([req("big", 4), req("small", 1)], [], mode="firstfit", cores=cores)
    assert isinstance(out["big"], Wait) and out["small"] == Binding([], [], (3,))


def test_the_apply_review_warns_of_more_cores_than_the_machine_has():
    from controller.decide.scheduler import never_fits

    assert never_fits(req("big", 8), [], frozenset({0, 1})) == "needs 8 CPUs, this machine has 2"
    assert never_fits(req("ok", 2), [], frozenset({0, 1})) is None
    assert never_fits(req("unbooked", 8), [], None) is None


# -- through reconcile: the launch carries the cores and the GPUs' device minors ---------------------


def _job(name: str, **spec):
    from controller.api.validation import validate_document

    spec.setdefault("command", ["true"])
    return validate_document(
        {"metadata": {"name": name}, "spec": spec},
        source=f"jobs/{name}.yaml",
        path=f"/h/jobs/{name}.yaml",
        stem=name,
        single=True,
    )


def test_reconcile_binds_cores_near_the_gpu_and_launches_with_its_minor_and_the_running_job_keeps_them():
    from controller.decide.admission import admit
    from controller.decide.reconcile import reconcile
    from controller.model.plan import Host, RunObservation, Snapshot

    listed = [Gpu(0, "GPU-0", "H100", 80 * GIB, minor=7, cpus=(2, 3)), Gpu(1, "GPU-1", "H100", 80 * GIB, minor=3)]
    host = Host(cores=frozenset(range(4)))
    admitted = admit([_job("a", resources={"gpus": 1, "cpus": 2}), _job("b", resources={"cpus": 3})])
    first = reconcile(Snapshot(admitted, {}, {}, listed, host=host), 1000.0)
    launch = next(s for s in first.starts if s.name == "a")
    assert (launch.devices, launch.device_minors, launch.cpus) == ([0], (7,), (2, 3))
    assert first.states["a"].cores == [2, 3] and first.states["a"].message == "bound to GPU 0, cores 2-3"
    assert first.states["b"].reason == "Resources"
    assert first.states["b"].message == "needs 3 CPUs, 2 free (cores 2-3 bound to a)"
    # the next pass: a runs and still holds its cores (from its record), b still waits
    runs = {"a": RunObservation("a", 1, 5, 1000.0, True)}
    second = reconcile(Snapshot(admitted, first.states, runs, listed, host=host), 1001.0)
    assert second.cores.taken == {2: "a", 3: "a"} and second.states["b"].reason == "Resources"


# -- the fake-GPU file: numaNode, numaNodes, minor ----------------------------------------------------


def test_the_fake_gpu_file_places_gpus_on_declared_numa_nodes_and_gives_minors():
    from controller.observe.gpus.inventory import parse_fake_gpus

    listed = parse_fake_gpus(
        "numaNodes: {0: '0-3', 1: '4-7,12'}\n"
        "gpus:\n  - {name: A, numaNode: 1, minor: 9}\n  - {name: B, numaNode: 0}\n  - {name: C}\n"
    )
    assert [(g.cpus, g.device_minor) for g in listed] == [
        ((4, 5, 6, 7, 12), 9),
        ((0, 1, 2, 3), 1),
        ((), 2),
    ]


def test_a_node_the_file_does_not_declare_is_this_machines_own():
    from controller.observe.gpus.inventory import parse_fake_gpus

    own = Path("/sys/devices/system/node/node0/cpulist")
    expected = tuple(sorted(parse_cpu_list(own.read_text()))) if own.exists() else ()
    assert parse_fake_gpus("gpus:\n  - {name: A, numaNode: 0}\n")[0].cpus == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("gpus:\n  - {name: A, numaNode: -1}\n", "gpus[0].numaNode: must be an integer >= 0"),
        ("gpus:\n  - {name: A, minor: x}\n", "gpus[0].minor: must be an integer >= 0"),
        ("numaNodes: {0: 'a-b'}\ngpus: []\n", "numaNodes.0: expected a CPU list like 0-7,16, not 'a-b'"),
        ("numaNodes: [0]\ngpus: []\n", "numaNodes: expected a mapping of node number to a CPU list like 0-7,16"),
    ],
)
def test_bad_placement_in_the_fake_gpu_file_is_one_line_naming_the_field(text, message):
    from controller.observe.gpus.inventory import parse_fake_gpus

    with pytest.raises(ValueError) as raised:
        parse_fake_gpus(text)
    assert str(raised.value) == message
