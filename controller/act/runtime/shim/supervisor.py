"""The per-job supervisor (like containerd-shim or conmon): one small process per running attempt,
which may supervise a next attempt once that one is over (``serve``).

Standard library only, and runnable as a plain file (``python -I -S shim/main.py``), so it starts
without the project's dependencies. It outlives gflowd: gflowd may stop, crash or restart while
jobs run, and the supervisor still enforces limits and writes the exit record.

One attempt is one file, ``run/attempts/<name>.<N>`` (``record.py``): gflowd creates it with the
launch record in it, room left for our two records, which we write in place:

    <name>.<N>         the launch record (gflowd's: what to run; the decision, before the start),
                       our run record (supervisor and job pid + kernel start time; written
                       before the job execs) and our exit record (exit code or signal, reason,
                       times; fsync'd before we exit). We hold an flock on it for our whole life:
                       "a supervisor for this attempt is alive".
    <name>.<N>.stop    a stop request: {"reason", "grace"}; gflowd then sends us SIGTERM
    <name>.<N>.limits  edited limits ({"timeLimit"}); gflowd then sends us SIGHUP
    <name>.<N>.input   a tty job: its mtime is the terminal's last input (idleTimeout)
    <name>.<N>.log     our own trace for humans; created only if we have something to say

Terminals and exec. Every attempt serves a control socket (``control_socket.py``, loaded from the folder above
this one) once its job is under way (CONTROL_AFTER later, so a job that ends in a few milliseconds never
creates one; ``gflowctl exec`` waits for it; a tty job's is bound at once): ``gflowctl exec`` runs
commands in the job's allocation through it. A ``tty`` job runs on a pseudo-terminal whose master we
hold (so it outlives gflowd like the job); we copy its output to the log and to ``gflowctl attach``
viewers. A stop hangs such a session up (SIGHUP) before the TERM.

Sequence: lock -> fork the job (it waits on a pipe) -> run record -> let it exec -> watch it. A
job of our own user without a terminal is spawned instead (posix_spawn: vfork and exec, nothing of
this process copied): run record without the job's pid -> step into the attempt's cgroup -> spawn
-> step back out -> the pid into the run record. Either way a job never runs unrecorded. We watch:
SIGCHLD, stop requests, the time limit (monotonic clock) and the memory limit (RSS of the whole
tree, polled every 100 ms). We are a child subreaper, so a grandchild that calls ``setsid`` still
ends up ours and dies with the job: the attempt ends when the whole tree is gone.

Cgroups (docs/cgroups.md). When gflowd made the attempt a cgroup (the launch record's ``cgroup``: its
``cgroup.procs`` paths, limits already written), the forked job joins it before anything else
(``join_cgroup``), so nothing it starts is outside. The kernel then enforces memory, and we only
read its OOM counter (no RSS polling): an OOM kill anywhere in the job ends the attempt as OOMKilled.
When the tree is gone we read CPU time and peak memory for the exit record and remove the cgroup.

A full disk. A job may fill the disk, and every job that ends meanwhile must still have its exit
recorded: the exit record is the only place its exit code lives. So its room is taken before the
job starts, while there is room: gflowd writes the record file whole, the exit region included
(zeros), and at the end we write the exit record over those bytes in place (blocks the filesystem
already gave the file, so none are needed), with a length and checksum, then fsync: a reader sees
the whole record or none. Of the ways to keep an exit across ENOSPC this is the one that needs
nothing from the disk at the moment it is full; holding the code in memory and retrying alone would
leave gflowd blind and the GPU held for as long as the disk stays full. Where even an overwrite
needs new blocks (copy-on-write filesystems: btrfs, ZFS) we fall back: keep the record in memory,
send it to gflowd in the notify datagram (so gflowd knows the exit at once), and retry the write
with backoff, alive and holding the attempt lock meanwhile, until it is written or gflowd, having
recorded the exit in its own status file, takes the record off its name.

If the run record (or the log file) cannot be written at the start, the job never execs: nothing
ran, so nothing is recorded. We clear what we wrote, release the lock, and tell gflowd
(``unlaunched NAME N WHY``), which holds the launch back and hands it over again later.


States. The watch is a small state machine (``State``, ``TRANSITIONS``): each turn of the loop
turns what it saw into events, in a fixed order (the memory limit, the time limit, the job's end,
the KILL that is due, then the signals gflowd sent), and each (state, event) pair the table names
runs one handler; a pair it does not name changes nothing (a second stop request while stopping,
the time limit while stopping). Starting the job is ``start.py``, the exit record ``exits.py``,
the child's side ``child.py``, /proc ``procfs.py``, the zygote ``launcher.py``.

Checkpoints (``checkpoint.py``, docs/checkpoint.md). With ``spec.checkpoint`` the job's signal goes out
``before`` its time limit (CHECKPOINT_DUE), and a stop request whose reason a checkpoint precedes
(preemption, suspend, idle stop) sends it at once and waits in CHECKPOINTING until the job confirms
(the control socket's ``checkpoint`` hello, or the confirmation file) or the checkpoint's grace is
up (CHECKPOINT_OVER); then the stop goes on as any other. We keep that time, not gflowd, and the
exit record says what happened, so a gflowd restarted meanwhile loses nothing.
"""

from __future__ import annotations

import enum
import fcntl
import json
import os
import select
import signal
import sys
import time

try:  # in the project; run as a plain file (shim/main.py), the modules beside this one and above it
    from controller.act.runtime import record
    from controller.act.runtime.control_socket import Control, control_folder
    from controller.act.runtime.shim.checkpoint import CHECKPOINT_STOPS, FILE_POLL, Handshake
    from controller.act.runtime.shim.child import attempt_cgroup, job_environment, join_cgroup
    from controller.act.runtime.shim.exits import ExitRecord, still_named
    from controller.act.runtime.shim.procfs import descendants, tree_rss
    from controller.act.runtime.shim.start import JobStart, NotLaunched
except ImportError:
    import record  # type: ignore[no-redef]
    from checkpoint import CHECKPOINT_STOPS, FILE_POLL, Handshake  # type: ignore[no-redef]
    from child import attempt_cgroup, job_environment, join_cgroup  # type: ignore[no-redef]
    from control_socket import Control, control_folder  # type: ignore[no-redef]
    from exits import ExitRecord, still_named  # type: ignore[no-redef]
    from procfs import descendants, tree_rss  # type: ignore[no-redef]
    from start import JobStart, NotLaunched  # type: ignore[no-redef]

PR_SET_CHILD_SUBREAPER = 36
MEMORY_POLL = 0.1
LEFTOVER_GRACE = 2.0  # after the job's main process ends, how long its stray children get
CONTROL_AFTER = 0.2  # the control socket is bound this long after the start (module docstring)


class State(enum.Enum):
    RUNNING = "running"  # the job runs; nothing asked it to stop
    KILLED = "killed"  # over its memory limit: the whole tree was sent KILL (OOMKilled)
    CHECKPOINTING = "checkpointing"  # a stop waits for the job's checkpoint (shim/checkpoint.py), up to its grace
    STOPPING = "stopping"  # TERM sent (a stop request, the time limit, a finished job's strays); KILL at ``kill_at``
    DONE = "done"  # the job and every process it left behind are gone


class Event(enum.Enum):
    OUT_OF_MEMORY = (
        "out of memory"  # the kernel OOM-killed a process of the cgroup, or the polled RSS is over the limit
    )
    DEADLINE = "deadline"  # the time limit passed
    JOB_EXITED = "job exited"  # the job's main process ended; some of its processes did not
    KILL_DUE = "kill due"  # the grace period of a stop is over
    STOP_ASKED = "stop asked"  # gflowd wrote a stop request and sent SIGTERM
    CHECKPOINT_DUE = "checkpoint due"  # the time limit is the checkpoint's ``before`` away: its signal goes out
    CHECKPOINT_OVER = "checkpoint over"  # the job confirmed its checkpoint, or the grace for it is up
    TREE_GONE = "tree gone"  # the job and everything it started are gone


# (state, event) -> (handler, next state). A pair not listed changes nothing.
TRANSITIONS: dict[tuple[State, Event], tuple[str, State]] = {
    (State.RUNNING, Event.OUT_OF_MEMORY): ("_kill_for_memory", State.KILLED),
    (State.STOPPING, Event.OUT_OF_MEMORY): ("_kill_for_memory", State.STOPPING),
    (State.RUNNING, Event.DEADLINE): ("_stop_for_deadline", State.STOPPING),
    (State.RUNNING, Event.JOB_EXITED): ("_stop_leftovers", State.STOPPING),
    (State.KILLED, Event.JOB_EXITED): ("_stop_leftovers", State.STOPPING),
    (State.STOPPING, Event.KILL_DUE): ("_kill_again", State.STOPPING),
    (State.RUNNING, Event.STOP_ASKED): ("_stop_as_asked", State.STOPPING),
    (State.KILLED, Event.STOP_ASKED): ("_stop_as_asked", State.STOPPING),
    (State.RUNNING, Event.CHECKPOINT_DUE): ("_checkpoint_before_deadline", State.RUNNING),
    (State.CHECKPOINTING, Event.CHECKPOINT_OVER): ("_stop_after_checkpoint", State.STOPPING),
    (State.CHECKPOINTING, Event.OUT_OF_MEMORY): ("_kill_for_memory", State.KILLED),
    (State.CHECKPOINTING, Event.DEADLINE): ("_stop_for_deadline", State.STOPPING),  # the time limit is hard
    (State.CHECKPOINTING, Event.JOB_EXITED): ("_stop_leftovers", State.STOPPING),
    (State.CHECKPOINTING, Event.STOP_ASKED): ("_stop_as_asked", State.STOPPING),  # e.g. a cancel meanwhile
    **{
        (state, Event.TREE_GONE): ("_gone", State.DONE)
        for state in (State.RUNNING, State.KILLED, State.STOPPING, State.CHECKPOINTING)
    },
}


_libc = None


def load_libc():
    """ctypes and libc, loaded once: the launcher loads them before forking, so supervisors don't."""
    global _libc
    if _libc is None:
        import ctypes  # lazy: the launcher loads it once before forking; a job's own exec never needs it

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def set_subreaper() -> bool:
    try:
        return load_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


_CAUGHT = (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_caught = False  # this process installed the handlers (a supervisor keeps them between attempts)


def _catch_signals() -> None:
    """The signals the watch waits for, caught by a handler that does nothing: each one only
    wakes the watch through the wake-up fd (``Supervisor._wait``). Installed once per process:
    four ``signal.signal`` calls, and four more to undo them, were ~50 us an attempt."""
    global _caught
    if not _caught:
        for sig in _CAUGHT:
            signal.signal(sig, _woken)
        _caught = True


def _woken(*_: object) -> None:
    """The handler of ``_CAUGHT``: the wake-up fd carries the signal's number."""


def _read_json(path: str) -> dict | None:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


class Supervisor(JobStart, ExitRecord):
    """One attempt, from its lock to its exit record (module docstring)."""

    def __init__(self, record_path: str):
        self.record_path = record_path
        try:  # held for our whole life: the record is also the attempt's lock
            self.fd: int | None = os.open(record_path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            self.launch = record.launch_region(self.fd)
            self.spec = record.decode(self.launch) or {}
        except OSError:
            self.fd, self.launch, self.spec = None, b"", {}
        self.paths = {kind: f"{record_path}.{kind}" for kind in ("stop", "limits", "input")}
        self.job_pid = 0
        self.job_status: int | None = None
        self.stop_reason = ""
        self.state = State.RUNNING
        self.kill_at: float | None = None  # monotonic: when a stop's grace period ends
        self.deadline_from = 0.0  # monotonic: the job's start, which the time limit counts from
        self.time_limit: float | None = self.spec.get("timeLimit")  # seconds; edited through ``.limits``
        self.memory_limit: int | None = self.spec.get("memoryLimit")  # bytes, polled without a memory cgroup
        self.grace = float(self.spec.get("grace", 10.0))
        self.max_rss = 0
        self.killed_hard = False
        self.control: Control | None = None  # the control socket: attach, exec, notices
        self.reusable = False  # ended cleanly: this process may supervise a next attempt (``serve``)
        self.cgroup_removed = False
        self.stuck_in_cgroup = False  # a direct spawn could not step back out of the attempt's cgroup
        self._wake: tuple[int, int] | None = None  # the signal wake-up pipe
        wanted = self.spec.get("checkpoint")
        self.checkpoint = (
            Handshake(wanted, self.spec.get("uid"), self.spec.get("gid"), record_path, self._notify) if wanted else None
        )
        self.held_stop: tuple[str, float] | None = None  # a stop waiting for the checkpoint: (reason, grace)
        try:
            self.cgroup = attempt_cgroup(self.spec.get("cgroup"))
        except Exception as exc:  # the job still joins (limits hold); only its counters are lost
            sys.stderr.write(f"supervisor: cannot read the attempt's cgroup: {exc!r}\n")
            self.cgroup = None

    def run(self) -> int:
        if not self.spec or self.fd is None:
            return 2  # no such record, or one gflowd never finished writing: never handed over
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another supervisor owns this attempt
        if not still_named(self.fd, self.record_path) or record.launch_region(self.fd) != self.launch:
            return 0  # our attempt ended and its record was recycled as another's since we opened it
        if record.read_exit(self.fd) is not None or record.read_run(self.fd) is not None:
            return 0  # this attempt already began: never run it twice
        set_subreaper()
        wake_r, wake_w = self._wake = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        _catch_signals()
        started_wall = time.time()
        started_mono = time.monotonic()
        self.control = Control(self.spec, self.paths["input"], join_cgroup=join_cgroup, environment=job_environment)
        if self.checkpoint is not None:
            self.checkpoint.prepare(control_folder)  # before the job: it may confirm at once
            self.control.on_checkpoint = self.checkpoint.confirm
            self.control.listen()  # so may `gflowctl checkpoint done`, before a first turn of the watch
        try:
            code, error = self._spawn()
        except NotLaunched as exc:
            self._not_launched(exc.why)
            return 0
        if error:
            self._finish(started_wall, exit_code=code, error=error)
            return 0
        self._notify("start")
        if self._listens_at_once():
            self.control.listen()
        self._watch(wake_r, started_mono)
        status = os.waitstatus_to_exitcode(self.job_status) if self.job_status is not None else None
        signum = -status if status is not None and status < 0 else None
        exit_code = 128 + signum if signum else status
        if self.control is not None:
            self.control.drain()  # the terminal's last output reaches the log and the viewers
        if self.checkpoint is not None:
            self.checkpoint.poll_file()  # a confirmation written just before the end still counts
        if (
            self._finish(started_wall, exit_code=exit_code, sig=signum)
            and not self.spec.get("tty")
            and not self.stuck_in_cgroup
        ):
            self.reusable = True
        return 0

    def _listens_at_once(self) -> bool:
        """A terminal session is what the socket is for; a checkpointing job's was bound before it
        started (it may confirm in its first instant). Others wait CONTROL_AFTER: most jobs of a
        drain end before anyone could attach."""
        return bool(self.spec.get("tty")) or self.checkpoint is not None

    def close(self) -> None:
        """After ``run``: the wake-up pipe and the record closed (which frees the attempt's lock: its
        exit record is written). The signals' handlers stay (``_catch_signals``): with no wake-up
        fd a signal meant for this attempt is lost, as ignored, and none reaches a next one."""
        signal.set_wakeup_fd(-1)
        for fd in (*(self._wake or ()), *((self.fd,) if self.fd is not None else ())):
            os.close(fd)
        self._wake, self.fd = None, None

    def _not_launched(self, why: str) -> None:
        """Nothing ran and nothing is recorded: clear what we wrote, free the attempt, say why."""
        if self.control is not None:
            self.control.close(None)
            self.control = None
        if self.fd is not None:
            record.clear_run(self.fd)
            os.close(self.fd)  # releases the lock first: gflowd may hand the launch over again at once
            self.fd = None
        self._notify("unlaunched", why)

    # -- the watch: events in, transitions out ------------------------------------------------------

    def _watch(self, wake_r: int, started_mono: float) -> None:
        """Until the job and everything it started are gone: the events of each turn, in order."""
        self.deadline_from = started_mono
        listen_at: float | None = None if self._listens_at_once() else started_mono + CONTROL_AFTER
        while True:
            self._reap()
            now = time.monotonic()
            if listen_at is not None and now >= listen_at and self.job_status is None:
                listen_at = None
                if self.control is not None:
                    self.control.listen()
            # while the job is unreaped it is in the tree: the walk of /proc is needed only once it
            # ended (its strays) or to poll the tree's RSS (4 opens of /proc a turn)
            tree = descendants(os.getpid()) if self.job_status is not None or self._polls_rss() else [self.job_pid]
            if self.job_status is not None and not tree:
                self._fire(Event.TREE_GONE)
                return
            if tree and not self.killed_hard and self._over_memory(tree):
                self._fire(Event.OUT_OF_MEMORY)
            if self.checkpoint is not None:
                self.checkpoint.poll_file()
                if self.checkpoint.deadline_signal_due(now, self._deadline()):
                    self._fire(Event.CHECKPOINT_DUE)
                if self.state is State.CHECKPOINTING and self.checkpoint.wait_over(now):
                    self._fire(Event.CHECKPOINT_OVER)
            if self.time_limit is not None and now >= self.deadline_from + self.time_limit:
                self._fire(Event.DEADLINE)
            if self.job_status is not None and tree:
                self._fire(Event.JOB_EXITED)
            if self.kill_at is not None and now >= self.kill_at:
                self._fire(Event.KILL_DUE, now)
            self._wait(wake_r, self._timeout(now, listen_at))

    def _fire(self, event: Event, *args: float) -> None:
        """The transition the table names for (state, event), if any."""
        found = TRANSITIONS.get((self.state, event))
        if found is None:
            return
        handler, self.state = found
        getattr(self, handler)(*args)

    def _polls_rss(self) -> bool:
        """The memory limit is ours to enforce, from the tree's RSS (``_over_memory``)."""
        return bool(self.memory_limit) and not (self.cgroup is not None and self.spec["cgroup"].get("memory"))

    def _over_memory(self, tree: list[int]) -> bool:
        """With a memory cgroup the kernel enforces the limit and we read its OOM counter; without,
        we poll the tree's RSS (and keep its peak for the exit record)."""
        if self.cgroup is not None and self.spec["cgroup"].get("memory"):
            return self._oom_killed()
        if not self.memory_limit:
            return False
        rss = tree_rss(tree)
        self.max_rss = max(self.max_rss, rss)
        return rss > self.memory_limit

    def _deadline(self) -> float | None:
        """Monotonic: when the time limit is up, if the job has one."""
        return None if self.time_limit is None else self.deadline_from + self.time_limit

    def _timeout(self, now: float, listen_at: float | None) -> float:
        """How long the next wait may last: until the next poll, deadline, KILL or control socket."""
        timeout = MEMORY_POLL if self.memory_limit else 1.0
        if self.checkpoint is not None:
            timeout = min(timeout, FILE_POLL)  # the confirmation file is polled
            deadline = self._deadline()
            if deadline is not None and self.checkpoint.why != "DeadlineExceeded":
                timeout = min(timeout, max(0.0, deadline - self.checkpoint.before - now))
        if self.time_limit is not None and not self.stop_reason:
            timeout = min(timeout, max(0.0, self.deadline_from + self.time_limit - now))
        if self.kill_at is not None:
            timeout = min(timeout, max(0.0, self.kill_at - now))
        if self.job_status is not None:
            timeout = min(timeout, 0.05)  # strays: re-check the tree soon
        if listen_at is not None and self.job_status is None:
            timeout = min(timeout, max(0.0, listen_at - now))
        return timeout

    def _wait(self, wake_r: int, timeout: float) -> None:
        """Sleep until a signal, the control socket or ``timeout``; then act on what came."""
        readers, writers = self.control.wanted() if self.control else ([], [])
        try:
            ready, writable, _ = select.select([wake_r, *readers], writers, [], timeout)
        except InterruptedError:
            ready, writable = [wake_r], []
        if self.control is not None:
            self.control.handle(ready, writable, job_running=self.job_status is None)
        if wake_r in ready:
            self._signalled(wake_r)

    def _signalled(self, wake_r: int) -> None:
        """gflowd's signals, as the wake-up pipe carries them: TERM (or INT) a stop, HUP edited limits."""
        try:
            signals = os.read(wake_r, 4096)
        except BlockingIOError:
            signals = b""
        if signal.SIGTERM in signals or signal.SIGINT in signals:
            self._fire(Event.STOP_ASKED)
        if signal.SIGHUP in signals:  # edited limits: a new time limit, counted from the start
            limits = _read_json(self.paths["limits"]) or {}
            if "timeLimit" in limits:
                self.time_limit = limits["timeLimit"]

    # -- the handlers ---------------------------------------------------------------------------

    def _kill_for_memory(self) -> None:
        self.stop_reason = "OOMKilled"  # the kernel killed one: the whole job goes, as v2's oom.group
        self._signal_tree(signal.SIGKILL)
        self.killed_hard = True

    def _stop_for_deadline(self) -> None:
        self._begin_stop("DeadlineExceeded", self.grace)

    def _stop_leftovers(self) -> None:
        self._begin_stop(self.stop_reason, min(self.grace, LEFTOVER_GRACE))  # strays of a finished job

    def _stop_as_asked(self) -> None:
        request = _read_json(self.paths["stop"]) or {}
        reason, grace = str(request.get("reason", "Stopped")), float(request.get("grace", self.grace))
        if self.checkpoint is not None and reason in CHECKPOINT_STOPS and not self.killed_hard:
            if self.held_stop is not None:  # already waiting for the checkpoint: keep waiting
                self.state, self.held_stop = State.CHECKPOINTING, (self.held_stop[0], grace)
                return
            self._checkpoint_first(reason, grace)
            return
        self.held_stop = None
        self._begin_stop(reason, grace)

    def _checkpoint_first(self, reason: str, grace: float) -> None:
        """A stop gflowd causes: the checkpoint signal now (unless one sent for the time limit was
        confirmed already), and the stop held until the job confirms or the grace is up."""
        assert self.checkpoint is not None
        self.stop_reason = self.stop_reason or reason  # the exit record says why, even before the TERM
        self.held_stop = (reason, grace)
        self.state = State.CHECKPOINTING
        if not self.checkpoint.confirmed_since_signal():
            self.checkpoint.send(reason, self._signal_tree, self._signal_main)
        self._log(
            f"checkpoint: {self.checkpoint.signal_name} sent for {reason}; waiting up to {self.checkpoint.grace:g}s"
        )

    def _checkpoint_before_deadline(self) -> None:
        assert self.checkpoint is not None
        self.checkpoint.send("DeadlineExceeded", self._signal_tree, self._signal_main)
        self._log(f"checkpoint: {self.checkpoint.signal_name} sent {self.checkpoint.before:g}s before the time limit")

    def _stop_after_checkpoint(self) -> None:
        assert self.checkpoint is not None and self.held_stop is not None
        reason, grace = self.held_stop
        self.held_stop = None
        if self.checkpoint.timed_out:
            self._log(f"checkpoint: not confirmed within {self.checkpoint.grace:g}s; stopping the job")
        self._begin_stop(reason, grace)

    def _log(self, line: str) -> None:
        """A line for humans: what the handshake did and when."""
        try:  # our own trace (module docstring), not the job's log: its output stays its own
            fd = os.open(
                f"{self.record_path}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
        except OSError:
            return
        try:
            os.write(fd, f"[gflow {time.strftime('%H:%M:%S')}] {line}\n".encode())
        except OSError:
            pass
        finally:
            os.close(fd)

    def _kill_again(self, now: float) -> None:
        self._signal_tree(signal.SIGKILL)
        self.kill_at = now + 1.0  # and again, for anything forked meanwhile

    def _gone(self) -> None:
        """Nothing left to watch: ``run`` writes the exit record."""

    def _begin_stop(self, reason: str, grace: float) -> None:
        if self.kill_at is not None:
            return
        self.stop_reason = self.stop_reason or reason
        if self.control is not None and self.control.master is not None:
            self._signal_tree(signal.SIGHUP)  # a terminal session hangs up: interactive shells ignore TERM
        self._signal_tree(signal.SIGTERM)
        self.kill_at = time.monotonic() + grace

    def _signal_main(self, sig: int) -> None:
        if self.job_pid and self.job_status is None:
            try:
                os.kill(self.job_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _signal_tree(self, sig: int) -> None:
        if self.job_pid and self.job_status is None:
            try:
                os.killpg(self.job_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            if pid == self.job_pid:
                self.job_status = status
            elif self.control is not None:
                self.control.reaped(pid, status)  # an exec'd command ended

    def _oom_killed(self) -> bool:
        try:
            return bool(self.cgroup.oom_kills())
        except Exception:  # a counter we cannot read is not an OOM kill
            return False
