"""Translate gflow manifests for other engines: Slurm (``slurm.py``) and Kubernetes (``k8s.py``).

Pure functions of a validated ``Job`` or ``Sweep`` and a few options: no files, no clocks (a
relative ``startAfter`` is expressed relative to submission, which is what it means). What does not
map is never dropped silently: each translation returns ``notes``, one sentence per field it
could not carry over, which the CLI prints as warnings.

``workdir`` resolves a ``workingDir`` the way the local runtime does, against the manifest's folder,
so an exported job runs where it would have run on the box. The job's variables come from the
local runtime's own definition (``controller.runtime.command.job_env``), with the values each
engine knows (docs/cluster.md): an export never has a list of names of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Exported:
    """The translated text (a script, or YAML) and what could not be carried over."""

    text: str
    notes: list[str] = field(default_factory=list)
    data: Any = None  # the structured form, where there is one (the Kubernetes object)


def workdir(working_dir: str | None, manifest_dir: str) -> str:
    """The job's working directory as the local runtime resolves it (``~`` and relative paths)."""
    if working_dir:
        path = os.path.expanduser(working_dir)
        if not os.path.isabs(path):
            path = os.path.join(manifest_dir, path)
    else:
        path = manifest_dir
    return os.path.normpath(path)


class Shell(str):
    """A variable's value as shell text the job's script expands when it starts (a port free on
    the node, Slurm's restart count): written into a script unquoted, where a plain value is quoted."""


def split_common(envs: list[dict[str, str]]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Sweep children's environments -> (what all share, what each adds): a script or a pod sets
    the shared variables once and looks up only the rest by index."""
    common = {k: v for k, v in envs[0].items() if all(k in e and e[k] == v for e in envs[1:])}
    return common, [{k: v for k, v in env.items() if k not in common} for env in envs]
