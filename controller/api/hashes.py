"""The two spec hashes of a Job: what bumps its generation, and what runs a finished job again."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from controller.api.job import Job

RERUN_ANNOTATION = "gflow.dev/rerun"
# Fields that steer a job rather than define its work: they act on a running attempt, and changing
# them never runs a finished job again (SPEC.md section 3).
CONTROL_FIELDS = ("priority", "suspend", "cancelled", "timeLimit", "terminationGracePeriod", "ttlSecondsAfterFinished")


def _hash(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def spec_hashes(job: Job) -> tuple[str, str]:
    spec = job.spec.model_dump(mode="json", by_alias=True)
    rerun = job.metadata.annotations.get(RERUN_ANNOTATION, "")
    run_part = {k: v for k, v in spec.items() if k not in CONTROL_FIELDS}
    return _hash([spec, rerun]), _hash([run_part, rerun])


def document_hash(spec: Any) -> str:
    """The spec hash of a document of another kind (a Reservation): any semantic change bumps it."""
    return _hash(spec.model_dump(mode="json", by_alias=True))
