"""Manifest documents as admission judged them: an admitted Job, Sweep or Reservation, or a Rejection with
the message users see; and the result of judging every document of the spec dir at once."""

from __future__ import annotations

import posixpath
import struct
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the schema, for annotations only: model imports nothing of ours at run time
    from controller.api.job import Job, JobSpec
    from controller.api.reservation import Reservation, ReservationSpec
    from controller.api.sweep import Sweep


@dataclass(slots=True)
class AdmittedJob:
    """A valid Job document. What admission, the index and a settled job's pass read (names,
    hashes, owner, priority, GPUs, labels and a few flags) is kept as plain fields; the pydantic
    ``job`` is built on first read from the cached parse (``document``, by ``build``) when the
    store started from its parse cache, so 50,000 settled jobs cost no model each
    (docs/design.md). Never modified once made (a pass tells an unchanged document by identity)."""

    name: str
    job: Job  # see _LazyJob below: None until first read when made from the cache
    source: str  # the manifest as users see it: jobs/a.yaml
    path: str  # absolute path of the manifest file
    doc_index: int
    spec_hash: str  # changes with any semantic spec change: bumps the generation
    run_hash: str  # changes with what a run depends on: a finished job runs again
    owner_uid: int = -1
    mtime_ns: int = 0
    owner: str | None = None  # the Sweep that created this job, if any
    real_dir: str | None = None  # the folder the manifest really lives in, when a symlink led to it
    # the facts (JobFacts): taken from ``job`` when not given
    priority: int = field(default=None, kw_only=True)  # type: ignore[assignment]
    gpus: int = field(default=0, kw_only=True)
    labels: dict[str, str] = field(default_factory=dict, kw_only=True)
    ttl: float | None = field(default=None, kw_only=True)  # spec.ttlSecondsAfterFinished
    cancelled: bool = field(default=False, kw_only=True)
    conda_env: bool = field(default=False, kw_only=True)  # spec.condaEnv is set
    depends: bool = field(default=False, kw_only=True)  # spec.dependsOn is not empty
    # the file's parsed documents as JSON (shared by its jobs), and what builds ``job`` from it
    document: str | None = field(default=None, kw_only=True, compare=False, repr=False)
    build: Callable[[str, int, str], Job] | None = field(default=None, kw_only=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.priority is None:  # no facts given: the model is at hand
            job = _JOB_SLOT.__get__(self, AdmittedJob)
            if job is None:
                raise ValueError("an AdmittedJob without its Job needs its facts")
            (self.priority, self.gpus, self.labels, self.ttl, self.cancelled, self.conda_env, self.depends) = facts_of(
                job
            )
        elif _JOB_SLOT.__get__(self, AdmittedJob) is None and (self.document is None or self.build is None):
            raise ValueError("an AdmittedJob without its Job needs its cached document and a builder")

    @property
    def spec(self) -> JobSpec:
        return self.job.spec

    @property
    def facts(self) -> JobFacts:
        return JobFacts(self.priority, self.gpus, self.labels, self.ttl, self.cancelled, self.conda_env, self.depends)

    def placed(self, real_dir: str) -> AdmittedJob:
        """The same job, running in ``real_dir`` (its manifest was reached through a symlink); its
        model is not built for that."""
        return AdmittedJob(
            self.name,
            _JOB_SLOT.__get__(self, AdmittedJob),
            self.source,
            self.path,
            self.doc_index,
            self.spec_hash,
            self.run_hash,
            self.owner_uid,
            self.mtime_ns,
            self.owner,
            real_dir,
            **self.facts._asdict(),
            document=self.document,
            build=self.build,
        )

    @property
    def folder(self) -> str:
        """Where relative paths and the default working directory resolve: the folder the manifest
        file really lives in, never a symlink's folder (docs/multi-user.md)."""
        return self.real_dir or posixpath.dirname(self.path)


_JOB_SLOT: Any = AdmittedJob.__dict__["job"]  # the slot itself; AdmittedJob.job becomes the lazy read of it


class _LazyJob:
    """``AdmittedJob.job``: the slot's value, built from the cached document on first read."""

    def __get__(self, obj: AdmittedJob | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        job = _JOB_SLOT.__get__(obj, owner)
        if job is None:
            job = obj.build(obj.document or "", obj.doc_index, obj.name)  # type: ignore[misc]
            _JOB_SLOT.__set__(obj, job)
        return job

    def __set__(self, obj: AdmittedJob, value: Any) -> None:
        _JOB_SLOT.__set__(obj, value)


AdmittedJob.job = _LazyJob()  # type: ignore[assignment,misc]


def model_built(job: AdmittedJob) -> bool:
    """Whether ``job``'s pydantic model exists yet (for tests and benchmarks)."""
    return _JOB_SLOT.__get__(job, AdmittedJob) is not None


# What says a manifest file is unchanged (``observe/manifests.py`` ``file_key``): its
# (mtime_ns, size, inode, uid, ctime_ns) from the fstat of the descriptor it was read through, packed.
FILE_KEY = struct.Struct("<qQQQq")
_KEY_MTIME, _KEY_UID = struct.Struct("<q"), struct.Struct("<Q")  # at offsets 0 and 24 of a key


class CachedJob(AdmittedJob):
    """The one plain Job of a manifest file a start found as the parse cache last saw it: the store's
    entry for the file and admission's document for the job in one object (``ManifestStore``
    reads ``key``, ``via_symlink``, ``documents`` and ``parsed_json`` of either). At 50,000
    finished jobs a start made a ``ManifestFile`` and a list per file besides the ``AdmittedJob``
    (~8 MiB); the owner's uid and the mtime are read off the key (a big int less per job).
    Like any ``AdmittedJob``, its model is built from the cached document only when read."""

    __slots__ = ("key",)
    via_symlink = False  # made only for a file in a real folder of the spec dir

    def __init__(
        self,
        key: bytes,
        name: str,
        source: str,
        path: str,
        doc_index: int,
        spec_hash: str,
        run_hash: str,
        facts: tuple[int, int, dict[str, str], float | None, bool, bool, bool],
        document: str,
        build: Callable[[str, int, str], Job],
    ) -> None:
        # the fields AdmittedJob's own __init__ sets, straight (it is ~2 us a job at 50,000)
        self.key = key
        self.name, self.source, self.path, self.doc_index = name, source, path, doc_index
        self.spec_hash, self.run_hash, self.owner, self.real_dir = spec_hash, run_hash, None, None
        (self.priority, self.gpus, self.labels, self.ttl, self.cancelled, self.conda_env, self.depends) = facts
        self.job = None  # type: ignore[assignment]  # built from the cached document when read
        self.document, self.build = document, build

    @classmethod
    def of_facts(
        cls,
        key: bytes,
        source: str,
        path: str,
        facts: tuple[int, str, str, str, int, int, dict[str, str], float | None, bool, bool, bool],
        document: str,
        build: Callable[[str, int, str], Job],
    ) -> CachedJob:
        """The job as the parse cache keeps its facts (``observe/manifests.py`` ``_jobs_of``: the
        document's index, the name, the two spec hashes, then :class:`JobFacts`' fields), taken
        apart here at once: a start makes 50,000 of these."""
        job = cls.__new__(cls)
        job.key, job.source, job.path, job.owner, job.real_dir = key, source, path, None, None
        (
            job.doc_index,
            job.name,
            spec_hash,
            run_hash,
            job.priority,
            job.gpus,
            labels,
            job.ttl,
            job.cancelled,
            job.conda_env,
            job.depends,
        ) = facts
        # equal hashes (jobs of one spec) are one string; no labels: the one shared empty mapping
        job.spec_hash, job.run_hash, job.labels = sys.intern(spec_hash), sys.intern(run_hash), labels or NO_LABELS
        _JOB_SLOT.__set__(job, None)  # built from the cached document when read
        job.document, job.build = document, build
        return job

    @property  # AdmittedJob's field, read off the key
    def owner_uid(self) -> int:  # type: ignore[override]
        return _KEY_UID.unpack_from(self.key, 24)[0]

    @property
    def mtime_ns(self) -> int:  # type: ignore[override]
        return _KEY_MTIME.unpack_from(self.key)[0]

    @property
    def documents(self) -> list[AdmittedJob | Rejection]:
        """The file's documents, as a ``ManifestFile``'s: this job."""
        return [self]

    @property
    def parsed_json(self) -> str | None:
        """The file's parsed documents as JSON, as a ``ManifestFile``'s: for the parse cache."""
        return self.document


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


def facts_of(job: Job) -> JobFacts:
    spec = job.spec
    return JobFacts(
        spec.priority,
        spec.resources.gpus,
        dict(job.metadata.labels) or NO_LABELS,
        spec.ttl_seconds_after_finished,
        spec.cancelled,
        spec.conda_env is not None,
        bool(spec.depends_on),
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
    sweep: Sweep
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
    reservation: Reservation
    source: str
    path: str
    doc_index: int
    spec_hash: str
    owner_uid: int = -1
    mtime_ns: int = 0

    @property
    def spec(self) -> ReservationSpec:
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
