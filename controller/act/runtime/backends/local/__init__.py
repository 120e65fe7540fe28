"""The local backend (the default): one crash-safe supervisor process per attempt on this machine
(``runtime.SupervisorRuntime``, gflowd's side; the supervisor itself is ``act/runtime/shim/``).

The ``Backend`` answers (``backends/__init__.py``) are here; the runtime is imported only when
this backend is the one chosen.
"""

from __future__ import annotations

import os
from typing import Any

from controller.act.runtime.protocol import Runtime
from controller.act.runtime.record import attempt_of


def make_runtime(home: Any, config: Any) -> Runtime:
    # lazy: only the chosen backend's runtime is loaded
    from controller.act.runtime.backends.local.runtime import SupervisorRuntime

    return SupervisorRuntime(
        home,
        cgroups=getattr(config, "cgroups", "auto"),
        device_dir=getattr(config, "device_dir", "/dev"),
        proc_dir=getattr(config, "proc_dir", "/proc"),
        sys_dir=getattr(config, "sys_dir", "/sys"),
    )


def unfinished(home: Any) -> list[str]:
    """Jobs with an attempt record in ``run/attempts``."""
    attempts_dir = home.run_dir / "attempts"
    found = (attempt_of(name) for name in os.listdir(attempts_dir)) if attempts_dir.is_dir() else ()
    return sorted({attempt[0] for attempt in found if attempt is not None})


def service_problem(config: Any) -> str | None:
    return None  # this machine serves whenever gflowd runs


def home_problem(home: Any) -> str | None:
    """Attempts recorded by a gflowd older than the attempt record (``run/jobs/<name>/launch-<N>.json``)
    are not adopted: say what to do rather than lose them. A folder with none left is removed."""
    jobs_dir = home.run_dir / "jobs"
    if not jobs_dir.is_dir():
        return None
    live = sorted(folder.name for folder in jobs_dir.iterdir() if folder.is_dir() and any(folder.glob("launch-*.json")))
    if not live:
        import shutil  # lazy: only a home an older gflowd used has the folder

        shutil.rmtree(jobs_dir, ignore_errors=True)  # ended attempts' leftovers (supervisor.log)
        return None
    names = ", ".join(live[:5]) + (" ..." if len(live) > 5 else "")
    return (
        f"{jobs_dir} holds {len(live)} attempt(s) of an older gflowd ({names}); run that version until they "
        f"end (gflowctl get jobs), or stop them and remove {jobs_dir}, then start this one"
    )
