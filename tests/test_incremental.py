"""Incremental passes decide exactly what full passes decide.

gflowd makes a pass cost what changed: ``admit_changes`` patches the previous admission with the
documents of the files that changed, and ``reconcile`` looks only at ``changed_names`` and carries
every other record over. These tests run the same story twice, side by side — once the way the
daemon does it (incremental) and once from scratch every pass (full) — and require the same job
records, the same starts, stops and events at every step. A seeded random walk over edits, deletes,
invalid files, duplicates, dependencies and exits covers the combinations a table would miss.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from builders import T0, FakeRuntime, gpus, invalid, job

import controller.decide.lifecycle as lifecycle_module
from controller.act.apply import act
from controller.decide.admission import admit, admit_changes, admit_observed
from controller.decide.reconcile import changed_names, reconcile
from controller.model.documents import AdmissionResult, Rejection
from controller.model.plan import Manifests, Plan, RunObservation, Snapshot
from controller.model.policy import Policy
from controller.model.records import JobState


class Twin:
    """One world of documents and processes, decided two ways each tick, each plan carried out by
    the real act code on its own fake runtime (tests/builders.py)."""

    def __init__(self, n_gpus: int = 4, policy: Policy | None = None):
        self.docs: dict[str, object] = {}  # key (a "file") -> document
        self.fields = {"policy": policy} if policy is not None else {}  # both ways' snapshots
        self.gpus = gpus(n_gpus)
        self.full_runtime, self.inc_runtime = FakeRuntime(), FakeRuntime()
        self.full_states: dict[str, JobState] = {}
        self.inc_states: dict[str, JobState] = {}
        self.previous: AdmissionResult | None = None
        self.unsettled: set[str] | None = None
        self.queue_memo = None  # the last plan's: waiting jobs carried over while nothing moved them
        self.carried = 0  # passes whose waiting jobs the memo carried over
        self.gone: list = []
        self.came: list = []
        self.serial = 0  # the pass number, as gflowd's snapshot builder counts
        self.patched = 0  # passes admitted by patching the previous admission (not a full admit)

    @property
    def runs(self) -> dict[str, RunObservation]:
        return self.full_runtime.runs

    # -- the files ---------------------------------------------------------------------------------

    def put(self, key: str, doc) -> None:
        if key in self.docs:
            self.gone.append(self.docs[key])
        self.docs[key] = doc
        self.came.append(doc)

    def delete(self, key: str) -> None:
        self.gone.append(self.docs.pop(key))

    # -- the passes ----------------------------------------------------------------------------------

    def tick(self, now: float) -> tuple[Plan, Plan]:
        # the reference: every document admitted, every job through the full path, no shortcuts
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(lifecycle_module, "_finished_and_current", lambda old, job: False)
            current = {n: s.manifest for n, s in self.full_states.items() if s.manifest and not s.owner}
            full = reconcile(
                Snapshot(
                    admission=admit(list(self.docs.values()), current),
                    states=dict(self.full_states),
                    runs=self.full_runtime.observe(),
                    gpus=self.gpus,
                    **self.fields,
                ),
                now,
            )
        # gflowd's way: the changed documents patch the previous admission when they can
        self.serial += 1
        snap = Snapshot(
            admission=None,
            states=self.inc_states,
            runs=self.inc_runtime.observe(),
            gpus=self.gpus,
            previous=self.previous,
            unsettled=self.unsettled,
            serial=self.serial,
            queue_memo=self.queue_memo,
            manifests=Manifests(list(self.docs.values()), self.gone, self.came, full=False),
            **self.fields,
        )
        admission = admit_observed(snap)
        if self.previous is not None and (admission is self.previous or admission.base == self.previous.serial):
            self.patched += 1
        self.gone, self.came = [], []
        inc = reconcile(replace(snap, admission=admission), now)
        self.carried += inc.queue_memo is not None and inc.queue_memo is self.queue_memo
        self.previous, self.unsettled, self.queue_memo = admission, inc.unsettled, inc.queue_memo
        self._check_same(full, inc)
        for runtime, plan in ((self.full_runtime, full), (self.inc_runtime, inc)):
            runtime.now = now
            act(plan, runtime)
        self.full_states, self.inc_states = dict(full.states), inc.states
        return full, inc

    @staticmethod
    def _check_same(full: Plan, inc: Plan) -> None:
        assert {n: s.to_status() for n, s in inc.states.items()} == {n: s.to_status() for n, s in full.states.items()}
        assert [(x.name, x.attempt, x.devices) for x in inc.starts] == [
            (x.name, x.attempt, x.devices) for x in full.starts
        ]
        assert [(x.name, x.reason) for x in inc.stops] == [(x.name, x.reason) for x in full.stops]
        assert sorted(inc.removed) == sorted(full.removed)
        assert sorted(inc.consumed) == sorted(full.consumed)
        assert sorted((e.type, e.reason, e.object, e.message) for e in inc.events) == sorted(
            (e.type, e.reason, e.object, e.message) for e in full.events
        )
        assert (inc.wake_at, inc.again) == (full.wake_at, full.again)

    def exit(self, name: str, code: int, at: float) -> None:
        for runtime in (self.full_runtime, self.inc_runtime):
            runtime.exit(name, code, at)


def test_an_edit_among_finished_jobs_is_patched_and_looks_only_at_that_job():
    twin = Twin()
    for i in range(20):
        twin.put(f"j{i}", job(f"j{i}"))
    now = T0
    twin.tick(now)
    for i in range(20):
        now += 1
        twin.exit(f"j{i}", 0, now)
    twin.tick(now)
    twin.tick(now + 1)  # settled: nothing left to look at
    assert twin.unsettled == set()
    twin.put("j7", job("j7", priority=5))
    patched = twin.patched
    snap_prev = twin.previous
    twin.tick(now + 2)
    assert twin.patched == patched + 1  # admitted by patching, not by re-admitting 20 documents
    assert twin.previous.touched == {"j7"} and twin.previous.base == snap_prev.serial
    assert twin.inc_states["j7"].priority == 5 and twin.inc_states["j7"].generation == 2
    # every other record is the very object the previous pass had
    snap = Snapshot(admission=twin.previous, states=twin.inc_states, runs={}, previous=snap_prev, unsettled=set())
    assert changed_names(snap) == {"j7"}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda t: t.put("c", job("b")), id="a second file defines an existing name"),
        pytest.param(lambda t: t.put("d", job("d", dependsOn=["a"])), id="a job with dependsOn"),
        pytest.param(lambda t: t.put("a", job("a", dependsOn=["b"])), id="an edit adds dependsOn"),
        pytest.param(
            lambda t: t.put("n", Rejection(None, "YAMLError", "bad", "jobs/x y.yaml")), id="a nameless rejection"
        ),
    ],
)
def test_changes_that_need_every_document_fall_back_to_a_full_admit(change):
    twin = Twin()
    twin.put("a", job("a"))
    twin.put("b", job("b"))
    twin.tick(T0)
    twin.tick(T0 + 0.5)
    patched = twin.patched
    change(twin)
    twin.tick(T0 + 1)  # the same decisions either way (checked inside tick)
    assert twin.patched == patched


def test_admit_changes_matches_admit_for_simple_changes():
    docs = {n: job(n) for n in "abc"}
    previous = admit(list(docs.values()))
    # edit b, delete c, add d, make a invalid
    new = {"a": invalid("a", bogus=1), "b": job("b", priority=3), "d": job("d")}
    patched = admit_changes(previous, [docs["a"], docs["b"], docs["c"]], [new["a"], new["b"], new["d"]])
    expected = admit(list(new.values()))
    assert patched is not None
    assert patched.jobs == expected.jobs and patched.rejected == expected.rejected
    assert patched.touched == {"a", "b", "c", "d"}
    assert previous.jobs.keys() == {"a", "b", "c"}  # the previous result is never modified


def test_a_restart_carries_finished_jobs_over_only_when_nothing_about_them_changed():
    # no previous pass (a restart): finished jobs whose record already says what their manifest
    # says are carried as they are; one whose labels changed while gflowd was down is updated
    twin = Twin()
    for i in range(6):
        twin.put(f"j{i}", job(f"j{i}", labels={"team": "a"}))
    twin.tick(T0)
    for i in range(6):
        twin.exit(f"j{i}", 0, T0 + 1)
    twin.tick(T0 + 1)
    twin.put("j2", job("j2", labels={"team": "b"}))
    states = twin.inc_states
    plan = reconcile(Snapshot(admission=admit(list(twin.docs.values())), states=states, runs={}), T0 + 2)
    assert all(plan.states[f"j{i}"] is states[f"j{i}"] for i in (0, 1, 3, 4, 5))
    assert plan.states["j2"] is not states["j2"] and plan.states["j2"].labels == {"team": "b"}


@pytest.mark.parametrize("seed", range(12))
def test_random_walks_decide_the_same_incrementally_and_from_scratch(seed):
    rng = random.Random(seed)
    twin = Twin(n_gpus=3)
    names = [f"j{i}" for i in range(10)]
    now = T0
    for _step in range(120):
        now += rng.choice([0.01, 0.5, 2.0])
        action = rng.random()
        name = rng.choice(names)
        key = name if rng.random() < 0.9 else f"{name}-copy"  # sometimes a second file: duplicates
        if action < 0.35:
            spec: dict = {"priority": rng.randint(0, 3)}
            if rng.random() < 0.5:
                spec["resources"] = {"gpus": rng.randint(0, 2)}
            if rng.random() < 0.15:
                spec["dependsOn"] = [rng.choice(names)]
            if rng.random() < 0.1:
                spec["suspend"] = True
            if rng.random() < 0.1:
                spec["cancelled"] = True
            if rng.random() < 0.1:
                spec["backoffLimit"] = 1
            if rng.random() < 0.1:  # a running job's limit: backfill hints count down
                spec["timeLimit"] = rng.choice([3, 30])
            if rng.random() < 0.1:  # a time gate that opens during the walk
                spec["startAfter"] = datetime.fromtimestamp(now + rng.choice([1, 5]), UTC).isoformat()
            twin.put(key, job(name, **spec))
        elif action < 0.45:
            twin.put(key, invalid(name, bogus=rng.randint(0, 9)))
        elif action < 0.55 and key in twin.docs:
            twin.delete(key)
        elif action < 0.85:
            live = [n for n, r in twin.runs.items() if r.running]
            if live:
                twin.exit(rng.choice(live), rng.choice([0, 0, 1]), now)
        elif action < 0.9:  # a GPU fails or comes back: the queue's memo must not hold
            index = rng.randrange(len(twin.gpus))
            twin.gpus[index] = replace(twin.gpus[index], healthy=not twin.gpus[index].healthy)
        twin.tick(now)
    assert twin.patched > 0  # the walk did exercise the patching path


def test_waiting_jobs_are_carried_over_until_something_the_queue_reads_moves():
    """The queue's memo: a pass where nothing moved keeps every waiting job's record (the very
    object); a priority edit, a GPU failing, a job ending or a time gate decide the queue again,
    and every pass still decides what a full pass decides (Twin checks that each tick)."""
    twin = Twin(n_gpus=1)
    twin.put("run", job("run", resources={"gpus": 1}))
    now = T0
    twin.tick(now)
    for i in range(5):
        twin.put(f"w{i}", job(f"w{i}", resources={"gpus": 1}))
    twin.tick(now := now + 1)
    waiting = {n: twin.inc_states[n] for n in ("w0", "w1", "w2", "w3", "w4")}
    assert {st.phase for st in waiting.values()} == {"Pending"}

    def carried_once(at: float) -> bool:
        before = twin.carried
        twin.tick(at)
        return twin.carried == before + 1

    now += 1

    assert carried_once(now)  # nothing moved: the same records
    assert all(twin.inc_states[n] is st for n, st in waiting.items())
    twin.put("w3", job("w3", resources={"gpus": 1}, priority=9))  # a priority edit
    now += 1
    assert not carried_once(now)
    assert twin.inc_states["w3"].queue_position == 1 and twin.inc_states["w0"].queue_position == 2
    now += 1
    assert carried_once(now)
    twin.gpus[0] = replace(twin.gpus[0], healthy=False)  # the GPU fails: the queue reads it
    now += 1
    assert not carried_once(now)
    assert twin.inc_states["w3"].reason == "Unschedulable"
    twin.gpus[0] = replace(twin.gpus[0], healthy=True)
    now += 1
    assert not carried_once(now)
    now += 1
    assert carried_once(now)
    twin.put("gate", job("gate", backoffLimit=1, command=["false"]))  # fails once, then backs off 1 s
    twin.tick(now := now + 1)
    twin.exit("gate", 1, now)
    twin.tick(now := now + 0.1)
    assert twin.inc_states["gate"].reason == "BackOff"
    now += 0.1
    assert carried_once(now)  # the backoff has not run out
    _, inc = twin.tick(now := now + 1.5)  # it has: decided again, and it starts
    assert [x.name for x in inc.starts] == ["gate"]
    twin.exit("run", 0, now)  # the GPU holder ends: the first waiting job starts
    _, inc = twin.tick(now := now + 1)
    assert [x.name for x in inc.starts] == ["w3"]


@pytest.mark.parametrize("seed", range(6))
def test_random_walks_decide_the_same_when_the_overlays_flatten_often(seed, monkeypatch):
    """Records and admitted jobs are layered over the previous pass's (controller/model/overlay.py)
    and flattened once the layer grows: here after a change or two, so the walk crosses many
    flattenings as well as layers over layers."""
    import controller.model.overlay as overlay

    monkeypatch.setattr(overlay, "MIN_FLATTEN", 1)
    monkeypatch.setattr(overlay, "FLATTEN_AT", 0.05)
    test_random_walks_decide_the_same_incrementally_and_from_scratch(seed)


FLOOD_POLICY = Policy(  # gflowd's defaults (config.yaml), with room for 4 CPU jobs at once
    max_running_cpu_jobs=4,
    aging_interval=3600.0,
    aging_max=100,
    fair_share_half_life=7 * 86400.0,
    max_pending_per_user=1000,
)


@pytest.mark.parametrize("fair_share", [True, False])
@pytest.mark.parametrize("seed", range(10))
def test_a_flood_of_cpu_jobs_decides_the_same_with_its_tail_carried_over(seed, fair_share):
    """A flood of CPU jobs waits behind maxRunningCpuJobs: the incremental passes carry its tail over
    (decide/queue.py ``carried_tail``) and must still decide exactly what a whole pass decides, through
    exits, new jobs, edits of waiting ones, priorities that permute a user's order, dependencies,
    time gates and GPU jobs, and a limit full of running jobs."""
    rng = random.Random(seed)
    # without fair share the whole queue's memo is kept too, and a pass it carries keeps its first pass's
    # aging wake-up (earlier than a fresh pass's, harmless): that variant runs without aging
    policy = FLOOD_POLICY if fair_share else replace(FLOOD_POLICY, fair_share_half_life=None, aging_interval=None)
    twin = Twin(n_gpus=2, policy=policy)
    now = T0
    for i in range(30):
        twin.put(f"f{i:02d}", replace(job(f"f{i:02d}"), owner_uid=1000))
    twin.tick(now)
    carried = 0
    for _step in range(80):
        now += rng.choice([0.001, 0.01, 0.5])
        before = dict(twin.inc_states)
        action = rng.random() if _step >= 8 else 0.0  # the flood drains a while first
        live = [n for n, r in twin.runs.items() if r.running]
        if action < 0.55 and live:
            for name in rng.sample(live, rng.randint(1, len(live))):
                twin.exit(name, rng.choice([0, 0, 0, 1]), now)
        elif action < 0.7:
            name = f"n{_step:02d}"
            spec: dict = {}
            if rng.random() < 0.2:
                spec["priority"] = rng.randint(1, 3)
            if rng.random() < 0.1:
                spec["dependsOn"] = [rng.choice(list(twin.docs))]
            if rng.random() < 0.1:
                spec["startAfter"] = datetime.fromtimestamp(now + rng.choice([0.5, 2]), UTC).isoformat()
            if rng.random() < 0.1:
                spec["resources"] = {"gpus": 1}
            twin.put(name, replace(job(name, **spec), owner_uid=rng.choice([1000, 1000, 1001])))
        elif action < 0.8:
            waiting = sorted(n for n, st in twin.inc_states.items() if st.phase == "Pending")
            if waiting:
                name = rng.choice(waiting)
                twin.put(name, replace(job(name, priority=rng.randint(0, 2)), owner_uid=1000))
        elif action < 0.85:
            waiting = sorted(n for n, st in twin.inc_states.items() if st.phase == "Pending")
            if waiting:
                twin.delete(rng.choice(waiting))
        twin.tick(now)
        carried += sum(
            1
            for n, st in twin.inc_states.items()
            if st.phase == "Pending" and before.get(n) is st and st.reason == "JobLimit"
        )
    assert carried > 0  # the tail was carried over, not only decided whole
