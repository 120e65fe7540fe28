"""Builders for the tests of the pure core and the act step: admitted jobs, GPUs, runs, records,
snapshots, a fake runtime, and ``World``, which drives the real decide and act code pass by pass.

Everything here is real project code except :class:`FakeRuntime`, the process edge: it keeps
attempts in memory instead of forking supervisors, and behaves as ``SupervisorRuntime`` does
towards the loop (``forget`` drops only ended attempts; an exit carries the stop reason the
supervisor acted on, as its exit record does).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller.act.apply import act
from controller.api.validation import validate_any, validate_document
from controller.decide.acted import fold_acted
from controller.decide.admission import admit
from controller.decide.reconcile import reconcile
from controller.model.documents import AdmittedJob, Rejection
from controller.model.gpus import Gpu, GpuProcess
from controller.model.plan import Launch, Memory, Plan, RunObservation, Snapshot
from controller.model.records import JobState
from controller.util.yamlio import load_one

GIB = 2**30
T0 = 1_800_000_000.0  # 2027-01-15: a fixed clock, far from the epoch


# --- documents -------------------------------------------------------------------------------------


def job(name: str = "a", *, labels: dict | None = None, annotations: dict | None = None, **spec: Any) -> AdmittedJob:
    """An admitted Job; ``spec`` in the manifest's own words (``resources={"gpus": 2}``, ``backoffLimit=1``)."""
    if "script" not in spec:
        spec.setdefault("command", ["true"])
    meta: dict = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    result = validate_document(
        {"apiVersion": "gflow.dev/v1alpha1", "kind": "Job", "metadata": meta, "spec": spec},
        source=f"jobs/{name}.yaml",
        path=f"/home/u/.local/share/gflow/jobs/{name}.yaml",
        stem=name,
        single=True,
    )
    assert isinstance(result, AdmittedJob), result
    return result


def invalid(name: str = "a", **spec: Any) -> Rejection:
    """A document admission rejects (``bogus=1`` makes any spec invalid)."""
    spec.setdefault("command", ["true"])
    result = validate_document(
        {"metadata": {"name": name}, "spec": spec},
        source=f"jobs/{name}.yaml",
        path=f"/h/jobs/{name}.yaml",
        stem=name,
        single=True,
    )
    assert isinstance(result, Rejection), result
    return result


def documents(text: str, stem: str = "x") -> list:
    """Every document of one manifest file's text (a Sweep expands into its record and children)."""
    return validate_any(
        load_one(text), source=f"jobs/{stem}.yaml", path=f"/h/jobs/{stem}.yaml", stem=stem, single=True, text=text
    )


# --- the machine and its processes -----------------------------------------------------------------


def gpus(n: int = 4, memory_gib: int = 80, name: str = "NVIDIA H100 80GB HBM3") -> list[Gpu]:
    return [Gpu(i, f"GPU-{i:04d}", name, memory_gib * GIB) for i in range(n)]


def gpu_process(pid: int, gib: float, name: str = "") -> GpuProcess:
    return GpuProcess(pid, int(gib * GIB), name)


def running(name: str, attempt: int = 1, pid: int = 4242, started_at: float = T0, **facts: Any) -> RunObservation:
    return RunObservation(name, attempt, pid, started_at, True, **facts)


def exited(
    name: str, code: int, at: float, attempt: int = 1, signal: int | None = None, **facts: Any
) -> RunObservation:
    return RunObservation(name, attempt, 4242, at - 1, False, code, signal, at, **facts)


def state(name: str = "a", **fields: Any) -> JobState:
    """A job's record as the status file would hold it (``phase="Running"``, ``attempt=1``...)."""
    return JobState(name=name, **fields)


def snapshot(
    *docs: AdmittedJob | Rejection, states: dict | None = None, runs: dict | None = None, **fields: Any
) -> Snapshot:
    """A snapshot of these documents (admitted together) and records, for one pass of reconcile."""
    states = states or {}
    current = {n: s.manifest for n, s in states.items() if s.manifest and not s.owner}
    return Snapshot(admission=admit(list(docs), current), states=states, runs=runs or {}, **fields)


class FakeRuntime:
    """The ``Runtime`` Protocol in memory: attempts start at ``now`` with the next pid."""

    allocates_devices = False

    def __init__(self, first_pid: int = 1000) -> None:
        self.runs: dict[str, RunObservation] = {}
        self.stops: dict[str, str] = {}  # job -> the reason of the stop it was sent
        self.time_limits: dict[str, float | None] = {}
        self.notices: list[tuple[str, str]] = []  # (job, line) shown on its terminal
        self.started: list[Launch] = []
        self.purged = 0
        self.now = T0
        self._pid = first_pid

    def start(self, launch: Launch) -> None:
        self._pid += 1
        self.started.append(launch)
        self.stops.pop(launch.name, None)
        self.runs[launch.name] = RunObservation(
            launch.name,
            launch.attempt,
            self._pid,
            self.now,
            True,
            devices=tuple(launch.devices),
            device_uuids=tuple(launch.device_uuids),
            run_hash=launch.job.run_hash,
            failed_before=launch.failed,
        )

    def stop(self, name: str, grace: float, reason: str) -> None:
        run = self.runs.get(name)
        if run is not None and run.running:
            self.stops.setdefault(name, reason)  # the supervisor acts on the first request

    def set_time_limit(self, name: str, seconds: float | None) -> None:
        self.time_limits[name] = seconds

    def notify(self, name: str, text: str) -> None:
        self.notices.append((name, text))

    def observe(self) -> dict[str, RunObservation]:
        return dict(self.runs)

    def forget(self, name: str) -> None:
        run = self.runs.get(name)
        if run is not None and not run.running:
            del self.runs[name]

    def purge(self) -> None:
        self.purged += 1

    def adopt(self) -> list[str]:
        return sorted(n for n, r in self.runs.items() if r.running)

    def tick(self, now: float) -> float | None:
        return None

    def job_pids(self) -> dict[str, set[int]]:
        return {n: {r.pid} for n, r in self.runs.items() if r.running and r.pid is not None}

    def wait_fds(self) -> list[int]:
        return []

    def needs_polling(self) -> bool:
        return False

    def close(self) -> None:
        pass

    @property
    def held_any(self) -> bool:  # its launches are never held: the disk is not faked
        return False

    def retry_held(self) -> None:
        pass

    def limits_summary(self) -> str | None:
        return None

    # -- what the processes do ---------------------------------------------------------------------

    def exit(self, name: str, code: int | None, at: float, signal: int | None = None, **facts: Any) -> None:
        """The attempt ends; like a supervisor's exit record, it says which stop it acted on."""
        facts.setdefault("stop_reason", self.stops.pop(name, ""))
        self.runs[name] = replace(
            self.runs[name], running=False, exit_code=code, signal=signal, finished_at=at, **facts
        )


class World:
    """Manifests, gflowd's memory and a :class:`FakeRuntime`, passed through the real ``reconcile``
    (every document admitted afresh, as on a restart) and the real ``act`` each tick.
    ``snapshot_fields``: settings of every Snapshot (``policy=``, ``host=``, ``bind_gpus=``...)."""

    def __init__(self, *docs: Any, n_gpus: int = 4, **snapshot_fields: Any) -> None:
        self.docs: dict[str, Any] = {d.name: d for d in docs}
        self.runtime = FakeRuntime()
        self.memory = Memory()
        self.gpus = gpus(n_gpus)
        self.snapshot_fields = snapshot_fields
        self.last: Plan | None = None
        self.pruned: list[str] = []

    # the state as tests look at it and, to play a crash, change it
    @property
    def runs(self) -> dict[str, RunObservation]:
        return self.runtime.runs

    @property
    def states(self) -> dict[str, JobState]:
        return self.memory.states

    @states.setter
    def states(self, value: dict[str, JobState]) -> None:
        self.memory.states = value

    @property
    def sweep_states(self) -> dict:
        return self.memory.sweep_states

    def put(self, doc: Any) -> None:
        self.docs[doc.name] = doc

    def delete(self, name: str) -> None:
        del self.docs[name]

    def snapshot(self) -> Snapshot:
        current = {n: s.manifest for n, s in self.states.items() if s.manifest and not s.owner}
        return Snapshot(
            admission=admit(list(self.docs.values()), current),
            states=dict(self.states),
            runs=self.runtime.observe(),
            gpus=self.gpus,
            sweep_states=dict(self.sweep_states),
            reservation_states=dict(self.memory.reservation_states),
            **self.snapshot_fields,
        )

    def tick(self, now: float) -> Plan:
        plan = reconcile(self.snapshot(), now)
        self.runtime.now = now
        plan = fold_acted(plan, act(plan, self.runtime, prune=self._prune))
        self.memory = Memory(dict(plan.states), dict(plan.sweeps), reservation_states=dict(plan.reservations))
        self.runtime.purge()  # what record does once the statuses are written
        self.last = plan
        return plan

    def _prune(self, expired: list[AdmittedJob]) -> list[str]:
        """The spec dir here is ``docs``: an expired job's document goes."""
        for expired_job in expired:
            self.docs.pop(expired_job.name, None)
            self.pruned.append(expired_job.name)
        return [j.path for j in expired]

    def exit(self, name: str, code: int, at: float, signal: int | None = None) -> None:
        self.runtime.exit(name, code, at, signal)

    def state(self, name: str = "a") -> JobState:
        return self.states[name]

    def phase(self, name: str = "a") -> tuple[str, str]:
        st = self.states[name]
        return st.phase, st.reason


def started(plan: Plan) -> list[str]:
    return [launch.name for launch in plan.starts]


def condition(record: JobState, type_: str) -> dict | None:
    return next((c for c in record.conditions if c["type"] == type_), None)
