"""Removing expired finished jobs (``ttlSecondsAfterFinished``, ``finishedJobsHistory``): the one
case where gflowd edits the spec dir. A single-document file is removed; a document inside a
multi-document file is cut out, the rest left as written. Decide chose the jobs; this only edits.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable

from controller.model.documents import AdmittedJob
from controller.util.fsutil import atomic_write
from controller.util.manifest_edit import join_documents
from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

log = logging.getLogger("gflowd")


def prune_manifests(jobs: Iterable[AdmittedJob]) -> list[str]:
    """Cut these jobs out of their manifests. Returns every file touched (or tried)."""
    by_path: dict[str, list[str]] = {}
    for job in jobs:
        by_path.setdefault(job.path, []).append(job.name)
    for path, names in by_path.items():
        try:
            text = Path(path).read_text()
            parts = list(iter_documents_text(text))
            keep = []
            for part in parts:
                data = load_one(part)
                name = (data.get("metadata") or {}).get("name") if isinstance(data, dict) else None
                if name is None and len(parts) == 1:
                    name = Path(path).stem
                if name not in names:
                    keep.append(part)
            if keep:
                atomic_write(Path(path), join_documents(keep), mode=os.stat(path).st_mode & 0o777)
            else:
                os.unlink(path)
        except (OSError, YAMLSyntaxError) as exc:
            log.warning("could not remove expired job(s) %s from %s: %s", ", ".join(names), path, exc)
    return list(by_path)
