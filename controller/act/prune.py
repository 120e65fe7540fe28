"""Removing expired finished jobs (``ttlSecondsAfterFinished``, ``finishedJobsHistory``): the one
case where gflowd edits the spec dir. A single-document file is removed; a document inside a
multi-document file is cut out, the rest left as written, the file still the user's (owner, group
and mode kept: the next job in it must not run as root). A file whose lock someone holds is left
for a later pass, never waited for. Decide chose the jobs; this only edits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from controller.model.documents import AdmittedJob, AdmittedReservation
from controller.util.fsutil import LockBusy, RewriteError, rewrite_locked
from controller.util.manifest_edit import join_documents
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

log = logging.getLogger("gflowd")


def prune_manifests(jobs: Iterable[AdmittedJob | AdmittedReservation], within: Path | None = None) -> list[str]:
    """Cut these jobs out of their manifests (inside ``within``). Returns the files changed."""
    by_path: dict[str, list[str]] = {}
    for job in jobs:
        by_path.setdefault(job.path, []).append(job.name)
    changed: list[str] = []
    for path, names in by_path.items():
        try:
            if rewrite_locked(Path(path), _cutter(path, names), within=within, wait=0):
                changed.append(path)
        except LockBusy:
            log.info("expired job(s) %s: %s is being edited; removing them on a later pass", ", ".join(names), path)
        except (OSError, YAMLSyntaxError, RewriteError) as exc:
            log.warning("could not remove expired job(s) %s from %s: %s", ", ".join(names), path, exc)
    return changed


def _cutter(path: str, names: list[str]):
    def cut(text: str) -> str | None:
        parts = list(iter_documents_text(text))
        keep = []
        for part in parts:
            data = load_one(part)
            name = (data.get("metadata") or {}).get("name") if isinstance(data, dict) else None
            if name is None and len(parts) == 1:
                name = Path(path).stem
            if name not in names:
                keep.append(part)
        if len(keep) == len(parts):
            return text
        return join_documents(keep) if keep else None

    return cut
