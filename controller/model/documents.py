"""Manifest documents as admission judged them: an admitted Job, Sweep or Reservation, or a Rejection with
the message users see; and the result of judging every document of the spec dir at once."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the schema, for annotations only: model imports nothing of ours at run time
    from controller.api.job import Job
    from controller.api.reservation import Reservation
    from controller.api.sweep import Sweep


@dataclass(frozen=True)
class AdmittedJob:
    name: str
    job: "Job"
    source: str  # the manifest as users see it: jobs/a.yaml
    path: str  # absolute path of the manifest file
    doc_index: int
    spec_hash: str  # changes with any semantic spec change: bumps the generation
    run_hash: str  # changes with what a run depends on: a finished job runs again
    owner_uid: int = -1
    mtime_ns: int = 0
    owner: str | None = None  # the Sweep that created this job, if any
    real_dir: str | None = None  # the folder the manifest really lives in, when a symlink led to it

    @property
    def spec(self):
        return self.job.spec

    @property
    def folder(self) -> str:
        """Where relative paths and the default working directory resolve: the folder the manifest
        file really lives in, never a symlink's folder (docs/multi-user.md)."""
        return self.real_dir or posixpath.dirname(self.path)


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
    jobs: dict[str, AdmittedJob] = field(default_factory=dict)
    rejected: dict[str, Rejection] = field(default_factory=dict)
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
