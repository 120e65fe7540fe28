"""The runtime seam: what the daemon asks of a backend (start, watch and stop job processes).

Every backend implements ``Runtime`` whole, so the daemon calls it without ``getattr``: a backend
that has nothing to say for an entry answers with its neutral value (no terminals: ``notify``
ignores the line; nothing held: ``held_any`` is False; a cluster: ``limits_summary`` is None).
"""

from __future__ import annotations

from typing import Protocol

from controller.model.plan import Launch, RunObservation


class Runtime(Protocol):
    allocates_devices: bool
    """True for a backend that allocates GPUs itself (a cluster scheduler): reconcile then binds
    none and reports the devices the backend's observations carry."""

    @property
    def held_any(self) -> bool:
        """A launch the disk refused is held (``holds.py``): the loop then watches the free space
        and, when it grows, calls ``retry_held`` (docs/reliability.md, "A full disk")."""

    def retry_held(self) -> None:
        """Free space came back: held launches are tried at the next ``tick``, not after their backoff."""

    def limits_summary(self) -> str | None:
        """One line for ``gflowctl get node``: what the kernel enforces on this machine, or why
        nothing is; None where the jobs do not run here."""

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
