"""The launcher: the zygote gflowd starts once (``shim/main.py --launcher``), and the pool of
supervisor processes it forks. Standard library only.

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

import gc
import os
import select
import signal
import sys
import time

try:  # in the project; run as a plain file (shim/main.py), the modules beside this one
    from controller.act.runtime.shim.child import cgroups_package, home_cgroups, join_cgroup
    from controller.act.runtime.shim.supervisor import Supervisor, load_libc
except ImportError:
    from child import cgroups_package, home_cgroups, join_cgroup  # type: ignore[no-redef]
    from supervisor import Supervisor, load_libc  # type: ignore[no-redef]

REUSE_MAX = 500  # attempts one supervisor process supervises before it ends (bounds any leak)
IDLE_SUPERVISORS = 8  # supervisor processes kept waiting for an attempt for IDLE_TIMEOUT seconds,
IDLE_TIMEOUT = 30.0
BURST_SUPERVISORS, BURST_TIMEOUT = 1024, 2.0  # and, in a burst, up to this many for this long
PURGED = b"purged "  # a line from gflowd: the record at the path that follows was purged
MAX_FD = 1 << 20  # above any descriptor a launcher holds


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
        load_libc()  # warm: every supervisor forked from here inherits it
    except OSError:
        pass
    try:
        cgroups_package()  # warm too: supervisors of jobs with a cgroup need it
        home_cgroups([])  # and where they step back to after spawning a job inside one
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
                *lines, said_pending = (said_pending + os.read(self.said_r, 65536)).split(b"\n")
                said = b"\n".join(lines)
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
                        self._purged(line[len(PURGED) :])
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
        # everything the zygote holds out of the child's collections: a full collection in a
        # supervisor wrote into every object's header, copying each page of the zygote it touched
        gc.freeze()
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
        gc.unfreeze()  # the zygote's own collections go on: garbage frozen at a fork is not kept for good
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
                self.fd = os.open(
                    self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
                )  # 0600: it may quote the job's command
            except OSError:  # e.g. a full disk: a trace for humans is not worth not supervising the job
                return len(text)
            os.dup2(self.fd, 2)  # what the interpreter itself writes there lands beside it
        os.write(self.fd, text.encode(errors="replace"))
        return len(text)

    def flush(self) -> None:
        pass


def _trace_to(path: str) -> None:
    previous = sys.stderr
    if not isinstance(previous, _LazyTrace):  # this process's first attempt
        _to_devnull((0, 1, 2))
    elif previous.fd is not None:  # the last attempt's trace, dup'd onto 2; 0 and 1 stayed /dev/null
        os.close(previous.fd)
        previous.fd = None
        _to_devnull((2,))
    sys.stdout = sys.stderr = _LazyTrace(path)


def _to_devnull(targets: tuple[int, ...]) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in targets:
        os.dup2(devnull, target)
    os.close(devnull)
