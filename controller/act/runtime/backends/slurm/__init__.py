"""The Slurm backend (``--backend slurm``): Slurm runs the jobs, gflowd still admits, orders and
gates them (``runtime.SlurmRuntime``; Slurm's words -> ours in ``words.py``, pure).

The ``Backend`` answers (``backends/__init__.py``) are here; the runtime is imported only when
this backend is the one chosen.
"""

from __future__ import annotations

from typing import Any

from controller.act.runtime.protocol import Runtime


def make_runtime(home: Any, config: Any) -> Runtime:
    # lazy: only the chosen backend's runtime is loaded
    from controller.act.runtime.backends.slurm.runtime import SlurmRuntime

    return SlurmRuntime(home, config.slurm)


def unfinished(home: Any) -> list[str]:
    """Jobs with a record in ``run/slurm``."""
    slurm_dir = home.run_dir / "slurm"
    return sorted(p.stem for p in slurm_dir.glob("*.json")) if slurm_dir.is_dir() else []


def home_problem(home: Any) -> str | None:
    return None


def service_problem(config: Any) -> str | None:
    """None when ``squeue --json`` answers."""
    from controller.act.runtime.backends.slurm.runtime import check_slurm  # lazy: only when Slurm is the chosen backend

    return check_slurm()
