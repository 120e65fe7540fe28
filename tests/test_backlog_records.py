"""One user's backlog must not make every pass cost per waiting job (issue 32, hole 6): a GPU
turnover decides only each owner's queue head, rewrites no waiting job's status file, and the events
about waiting jobs are folded per owner, so another user's events stay in the event log; a mass
write is read within a budget per owner, others' files first. The real decide, act and PassWriter on a
temp home; only the process edge is the builders' FakeRuntime."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from builders import T0, World, job

from controller.act.apply import act
from controller.decide.acted import fold_acted
from controller.decide.backlog import QUEUE_DEPTH
from controller.decide.reconcile import reconcile
from controller.model.plan import Event, Memory
from controller.observe.manifests import READ_BUDGET, ManifestStore
from controller.paths import Home
from controller.record.fold import BUDGET, WINDOW, EventFolder
from controller.record.recorder import LAGGING_REFRESH, Recorder
from controller.record.writer import PassWriter

MALLORY, ALICE = 65534, 65533
BACKLOG = 2000


def _pass(world: World, writer: PassWriter, now: float, full: bool = False):
    """What gflowd's loop does: decide (given what the last pass left), act, record."""
    snap = world.snapshot()
    last = world.last
    if last is not None and not full:
        snap = replace(
            snap, previous=last.admission, unsettled=last.unsettled, queue_memo=last.queue_memo, parked=last.parked
        )
    plan = replace(reconcile(snap, now), admission=snap.admission)
    plan = fold_acted(plan, act(plan, world.runtime, prune=lambda expired: []))
    world.last = plan
    world.memory = Memory(dict(plan.states), dict(plan.sweeps), reservation_states=dict(plan.reservations))
    writer.write(plan, now, full=full, first=False, after_statuses=world.runtime.purge)
    return plan


def _events(home: Home) -> list[dict]:
    return [json.loads(line) for line in home.events_file.read_text().splitlines()]


def test_a_gpu_turnover_rewrites_no_waiting_status_and_folds_their_events(tmp_path):
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home, clock=lambda: T0)
    writer = PassWriter(home, recorder, lambda: "fake")
    backlog = [replace(job(f"m-{k:05d}", resources={"gpus": 1}), owner_uid=MALLORY) for k in range(BACKLOG)]
    world = World(*backlog, n_gpus=4)
    now = T0
    _pass(world, writer, now, full=True)  # every waiting job gets its first status file
    for turn in range(6):  # the GPUs turn over: one running job ends, the next starts
        running = sorted(n for n, r in world.runs.items() if r.running)
        now += 1.0
        world.exit(running[0], 0, now)
        before, lines_before = recorder.status_writes, len(_events(home))
        plan = _pass(world, writer, now)
        assert len(plan.looked_at) <= QUEUE_DEPTH + 8, f"turnover {turn}: the pass decided every waiting job again"
        _pass(world, writer, now + 0.1)
        assert recorder.status_writes - before <= 4, f"turnover {turn}: a status write per waiting job"
        assert len(_events(home)) - lines_before <= BUDGET + 4, f"turnover {turn}: an event per waiting job"
    # alice submits one job: her events are written as they are, mallory's flood did not use them up
    world.put(replace(job("alice-1", resources={"gpus": 1}), owner_uid=ALICE))
    _pass(world, writer, now + 0.2)
    assert any(e["object"] == "job/alice-1" for e in _events(home))
    # the head of mallory's queue moved up as her first jobs started; the rest waited as they were
    assert all(world.states[f"m-{k:05d}"].phase == "Pending" for k in range(20, BACKLOG))
    # when the window closes, mallory's folded events are said once, as a count
    _pass(world, writer, now + WINDOW + 1)
    summaries = [e for e in _events(home) if e["object"].startswith("user/")]
    assert summaries and all("more waiting-job events" in e["message"] for e in summaries)
    # a resync refreshes lagging files, a bounded number per owner
    before = recorder.status_writes
    _pass(world, writer, now + WINDOW + 2, full=True)
    assert 0 < recorder.status_writes - before <= LAGGING_REFRESH + 8


def test_the_folder_keeps_each_owner_to_its_budget_per_window():
    folder = EventFolder(window=10.0, budget=3)
    owners = {f"m{k}": "mallory" for k in range(100)} | {"a1": "alice"}
    flood = [Event("Normal", "Resources", f"m{k}", "needs 1 GPU") for k in range(100)]
    started = Event("Normal", "Started", "m99", "bound to GPU 0")
    out = folder.fold([*flood, Event("Normal", "Priority", "a1", "behind"), started], owners.get, T0)
    assert [e.object for e in out] == ["m0", "m1", "m2", "a1", "m99"]  # budget, alice's own, a non-waiting event
    assert folder.fold([], owners.get, T0 + 5) == []  # the window is still open
    summary = folder.fold([], owners.get, T0 + 10)
    assert len(summary) == 1 and summary[0].object == "mallory" and summary[0].kind == "user"
    assert (
        summary[0].message.startswith("97 more waiting-job events of mallory")
        and "m3, m4, m5, ..." in summary[0].message
    )
    # a new window: the budget is back
    assert len(folder.fold(flood[:5], owners.get, T0 + 11)) == 3


def test_a_mass_write_is_read_within_a_budget_per_owner_and_others_first(tmp_path):
    spec = tmp_path / "jobs"
    mine, hers = spec / "mallory", spec / "alice"
    for folder, uid in ((mine, MALLORY), (hers, ALICE)):
        folder.mkdir(parents=True)
        os.chown(folder, uid, uid)
    store = ManifestStore(spec, str)
    store.scan()
    flood = [mine / f"m-{k:04d}.yaml" for k in range(READ_BUDGET * 2 + 10)]
    for path in flood:
        path.write_text(f"metadata: {{name: {path.stem}}}\nspec:\n  command: ['true']\n")
    (hers / "a.yaml").write_text("metadata: {name: a}\nspec:\n  command: ['true']\n")
    changed = store.refresh([*map(str, flood), str(hers / "a.yaml")])
    assert str(hers / "a.yaml") in changed  # hers is read in the first pass
    assert len(changed) == READ_BUDGET + 1 and len(store.deferred) == READ_BUDGET + 10
    assert len(store.refresh([])) == READ_BUDGET  # the rest over the next passes
    assert len(store.refresh([])) == 10 and not store.deferred
    assert len(store.documents()) == len(flood) + 1
