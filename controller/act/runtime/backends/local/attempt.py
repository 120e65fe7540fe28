"""What gflowd knows of one attempt of the local backend (``Attempt``), and the observations its
records turn into: an exit, a loss (its supervisor died without an exit record; a reboot)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from controller.act.runtime.holds import Hold
from controller.act.runtime.orphans import MARKER_VARIABLE
from controller.act.runtime.shim.procfs import start_ticks
from controller.model.failures import LOG_TAIL_BYTES
from controller.model.plan import RunObservation
from controller.util.fsutil import lock_held


@dataclass
class Orphaned:
    """A job whose supervisor died without an exit record, being stopped by gflowd itself."""

    supervisor_pid: int
    kill_at: float  # monotonic
    processes: dict[int, int]  # pid -> start ticks, as last found
    stopped: int = 0  # how many processes were signalled in all


@dataclass
class Attempt:
    """One attempt as gflowd knows it: its record's path, what the records said so far, and what
    gflowd still owes it (a held launch, a stop being sent, a dead supervisor's job being stopped)."""

    name: str
    attempt: int
    record: Path  # run/attempts/<name>.<N>
    submitted: float  # monotonic time the launch was handed to a launcher (0: found on disk)
    master_port: int = 0
    supervisor_pid: int | None = None
    supervisor_ticks: int | None = None
    job_pid: int | None = None
    started_at: float = 0.0
    pidfd: int | None = None
    result: RunObservation | None = None
    stop_sent: bool = False
    time_limit: float | None = None
    devices: tuple[int, ...] = ()
    device_uuids: tuple[str, ...] = ()
    run_hash: str = ""
    failed_before: int = 0  # the launch record's failedBefore
    spec: dict | None = None  # the launch record, kept to write it again
    script: str | None = None  # the script file's text (a ``script:`` job), until it is written
    log_rotated: bool = False
    held: Hold | None = None  # the launch could not be recorded (it is retried); None when it was
    was_held: bool = False
    handover_warned: bool = False
    job_ticks: int | None = None
    exit_note: dict | None = None  # the exit record, as sent by a supervisor the disk refused it to
    cgroup_removed: bool = False  # its supervisor removed its cgroup (its exit record says so)
    extras: set[str] | None = None  # which of record.SUFFIXES it may have; None: any (adopted)
    orphaned: Orphaned | None = None
    checkpoint: dict | None = None  # its latest confirmed checkpoint while it runs (``running_checkpoint``)
    checkpoint_file: tuple[int, int] | None = None  # (inode, mtime) of the ``.ckpt`` file last read

    def path(self, kind: str) -> Path:
        """One of the attempt's other files (``record.SUFFIXES``): stop, limits, sh (a ``script:``
        job's script), input (a tty job: its mtime is the terminal's last input), log (the supervisor's)."""
        return self.record.with_name(f"{self.record.name}.{kind}")

    def written(self, kind: str) -> Path:
        """``path(kind)``, about to be written: it is removed with the record."""
        if self.extras is not None:
            self.extras.add(kind)
        return self.path(kind)

    @property
    def marker(self) -> str | None:
        return ((self.spec or {}).get("env") or {}).get(MARKER_VARIABLE)

    @property
    def grace(self) -> float:
        return float((self.spec or {}).get("grace") or 10.0)

    def supervisor_is_ours(self) -> bool:
        """The recorded supervisor pid still names that process (pid AND kernel start time)."""
        if rebooted(self):  # a pid and start time from another boot may match anything
            return False
        pid = self.supervisor_pid
        return pid is not None and self.supervisor_ticks is not None and start_ticks(pid) == self.supervisor_ticks

    def supervisor_alive(self) -> bool:
        """A supervisor holds the attempt's lock for its whole life: a free lock means none is alive."""
        return lock_held(self.record)


def boot_id() -> str:
    """This boot's id (a new random one each boot), or "" where the kernel does not say."""
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as file:
                _boot_id = file.read().strip()
        except OSError:
            _boot_id = ""
    return _boot_id


_boot_id: str | None = None


def rebooted_since(launched: str | None, now: str) -> str:
    """Why an attempt is lost when it was launched in another boot than this one ("" if not)."""
    if not launched or not now or launched == now:
        return ""
    return f"lost to a reboot of the machine: it was started in boot {launched[:8]}, this is boot {now[:8]}"


def exit_observation(attempt: Attempt, record: dict) -> RunObservation:
    """The attempt's end, from its exit record (or the one its supervisor sent, see ``exit_note``)."""
    started = float(record.get("startedAt") or attempt.started_at or time.time())
    error = record.get("error") or ""
    rebooted = rebooted_since((attempt.spec or {}).get("bootId"), boot_id())
    if rebooted and not error and record.get("signal") == signal.SIGTERM and not record.get("reason"):
        # a TERM gflowd did not ask for, from a boot that is over: systemd stopping the scope at shutdown
        error = f"killed by SIGTERM (exit code {record.get('exitCode')}) when the machine shut down ({rebooted.split(': ', 1)[1]})"
    return RunObservation(
        attempt.name,
        attempt.attempt,
        record.get("jobPid") or attempt.job_pid,
        started,
        False,
        record.get("exitCode"),
        record.get("signal"),
        float(record.get("finishedAt") or time.time()),
        error,
        reason=record.get("reason") or "",
        stop_reason=record.get("stopReason") or "",
        usage=record.get("usage") or None,
        checkpoint=record.get("checkpoint") if isinstance(record.get("checkpoint"), dict) else None,
        devices=attempt.devices,
        device_uuids=attempt.device_uuids,
        run_hash=attempt.run_hash,
        failed_before=attempt.failed_before,
        oom_kills=record.get("oomKills"),
        **(failed_log_tail(attempt) if record.get("exitCode") != 0 or record.get("signal") else {}),
    )


def running_checkpoint(attempt: Attempt) -> dict | None:
    """A running attempt's latest confirmed checkpoint: ``{confirmedAt, path}`` as its supervisor
    published it (``<record>.ckpt``, shim/checkpoint.py), re-read only when the file changed: one
    stat a pass, and only for a job with spec.checkpoint. The supervisor's datagram wakes the pass;
    one the kernel dropped is made up for by the next pass, and a restarted gflowd reads it afresh."""
    if not (attempt.spec or {}).get("checkpoint"):
        return None
    path = attempt.path("ckpt")
    try:
        seen = os.stat(path)
    except OSError:
        return attempt.checkpoint
    key = (seen.st_ino, seen.st_mtime_ns)
    if key == attempt.checkpoint_file:
        return attempt.checkpoint
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return attempt.checkpoint  # a supervisor writes it whole then renames it: this is not its file
    attempt.checkpoint_file = key
    if (
        isinstance(found, dict)
        and found.get("attempt") == attempt.attempt
        and isinstance(found.get("confirmedAt"), (int, float))
        and isinstance(found.get("path"), (str, type(None)))
    ):
        attempt.checkpoint = {"confirmedAt": float(found["confirmedAt"]), "path": found["path"]}
    return attempt.checkpoint


def failed_log_tail(attempt: Attempt) -> dict:
    """The last lines of a failed attempt's log (``log_tail``, ``log_first_line``), for its classification."""
    path = (attempt.spec or {}).get("log")
    if not path:
        return {}
    lines, first = read_log_tail(path, owner=(attempt.spec or {}).get("uid"))
    return {"log_tail": tuple(lines), "log_first_line": first, "python": job_python(attempt.spec or {})}


def job_python(spec: dict) -> str:
    """The python a job ran: its command's own (``/venv/bin/python train.py``), else the first on
    its PATH; "" when neither is known."""
    argv = spec.get("argv") or []
    if argv and os.path.basename(str(argv[0])).startswith("python"):
        found = argv[0] if os.sep in str(argv[0]) else shutil.which(argv[0], path=(spec.get("env") or {}).get("PATH"))
        return str(found or argv[0])
    path = (spec.get("env") or {}).get("PATH")
    return (shutil.which("python3", path=path) or shutil.which("python", path=path) or "") if path else ""


def read_log_tail(path: str, limit: int = LOG_TAIL_BYTES, owner: int | None = None) -> tuple[list[str], int]:
    """The last ``limit`` bytes of a log as whole lines, and the number of the first of them in the
    log (0: unknown, the log is longer). The job's user owns the log and may have swapped it: never
    follow a link, never wait on a fifo, read only a regular file with no other hard link, owned by
    ``owner`` (the job's uid, as the supervisor made it) when given; else no lines."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return [], 1
    with open(fd, "rb") as file:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or owner not in (None, info.st_uid):
                return [], 1
            size = file.seek(0, os.SEEK_END)
            file.seek(max(size - limit, 0))
            data = file.read(limit)
        except OSError:
            return [], 1
    lines = data.decode("utf-8", "replace").splitlines()
    if size > limit:
        return lines[1:], 0  # its first line is cut
    return lines, 1


def lost_observation(attempt: Attempt, why: str) -> RunObservation:
    """The attempt is over and its exit code unknown: its supervisor died without an exit record."""
    rebooted = rebooted_since((attempt.spec or {}).get("bootId"), boot_id())
    if rebooted:  # said instead of how its supervisor went: the reboot took them all
        why = f"{rebooted}; exit code unknown"
    return RunObservation(
        attempt.name,
        attempt.attempt,
        attempt.job_pid,
        attempt.started_at,
        False,
        None,
        None,
        time.time(),
        why,
        lost=True,
        devices=attempt.devices,
        device_uuids=attempt.device_uuids,
        run_hash=attempt.run_hash,
        failed_before=attempt.failed_before,
    )


def rebooted(attempt: Attempt) -> bool:
    """The attempt was launched in an earlier boot: its pids (and start times) may name anything now."""
    return bool(rebooted_since((attempt.spec or {}).get("bootId"), boot_id()))


def held_observation(
    attempt: Attempt, running: bool = True, finished_at: float | None = None, stop_reason: str = ""
) -> RunObservation:
    """A held attempt: running (queued, its GPUs kept) until stopped, then ended without having run."""
    assert attempt.held is not None
    return RunObservation(
        attempt.name,
        attempt.attempt,
        None,
        time.time(),
        running,
        finished_at=finished_at,
        error="" if running else attempt.held.never_started(),
        **(attempt.held.pending() if running else {}),
        stop_reason=stop_reason,
        devices=attempt.devices,
        device_uuids=attempt.device_uuids,
        run_hash=attempt.run_hash,
        failed_before=attempt.failed_before,
    )
