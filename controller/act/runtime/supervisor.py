#!/usr/bin/env python3
"""The per-job supervisor (like containerd-shim or conmon): one small process per running attempt,
which may supervise a next attempt once that one is over (``serve``).

Standard library only, and runnable as a plain file (``python -I -S supervisor.py``), so it starts
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

Terminals and exec. Every attempt serves a control socket (``control_socket.py``, loaded beside this
file) once its job is under way (CONTROL_AFTER later, so a job that ends in a few milliseconds never
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

``--launcher`` mode is a zygote: started once by gflowd, it reads record paths on stdin and hands
each to a supervisor process it forked (about 2 ms instead of a 35 ms interpreter start). A
supervisor process supervises one attempt at a time, and may supervise several in turn: after an
attempt whose exit record it wrote (not a terminal session), it says so to the launcher, which gives
it the next attempt only once gflowd has purged that record (gflowd writes "purged PATH" to the
launcher): no stop or limits signal meant for the last attempt can then reach the next. Forking, copying on write and tearing down a Python process was most of an
attempt's cost; a flood of short jobs now pays it a few times, not once per job. The launcher keeps
IDLE_SUPERVISORS waiting for IDLE_TIMEOUT (more, in a burst, for BURST_TIMEOUT), and one ends
after REUSE_MAX attempts. The
launcher exits when gflowd closes the pipe; the supervisors live on, each until its attempt ends.
Supervisors stay in the launcher's session (a process group each) and every job leads a session of
its own: where the kernel shares CPU time between sessions (autogroup, on by default in most
distributions), a session per supervisor let a burst of them outweigh gflowd many times over.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat
import sys
import time
import warnings  # noqa: F401  os.execvpe imports it lazily; after setuid the stdlib may be unreadable


try:  # the control socket (attach, exec, notices) and the record's format: standard library only, like this file
    from controller.act.runtime import record
    from controller.act.runtime.control_socket import Control, enter_terminal, open_terminal, unix_address
except ImportError:  # run as a plain file (python -I -S): the modules beside us, as cgroups_package() finds its package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import record  # type: ignore[no-redef]
    from control_socket import Control, enter_terminal, open_terminal, unix_address  # type: ignore[no-redef]

PR_SET_CHILD_SUBREAPER = 36
MEMORY_POLL = 0.1
LEFTOVER_GRACE = 2.0  # after the job's main process ends, how long its stray children get
CONTROL_AFTER = 0.2  # the control socket is bound this long after the start (module docstring)
ERROR_CHARS = 3000  # a start error is cut to this, so the record fits in its room
RETRY_FIRST, RETRY_MAX = 0.2, 5.0  # seconds between tries to write an exit record the disk refused
REUSE_MAX = 500  # attempts one supervisor process supervises before it ends (bounds any leak)
IDLE_SUPERVISORS = 8  # supervisor processes kept waiting for an attempt for IDLE_TIMEOUT seconds,
IDLE_TIMEOUT = 30.0
BURST_SUPERVISORS, BURST_TIMEOUT = 1024, 2.0  # and, in a burst, up to this many for this long
PURGED = b"purged "  # a line from gflowd: the record at the path that follows was purged
MAX_FD = 1 << 20  # above any descriptor a launcher holds
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class NotLaunched(Exception):
    """The attempt could not be recorded (e.g. the disk is full): the job must not run."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class UnsafeLogFile(Exception):
    """The job's log path is something we must not write through (a symlink, a FIFO, a hard link)."""


def describe_error(exc: OSError) -> str:
    """``No space left on device (ENOSPC) writing /h/run/jobs/a/run-1.json``."""
    name = errno.errorcode.get(exc.errno or 0, "")
    where = f" writing {os.fsdecode(exc.filename)}" if exc.filename else ""
    return f"{exc.strerror or exc}{f' ({name})' if name else ''}{where}"


def _fsync_dir(directory: str) -> None:
    try:
        dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _still_named(fd: int, path: str) -> bool:
    """``path`` still names the open file ``fd``."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def _read_json(path: str) -> dict | None:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def open_job_log(path: str, uid: int | None = None, gid: int | None = None, append: bool = False) -> int:
    """Open a job's output file for writing, safely even as root: never through a symlink
    (``O_NOFOLLOW``), never a FIFO or a device (``O_NONBLOCK``, then ``fstat``), never a file with
    other hard links; truncated unless ``append``; handed to the job's user by descriptor
    (``fchown``), never by path. Raises UnsafeLogFile, or OSError."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags, 0o640)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeLogFile(f"log file {path} is a symbolic link; refused (remove it)") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeLogFile(f"log file {path} is not a regular file; refused (remove it)")
        if info.st_nlink > 1:
            raise UnsafeLogFile(f"log file {path} has other hard links; refused (remove it)")
        if not append:
            os.ftruncate(fd, 0)
        if uid is not None and os.geteuid() == 0:
            os.fchown(fd, uid, gid if gid is not None else -1)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _slurp(path: str) -> bytes:
    """A small file's bytes with two system calls' worth of work (no buffered file object: its
    fstat, isatty and seek cost more than the read, in every supervisor loop)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks: with the pid, a process's identity."""
    try:
        data = _slurp(f"/proc/{pid}/stat")
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2 :].split()[19])


def _children_of(pid: int) -> list[int] | None:
    """Direct children from /proc/PID/task/*/children; None when the kernel lacks that file."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            kids.extend(int(x) for x in _slurp(f"/proc/{pid}/task/{tid}/children").split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}"):
                return []
            return None
        except OSError:
            continue
    return kids


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself)."""
    found: list[int] = []
    stack = [root]
    fallback = None
    while stack:
        pid = stack.pop()
        kids = _children_of(pid)
        if kids is None:  # no /proc/PID/task/TID/children: build the map from /proc once
            if fallback is None:
                fallback = _ppid_map()
            kids = fallback.get(pid, [])
        for kid in kids:
            if kid not in found:
                found.append(kid)
                stack.append(kid)
    return found


def _ppid_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(_slurp(f"/proc/{pid}/statm").split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


_libc = None


def _load_libc():
    """ctypes and libc, loaded once: the launcher loads them before forking, so supervisors don't."""
    global _libc
    if _libc is None:
        import ctypes  # lazy: the launcher loads it once before forking; a job's own exec never needs it

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _set_subreaper() -> bool:
    try:
        return _load_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Supervisor:
    def __init__(self, record_path: str):
        self.record_path = record_path
        try:  # held for our whole life: the record is also the attempt's lock
            self.fd: int | None = os.open(record_path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            self.spec = record.read_launch(self.fd) or {}
        except OSError:
            self.fd, self.spec = None, {}
        self.paths = {kind: f"{record_path}.{kind}" for kind in ("stop", "limits", "input")}
        self.job_pid = 0
        self.job_status: int | None = None
        self.stop_reason = ""
        self.kill_at: float | None = None
        self.max_rss = 0
        self.killed_hard = False
        self.control: Control | None = None  # the control socket: attach, exec, notices
        self.reusable = False  # ended cleanly: this process may supervise a next attempt (``serve``)
        self.cgroup_removed = False
        self.stuck_in_cgroup = False  # a direct spawn could not step back out of the attempt's cgroup
        self._wake: tuple[int, int] | None = None  # the signal wake-up pipe
        try:
            self.cgroup = attempt_cgroup(self.spec.get("cgroup"))
        except Exception as exc:  # the job still joins (limits hold); only its counters are lost
            sys.stderr.write(f"supervisor: cannot read the attempt's cgroup: {exc!r}\n")
            self.cgroup = None

    # -- life ---------------------------------------------------------------------------------------

    def run(self) -> int:
        if not self.spec or self.fd is None:
            return 2  # no such record, or one gflowd never finished writing: never handed over
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another supervisor owns this attempt
        if not _still_named(self.fd, self.record_path) or record.read_launch(self.fd) != self.spec:
            return 0  # our attempt ended and its record was recycled as another's since we opened it
        if record.read_exit(self.fd) is not None or record.read_run(self.fd) is not None:
            return 0  # this attempt already began: never run it twice
        _set_subreaper()
        wake_r, wake_w = self._wake = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        started_wall = time.time()
        started_mono = time.monotonic()
        self.control = Control(self.spec, self.paths["input"], join_cgroup=join_cgroup, environment=job_environment)
        try:
            code, error = self._spawn()
        except NotLaunched as exc:
            self._not_launched(exc.why)
            return 0
        if error:
            self._finish(started_wall, exit_code=code, error=error)
            return 0
        self._notify("start")
        if self.spec.get("tty"):
            self.control.listen()  # a terminal session is what it is for: at once
        self._watch(wake_r, started_mono)
        code = os.waitstatus_to_exitcode(self.job_status) if self.job_status is not None else None
        sig = -code if code is not None and code < 0 else None
        exit_code = 128 + sig if sig else code
        if self.control is not None:
            self.control.drain()  # the terminal's last output reaches the log and the viewers
        if self._finish(started_wall, exit_code=exit_code, sig=sig) and not self.spec.get("tty") and not self.stuck_in_cgroup:
            self.reusable = True
        return 0

    def close(self) -> None:
        """After ``run``: signals back to their defaults, the wake-up pipe and the record closed
        (which frees the attempt's lock: its exit record is written)."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # none is meant for a next attempt
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
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

    def _spawn(self) -> tuple[int, str]:
        """Fork the job, record it, then let it exec. Returns (exit code, error) if it could not
        start; raises NotLaunched if it must not (the run record could not be written)."""
        spec = self.spec
        uid, gid = spec.get("uid"), spec.get("gid")
        try:
            log_fd = open_job_log(spec["log"], uid, gid, append=bool(spec.get("logAppend")))
        except UnsafeLogFile as exc:
            return 126, str(exc)
        except OSError as exc:
            if exc.errno in DISK_FULL:
                raise NotLaunched(describe_error(OSError(exc.errno, exc.strerror, spec["log"]))) from None
            return 126, f"log file {spec['log']}: {exc.strerror or exc}"
        if self._spawns_directly():
            return self._spawn_directly(log_fd)
        try:
            terminal = open_terminal(spec) if spec.get("tty") else None  # (master, slave): a tty job's pty
        except OSError as exc:
            os.close(log_fd)
            return 126, f"cannot open a pseudo-terminal for the job: {exc.strerror or exc}"
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the job
            _become_job(spec, log_fd, go_r, go_w, err_r, err_w, terminal[1] if terminal else None)
        os.close(go_r)
        os.close(err_w)
        if terminal is not None and self.control is not None:
            os.close(terminal[1])  # the job holds the slave: its last close gives us EIO on the master
            self.control.serve_terminal(terminal[0], log_fd)  # copies the pty's output to the log
        else:
            os.close(log_fd)
        self.job_pid = pid
        try:
            self._write_run(pid)
        except OSError as exc:
            os.close(go_w)  # the job reads EOF and exits (125) without ever exec'ing
            os.close(err_r)
            _waitpid(pid)
            self.job_pid = 0
            if exc.filename is None:
                exc = OSError(exc.errno, exc.strerror, self.record_path)
            raise NotLaunched(describe_error(exc)) from None
        os.write(go_w, b"x")
        os.close(go_w)
        chunks = []
        while True:
            try:
                chunk = os.read(err_r, 4096)
            except InterruptedError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
        os.close(err_r)
        if chunks:
            self.job_status = _waitpid(pid)
            code, _, message = b"".join(chunks).decode(errors="replace").partition(" ")
            return (int(code) if code.isdigit() else 126), message
        return 0, ""

    def _write_run(self, job_pid: int | None) -> None:
        """The run record, in place, not fsync'd: it must survive gflowd crashing (the page cache
        does), not the machine crashing (which kills the job too); this keeps ~1 ms off every start."""
        assert self.fd is not None
        record.write_run(self.fd, {
            "name": self.spec.get("name"),
            "attempt": self.spec.get("attempt"),
            "supervisorPid": os.getpid(),
            "supervisorStartTicks": start_ticks(os.getpid()),
            "jobPid": job_pid,
            "jobStartTicks": start_ticks(job_pid) if job_pid else None,
            "startedAt": time.time(),
        })

    def _spawns_directly(self) -> bool:
        """Whether the job can be spawned without forking this Python process (``_spawn_directly``):
        no terminal, no other user to become, and a way back out of the attempt's cgroup."""
        spec = self.spec
        if spec.get("tty") or spec.get("uid") is not None or not spec.get("argv"):
            return False
        procs = (spec.get("cgroup") or {}).get("procs") or []
        if not procs:
            return True
        pids = spec.get("pidsLimit")
        return (pids is None or pids >= 2) and _home_cgroups(procs) is not None

    def _spawn_directly(self, log_fd: int) -> tuple[int, str]:
        """``posix_spawn`` (vfork and exec: nothing of this process is copied, ~2 ms less per start
        than a fork of it). The run record is written first, without the job's pid: a job never
        runs unrecorded; its pid follows once it runs. We step into the attempt's cgroup so the job
        starts inside it, and back out. Returns (exit code, error) if the job could not start;
        raises NotLaunched if it must not (the run record could not be written)."""
        spec = self.spec
        try:
            self._write_run(None)
        except OSError as exc:
            os.close(log_fd)
            raise NotLaunched(describe_error(OSError(exc.errno, exc.strerror, self.record_path))) from None
        procs = (spec.get("cgroup") or {}).get("procs") or []
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        step = "workingDir"
        try:
            step = "environment"
            env = job_environment(spec)
            step = "workingDir"
            os.chdir(spec["cwd"])  # the job's user is ours: it may enter whatever we may
            step = "command"
            program = _find_program(spec["argv"][0], env)
            step = "cgroup"
            join_cgroup(procs)
            try:
                step = "command"
                pid = os.posix_spawn(program, spec["argv"], env, setsid=True, setsigdef=JOB_DEFAULT_SIGNALS,
                                     file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                                   (os.POSIX_SPAWN_DUP2, log_fd, 1), (os.POSIX_SPAWN_DUP2, log_fd, 2)])
            finally:
                if procs:
                    self._step_out(procs)
        except Exception as exc:  # noqa: BLE001  the job never ran: say why, as the forked path does
            return start_failure(step, spec, exc)
        finally:
            os.close(log_fd)
            os.fchdir(here)
            os.close(here)
        self.job_pid = pid
        try:
            self._write_run(pid)
        except OSError:
            pass  # the run record without the pid still says the job began; gflowd finds it by its cgroup or marker
        return 0, ""

    def _step_out(self, procs: list[str]) -> None:
        """Back into our own cgroups after a spawn in the attempt's. Should the kernel refuse, the job
        still runs and is supervised; this process, its memory now the job's, is not reused."""
        try:
            join_cgroup(_home_cgroups(procs) or [])
        except OSError as exc:
            self.stuck_in_cgroup = True
            sys.stderr.write(f"supervisor: cannot leave the attempt's cgroup: {exc}\n")

    def _watch(self, wake_r: int, started_mono: float) -> None:
        spec = self.spec
        time_limit = spec.get("timeLimit")
        memory_limit = spec.get("memoryLimit")
        grace = float(spec.get("grace", 10.0))
        listen_at: float | None = None if self.spec.get("tty") else started_mono + CONTROL_AFTER
        while True:
            self._reap()
            now = time.monotonic()
            if listen_at is not None and now >= listen_at and self.job_status is None:
                listen_at = None
                if self.control is not None:
                    self.control.listen()
            tree = descendants(os.getpid())
            if self.job_status is not None and not tree:
                return  # the job and every process it left behind are gone
            if self.cgroup is not None and self.spec["cgroup"].get("memory"):
                if tree and not self.killed_hard and self._oom_killed():
                    self.stop_reason = "OOMKilled"  # the kernel killed one: the whole job goes, as v2's oom.group
                    self._signal_tree(signal.SIGKILL)
                    self.killed_hard = True
            elif memory_limit and tree and not self.killed_hard:
                rss = tree_rss(tree)
                self.max_rss = max(self.max_rss, rss)
                if rss > memory_limit:
                    self.stop_reason = "OOMKilled"
                    self._signal_tree(signal.SIGKILL)
                    self.killed_hard = True
            if time_limit is not None and not self.stop_reason and now >= started_mono + time_limit:
                self._begin_stop("DeadlineExceeded", grace)
            if self.job_status is not None and self.kill_at is None and tree:
                self._begin_stop(self.stop_reason, min(grace, LEFTOVER_GRACE))  # strays of a finished job
            if self.kill_at is not None and now >= self.kill_at:
                self._signal_tree(signal.SIGKILL)
                self.kill_at = now + 1.0  # and again, for anything forked meanwhile
            timeout = 1.0
            if memory_limit:
                timeout = MEMORY_POLL
            if time_limit is not None and not self.stop_reason:
                timeout = min(timeout, max(0.0, started_mono + time_limit - now))
            if self.kill_at is not None:
                timeout = min(timeout, max(0.0, self.kill_at - now))
            if self.job_status is not None:
                timeout = min(timeout, 0.05)  # strays: re-check the tree soon
            if listen_at is not None and self.job_status is None:
                timeout = min(timeout, max(0.0, listen_at - now))
            readers, writers = self.control.wanted() if self.control else ([], [])
            try:
                ready, writable, _ = select.select([wake_r, *readers], writers, [], timeout)
            except InterruptedError:
                ready, writable = [wake_r], []
            if self.control is not None:
                self.control.handle(ready, writable, job_running=self.job_status is None)
            if wake_r in ready:
                try:
                    signals = os.read(wake_r, 4096)
                except BlockingIOError:
                    signals = b""
                if signal.SIGTERM in signals or signal.SIGINT in signals:
                    request = _read_json(self.paths["stop"]) or {}
                    self._begin_stop(str(request.get("reason", "Stopped")), float(request.get("grace", grace)))
                if signal.SIGHUP in signals:
                    limits = _read_json(self.paths["limits"]) or {}
                    if "timeLimit" in limits:
                        time_limit = limits["timeLimit"]

    def _begin_stop(self, reason: str, grace: float) -> None:
        if self.kill_at is not None:
            return
        self.stop_reason = self.stop_reason or reason
        if self.control is not None and self.control.master is not None:
            self._signal_tree(signal.SIGHUP)  # a terminal session hangs up: interactive shells ignore TERM
        self._signal_tree(signal.SIGTERM)
        self.kill_at = time.monotonic() + grace

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

    def _cgroup_usage(self) -> dict:
        """The tree is gone: the cgroup's counters for the exit record, then the cgroup is removed,
        unless the launch says gflowd ``leave``s it for later (gflowd removes it also should this fail)."""
        if self.cgroup is None:
            return {}
        usage: dict = {}
        try:
            stats = self.cgroup.stats()
            if stats.oom_kills and not self.stop_reason:
                self.stop_reason = "OOMKilled"
            if stats.cpu_usec is not None:
                usage["cpuSeconds"] = round(stats.cpu_usec / 1e6, 3)
            if stats.memory_peak is not None:
                usage["peakMemoryBytes"] = stats.memory_peak
            if not self.spec["cgroup"].get("leave"):  # else gflowd removes it when no start waits on the cgroup lock
                self.cgroup.remove(timeout=5.0)
                self.cgroup_removed = True
        except Exception as exc:
            sys.stderr.write(f"supervisor: cgroup {self.cgroup.name}: {exc}\n")
        return usage

    def _finish(self, started_wall: float, exit_code: int | None, sig: int | None = None, error: str = "") -> bool:
        """The exit record, written (True), or held until the disk takes it (False)."""
        usage = self._cgroup_usage()
        if not usage.get("peakMemoryBytes") and self.max_rss:
            usage["peakMemoryBytes"] = self.max_rss  # polled: the largest tree RSS seen
        exit_record = {
            "name": self.spec.get("name"),
            "attempt": self.spec.get("attempt"),
            "exitCode": exit_code,
            "signal": sig,
            "reason": self.stop_reason if self.stop_reason in ("OOMKilled", "DeadlineExceeded") else "",
            "stopped": bool(self.stop_reason),
            "stopReason": self.stop_reason,  # why gflowd asked it to stop, should its own record be lost
            "error": error[:ERROR_CHARS],
            "startedAt": started_wall,
            "finishedAt": time.time(),
            "maxRssBytes": self.max_rss,
            "usage": usage,
            "jobPid": self.job_pid or None,
            "cgroupRemoved": self.cgroup_removed,  # gflowd then does not look for it
        }
        data = record.encode(exit_record)
        while not record.exit_fits(data):  # an error text of escaped characters: cut it further
            exit_record["error"] = exit_record["error"][: len(exit_record["error"]) // 2]
            data = record.encode(exit_record)
        try:
            self._write_exit(data)
        except OSError:
            self._close_control(exit_code)
            self._keep_exit(data)
            return False
        self._close_control(exit_code)
        self._notify("exit")
        return True

    def _close_control(self, exit_code: int | None) -> None:
        """Viewers and exec clients learn the exit code; the control socket goes."""
        if self.control is not None:
            self.control.close(exit_code)
            self.control = None

    def _write_exit(self, data: bytes) -> None:
        """Over the exit region, in place (no new blocks), fsync'd, and the folder too: the record
        file's own name may not be on disk yet."""
        if self.fd is None:
            raise OSError(errno.EBADF, "the attempt's record is not open", self.record_path)
        try:
            record.write_exit(self.fd, data)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self.record_path) from None
        _fsync_dir(os.path.dirname(self.record_path))

    def _keep_exit(self, data: bytes) -> None:
        """The disk refused the exit record: hold it, tell gflowd, retry until it is written or
        gflowd has recorded the exit itself (it then removes the record from its name, or keeps
        it as a spare under another). We stay alive, holding the attempt lock, meanwhile."""
        delay = RETRY_FIRST
        while True:
            self._notify("exit", data[record.HEADER :].decode())  # the JSON, without its length and checksum
            time.sleep(delay)
            if self.fd is None or not _still_named(self.fd, self.record_path):
                return
            try:
                self._write_exit(data)
            except OSError:
                delay = min(delay * 2, RETRY_MAX)
                continue
            self._notify("exit")
            return

    def _notify(self, what: str, detail: str = "") -> None:
        """Tell gflowd at once (a datagram); if it is down it reads the records when it returns."""
        address = self.spec.get("notify")
        if not address:
            return
        message = f"{what} {self.spec.get('name')} {self.spec.get('attempt')}" + (f" {detail}" if detail else "")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock, unix_address(address) as short:
                sock.setblocking(False)
                sock.sendto(message.encode(), short)
        except OSError:
            pass


def _become_job(spec: dict, log_fd: int, go_r: int, go_w: int, err_r: int, err_w: int, tty_fd: int | None = None) -> None:
    """In the forked child: wait for the run record, drop privileges, enter the working directory,
    exec. Never returns; a failure is reported on ``err_w`` as "CODE message", naming the step.
    A tty job (``tty_fd``, the pty's slave) gets the pty as stdin, stdout and stderr."""
    uid, gid = spec.get("uid"), spec.get("gid")
    step = "setup"
    try:
        os.close(go_w)
        os.close(err_r)
        step = "cgroup"  # first: everything this process does or starts is inside
        join_cgroup((spec.get("cgroup") or {}).get("procs") or [])
        step = "setup"
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        if tty_fd is not None:
            enter_terminal(tty_fd, uid, gid)
        else:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
        if os.read(go_r, 1) != b"x":  # wait until the run record is on disk
            os._exit(125)  # the supervisor died first, or could not record us: never run unrecorded
        if uid is not None and os.geteuid() == 0:
            step = "user"
            os.setgroups(spec.get("groups") or [])
            os.setgid(gid)
            os.setuid(uid)
        step = "environment"  # after dropping privileges: read as the job's user
        env = job_environment(spec)
        step = "workingDir"  # after dropping privileges: the job's user must be able to enter it
        os.chdir(spec["cwd"])
        step = "command"
        os.execvpe(spec["argv"][0], spec["argv"], env)
    except BaseException as exc:  # report why the job could not start, then die
        code, message = start_failure(step, spec, exc)
        try:
            os.write(err_w, f"{code} {message}".encode()[:4000])
        finally:
            os._exit(code)


def start_failure(step: str, spec: dict, exc: BaseException) -> tuple[int, str]:
    """(exit code, message) for a job that could not start: the message names the step that failed
    (workingDir, the condaEnv's conda, the command) and the user it ran as."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    missing = isinstance(exc, (FileNotFoundError, NotADirectoryError))
    who = f" (as uid {os.getuid()})"
    argv = spec.get("argv") or ["?"]
    if step == "workingDir" and spec.get("uid") is not None:
        # another user's job: one message whether the folder is missing or closed to them, so a
        # start error never says more about a path than the user could learn with ``cd``
        hidden = missing or isinstance(exc, PermissionError)
        user = spec.get("user") or f"uid {spec.get('uid')}"
        if hidden:
            return 127, f"workingDir {spec.get('cwd')}: not found or not accessible to {user}"
        return 126, f"workingDir {spec.get('cwd')}: {text} (as {user})"
    if step == "workingDir":
        return (127, f"workingDir {spec.get('cwd')} does not exist") if missing else (126, f"workingDir {spec.get('cwd')}: {text}{who}")
    if step == "command" and spec.get("condaEnv"):
        what = f"condaEnv {spec['condaEnv']}: conda ({argv[0]})"
        return (127, f"{what} not found") if missing else (126, f"{what}: {text}{who}")
    if step == "command":
        return (127, f"command not found: {argv[0]!r}") if missing else (126, f"command {argv[0]!r}: {text}{who}")
    if step == "user":
        return 126, f"cannot switch to uid {spec.get('uid')}: {text}"
    if step == "environment":
        return 126, f"the submitter's environment {spec.get('envFile')}: {text} (resubmit, or remove the manifest's annotation gflow.dev/environment)"
    if step == "cgroup":
        where = exc.filename if isinstance(exc, OSError) and exc.filename else "its cgroup"
        return 126, f"cannot join the attempt's cgroup ({where}): {text}"
    return 126, f"cannot start the job: {text}"


def job_environment(spec: dict) -> dict:
    """The job's environment: the launch record's, with the submitter's (``envFile``, written by
    ``gflowctl run``: controller/api/export.py) between the login basics and what wins over it
    (``envAbove``: spec.env, gflow's variables). Called as the job's user; the file is used only if
    it is a regular file of that user that no one else may read or write, checked on the
    descriptor read (a symlink or another user's file planted beside the manifest is refused)."""
    path = spec.get("envFile")
    if not path:
        return spec["env"]
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(errno.EPERM, f"not a file of uid {os.getuid()} with mode 0600")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    above = set(spec.get("envAbove") or ())
    env = dict(spec["env"])
    for entry in b"".join(chunks).split(b"\0"):
        key, eq, value = entry.decode("utf-8", "surrogateescape").partition("=")
        if eq and key and key not in above:
            env[key] = value
    return env


def join_cgroup(procs: list[str]) -> None:
    """In the job's forked child, before exec: move this process into the attempt's cgroup, one
    ``cgroup.procs`` per hierarchy (gflowd made them and wrote the limits first). Also what
    ``gflowctl exec`` does to run a command inside a job's limits."""
    for path in procs:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            os.close(fd)


JOB_DEFAULT_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ)
_home: dict[str, str] | None = None  # hierarchy mount point -> this process's own cgroup.procs there


def _home_cgroups(procs: list[str]) -> list[str] | None:
    """This process's own ``cgroup.procs`` in the hierarchy of each of ``procs`` (an attempt's), to
    step back out after spawning its job inside; None if one is unknown."""
    global _home
    if _home is None:
        try:
            discover = cgroups_package().discover
            with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as own:
                located = discover.locate(discover.parse_mountinfo(mountinfo.read()), discover.parse_proc_cgroup(own.read()))
        except (OSError, ImportError, ValueError):
            located = {}
        _home = {where.mount.point: os.path.join(where.path, "cgroup.procs")
                 for where in located.values() if where.path is not None and where.mount is not None}
    found = []
    for path in procs:
        point = max((point for point in _home if path.startswith(point.rstrip("/") + "/")), key=len, default=None)
        if point is None:
            return None
        if _home[point] not in found:
            found.append(_home[point])
    return found


def _find_program(name: str, env: dict) -> str:
    """``name`` as ``execvpe`` would find it on the job's own PATH; FileNotFoundError if nowhere."""
    if "/" in name:
        return name
    for folder in os.get_exec_path(env):
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


_cgroups = None


def cgroups_package():
    """``controller.act.runtime.cgroups`` (standard library only). Run as a plain file
    (``python -I -S supervisor.py``) the project is not importable: the package beside us is.
    Found once (a failed import searches every folder on the path)."""
    global _cgroups
    if _cgroups is None:
        _cgroups = _find_cgroups_package()
    return _cgroups


def _find_cgroups_package():
    try:
        from controller.act.runtime import cgroups  # lazy: only jobs with a cgroup need it
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        import cgroups  # type: ignore[no-redef]  # lazy: the package beside this file, stdlib only
    return cgroups


def attempt_cgroup(record: dict | None):
    """The attempt's cgroup as the launch record describes it (``AttemptCgroup``), or None."""
    if not record:
        return None
    package = cgroups_package()
    found = package.Probe.from_dict(record["probe"])
    return package.AttemptCgroup(package.Cgroups(found, record["group"]), record["name"], record.get("keys"))


def _waitpid(pid: int) -> int | None:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return None


def launcher(wake: int | None = None, join: str | None = None) -> int:
    """Zygote: hand each record path read from stdin to a supervisor process, a waiting one or one
    forked now (module docstring: a pool of supervisors, each one attempt at a time). ``wake``: a
    pipe to gflowd, written when a supervisor ended an attempt and lives on (no pidfd tells it).
    ``join``: the ``cgroup.procs`` of the systemd scope's supervisors leaf (``systemd_scope``),
    entered first, before anything is forked or the home cgroup is looked up: every supervisor is
    born there, out of gflowd's unit, so a stop or restart of gflowd leaves them (and jobs) alone.
    Done here and not by gflowd after spawning us: no window in which a supervisor exists outside."""
    if join is not None:
        try:
            join_cgroup([join])
        except OSError as exc:  # the jobs still run; only a stop of gflowd's unit would take them
            sys.stderr.write(f"launcher: cannot enter {join}: {exc}; supervisors stay in gflowd's cgroup\n")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped automatically
    if wake is not None:
        os.set_inheritable(wake, False)  # never into a job
    try:
        _load_libc()  # warm: every supervisor forked from here inherits it
    except OSError:
        pass
    try:
        cgroups_package()  # warm too: supervisors of jobs with a cgroup need it
        _home_cgroups([])  # and where they step back to after spawning a job inside one
    except ImportError:
        pass
    return _Pool(wake).run()


class _Pool:
    """The launcher's supervisor processes: ``tasks`` (pid -> the write end of its pipe of record
    paths), what each supervises (``serving``), those that ended an attempt cleanly and wait for
    gflowd to purge it (``done``), purges heard before that (``purged``), and those free to take
    an attempt (``idle``: pid -> since when, oldest first)."""

    def __init__(self, wake: int | None = None) -> None:
        self.wake = wake
        self.tasks: dict[int, int] = {}
        self.serving: dict[int, bytes] = {}
        self.by_path: dict[bytes, int] = {}  # the inverse of ``serving``
        self.done: set[int] = set()
        self.purged: set[bytes] = set()
        self.idle: dict[int, float] = {}
        self.said_r, self.said_w = os.pipe2(os.O_CLOEXEC)  # supervisors say "done PID" or "gone PID"

    def run(self) -> int:
        pending = said_pending = b""
        while True:
            timeout = None
            if self.idle:
                wait = IDLE_TIMEOUT if len(self.idle) <= IDLE_SUPERVISORS else BURST_TIMEOUT
                timeout = max(0.0, next(iter(self.idle.values())) + wait - time.monotonic())
            try:
                ready, _, _ = select.select([0, self.said_r], [], [], timeout)
            except InterruptedError:
                continue
            if self.said_r in ready:
                *said, said_pending = (said_pending + os.read(self.said_r, 65536)).split(b"\n")
                said = b"\n".join(said)
                self._heard(said)
                if self.wake is not None and b"done" in said:
                    try:
                        os.write(self.wake, b"d")  # gflowd reads the exit records at its next pass
                    except OSError:  # full (gflowd is awake already) or gone
                        pass
            if 0 in ready:
                data = os.read(0, 65536)
                if not data:
                    break  # gflowd closed the pipe (stopped or died): our supervisors live on
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    line = line.strip()
                    if line.startswith(PURGED):
                        self._purged(line[len(PURGED):])
                    elif line:
                        self._hand(line)
            self._retire(time.monotonic())
        for fd in self.tasks.values():  # the waiting ones end now, the busy ones after their attempt
            os.close(fd)
        return 0

    def _heard(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            what, _, pid_text = line.partition(b" ")
            if not pid_text.isdigit() or int(pid_text) not in self.tasks:
                continue
            pid = int(pid_text)
            if what == b"done":
                path = self.serving.get(pid, b"")
                if path in self.purged:
                    self.purged.discard(path)
                    self._free(pid)
                else:
                    self.done.add(pid)
            else:
                self.purged.discard(self.serving.get(pid, b""))
                self._drop(pid)

    def _purged(self, path: bytes) -> None:
        """gflowd purged the record at ``path``: its supervisor, done with it, may take another."""
        pid = self.by_path.get(path)
        if pid is None:
            return  # its supervisor ended (not reusable) or was never ours
        if pid not in self.done:
            self.purged.add(path)  # heard before its supervisor said it was done
            return
        self.done.discard(pid)
        self._free(pid)

    def _free(self, pid: int) -> None:
        self.by_path.pop(self.serving.pop(pid, b""), None)
        self.idle[pid] = time.monotonic()
        while len(self.idle) > BURST_SUPERVISORS:
            self._drop(next(iter(self.idle)))

    def _retire(self, now: float) -> None:
        """Supervisors waiting too long end (their pipe closes): beyond IDLE_SUPERVISORS after
        BURST_TIMEOUT, the rest after IDLE_TIMEOUT."""
        for pid, since in list(self.idle.items()):
            if now - since < (IDLE_TIMEOUT if len(self.idle) <= IDLE_SUPERVISORS else BURST_TIMEOUT):
                break
            self._drop(pid)

    def _drop(self, pid: int) -> None:
        self.idle.pop(pid, None)
        self.done.discard(pid)
        self.by_path.pop(self.serving.pop(pid, b""), None)
        os.close(self.tasks.pop(pid))

    def _hand(self, path: bytes) -> None:
        while self.idle:
            pid = next(reversed(self.idle))  # the most recent: its pages are the warmest
            del self.idle[pid]
            try:
                os.write(self.tasks[pid], path + b"\n")
            except OSError:  # it died meanwhile
                self._drop(pid)
                continue
            self.serving[pid], self.by_path[path] = path, pid
            return
        task_r, task_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # only what this supervisor uses: the other supervisors' pipes must close when the
                # launcher closes them (one close_range per gap, not one close per supervisor)
                last = 2
                for fd in sorted({task_r, self.said_w}):
                    os.closerange(last + 1, fd)
                    last = fd
                os.closerange(last + 1, MAX_FD)
                code = serve(task_r, self.said_w)
            except BaseException as exc:  # keep the zygote's view clean; leave a trace for humans
                try:
                    sys.stderr.write(f"supervisor {path.decode(errors='replace')}: {exc!r}\n")
                    sys.stderr.flush()
                except OSError:
                    pass
            finally:
                os._exit(code)
        os.close(task_r)
        os.write(task_w, path + b"\n")
        self.tasks[pid] = task_w
        self.serving[pid], self.by_path[path] = path, pid


def serve(task: int, said: int) -> int:
    """One supervisor process: the attempts the launcher sends on ``task``, one at a time. After an
    attempt that ended cleanly it says "done" and waits: the launcher sends it the next attempt only
    once gflowd has purged this one's record (so no stop or limits signal meant for it can reach
    the next). Else it says "gone" and ends; also when the launcher closes ``task``."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for served in range(1, REUSE_MAX + 1):
        line = os.read(task, 4096)  # the next record's path; nothing when the launcher closed the pipe
        if not line:
            return 0
        path = line.decode().strip()
        _trace_to(f"{path}.log")
        supervisor = Supervisor(path)
        try:
            supervisor.run()
        except Exception as exc:  # leave a trace for humans; this process ends (a fresh one takes over)
            supervisor.reusable = False
            sys.stderr.write(f"supervisor {path}: {exc!r}\n")
        supervisor.close()
        if not supervisor.reusable or served == REUSE_MAX:
            break
        os.write(said, b"done %d\n" % os.getpid())
    os.write(said, b"gone %d\n" % os.getpid())
    return 0


class _LazyTrace:
    """A supervisor's stderr: its trace file is created at the first write, so an attempt with
    nothing to say creates none (creating a file costs up to a millisecond on a busy ext4)."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None

    def write(self, text: str) -> int:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)  # 0600: it may quote the job's command
            except OSError:  # e.g. a full disk: a trace for humans is not worth not supervising the job
                return len(text)
            os.dup2(self.fd, 2)  # what the interpreter itself writes there lands beside it
        os.write(self.fd, text.encode(errors="replace"))
        return len(text)

    def flush(self) -> None:
        pass


def _trace_to(path: str) -> None:
    previous = sys.stderr
    if isinstance(previous, _LazyTrace) and previous.fd is not None:  # the last attempt's
        os.close(previous.fd)
        previous.fd = None
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(devnull, target)
    os.close(devnull)
    sys.stdout = sys.stderr = _LazyTrace(path)  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--launcher"]:
        return launcher(int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else None, argv[2] if len(argv) > 2 else None)
    if len(argv) != 1:
        sys.stderr.write("usage: supervisor.py RECORD_FILE | --launcher [WAKE_FD [SCOPE_CGROUP_PROCS]]\n")
        return 2
    os.setsid() if os.getpid() != os.getsid(0) else None
    return Supervisor(argv[0]).run()


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            sys.exit(0)
        raise
