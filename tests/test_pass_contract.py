"""The pass contract: observe hands decide a frozen Snapshot, decide returns a frozen Plan, act
carries it out without changing it and reports what it learned (an ActResult), and the pure fold
(``decide/acted.py``) turns that report into the records record writes.

Real decide and act code throughout; the process edge is the builders' FakeRuntime.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from builders import T0, FakeRuntime, World, job, running

from controller.act.apply import act, started_facts
from controller.act.runtime.protocol import Runtime
from controller.decide.acted import fold_acted
from controller.decide.reconcile import decide, reconcile
from controller.decide.scheduler import build_slots
from controller.model.gpus import Gpu, GpuProcess
from controller.model.plan import ActResult, Plan
from controller.model.scheduling import GPU_STATES, GpuState

GIB = 2**30
DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_a_snapshot_is_frozen_and_its_variants_are_made_with_replace():
    snap = World(job("a")).snapshot()
    with pytest.raises(FrozenInstanceError):
        snap.job_pids = {"a": {1}}  # type: ignore[misc]
    variant = replace(snap, job_pids={"a": {1}})
    assert variant.job_pids == {"a": {1}} and snap.job_pids == {}


def test_the_plan_decide_returns_cannot_be_changed():
    world = World(job("a", resources={"gpus": 1}), job("b", resources={"gpus": 1}))
    plan = decide(world.snapshot(), T0)
    assert isinstance(plan, Plan) and [s.name for s in plan.starts] == ["a", "b"]
    with pytest.raises(FrozenInstanceError):
        plan.starts = ()  # type: ignore[misc]
    for name in ("starts", "stops", "consumed", "removed", "events", "notices", "slots", "expired"):
        assert isinstance(getattr(plan, name), tuple), name
    for name in ("time_limits", "sweeps", "reservations", "parked"):
        with pytest.raises(TypeError):
            getattr(plan, name)["x"] = None


def test_act_leaves_the_plan_as_decided_and_the_fold_gives_the_records_their_pids():
    world = World(job("a", resources={"gpus": 1}), job("b", resources={"gpus": 1}))
    plan = reconcile(world.snapshot(), T0)
    before = {name: (st.phase, st.pid) for name, st in plan.states.items()}
    acted = act(plan, world.runtime)
    assert {name: (st.phase, st.pid) for name, st in plan.states.items()} == before  # act wrote nothing
    pids = {name: run.pid for name, run in world.runtime.observe().items()}
    assert [(f.name, f.pid, f.failed, f.held) for f in acted.started] == [
        ("a", pids["a"], False, False),
        ("b", pids["b"], False, False),
    ]
    folded = fold_acted(plan, acted)
    assert {n: st.pid for n, st in folded.states.items()} == pids
    assert all(plan.states[n].pid is None for n in pids)  # the fold is pure: the acted plan is unchanged
    assert folded.starts == plan.starts and folded.events == plan.events


def test_a_start_that_failed_at_once_asks_for_another_pass_and_nothing_started_folds_to_the_same_plan():
    world = World(job("a"))
    plan = reconcile(world.snapshot(), T0)
    runs = {"a": replace(running("a", pid=77), running=False, exit_code=127, error="command not found")}
    facts = started_facts(plan.starts, runs)
    assert [(f.name, f.pid, f.failed) for f in facts] == [("a", 77, True)]
    assert fold_acted(plan, ActResult()) is plan


def test_the_fake_runtime_is_a_whole_runtime():
    """The builders' FakeRuntime implements every member of the Runtime protocol with the
    protocol's parameters, so the loop's calls work on it as on a real backend."""
    members = {name for name in vars(Runtime) if not name.startswith("_")} | set(Runtime.__annotations__)
    fake = FakeRuntime()
    missing = sorted(name for name in members if not hasattr(fake, name))
    assert missing == []
    for name in members:
        declared = inspect.getattr_static(Runtime, name, None)
        if inspect.isfunction(declared):
            assert (
                list(inspect.signature(getattr(fake, name)).parameters)
                == list(inspect.signature(declared).parameters)[1:]
            ), name


def test_gpu_states_are_one_table_the_scheduler_and_the_metrics_read():
    metrics = pytest.importorskip("controller.sinks.metrics")
    assert metrics.GPU_STATES is GPU_STATES
    gpus = [
        Gpu(0, "GPU-0", "H100", 80 * GIB),
        Gpu(1, "GPU-1", "H100", 80 * GIB, healthy=False),
        Gpu(2, "GPU-2", "H100", 80 * GIB),
        Gpu(3, "GPU-3", "H100", 80 * GIB, processes=(GpuProcess(999, 2 * GIB),)),
    ]
    slots = build_slots(gpus, [], {0, 1, 3}, set(), GIB)
    assert [s.state for s in slots] == [GpuState.Free, GpuState.Unhealthy, GpuState.Restricted, GpuState.Unmanaged]
    section = (DOCS / "scheduling.md").read_text().split("## GPU states", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert documented == [s.value for s in GpuState]
