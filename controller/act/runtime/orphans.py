"""An attempt's processes after its supervisor died: found without the supervisor's help.

While a supervisor lives it knows its job's tree exactly (it is the tree's subreaper). Killed with
SIGKILL, it leaves the tree reparented to PID 1, and gflowd must find and stop it before the
attempt's GPUs go to another job. A process belongs to the attempt when it started no earlier than
the job (kernel start times: a pid reused later by a stranger never matches an older identity) and

  * it carries the attempt's marker, ``GFLOW_ATTEMPT_ID=<unguessable id>``, in its environment
    (``/proc/PID/environ``: readable by root and by the process's own user, as gflowd is), which
    every process of the job inherits, however often it forks or calls ``setsid``; or
  * it is in the job's process group, and that group provably is the job's: its leader (the job's
    first process, by pid *and* start time) still lives, or one of its members carries the marker.
    (A process group's id cannot be reused while any member lives, so a marked member vouches for
    the whole group.) This finds a process that exec'd with a cleared environment but stayed put.

What this cannot find: a process that both cleared its environment and left the job's process
group (``setsid env -i ...``). An attempt with a cgroup (docs/cgroups.md) is answered exactly from
its ``cgroup.procs`` instead (``SupervisorRuntime._processes``); this is the fallback without one.
"""

from __future__ import annotations

import os
import signal

from controller.act.runtime.shim.procfs import start_ticks

MARKER_VARIABLE = "GFLOW_ATTEMPT_ID"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start ticks) of ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2]), int(fields[19])


def _has_marker(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in b"\0" + handle.read()
    except OSError:
        return False


def attempt_processes(job_pid: int | None, job_ticks: int | None, marker: str | None) -> dict[int, int]:
    """Every live process of the attempt, as pid -> kernel start time (its identity)."""
    needle = f"\0{MARKER_VARIABLE}={marker}\0".encode() if marker else None
    me = os.getpid()
    marked: dict[int, int] = {}
    group: dict[int, int] = {}
    leader_alive = False
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or pid == 1:
            continue
        facts = _stat(pid)
        if facts is None:
            continue
        state, pgid, ticks = facts
        if state in ("Z", "X") or (job_ticks is not None and ticks < job_ticks):
            continue  # a zombie only awaits reaping; an older process is never the job's
        if needle is not None and _has_marker(pid, needle):
            marked[pid] = ticks
        if job_pid and job_ticks is not None and pgid == job_pid:
            group[pid] = ticks
            leader_alive = leader_alive or (pid == job_pid and ticks == job_ticks)
    if leader_alive or any(pid in marked for pid in group):
        marked.update(group)
    return marked


def signal_processes(processes: dict[int, int], sig: int) -> None:
    """Signal each process, checking its identity through a pidfd, so a pid that was reused in
    the meantime is never signalled."""
    for pid, ticks in processes.items():
        try:
            fd = os.pidfd_open(pid)
        except AttributeError:  # no pidfds: check, then signal (a tiny window for reuse remains)
            if start_ticks(pid) == ticks:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            continue
        except OSError:
            continue
        try:
            if start_ticks(pid) == ticks:  # the pidfd pins the process: the check holds at the signal
                signal.pidfd_send_signal(fd, sig)
        except OSError:
            pass
        finally:
            os.close(fd)
