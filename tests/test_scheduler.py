"""The scheduler: GPU states (build_slots) and bindings/waits (schedule), as pure functions."""

from __future__ import annotations

import pytest

from controller.decide.scheduler import (
    Binding,
    Holder,
    Request,
    Wait,
    build_slots,
    schedule,
)
from controller.model.gpus import Gpu, GpuProcess

GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


# --- builders --------------------------------------------------------------------------------------


def gpu(index: int, name: str = H100, memory: int = 80 * GIB, processes=(), healthy: bool = True) -> Gpu:
    return Gpu(index, f"GPU-{index:04d}", name, memory, processes=tuple(processes), healthy=healthy)


def machine(n: int = 4, name: str = H100, memory: int = 80 * GIB) -> list[Gpu]:
    return [gpu(i, name, memory) for i in range(n)]


def foreign(pid: int, gib: float, name: str = "") -> GpuProcess:
    return GpuProcess(pid, int(gib * GIB), name)


def slots_for(gpus, holders=(), allowed=None, managed=(), threshold=GIB, ignore=()):
    return build_slots(list(gpus), list(holders), allowed, set(managed), threshold, frozenset(ignore))


def excl(name: str, gpus: int, gpu_type: str | None = None, gpu_memory: float | None = None) -> Request:
    return Request(name, gpus, gpu_type, int(gpu_memory * GIB) if gpu_memory is not None else None, False)


def shared(name: str, gpus: int, gib: float, gpu_type: str | None = None) -> Request:
    return Request(name, gpus, gpu_type, int(gib * GIB), True)


def bound(decision) -> list[int]:
    assert isinstance(decision, Binding), decision
    return decision.devices


def waits(decision, reason: str) -> str:
    assert isinstance(decision, Wait), decision
    assert decision.reason == reason, decision
    return decision.message


# --- build_slots -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "holders", "allowed", "managed", "states"),
    [
        pytest.param(machine(2), [], None, [], ["Free", "Free"], id="all-free"),
        pytest.param(
            machine(3), [Holder("a", (0, 2), False)], None, [], ["Allocated", "Free", "Allocated"], id="allocated"
        ),
        pytest.param(machine(2), [Holder("s", (1,), True, 10 * GIB)], None, [], ["Free", "Shared"], id="shared"),
        pytest.param(machine(3), [], {0, 2}, [], ["Free", "Restricted", "Free"], id="restricted"),
        pytest.param([gpu(0, healthy=False), gpu(1)], [], None, [], ["Unhealthy", "Free"], id="unhealthy"),
        pytest.param([gpu(0, processes=[foreign(99, 2)]), gpu(1)], [], None, [], ["Unmanaged", "Free"], id="unmanaged"),
        pytest.param([gpu(0, processes=[foreign(99, 0.5)])], [], None, [], ["Free"], id="foreign-below-threshold"),
        pytest.param(
            [gpu(0, processes=[foreign(99, 0.5), foreign(98, 0.6)])],
            [],
            None,
            [],
            ["Unmanaged"],
            id="foreign-together-above-threshold",
        ),
        pytest.param([gpu(0, processes=[foreign(99, 8)])], [], None, [99], ["Free"], id="own-process"),
        pytest.param(
            [gpu(0, healthy=False, processes=[foreign(1, 9)])], [], {1}, [], ["Unhealthy"], id="unhealthy-wins"
        ),
        pytest.param(machine(1), [Holder("ghost", (7,), False)], None, [], ["Free"], id="holder-of-missing-gpu"),
    ],
)
def test_build_slots_states(gpus, holders, allowed, managed, states):
    assert [s.state for s in slots_for(gpus, holders, allowed, managed)] == states


@pytest.mark.parametrize(
    ("ignore", "state"),
    [((), "Unmanaged"), (("4242",), "Free"), (("Xorg",), "Free"), (("other",), "Unmanaged")],
)
def test_ignore_processes_by_pid_or_name(ignore, state):
    (slot,) = slots_for([gpu(0, processes=[foreign(4242, 4, "Xorg")])], ignore=ignore)
    assert slot.state == state


def test_build_slots_records_holders_and_shared_reservations():
    slots = slots_for(
        machine(2),
        [Holder("s1", (0,), True, 10 * GIB), Holder("s2", (0,), True, 30 * GIB), Holder("x", (1,), False)],
    )
    assert slots[0].jobs == ["s1", "s2"]
    assert slots[0].shared_reserved == 40 * GIB
    assert slots[0].shared_room() == 40 * GIB
    assert (slots[1].state, slots[1].jobs) == ("Allocated", ["x"])


# --- schedule: exclusive ---------------------------------------------------------------------------


def test_cpu_job_always_binds_without_gpus():
    assert schedule([excl("cpu", 0)], []) == {"cpu": Binding([], [])}


def test_exclusive_gang_binding_in_priority_order():
    slots = slots_for(machine(4))
    result = schedule([excl("first", 2), excl("second", 1), excl("third", 1)], slots)
    assert bound(result["first"]) == [0, 1]
    assert bound(result["second"]) == [2]
    assert bound(result["third"]) == [3]
    assert result["first"].uuids == ["GPU-0000", "GPU-0001"]
    assert [s.state for s in slots] == ["Allocated"] * 4
    assert [s.jobs for s in slots] == [["first"], ["first"], ["second"], ["third"]]


def test_gang_binding_is_all_or_nothing_and_the_blocked_head_job_holds_what_is_free():
    """No starvation: huge (2 GPUs) cannot fit behind big, and small may not take the GPU that is
    free, or a stream of small jobs would keep huge waiting forever."""
    slots = slots_for(machine(4))
    result = schedule([excl("big", 3), excl("huge", 2), excl("small", 1)], slots)
    assert bound(result["big"]) == [0, 1, 2]
    waits(result["huge"], "Priority")
    message = waits(result["small"], "Priority")
    assert message.startswith("waiting behind higher-priority job huge: needs 1 GPU, 1 free but held for it")
    assert "GPU 3 held for higher-priority job huge" in message


def test_a_job_waiting_for_running_jobs_holds_free_gpus_against_smaller_ones():
    slots = slots_for(machine(4), [Holder("running", (0, 1, 2), False)])
    result = schedule([excl("head", 2), excl("small", 1)], slots)
    assert waits(result["head"], "Resources").startswith("needs 2 GPUs, 1 free (GPUs 0,1,2 allocated to running")
    waits(result["small"], "Priority")


def test_a_job_blocked_by_foreign_processes_holds_nothing():
    """Held GPUs wait for our own jobs to end; a foreign process may never go, so it holds nothing."""
    gpus = [gpu(0, processes=[foreign(4242, 8)]), gpu(1)]
    result = schedule([excl("head", 2), excl("small", 1)], slots_for(gpus))
    message = waits(result["head"], "Resources")
    assert "GPU 0 unmanaged: pid 4242 (8Gi)" in message
    assert bound(result["small"]) == [1]


def test_priority_reason_names_the_jobs_ahead():
    result = schedule([excl("hi", 3), excl("lo", 2)], slots_for(machine(4)))
    assert (
        waits(result["lo"], "Priority")
        == "waiting behind higher-priority job hi: needs 2 GPUs, 1 free after it took GPUs"
    )


def test_priority_reason_names_every_job_that_took_gpus_this_pass():
    """Two shared jobs land on GPU 1; both were ahead of the waiting job, so both are named."""
    slots = slots_for(machine(2), [Holder("s1", (0,), True, 60 * GIB)])
    result = schedule([shared("s2", 1, 20), shared("s3", 1, 30), shared("s4", 1, 30), shared("s5", 1, 50)], slots)
    assert [bound(result[n]) for n in ("s2", "s3", "s4")] == [[0], [1], [1]]
    message = waits(result["s5"], "Priority")
    for job in ("s2", "s3", "s4"):
        assert job in message, message


def test_not_enough_free_gpus_waits_for_resources_naming_busy_gpus_and_jobs():
    slots = slots_for(machine(4), [Holder("a", (0,), False), Holder("b", (2,), False)])
    message = waits(schedule([excl("x", 3)], slots)["x"], "Resources")
    assert message == "needs 3 GPUs, 2 free (GPUs 0,2 allocated to a, b)"


def test_resources_message_mentions_foreign_processes_and_unhealthy_gpus():
    gpus = [gpu(0, processes=[foreign(99, 4)]), gpu(1), gpu(2, healthy=False), gpu(3)]
    slots = slots_for(gpus, [Holder("a", (3,), False)])
    message = waits(schedule([excl("x", 2)], slots)["x"], "Resources")
    assert message == (
        "needs 2 GPUs, 1 free (GPU 3 allocated to a; GPU 0 unmanaged: pid 99 (4Gi) not started by gflow; GPU 2 unhealthy)"
    )


@pytest.mark.parametrize(
    ("gpus", "allowed", "request_", "message"),
    [
        pytest.param(machine(4), None, excl("x", 8), "needs 8 GPUs, this machine has 4", id="too-many"),
        pytest.param(machine(1), None, excl("x", 2), "needs 2 GPUs, this machine has 1", id="singular"),
        pytest.param([], None, excl("x", 1), "needs 1 GPU, this machine has no GPUs", id="no-gpus"),
        pytest.param(
            machine(4),
            {0, 1},
            excl("x", 3),
            "needs 3 GPUs, this machine has 2 usable of 4 (GPUs 2,3 restricted by the controller's gpus setting)",
            id="restricted",
        ),
        pytest.param(
            [gpu(0), gpu(1, healthy=False)],
            None,
            excl("x", 2),
            "needs 2 GPUs, this machine has 1 usable of 2 (GPU 1 unhealthy)",
            id="unhealthy",
        ),
        pytest.param(
            machine(2),
            None,
            excl("x", 1, gpu_type="A100"),
            f"needs 1 GPU of type A100, no GPU on this machine matches (it has: {H100})",
            id="no-type-match",
        ),
        pytest.param(
            [gpu(0, A100, 40 * GIB), gpu(1), gpu(2)],
            None,
            excl("x", 2, gpu_type="a100"),
            "needs 2 GPUs a100, this machine has 1",
            id="too-few-of-type",
        ),
        pytest.param(
            machine(2),
            None,
            excl("x", 1, gpu_memory=100),
            "needs 1 GPU with 100Gi memory each, 0 GPUs this large (largest 80Gi)",
            id="too-little-memory",
        ),
        pytest.param(
            [gpu(0, A100, 40 * GIB), gpu(1)],
            None,
            shared("x", 2, 50),
            "needs 2 GPUs with 50Gi memory each, 1 GPU this large (largest 80Gi)",
            id="shared-too-large",
        ),
    ],
)
def test_requests_that_can_never_fit_are_unschedulable_with_numbers(gpus, allowed, request_, message):
    result = schedule([request_], slots_for(gpus, allowed=allowed))
    assert waits(result[request_.name], "Unschedulable") == message


def test_unschedulable_is_decided_on_capacity_not_on_current_use():
    """Busy or foreign-used GPUs free up eventually: that is Resources, not Unschedulable."""
    gpus = [gpu(0, processes=[foreign(99, 4)]), gpu(1)]
    slots = slots_for(gpus, [Holder("a", (1,), False)])
    waits(schedule([excl("x", 2)], slots)["x"], "Resources")


# --- gpuType ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu_type", "devices"),
    [("A100", [1]), ("a100", [1]), ("H100", [0]), ("nvidia", [0]), ("80GB", [0]), (None, [0])],
)
def test_gpu_type_is_a_case_insensitive_substring_of_the_nvml_name(gpu_type, devices):
    slots = slots_for([gpu(0, H100), gpu(1, A100, 40 * GIB)])
    assert bound(schedule([excl("x", 1, gpu_type)], slots)["x"]) == devices


def test_gpu_type_waits_for_its_own_kind_even_when_others_are_free():
    slots = slots_for([gpu(0, H100), gpu(1, A100, 40 * GIB)], [Holder("a", (1,), False)])
    message = waits(schedule([excl("x", 1, "A100")], slots)["x"], "Resources")
    assert message.startswith("needs 1 GPU, 0 free")


# --- shared ----------------------------------------------------------------------------------------


def test_shared_jobs_co_locate_within_memory():
    slots = slots_for(machine(1))
    result = schedule([shared("a", 1, 30), shared("b", 1, 30), shared("c", 1, 20)], slots)
    assert [bound(result[n]) for n in "abc"] == [[0], [0], [0]]
    assert slots[0].state == "Shared"
    assert slots[0].shared_reserved == 80 * GIB
    assert slots[0].jobs == ["a", "b", "c"]


def test_shared_job_joins_a_gpu_already_shared_by_a_running_job():
    slots = slots_for(machine(1), [Holder("running", (0,), True, 50 * GIB)])
    assert bound(schedule([shared("x", 1, 30)], slots)["x"]) == [0]


def test_shared_job_waits_for_gpu_memory_when_the_shared_gpu_is_full():
    slots = slots_for(machine(1), [Holder("running", (0,), True, 60 * GIB)])
    message = waits(schedule([shared("x", 1, 30)], slots)["x"], "GPUMemory")
    assert message == "needs 30Gi GPU memory on 1 GPU, at most 20Gi free on GPU 0: 60Gi promised to Shared job running"


def test_shared_room_counts_memory_of_foreign_processes_below_the_threshold():
    slots = slots_for([gpu(0, processes=[foreign(99, 0.5)])], [Holder("running", (0,), True, 79 * GIB)])
    assert slots[0].state == "Shared"
    waits(schedule([shared("x", 1, 1)], slots)["x"], "GPUMemory")


def test_exclusive_never_takes_a_shared_gpu_and_shared_never_takes_an_allocated_one():
    slots = slots_for(machine(2), [Holder("s", (0,), True, 10 * GIB), Holder("e", (1,), False)])
    result = schedule([excl("x", 1), shared("y", 1, 10)], slots)
    waits(result["x"], "Resources")
    assert bound(result["y"]) == [0]


def test_exclusive_after_shared_in_the_same_pass():
    slots = slots_for(machine(2))
    result = schedule([shared("s", 1, 10), excl("e", 2)], slots)
    assert bound(result["s"]) == [0]
    assert waits(result["e"], "Priority").startswith("waiting behind higher-priority job s: needs 2 GPUs, 1 free")


# --- GPUs the scheduler must not use -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "allowed"),
    [
        pytest.param([gpu(0, processes=[foreign(99, 4)]), gpu(1)], None, id="unmanaged"),
        pytest.param([gpu(0), gpu(1)], {1}, id="restricted"),
        pytest.param([gpu(0, healthy=False), gpu(1)], None, id="unhealthy"),
    ],
)
def test_unmanaged_restricted_and_unhealthy_gpus_are_never_bound(gpus, allowed):
    slots = slots_for(gpus, allowed=allowed)
    result = schedule([excl("a", 1), excl("b", 1), shared("c", 1, 1)], slots)
    assert bound(result["a"]) == [1]
    assert isinstance(result["b"], Wait)
    assert isinstance(result["c"], Wait)
    assert slots[0].jobs == []


def test_schedule_is_deterministic():
    def run():
        slots = slots_for(machine(4), [Holder("r", (1,), False)])
        return schedule([excl("a", 2), shared("b", 1, 10), excl("c", 1), excl("d", 4)], slots)

    assert run() == run()


# --- strategies and topology ------------------------------------------------------------------------


def test_three_two_gpu_jobs_on_four_gpus_two_run_one_waits():
    result = schedule([excl("a", 2), excl("b", 2), excl("c", 2)], slots_for(machine(4)))
    assert (bound(result["a"]), bound(result["b"])) == ([0, 1], [2, 3])
    assert waits(result["c"], "Priority").startswith("waiting behind higher-priority job a, b: needs 2 GPUs, 0 free")


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("sequential", [0]),  # lowest index
        ("packed", [1]),  # the partly used shared GPU with the least room that fits
        ("spread", [2]),  # an empty GPU (fewest jobs), most room
    ],
)
def test_strategies_place_a_shared_job(strategy, expected):
    slots = slots_for(machine(3), [Holder("s1", (1,), True, 40 * GIB), Holder("s0", (0,), True, 10 * GIB)])
    assert bound(schedule([shared("x", 1, 20)], slots, strategy)["x"]) == expected


def test_random_strategy_is_deterministic_per_job_and_varies_across_jobs():
    picks = {
        name: bound(schedule([excl(name, 1)], slots_for(machine(8)), "random")[name])[0]
        for name in [f"job-{i}" for i in range(12)]
    }
    again = {name: bound(schedule([excl(name, 1)], slots_for(machine(8)), "random")[name])[0] for name in picks}
    assert picks == again
    assert len(set(picks.values())) > 2


def test_multi_gpu_job_prefers_gpus_under_one_switch():
    # GPUs 0-1 and 2-3 share a switch (level 10); across switches is level 30
    topo = {(a, b): (10 if a // 2 == b // 2 else 30) for a in range(4) for b in range(4) if a != b}
    slots = slots_for(machine(4), [Holder("busy", (0,), False)])
    # sequential would take 1,2 (across switches); the topology-aware choice is 2,3
    assert bound(schedule([excl("x", 2)], slots, "sequential", topo)["x"]) == [2, 3]
    assert bound(schedule([excl("y", 2)], slots_for(machine(4), [Holder("busy", (0,), False)]))["y"]) == [1, 2]


# --- live GPU memory: a job that declares gpuMemory goes where NVML says that much is free ----------


def test_exclusive_job_declaring_gpu_memory_skips_a_gpu_whose_memory_no_process_owns():
    leaked = Gpu(0, "GPU-0000", H100, 80 * GIB, memory_used=70 * GIB)  # e.g. a killed job's leak
    slots = slots_for([leaked, gpu(1)])
    result = schedule([excl("x", 1, gpu_memory=40), excl("plain", 1)], slots)
    assert bound(result["x"]) == [1]
    assert bound(result["plain"]) == [0]  # no gpuMemory declared: the whole GPU, as before
    slots = slots_for([leaked])
    message = waits(schedule([excl("x", 1, gpu_memory=40)], slots)["x"], "GPUMemory")
    assert message == "needs 40Gi GPU memory on 1 GPU, at most 10Gi free on GPU 0: 70Gi held by no process NVML lists"


def test_a_wait_for_memory_names_the_process_that_holds_it_with_its_user():
    server = GpuProcess(4242, int(21.3 * GIB), "vllm", user="bob")
    slots = slots_for([gpu(0, memory=40 * GIB, processes=[server])], ignore=("vllm",))
    assert slots[0].state == "Free"  # ignoreProcesses: not Unmanaged, but its memory still counts
    message = waits(schedule([shared("x", 1, 20)], slots)["x"], "GPUMemory")
    assert message == "needs 20Gi GPU memory on 1 GPU, at most 18.7Gi free on GPU 0: pid 4242 (bob, vllm) holds 21.3Gi"
    assert bound(schedule([shared("y", 1, 18)], slots)["y"]) == [0]


def test_a_shared_job_past_its_gpu_memory_and_one_not_started_yet_both_count():
    over, idle = GpuProcess(77, 50 * GIB), GpuProcess(78, 0)
    holders = [Holder("over", (0,), True, 10 * GIB), Holder("idle", (0,), True, 20 * GIB)]
    slots = build_slots(
        [gpu(0, processes=[over, idle])], holders, None, {77, 78}, GIB, frozenset(), {"over": {77}, "idle": {78}}
    )
    assert slots[0].shared_room() == 50 * GIB  # the promises alone would let 50Gi in
    # live: 50Gi in use by "over", and "idle" may still take its 20Gi: 10Gi is what is left
    assert slots[0].memory_room() == 10 * GIB
    waits(schedule([shared("x", 1, 11)], slots)["x"], "GPUMemory")
    assert bound(schedule([shared("y", 1, 10)], slots)["y"]) == [0]


def test_a_job_that_only_others_memory_keeps_out_holds_no_gpus_from_the_jobs_behind_it():
    server = GpuProcess(4242, 60 * GIB, "vllm")
    slots = slots_for([gpu(0), gpu(1, processes=[server])], [Holder("a", (0,), False)], ignore=("vllm",))
    result = schedule([excl("big", 2, gpu_memory=40), excl("small", 1)], slots)
    waits(result["big"], "GPUMemory")
    assert bound(result["small"]) == [1]  # big can never fit beside the server: nothing is kept for it
