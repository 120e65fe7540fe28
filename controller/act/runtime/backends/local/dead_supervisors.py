"""A supervisor that died without an exit record (killed, or the machine's OOM killer): gflowd
stops what is left of its job itself (TERM now, KILL after the job's grace period), finding the
processes by the attempt's cgroup or, without one, by marker and process group (``orphans.py``).
Until they are gone the attempt is reported running, so its GPUs stay held; then it is Lost."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

from controller.act.runtime.backends.local.attempt import Attempt, Orphaned, lost_observation, rebooted
from controller.act.runtime.backends.local.attempt_cgroups import AttemptCgroups
from controller.act.runtime.cgroups import CgroupError
from controller.act.runtime.orphans import attempt_processes, signal_processes
from controller.act.runtime.shim.procfs import start_ticks

log = logging.getLogger("gflowd.runtime")


class DeadSupervisors:
    def __init__(self, cgroups: AttemptCgroups, poke: Callable[[], None]) -> None:
        self.cgroups = cgroups
        self.poke = poke  # wakes the loop: an attempt ended

    def found_dead(self, attempt: Attempt) -> None:
        """Its supervisor died without an exit record: stop what is left of the job, then it is Lost.
        Until its processes are gone it is reported running, so its GPUs stay held."""
        supervisor = attempt.supervisor_pid or 0
        if rebooted(attempt):  # its pids (and start times) now name other processes: touch none
            attempt.result = lost_observation(attempt, "")
            return
        processes = self.processes(attempt)
        if not processes:
            attempt.result = lost_observation(
                attempt,
                f"its supervisor (pid {supervisor}) died without recording the exit "
                "and the job's processes were gone; exit code unknown",
            )
            return
        log.warning(
            "job/%s attempt %d: its supervisor (pid %d) died; stopping the job's %d process(es): TERM now, "
            "KILL after %gs",
            attempt.name,
            attempt.attempt,
            supervisor,
            len(processes),
            attempt.grace,
        )
        attempt.orphaned = Orphaned(supervisor, time.monotonic() + attempt.grace, processes, len(processes))
        signal_processes(processes, signal.SIGTERM)

    def stop(self, attempt: Attempt, mono: float) -> None:
        """One more look: the job's processes TERMed as they appear, KILLed after the grace period; Lost once none is left."""
        orphaned = attempt.orphaned
        assert orphaned is not None
        found = self.processes(attempt)
        if not found:
            attempt.orphaned = None
            attempt.result = lost_observation(
                attempt,
                f"its supervisor (pid {orphaned.supervisor_pid}) died without recording "
                f"the exit; the job's {orphaned.stopped} process(es) were stopped; exit code unknown",
            )
            log.warning("job/%s attempt %d: the job's processes are gone", attempt.name, attempt.attempt)
            self.poke()
            return
        new = {pid: ticks for pid, ticks in found.items() if orphaned.processes.get(pid) != ticks}
        orphaned.processes = found
        orphaned.stopped += len(new)
        if mono >= orphaned.kill_at:
            signal_processes(found, signal.SIGKILL)
            orphaned.kill_at = mono + 1.0  # and again, for anything forked meanwhile
        elif new:
            signal_processes(new, signal.SIGTERM)

    def processes(self, attempt: Attempt) -> dict[int, int]:
        """The attempt's live processes (pid -> start ticks): its cgroup's members where it has one
        (exact), else found by marker and process group (``orphans.py``)."""
        cgroup = self.cgroups.of(attempt)
        if cgroup is not None:
            try:
                members = cgroup.pids()
            except CgroupError:
                members = None
            if members is not None:
                ticks = {pid: start_ticks(pid) for pid in members}
                return {pid: tick for pid, tick in ticks.items() if tick is not None}
        return attempt_processes(attempt.job_pid, attempt.job_ticks, attempt.marker)
