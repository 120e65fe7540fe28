"""The runtime seam: start, watch and stop job processes.

``Runtime`` is the Protocol the daemon talks to; ``supervised.SupervisorRuntime`` implements it with
one crash-safe supervisor process per attempt (``supervisor.py``), ``slurm.SlurmRuntime`` with a
Slurm cluster (``backend: slurm``). ``make_runtime`` picks one from the configuration.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from controller.model.plan import Launch, RunObservation


class Runtime(Protocol):
    def start(self, launch: Launch) -> None:
        """Start the attempt. Never raises: a user error becomes an exited observation; a launch
        whose records cannot be written (a full disk) is *held*: nothing runs, ``observe`` reports
        it running with ``held`` set and ``queued`` saying why (DiskFull, DiskError), and ``tick``
        launches it once the records can be written. The process may begin only at the next
        ``observe`` or ``tick`` (the local runtime hands a pass's starts over together)."""

    def stop(self, name: str, grace: float, reason: str) -> None:
        """TERM the job's whole process tree now, KILL it after ``grace`` seconds. Idempotent."""

    def set_time_limit(self, name: str, seconds: float | None) -> None:
        """The running attempt's time limit was edited. Idempotent."""

    def notify(self, name: str, text: str) -> None:
        """Show a line on a tty job's attached terminals (not its input). Best effort; a runtime
        without terminals ignores it."""

    def adopt(self) -> list[str]:
        """At start-up: re-attach to attempts that outlived the previous controller."""

    def close(self) -> None:
        """The controller is stopping; jobs keep running."""

    def observe(self) -> dict[str, RunObservation]:
        """Every attempt the runtime knows: running, or ended and not yet forgotten. An attempt
        stays running until every process of it is gone (a dead supervisor's job is stopped
        first), so its GPUs are never given away while any of it runs."""

    def forget(self, name: str) -> None:
        """The controller decided this attempt's end: drop it (a new attempt may start now). Its
        records on disk stay until :meth:`purge`, so a crash before the status file is written
        still finds the exit."""

    def purge(self) -> None:
        """The ends of forgotten attempts are now recorded in status files: remove their records."""

    def tick(self, now: float) -> float | None:
        """Do timed work (held launches, KILL after grace); return when it is next due."""

    def job_pids(self) -> dict[str, set[int]]:
        """Each running job's process tree: tells our GPU processes from foreign ones, and what each
        Shared job uses."""

    def wait_fds(self) -> list[int]:
        """File descriptors that become readable when a job process ends."""

    def needs_polling(self) -> bool:
        """True when an exit can only be noticed by polling ``observe``."""

    # A backend that holds launches the disk refused may set ``held_any`` (True while one is held)
    # and offer ``retry_held()``: the loop then watches the free space and, when it grows, has
    # them tried at once instead of after their backoff (docs/reliability.md, "A full disk").
    # A backend that allocates GPUs itself (a cluster scheduler) sets ``allocates_devices = True``:
    # reconcile then binds none and reports the devices the backend's observations carry.


def make_runtime(home: Any, config: Any) -> Runtime:
    """The runtime for ``config.backend``: local supervisors (default) or Slurm."""
    if getattr(config, "backend", "local") == "slurm":
        from controller.act.runtime.slurm import SlurmRuntime  # lazy: only the configured backend is loaded

        return SlurmRuntime(home, config.slurm)
    from controller.act.runtime.supervised import SupervisorRuntime  # lazy: only the configured backend is loaded

    return SupervisorRuntime(home, cgroups=getattr(config, "cgroups", "auto"), device_dir=getattr(config, "device_dir", "/dev"))


def backend_switch_problem(home: Any, backend: str) -> str | None:
    """Jobs the other backend still tracks would be orphaned (and reported Lost) by a switch: say so."""
    if backend == "slurm":
        from controller.act.runtime.record import attempt_of  # lazy: standard library only, small

        attempts_dir = home.run_dir / "attempts"
        found = (attempt_of(name) for name in os.listdir(attempts_dir)) if attempts_dir.is_dir() else ()
        live = sorted({attempt[0] for attempt in found if attempt is not None})
        other = "local"
    else:
        slurm_dir = home.run_dir / "slurm"
        live = sorted(p.stem for p in slurm_dir.glob("*.json")) if slurm_dir.is_dir() else []
        other = "slurm"
    if not live:
        return None
    names = ", ".join(live[:5]) + (" ..." if len(live) > 5 else "")
    return f"{len(live)} job(s) of the {other} backend are not finished ({names}); run with --backend {other} until they are"


def old_layout_problem(home: Any) -> str | None:
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
    return (f"{jobs_dir} holds {len(live)} attempt(s) of an older gflowd ({names}); run that version until they "
            f"end (gflowctl get jobs), or stop them and remove {jobs_dir}, then start this one")
