"""The backends, by name: each one a package of its own (``local/``, ``slurm/``) that implements
``Runtime`` (``protocol.py``) and answers the ``Backend`` questions below. ``BACKENDS`` is the
registry ``--backend NAME`` (``config.backend``) is looked up in; a backend's package is imported
only when it is asked something, and its runtime only when it is the one chosen.

A new backend is a new folder here and one line in ``BACKENDS`` (and its name in the config's
``backend`` choices, ``api/config.py``).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from controller.act.runtime.protocol import Runtime

BACKENDS: dict[str, str] = {  # name -> the package that implements it
    "local": "controller.act.runtime.backends.local",
    "slurm": "controller.act.runtime.backends.slurm",
}


class Backend(Protocol):
    """What a backend's package offers (module-level functions; cheap to import)."""

    def make_runtime(self, home: Any, config: Any) -> Runtime:
        """The runtime, configured from ``config`` (the daemon's ``Config``)."""

    def unfinished(self, home: Any) -> list[str]:
        """Jobs whose attempts this backend still tracks in ``home``: a switch to another backend
        would orphan them (read from its records on disk, standard library only)."""

    def home_problem(self, home: Any) -> str | None:
        """Why gflowd must not start on ``home`` with this backend, said before any other check."""

    def service_problem(self, config: Any) -> str | None:
        """Why this backend cannot serve now (e.g. the cluster does not answer); None if it can."""


def backend(name: str) -> Backend:
    """The package of backend ``name`` (one of ``BACKENDS``)."""
    return importlib.import_module(BACKENDS[name])


def make_runtime(home: Any, config: Any) -> Runtime:
    """The runtime of ``config.backend``."""
    return backend(config.backend).make_runtime(home, config)


def start_problem(home: Any, config: Any) -> str | None:
    """Why gflowd must not start with ``config.backend`` on ``home`` (one line), or None: the
    backend's own objection to the home, then the jobs another backend still runs (a switch would
    orphan them, and report them Lost), then whether the backend can serve."""
    chosen = backend(config.backend)
    problem = chosen.home_problem(home)
    if problem is not None:
        return problem
    problem = switch_problem(home, config.backend) or chosen.service_problem(config)
    return f"--backend {config.backend}: {problem}" if problem else None


def switch_problem(home: Any, name: str) -> str | None:
    """Jobs another backend still tracks would be orphaned (and reported Lost) by a switch: say so."""
    for other in BACKENDS:
        if other == name:
            continue
        live = backend(other).unfinished(home)
        if live:
            names = ", ".join(live[:5]) + (" ..." if len(live) > 5 else "")
            return f"{len(live)} job(s) of the {other} backend are not finished ({names}); run with --backend {other} until they are"
    return None
