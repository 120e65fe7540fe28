"""Sweeps as pure functions: expansion into child Jobs, admission, and their life in reconcile."""

from __future__ import annotations

import pytest
from builders import T0, World

from controller.api.validation import validate_any
from controller.decide.admission import admit
from controller.model.documents import AdmittedSweep, Rejection
from controller.util.yamlio import load_one

SWEEP = """\
apiVersion: gflow.dev/v1alpha1
kind: Sweep
metadata: {name: lr}
spec:
  template:
    command: [python3, train.py, --lr, "{lr}", --bs, "{batch}"]
    env: {TAG: "run-{index}"}
  matrix:
    lr: ["0.1", "0.01"]
    batch: [32, 64, 128]
"""


def docs(text: str, stem: str = "lr") -> list:
    return validate_any(
        load_one(text), source=f"jobs/{stem}.yaml", path=f"/h/jobs/{stem}.yaml", stem=stem, single=True, text=text
    )


def test_matrix_expands_in_order_with_env_and_substitution():
    record, *children = docs(SWEEP)
    assert isinstance(record, AdmittedSweep)
    assert [c.name for c in children] == [f"lr-{i}" for i in range(6)]
    first, last = children[0], children[-1]
    assert first.spec.command == ["python3", "train.py", "--lr", "0.1", "--bs", "32"]
    assert last.spec.command == ["python3", "train.py", "--lr", "0.01", "--bs", "128"]
    assert last.spec.env == {
        "TAG": "run-5",
        "LR": "0.01",
        "BATCH": "128",
        "GFLOW_SWEEP_NAME": "lr",
        "GFLOW_SWEEP_INDEX": "5",
    }
    assert all(c.owner == "lr" for c in children)
    assert first.job.metadata.labels["gflow.dev/sweep"] == "lr"


def test_exclude_and_name_template():
    text = SWEEP + '  exclude: [{lr: "0.1", batch: 128}, {batch: 64}]\n  nameTemplate: "lr-{batch}-{index}"\n'
    _, *children = docs(text)
    assert [c.name for c in children] == ["lr-32-0", "lr-32-1", "lr-128-2"]


def test_indices_make_a_job_array():
    text = "kind: Sweep\nspec:\n  template: {script: 'echo {index}'}\n  indices: 0-2,10\n  parallelism: 2\n"
    record, *children = docs(text, stem="arr")
    assert [c.name for c in children] == ["arr-0", "arr-1", "arr-2", "arr-10"]
    assert children[-1].spec.script == "echo 10"
    assert record.parallelism == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  parallelism: 0\n", "spec.parallelism: must be >= 1"),
        ("  indices: 0-3\n", "exactly one of matrix and indices is required"),
        ('  nameTemplate: "Run_{index}"\n', "child name 'Run_0' is not a valid job name"),
        ('  nameTemplate: "same"\n', "two children would be named 'same'"),
        ("  paralelism: 2\n", "spec.paralelism: unknown field; did you mean parallelism?"),
    ],
)
def test_invalid_sweeps_are_rejected_with_the_field(extra, message):
    (result,) = docs(SWEEP + extra)
    assert isinstance(result, Rejection)
    assert message in result.message


def test_a_job_named_like_a_child_is_a_duplicate_and_the_first_owner_keeps_it():
    job = validate_any(
        load_one("spec: {command: [x]}"), source="jobs/lr-1.yaml", path="/h/jobs/lr-1.yaml", stem="lr-1", single=True
    )
    result = admit([*docs(SWEEP), *job], current_sources={"lr-1": "jobs/lr-1.yaml"})
    assert result.jobs["lr-1"].owner is None  # the standalone job owned the name first
    assert "lr-0" in result.jobs and "lr" in result.sweeps


# --- reconcile -------------------------------------------------------------------------------------


def sweep_world(*texts: str) -> World:
    """The manifests of ``texts`` through the real reconcile and act (tests/builders.py)."""
    return World(*(d for text in texts for d in docs(text, stem="x")))


def running_jobs(world: World) -> list[str]:
    return sorted(n for n, r in world.runs.items() if r.running)


def by_name(documents: list) -> dict:
    return {d.name: d for d in documents}


def test_parallelism_caps_running_children_and_the_sweep_counts_them():
    world = sweep_world(SWEEP + "  parallelism: 2\n")
    world.tick(T0)
    assert running_jobs(world) == ["lr-0", "lr-1"]
    assert (world.states["lr-2"].phase, world.states["lr-2"].reason) == ("Pending", "Parallelism")
    assert "at most 2 children" in world.states["lr-2"].message
    sweep = world.sweep_states["lr"]
    assert (sweep.phase, sweep.counts) == ("Running", {"Pending": 4, "Running": 2})
    world.exit("lr-0", 0, T0 + 1)
    world.tick(T0 + 1)
    assert running_jobs(world) == ["lr-1", "lr-2"]
    t = T0 + 2
    while running_jobs(world):
        for name in running_jobs(world):
            world.exit(name, 0, t)
        world.tick(t)
        assert len(running_jobs(world)) <= 2
        t += 1
    sweep = world.sweep_states["lr"]
    assert (sweep.phase, sweep.reason, sweep.counts) == ("Succeeded", "AllSucceeded", {"Succeeded": 6})


def test_a_failed_child_fails_the_sweep_and_a_dependent_job_is_cancelled():
    dependent = "metadata: {name: evaluate}\nspec:\n  command: [eval]\n  dependsOn: [lr]\n"
    world = sweep_world(SWEEP.replace('["0.1", "0.01"]', '["0.1"]').replace("[32, 64, 128]", "[32, 64]"), dependent)
    assert world.tick(T0).again  # children started: one more pass refreshes what evaluate waits for
    world.tick(T0)
    assert world.states["evaluate"].reason == "Dependency"
    assert world.states["evaluate"].message == "waits for sweep lr (Running)"
    world.exit("lr-0", 0, T0 + 1)
    world.exit("lr-1", 3, T0 + 1)
    plan = world.tick(T0 + 1)
    assert world.sweep_states["lr"].phase == "Failed"
    assert "failed: lr-1" in world.sweep_states["lr"].message
    if plan.again:
        world.tick(T0 + 1)
    assert (world.states["evaluate"].phase, world.states["evaluate"].reason) == ("Cancelled", "DependencyFailed")
    assert "sweep lr ended Failed" in world.states["evaluate"].message


def test_deleting_the_sweep_stops_running_children_then_removes_everything():
    world = sweep_world(SWEEP + "  parallelism: 1\n")
    world.tick(T0)
    assert running_jobs(world) == ["lr-0"]
    world.docs = {}
    plan = world.tick(T0 + 1)
    assert [(s.name, s.reason) for s in plan.stops] == [("lr-0", "Deleted")]
    assert sorted(plan.removed) == [f"lr-{i}" for i in range(1, 6)]
    assert plan.removed_sweeps == ("lr",)
    world.exit("lr-0", 143, T0 + 2)
    plan = world.tick(T0 + 2)
    assert plan.removed == ("lr-0",)
    assert world.states == {} and world.sweep_states == {}


def test_an_invalid_edit_of_a_sweep_keeps_its_children():
    world = sweep_world(SWEEP + "  parallelism: 1\n")
    world.tick(T0)
    world.exit("lr-0", 0, T0 + 1)
    world.tick(T0 + 1)
    assert running_jobs(world) == ["lr-1"]
    world.docs = by_name(docs(SWEEP + "  parallelism: 0\n", stem="x"))
    plan = world.tick(T0 + 2)
    assert plan.stops == () and plan.removed == ()
    assert world.states["lr-0"].phase == "Succeeded"  # its outcome is kept
    assert world.states["lr-1"].phase == "Running"
    world.docs = by_name(docs(SWEEP + "  parallelism: 1\n", stem="x"))
    world.tick(T0 + 3)
    assert world.states["lr-0"].phase == "Succeeded"  # fixing the file does not run it again
