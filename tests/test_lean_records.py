"""Finished jobs a start read back kept lean (model/lean_records.py): their records stay journal
rows until read, decide's first pass carries the unchanged ones without building them, and a job
that something touches (its manifest changed or deleted, a rerun, a dependent) is built and decided
as before. Pure: the World of builders.py, restarted on lean records the way gflowd restarts."""

from __future__ import annotations

import marshal
from dataclasses import replace

import pytest
from builders import T0, World, job, started

from controller.act.apply import act
from controller.decide.acted import fold_acted
from controller.decide.lifecycle import _finished_and_current
from controller.decide.reconcile import decide
from controller.model.documents import FILE_KEY, AdmittedJob, CachedJob, model_built
from controller.model.lean_records import LeanRecords, changed_items, facts_of, loaded_facts, loaded_names
from controller.model.overlay import Overlay
from controller.model.plan import Manifests, Memory, Snapshot
from controller.model.reasons import SETTLED_PHASES
from controller.model.records import JobState
from controller.record.recorder import _facts_of_row


def _row(state: JobState) -> tuple:
    """The row the records journal gives back for ``state``'s status file."""
    return marshal.loads(marshal.dumps(JobState.from_status(state.to_status()).to_row()))


def _restarted(states) -> LeanRecords:
    """gflowd's memory after a restart (Recorder.load): finished records as their facts, built from
    their status files when read; the others built."""
    loaded = {n: JobState.from_row(_row(s)) for n, s in states.items()}
    facts = {n: _facts_of_row(_row(s)) for n, s in states.items() if s.phase in SETTLED_PHASES}
    plain = {n: s for n, s in loaded.items() if n not in facts}
    return LeanRecords(facts, plain, build=lambda name: JobState.from_status(states[name].to_status()))


def _cached(doc: AdmittedJob) -> CachedJob:
    """``doc`` as a restarted store holds a cached file of that one Job (observe/manifests.py): its
    model built from the cached document only when read."""
    key = FILE_KEY.pack(doc.mtime_ns, 1, 2, 1000, 3)
    document = f'[{{"metadata":{{"name":"{doc.name}"}}}}]'
    built = doc.job

    def build(text: str, doc_index: int, name: str):
        assert (text, doc_index, name) == (document, doc.doc_index, doc.name)
        return built

    return CachedJob(
        key, doc.name, doc.source, doc.path, doc.doc_index, doc.spec_hash, doc.run_hash, doc.facts, document, build
    )


class LeanWorld(World):
    """A World whose memory is handed to decide as it is (no copy to a dict), as gflowd's loop does;
    its first pass after :meth:`restart` is a start's (no previous admission), its plain Jobs'
    manifests as a restarted store holds them (``CachedJob``)."""

    def restart(self) -> LeanRecords:
        self.memory = Memory(_restarted(self.states), dict(self.sweep_states))
        self.docs = {n: _cached(d) if type(d) is AdmittedJob and d.owner is None else d for n, d in self.docs.items()}
        return self.memory.states

    def tick(self, now: float):
        snap = Snapshot(
            admission=None,
            states=self.states,
            runs=self.runtime.observe(),
            gpus=self.gpus,
            sweep_states=dict(self.sweep_states),
            previous=self.memory.admission,
            unsettled=self.memory.unsettled,
            manifests=Manifests(documents=list(self.docs.values())),
            **self.snapshot_fields,
        )
        plan = decide(snap, now)
        self.runtime.now = now
        plan = fold_acted(plan, act(plan, self.runtime, prune=self._prune))
        self.memory = Memory.after(plan)
        self.runtime.purge()
        self.last = plan
        return plan


def _finished_world(*names: str, **snapshot_fields) -> LeanWorld:
    world = LeanWorld(*(job(n) for n in names), **snapshot_fields)
    world.tick(T0)
    for name in names:
        world.exit(name, 0, T0 + 1)
    world.tick(T0 + 2)
    assert all(world.phase(n) == ("Succeeded", "Completed") for n in names)
    return world


def _built(records: LeanRecords) -> int:
    return len(records._built)


def _lean(states: dict[str, JobState]) -> LeanRecords:
    return LeanRecords({n: facts_of(s) for n, s in states.items()}, build=lambda name: states[name].copy())


def test_a_record_is_built_once_when_read_and_every_read_gives_that_object():
    state = JobState(name="a", phase="Succeeded", created=T0)
    records = LeanRecords({"a": facts_of(state)}, {"b": JobState(name="b")}, build=lambda name: state.copy())
    assert (len(records), sorted(records), _built(records)) == (2, ["a", "b"], 0)
    first = records["a"]
    assert first is records["a"] is records.get("a") and _built(records) == 1
    assert first == state
    written = records.sibling()
    assert written["a"] is first  # the recorder's copy gives the same object: `is` holds between them
    records["a"] = JobState(name="a", phase="Failed")
    assert records.facts("a") is None and written.facts("a") is not None
    del records["b"]
    assert "b" not in records and len(records) == 1
    with pytest.raises(KeyError):
        del records["b"]


def test_an_overlay_flattened_over_lean_records_builds_none_of_them():
    base = _lean({f"j{i}": JobState(name=f"j{i}", phase="Succeeded") for i in range(1000)})
    layer = Overlay(base)
    for i in range(300):  # past the layer's flattening threshold
        layer[f"new{i}"] = JobState(name=f"new{i}")
    del layer["j0"]
    flat = Overlay(layer)
    assert type(flat.base) is LeanRecords and _built(base) == 0
    assert loaded_names(flat) == {f"j{i}" for i in range(1, 1000)}
    assert "j0" not in flat and len(flat) == 1299
    assert {n for n, _ in changed_items(flat)} == {f"new{i}" for i in range(300)}
    assert loaded_facts(flat, "j1") is base.facts("j1") and loaded_facts(flat, "new1") is None


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"labels": {"team": "z"}}, id="other-labels"),
        pytest.param({"command": ["v2"]}, id="spec"),
        pytest.param({"priority": 7}, id="priority"),
        pytest.param({"labels": {"team": "x"}}, id="labels"),
        pytest.param({"resources": {"gpus": 1}}, id="gpus"),
        pytest.param({"annotations": {"gflow.dev/rerun": "1"}}, id="rerun"),
    ],
)
@pytest.mark.parametrize("code", [0, 1])
def test_the_facts_of_a_journal_row_are_those_of_the_record_it_stands_for(edit, code):
    world = LeanWorld(job("a", labels={"team": "y"}))
    world.tick(T0)
    world.exit("a", code, T0 + 1)
    world.tick(T0 + 2)
    labels = edit.pop("labels", None)
    annotations = edit.pop("annotations", None)
    changed = job("a", labels=labels, annotations=annotations, **edit)
    row = _row(world.state())
    record = JobState.from_row(row)
    assert _facts_of_row(row) == facts_of(record)
    assert _finished_and_current(record, changed) is False  # every edit here differs from job a's manifest
    assert _finished_and_current(record, job("a", labels={"team": "y"})) is True


def test_a_start_carries_unchanged_finished_jobs_without_building_their_records():
    world = _finished_world("a", "b", "c")
    before = {n: world.state(n) for n in "abc"}
    records = world.restart()
    plan = world.tick(T0 + 10)
    assert (plan.starts, plan.removed, plan.events) == ((), (), ())
    assert _built(records) == 0
    assert all(type(d) is CachedJob and not model_built(d) for d in world.docs.values())  # nor their models
    assert all(plan.admission.jobs[n] is world.docs[n] for n in "abc")
    assert plan.looked_at == set()  # nothing decided: the writer looks at none of them
    assert {n: plan.states[n].to_status() for n in "abc"} == {n: s.to_status() for n, s in before.items()}
    assert changed_items(plan.states) == []  # and a resync's write_states finds nothing to compare


def test_a_finished_job_whose_manifest_changed_runs_again_as_a_new_generation():
    world = _finished_world("a", "b")
    records = world.restart()
    world.put(job("a", command=["python", "v2.py"]))
    plan = world.tick(T0 + 10)
    (launch,) = plan.starts
    assert (launch.name, launch.attempt, launch.generation) == ("a", 2, 2)
    assert set(records._built) <= {"a"}  # b stays a row (until read, below)
    assert world.state("a").generation == 2 and world.phase("b") == ("Succeeded", "Completed")


def test_a_rerun_of_a_finished_job_runs_it_again():
    world = LeanWorld(job("a", annotations={"gflow.dev/rerun": "1"}))
    world.tick(T0)
    world.exit("a", 0, T0 + 1)
    world.tick(T0 + 2)
    world.restart()
    world.put(job("a", annotations={"gflow.dev/rerun": "2"}))
    assert started(world.tick(T0 + 10)) == ["a"]


def test_a_deleted_finished_job_loses_its_status():
    world = _finished_world("a", "b")
    world.restart()
    world.delete("a")
    plan = world.tick(T0 + 10)
    assert plan.removed == ("a",) and "a" not in plan.states and "b" in plan.states


def test_a_cached_job_whose_record_is_not_finished_builds_its_model_and_is_decided_as_ever():
    world = LeanWorld(job("a", backoffLimit=0), job("b"))
    world.tick(T0)
    world.exit("b", 0, T0 + 1)
    world.tick(T0 + 2)
    assert world.phase("a")[0] == "Running"
    world.runtime.runs.pop("a")  # its process gone while gflowd was away
    world.restart()
    plan = world.tick(T0 + 10)
    assert world.phase("a") == ("Failed", "Lost") and plan.states["a"].generation == 1
    assert model_built(world.docs["a"]) and not model_built(world.docs["b"])  # a's read, b's not


def test_a_dependent_of_a_finished_job_starts():
    world = _finished_world("a")
    records = world.restart()
    world.put(job("b", dependsOn=["a"]))
    assert started(world.tick(T0 + 10)) == ["b"]
    world.exit("b", 0, T0 + 11)
    world.tick(T0 + 12)
    assert world.phase("b") == ("Succeeded", "Completed")
    assert "a" in records.loaded_names()


def test_the_passes_after_a_start_keep_the_lean_records_lean():
    world = _finished_world(*(f"j{i}" for i in range(20)))
    records = world.restart()
    for i in range(5):
        world.put(job(f"new{i}"))
        world.tick(T0 + 10 + 2 * i)
        world.exit(f"new{i}", 0, T0 + 11 + 2 * i)
    world.tick(T0 + 30)
    assert all(world.phase(f"new{i}") == ("Succeeded", "Completed") for i in range(5))
    assert _built(records) == 0


def test_a_metrics_scrape_counts_lean_records_without_building_them():
    from controller.sinks.metrics import _SnapshotCollector

    world = _finished_world("a", "b")
    records = world.restart()
    world.put(job("c", startAfter="2099-01-01T00:00:00Z"))
    plan = world.tick(T0 + 10)
    collector = _SnapshotCollector()
    collector.current = (plan.states, [], T0 + 10, {})
    jobs = next(m for m in collector.collect() if m.name == "gflow_jobs")
    counts = {s.labels["phase"]: s.value for s in jobs.samples}
    assert (counts["Succeeded"], counts["Pending"]) == (2, 1)
    assert _built(records) == 0


def test_a_history_limit_expires_the_oldest_finished_jobs_without_building_the_others():
    world = _finished_world("a", "b", "c", finished_history=3)
    records = world.restart()
    world.put(job("d"))
    world.tick(T0 + 10)
    world.exit("d", 0, T0 + 11)
    plan = world.tick(T0 + 12)  # four finished, three kept: the oldest (by completion, then name) goes
    assert [j.name for j in plan.expired] == ["a"]
    assert _built(records) == 0


def test_fair_share_builds_only_the_finished_jobs_recent_enough_to_count():
    from controller.model.policy import Policy

    world = _finished_world("old", policy=Policy(fair_share_half_life=60))
    world.put(job("new", resources={"gpus": 1}))
    world.tick(T0 + 3)
    world.exit("new", 0, T0 + 4000)  # ended long after "old": "old" weighs nothing any more
    world.tick(T0 + 4001)
    records = world.restart()
    world.put(replace(job("mine", resources={"gpus": 1}), owner_uid=1000))
    world.put(replace(job("theirs", resources={"gpus": 1}), owner_uid=1001))  # two users wait: usage counts
    assert sorted(started(world.tick(T0 + 4002))) == ["mine", "theirs"]
    assert set(records._built) == {"new"}  # the one that ended within 20 half-lives
