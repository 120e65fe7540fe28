"""Every resource kind answers the scheduler the same questions (``controller.decide.placement.Placer``):
GPUs, CPU cores and a counted kind, table-driven over one machine built with tests/builders.py.
What each kind says when a job asks none of it, more than the machine has, what is free, or more
than is free; and that a kind books exactly what it said it would."""

from __future__ import annotations

import math

import pytest
from builders import GIB, gpus

from controller.decide.placement import Placer
from controller.decide.placement.counted import CountBooking
from controller.decide.placement.cpus import CoreBooking
from controller.decide.placement.gpus import GpuPlacer
from controller.decide.scheduler import build_slots
from controller.model.resources import ResourceVector
from controller.model.scheduling import CorePool, CountPool, Request


def machine() -> dict[str, Placer]:
    """4 GPUs (GPU 3 busy with x), 8 cores (0-5 bound to x), 4Gi of /dev/shm (3Gi booked by x)."""
    slots = build_slots(gpus(4), [], None, set(), GIB)
    slots[3].state, slots[3].jobs = "Allocated", ["x"]
    cores = CorePool(frozenset(range(8)), {c: "x" for c in range(6)}, {c: math.inf for c in range(6)})
    shm = CountPool("shm", 4 * GIB, {"x": 3 * GIB}, {"x": math.inf})
    return {
        "gpus": GpuPlacer(slots, "sequential", None, "backfill", 0.0, True),
        "cpus": CoreBooking(cores, "backfill", 0.0),
        "shm": CountBooking(shm, "backfill", 0.0),
    }


def asking(kind: str, n: int) -> Request:
    """A request for ``n`` of one kind (GiB for shm) and nothing else."""
    if kind == "gpus":
        return Request("job", n)
    if kind == "cpus":
        return Request("job", 0, cpus=n)
    return Request("job", 0, amounts=ResourceVector(shm=n * GIB))


KINDS = ["gpus", "cpus", "shm"]
# kind -> (what the machine has, what is free now, the words of the messages)
HAS = {"gpus": (4, 3), "cpus": (8, 2), "shm": (4, 1)}
NEVER = {
    "gpus": "needs 5 GPUs, this machine has 4",
    "cpus": "needs 9 CPUs, this machine has 8",
    "shm": "needs 5Gi of /dev/shm, this machine has 4Gi",
}
SHORT = {
    "gpus": ("Resources", "needs 4 GPUs, 3 free (GPU 3 allocated to x)"),
    "cpus": ("Resources", "needs 3 CPUs, 2 free (cores 0-5 bound to x)"),
    "shm": ("Resources", "needs 2Gi of /dev/shm, 1Gi free (booked by x)"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_that_asks_none_of_a_kind_is_neither_stopped_nor_booked_by_it(kind):
    placer = machine()[kind]
    other = asking(next(k for k in KINDS if k != kind), 1)
    assert not placer.needs(other)
    assert placer.never(other) is None


@pytest.mark.parametrize("kind", KINDS)
def test_more_than_the_machine_has_is_never_with_the_numbers(kind):
    placer, (total, _free) = machine()[kind], HAS[kind]
    assert placer.never(asking(kind, total + 1)) == NEVER[kind]
    assert placer.never(asking(kind, total)) is None


@pytest.mark.parametrize("kind", KINDS)
def test_more_than_is_free_waits_and_says_how_much_is(kind):
    placer, (_total, free) = machine()[kind], HAS[kind]
    req = asking(kind, free + 1)
    assert placer.needs(req) and not placer.allows(req)
    wait = placer.wait(req)
    assert (wait.reason, wait.message) == SHORT[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_what_is_free_is_taken_and_then_is_not(kind):
    placer, (_total, free) = machine()[kind], HAS[kind]
    req = asking(kind, free)
    assert placer.allows(req)
    placed = placer.take(req, frozenset())
    assert not placer.allows(asking(kind, 1))  # all of it is booked now
    if kind == "gpus":
        assert placed == (0, 1, 2)
    elif kind == "cpus":
        assert placed == (6, 7)
    else:
        assert placed == ()
