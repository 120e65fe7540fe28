"""Manifest documents as admission judged them: an admitted Job, Sweep or Reservation, or a Rejection with
the message users see; and the result of judging every document of the spec dir at once."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, MutableMapping, NamedTuple

if TYPE_CHECKING:  # the schema, for annotations only: model imports nothing of ours at run time
    from controller.api.job import Job
    from controller.api.reservation import Reservation
    from controller.api.sweep import Sweep


class AdmittedJob:
    """A valid Job document. What admission, the index and a settled job's pass read (names,
    hashes, owner, priority, GPUs, labels and a few flags) is kept as plain fields; the pydantic
    ``Job`` itself is built on first use from the cached parse (``document``) when the store
    started from its parse cache, so 50,000 settled jobs cost no model each (docs/design.md).
    Never modified once made (a pass tells an unchanged document by identity)."""

    __slots__ = (
        "name", "_job", "_document", "_build", "source", "path", "doc_index", "spec_hash", "run_hash", "owner_uid",
        "mtime_ns", "owner", "real_dir", "priority", "gpus", "labels", "ttl", "cancelled", "conda_env",
        "depends",
    )

    def __init__(
        self, name: str, job: "Job | None", source: str, path: str, doc_index: int, spec_hash: str, run_hash: str,
        owner_uid: int = -1, mtime_ns: int = 0, owner: str | None = None, real_dir: str | None = None,
        *, facts: "JobFacts | None" = None, document: str | None = None,
        build: "Callable[[str, int, str], Job] | None" = None,
    ) -> None:
        if job is None and (facts is None or document is None or build is None):
            raise ValueError("an AdmittedJob without its Job needs its facts, its cached document and a builder")
        self.name = name
        self._job = job
        self._document = document  # the file's parsed documents as JSON (shared by its jobs)
        self._build = build  # (document, doc_index, name) -> the Job admission validated
        self.source = source  # the manifest as users see it: jobs/a.yaml
        self.path = path  # absolute path of the manifest file
        self.doc_index = doc_index
        self.spec_hash = spec_hash  # changes with any semantic spec change: bumps the generation
        self.run_hash = run_hash  # changes with what a run depends on: a finished job runs again
        self.owner_uid = owner_uid
        self.mtime_ns = mtime_ns
        self.owner = owner  # the Sweep that created this job, if any
        self.real_dir = real_dir  # the folder the manifest really lives in, when a symlink led to it
        (self.priority, self.gpus, self.labels, self.ttl, self.cancelled, self.conda_env, self.depends) = (
            facts if facts is not None else facts_of(job)  # type: ignore[arg-type]
        )

    def __repr__(self) -> str:
        return f"AdmittedJob(name={self.name!r}, source={self.source!r}, doc_index={self.doc_index}, spec_hash={self.spec_hash!r})"

    @property
    def job(self) -> "Job":
        job = self._job
        if job is None:
            job = self._build(self._document or "", self.doc_index, self.name)
            self._job = job
        return job

    @property
    def spec(self):
        return self.job.spec

    @property
    def facts(self) -> "JobFacts":
        return JobFacts(*(getattr(self, f) for f in JobFacts._fields))

    def placed(self, real_dir: str) -> "AdmittedJob":
        """The same job, running in ``real_dir`` (its manifest was reached through a symlink)."""
        return AdmittedJob(
            self.name, self._job, self.source, self.path, self.doc_index, self.spec_hash, self.run_hash, self.owner_uid,
            self.mtime_ns, self.owner, real_dir, facts=self.facts, document=self._document, build=self._build,
        )

    @property
    def folder(self) -> str:
        """Where relative paths and the default working directory resolve: the folder the manifest
        file really lives in, never a symlink's folder (docs/multi-user.md)."""
        return self.real_dir or posixpath.dirname(self.path)


class JobFacts(NamedTuple):
    """What is read of every admitted job each pass, settled or not (see :class:`AdmittedJob`)."""

    priority: int
    gpus: int
    labels: dict[str, str]
    ttl: float | None  # spec.ttlSecondsAfterFinished
    cancelled: bool
    conda_env: bool  # spec.condaEnv is set
    depends: bool  # spec.dependsOn is not empty


NO_LABELS: dict[str, str] = {}  # shared by the many jobs without labels; never modified


def facts_of(job: "Job") -> JobFacts:
    spec = job.spec
    return JobFacts(
        spec.priority, spec.resources.gpus, dict(job.metadata.labels) or NO_LABELS, spec.ttl_seconds_after_finished,
        spec.cancelled, spec.conda_env is not None, bool(spec.depends_on),
    )


@dataclass(frozen=True)
class Rejection:
    name: str | None  # None when neither metadata.name nor the file stem is a valid name
    reason: str  # Reason.Invalid | YAMLError | DuplicateName | Forbidden | DependencyCycle
    message: str
    source: str
    path: str = ""
    doc_index: int = 0
    mtime_ns: int = 0


@dataclass(frozen=True)
class AdmittedSweep:
    name: str
    sweep: "Sweep"
    source: str
    path: str
    doc_index: int
    children: tuple[str, ...]
    spec_hash: str
    owner_uid: int = -1
    mtime_ns: int = 0

    @property
    def parallelism(self) -> int | None:
        return self.sweep.spec.parallelism


@dataclass(frozen=True)
class AdmittedReservation:
    """A schema-valid Reservation; whether it fits the machine and the other reservations is decided
    each pass (``controller.decide.reservations``)."""

    name: str
    reservation: "Reservation"
    source: str
    path: str
    doc_index: int
    spec_hash: str
    owner_uid: int = -1
    mtime_ns: int = 0

    @property
    def spec(self):
        return self.reservation.spec


@dataclass
class AdmissionResult:
    # a dict, or an Overlay of the previous result's when admit_changes patched it (model/overlay.py)
    jobs: MutableMapping[str, AdmittedJob] = field(default_factory=dict)
    rejected: MutableMapping[str, Rejection] = field(default_factory=dict)
    # duplicates and documents without any valid name: reported as Warning events only
    warnings: list[Rejection] = field(default_factory=list)
    # name -> sources of documents that lost a duplicate-name contest, for a condition on the winner
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    sweeps: dict[str, AdmittedSweep] = field(default_factory=dict)
    reservations: dict[str, AdmittedReservation] = field(default_factory=dict)
    ttl_jobs: int = 0  # admitted jobs with their own ttlSecondsAfterFinished: expiry has work to do
    serial: int = 0  # which pass admitted it: the caller numbers them, nothing global counts here
    base: int | None = None  # set by admit_changes: the serial of the result this one patches...
    touched: frozenset[str] = frozenset()  # ...and the names whose entries it changed
    # the host facts it was judged under: a patch of it is valid only while they hold
    controller_uid: int | None = None
    conda_available: bool = True
