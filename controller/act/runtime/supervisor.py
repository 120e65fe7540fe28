#!/usr/bin/env python3
"""The per-job supervisor (like containerd-shim or conmon): one small process per attempt.

Standard library only, and runnable as a plain file (``python -I -S supervisor.py``), so it starts
without the project's dependencies. It outlives gflowd: gflowd may stop, crash or restart while
jobs run, and the supervisor still enforces limits and writes the exit record.

One attempt, in files under ``run/jobs/<name>/`` (gflowd writes the first two, we write the rest):

    launch-<N>.json   what to run; written (atomically) before the start: the decision record
    stop-<N>.json     a stop request: {"reason", "grace"}; gflowd then sends us SIGTERM
    limits-<N>.json   edited limits ({"timeLimit"}); gflowd then sends us SIGHUP
    attempt-<N>.lock  flock held for our whole life: "a supervisor for this attempt is alive"
    run-<N>.json      supervisor and job pid + kernel start time; written before the job execs
    exit-<N>.json     exit code or signal, reason, times; fsync'd before we exit

Sequence: lock -> fork the job (it waits on a pipe) -> run record -> let it exec -> watch it:
SIGCHLD, stop requests, the time limit (monotonic clock) and the memory limit (RSS of the whole
tree, polled every 100 ms). We are a child subreaper, so a grandchild that calls ``setsid`` still
ends up ours and dies with the job: the attempt ends when the whole tree is gone.

``--launcher`` mode is a zygote: started once by gflowd, it reads launch-file paths on stdin and
forks a supervisor for each (about 2 ms instead of a 35 ms interpreter start). It exits when gflowd
closes the pipe; the supervisors it forked live on.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import socket
import sys
import time
import warnings  # noqa: F401  os.execvpe imports it lazily; after setuid the stdlib may be unreadable

PR_SET_CHILD_SUBREAPER = 36
MEMORY_POLL = 0.1
LEFTOVER_GRACE = 2.0  # after the job's main process ends, how long its stray children get


def _write_atomic(path: str, data: dict, durable: bool = True) -> None:
    """Temp file, (fsync), rename, (fsync the folder). A reader never sees half a record."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(data).encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_json(path: str) -> dict | None:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks: with the pid, a process's identity."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
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
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                kids.extend(int(x) for x in handle.read().split())
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
            with open(f"/proc/{pid}/statm", "rb") as handle:
                total += int(handle.read().split()[1]) * _PAGE
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
    def __init__(self, launch_path: str):
        self.launch_path = launch_path
        self.spec = _read_json(launch_path) or {}
        self.dir = os.path.dirname(launch_path)
        attempt = self.spec.get("attempt", 1)
        self.paths = {
            kind: os.path.join(self.dir, f"{kind}-{attempt}.{'lock' if kind == 'attempt' else 'json'}")
            for kind in ("attempt", "run", "exit", "stop", "limits")
        }
        self.job_pid = 0
        self.job_status: int | None = None
        self.stop_reason = ""
        self.kill_at: float | None = None
        self.max_rss = 0
        self.killed_hard = False

    # -- life ---------------------------------------------------------------------------------------

    def run(self) -> int:
        if not self.spec:
            return 2
        lock_fd = os.open(self.paths["attempt"], os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another supervisor owns this attempt
        if os.path.exists(self.paths["exit"]) or os.path.exists(self.paths["run"]):
            return 0  # this attempt already began: never run it twice
        _set_subreaper()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        started_wall = time.time()
        started_mono = time.monotonic()
        error = self._spawn()
        if error:
            self._finish(started_wall, exit_code=127 if "No such file" in error or "not found" in error else 126, error=error)
            return 0
        self._notify("start")
        self._watch(wake_r, started_mono)
        code = os.waitstatus_to_exitcode(self.job_status) if self.job_status is not None else None
        sig = -code if code is not None and code < 0 else None
        exit_code = 128 + sig if sig else code
        self._finish(started_wall, exit_code=exit_code, sig=sig)
        return 0

    def _spawn(self) -> str:
        """Fork the job, record it, then let it exec. Returns an error text if exec failed."""
        spec = self.spec
        log_flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if spec.get("logAppend") else os.O_TRUNC)
        log_fd = os.open(spec["log"], log_flags, 0o640)
        uid, gid = spec.get("uid"), spec.get("gid")
        if uid is not None and os.geteuid() == 0:
            os.fchown(log_fd, uid, gid if gid is not None else -1)
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # the job
            try:
                os.close(go_w)
                os.close(err_r)
                os.setpgid(0, 0)
                for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
                    signal.signal(sig, signal.SIG_DFL)
                signal.set_wakeup_fd(-1)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                if os.read(go_r, 1) != b"x":  # wait until the run record is on disk
                    os._exit(125)  # the supervisor died first: never run unrecorded
                if uid is not None and os.geteuid() == 0:
                    os.setgroups(spec.get("groups") or [])
                    os.setgid(gid)
                    os.setuid(uid)
                os.chdir(spec["cwd"])
                os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
            except BaseException as exc:  # report why the job could not start, then die
                text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                what = spec["argv"][0] if spec.get("argv") else "?"
                if isinstance(exc, FileNotFoundError) and not os.path.isdir(spec.get("cwd", "/")):
                    message = f"workingDir {spec.get('cwd')} does not exist"
                elif isinstance(exc, FileNotFoundError):
                    message = f"command not found: {what!r}"
                else:
                    message = f"cannot start {what!r}: {text}"
                try:
                    os.write(err_w, message.encode()[:4000])
                finally:
                    os._exit(127)
        os.close(go_r)
        os.close(err_w)
        os.close(log_fd)
        self.job_pid = pid
        _write_atomic(
            self.paths["run"],
            {
                "name": spec.get("name"),
                "attempt": spec.get("attempt"),
                "supervisorPid": os.getpid(),
                "supervisorStartTicks": start_ticks(os.getpid()),
                "jobPid": pid,
                "jobStartTicks": start_ticks(pid),
                "startedAt": time.time(),
            },
            # atomic but not fsync'd: it must survive gflowd crashing (the page cache does), not the
            # machine crashing (which kills the job too); this keeps ~1 ms off every start
            durable=False,
        )
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
            _, status = os.waitpid(pid, 0)
            self.job_status = status
            return b"".join(chunks).decode(errors="replace")
        return ""

    def _watch(self, wake_r: int, started_mono: float) -> None:
        spec = self.spec
        time_limit = spec.get("timeLimit")
        memory_limit = spec.get("memoryLimit")
        grace = float(spec.get("grace", 10.0))
        while True:
            self._reap()
            now = time.monotonic()
            tree = descendants(os.getpid())
            if self.job_status is not None and not tree:
                return  # the job and every process it left behind are gone
            if memory_limit and tree and not self.killed_hard:
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
            try:
                ready, _, _ = select.select([wake_r], [], [], timeout)
            except InterruptedError:
                ready = [wake_r]
            if ready:
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

    def _finish(self, started_wall: float, exit_code: int | None, sig: int | None = None, error: str = "") -> None:
        record = {
            "name": self.spec.get("name"),
            "attempt": self.spec.get("attempt"),
            "exitCode": exit_code,
            "signal": sig,
            "reason": self.stop_reason if self.stop_reason in ("OOMKilled", "DeadlineExceeded") else "",
            "stopped": bool(self.stop_reason),
            "stopReason": self.stop_reason,  # why gflowd asked it to stop, should its own record be lost
            "error": error,
            "startedAt": started_wall,
            "finishedAt": time.time(),
            "maxRssBytes": self.max_rss,
            "jobPid": self.job_pid or None,
        }
        _write_atomic(self.paths["exit"], record)
        self._notify("exit")

    def _notify(self, what: str) -> None:
        """Tell gflowd at once (a datagram); if it is down it reads the records when it returns."""
        address = self.spec.get("notify")
        if not address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                sock.sendto(f"{what} {self.spec.get('name')} {self.spec.get('attempt')}".encode(), address)
        except OSError:
            pass


def launcher() -> int:
    """Zygote: fork one supervisor per launch-file path read from stdin."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped automatically
    try:
        _load_libc()  # warm: every supervisor forked from here inherits it
    except OSError:
        pass
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0  # gflowd closed the pipe (stopped or died): our supervisors live on
        path = line.decode().strip()
        if not path:
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _redirect_output(os.path.join(os.path.dirname(path), "supervisor.log"))
                code = Supervisor(path).run()
            except BaseException as exc:  # keep the zygote's view clean; leave a trace for humans
                try:
                    os.write(2, f"supervisor {path}: {exc!r}\n".encode())
                except OSError:
                    pass
            finally:
                os._exit(code)


def _redirect_output(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(devnull)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--launcher"]:
        return launcher()
    if len(argv) != 1:
        sys.stderr.write("usage: supervisor.py LAUNCH_FILE | --launcher\n")
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
