"""The minimal local runtime: job processes are direct children of gflowd.

Each attempt runs in its own session and process group (so a stop reaches the whole group, and
stopping gflowd does not stop the job), with stdout+stderr appended to ``logs/<name>.log``. A run
record under ``run/`` (pid + kernel start time) lets a restarted gflowd recognise a survivor; as
it is no longer gflowd's child, its exit code is unknown and it ends ``Failed/Lost``. The
crash-safe supervisor (runtime issue) removes that limit behind the same Protocol.
"""

from __future__ import annotations

import json
import select
import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from controller.fsutil import atomic_write
from controller.paths import Home
from controller.reconcile import Launch, RunObservation
from controller.runtime.command import LaunchError, build_process

log = logging.getLogger("gflowd.runtime")
MASTER_PORT_BASE = 29500


def proc_start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot): with the pid, a process's identity."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: fields resume after the last ')'
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def proc_children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


@dataclass
class _Attempt:
    name: str
    attempt: int
    pid: int | None
    started_at: float
    process: subprocess.Popen | None = None  # None for an adopted survivor
    pidfd: int | None = None
    master_port: int = 0
    start_ticks: int | None = None
    kill_at: float | None = None
    result: RunObservation | None = None


class LocalRuntime:
    def __init__(self, home: Home, base_env: dict[str, str] | None = None):
        self.home = home
        self.base_env = dict(base_env if base_env is not None else os.environ)
        self.attempts: dict[str, _Attempt] = {}
        self.scripts_dir = home.run_dir / "scripts"
        self.records_dir = home.run_dir / "local"
        self.scripts_dir.mkdir(parents=True, exist_ok=True)
        self.records_dir.mkdir(parents=True, exist_ok=True)
        # one pollable fd for the daemon: readable when any watched job process has ended
        self._epoll = select.epoll()

    # -- the Protocol --------------------------------------------------------------------------

    def start(self, launch: Launch) -> None:
        if launch.name in self.attempts and self.attempts[launch.name].result is None:
            return  # idempotent: this attempt is already running
        now = time.time()
        port = self._free_port()
        script_path = self.scripts_dir / f"{launch.name}.sh"
        attempt = _Attempt(launch.name, launch.attempt, None, now, master_port=port)
        self.attempts[launch.name] = attempt
        try:
            proc_spec = build_process(launch, self.base_env, script_path, port)
            if proc_spec.script is not None:
                atomic_write(script_path, proc_spec.script, mode=0o700, durable=False)
            log_file = self._open_log(launch.name, launch.attempt)
            try:
                process = subprocess.Popen(
                    proc_spec.argv,
                    cwd=proc_spec.cwd,
                    env=proc_spec.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            finally:
                os.close(log_file)
        except LaunchError as exc:
            attempt.result = RunObservation(launch.name, launch.attempt, None, now, False, 127, None, now, str(exc))
            return
        except OSError as exc:
            message = f"cannot start {launch.job.spec.command[0] if launch.job.spec.command else 'bash'}: {exc.strerror or exc}"
            attempt.result = RunObservation(launch.name, launch.attempt, None, now, False, 126, None, time.time(), message)
            return
        attempt.process = process
        attempt.pid = process.pid
        attempt.start_ticks = proc_start_ticks(process.pid)
        self._watch(attempt)
        self._write_record(attempt)

    def stop(self, name: str, grace: float) -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is not None or attempt.pid is None:
            return
        if attempt.kill_at is None:
            attempt.kill_at = time.monotonic() + grace
            self._signal_group(attempt, signal.SIGTERM)

    def observe(self) -> dict[str, RunObservation]:
        self._reap()
        out = {}
        for name, attempt in self.attempts.items():
            out[name] = attempt.result or RunObservation(name, attempt.attempt, attempt.pid, attempt.started_at, True)
        return out

    def forget(self, name: str) -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is None:
            return
        del self.attempts[name]
        try:
            (self.records_dir / f"{name}.json").unlink()
        except FileNotFoundError:
            pass

    def tick(self, now: float) -> float | None:
        """KILL groups whose grace ran out. Returns the next KILL time on the wall clock."""
        mono = time.monotonic()
        due = None
        for attempt in self.attempts.values():
            if attempt.kill_at is None or attempt.result is not None:
                continue
            if mono >= attempt.kill_at:
                self._signal_group(attempt, signal.SIGKILL)
                attempt.kill_at = mono + 3600  # once
            else:
                when = now + (attempt.kill_at - mono)
                due = when if due is None else min(due, when)
        return due

    def managed_pids(self) -> set[int]:
        roots = {a.pid for a in self.attempts.values() if a.pid is not None and a.result is None}
        if not roots:
            return set()
        children = proc_children_map()
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            stack.extend(children.get(pid, ()))
        return seen

    def wait_fds(self) -> list[int]:
        return [self._epoll.fileno()]

    def needs_polling(self) -> bool:
        """True when some running process cannot be watched by pidfd (old kernels)."""
        return any(a.result is None and a.pid is not None and a.pidfd is None for a in self.attempts.values())

    # -- adoption after a restart ----------------------------------------------------------------

    def adopt(self) -> list[str]:
        """Re-attach to survivors recorded under ``run/local``. Returns the names adopted."""
        adopted = []
        for path in self.records_dir.glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            name, pid = record.get("name"), record.get("pid")
            if not isinstance(name, str) or not isinstance(pid, int):
                continue
            attempt = _Attempt(name, int(record.get("attempt", 1)), pid, float(record.get("startedAt", 0)))
            attempt.master_port = int(record.get("masterPort", 0))
            attempt.start_ticks = record.get("startTicks")
            if attempt.start_ticks is not None and proc_start_ticks(pid) == attempt.start_ticks:
                self._watch(attempt)
                adopted.append(name)
            else:
                attempt.result = self._lost(attempt)
            self.attempts[name] = attempt
        return adopted

    # -- internals ---------------------------------------------------------------------------------

    def _lost(self, attempt: _Attempt) -> RunObservation:
        return RunObservation(
            attempt.name, attempt.attempt, attempt.pid, attempt.started_at, False, None, None, time.time(),
            "the process ended while gflowd was not its parent; exit code unknown", lost=True,
        )

    def _reap(self) -> None:
        for attempt in self.attempts.values():
            if attempt.result is not None:
                continue
            if attempt.process is not None:
                code = attempt.process.poll()
                if code is None:
                    continue
                sig = -code if code < 0 else None
                exit_code = 128 + sig if sig else code
                attempt.result = RunObservation(
                    attempt.name, attempt.attempt, attempt.pid, attempt.started_at, False, exit_code, sig, time.time()
                )
            elif attempt.pid is not None and proc_start_ticks(attempt.pid) != attempt.start_ticks:
                attempt.result = self._lost(attempt)
            else:
                continue
            if attempt.pidfd is not None:
                self._epoll.unregister(attempt.pidfd)  # before close: the number may be reused
                os.close(attempt.pidfd)
                attempt.pidfd = None
            # the leader is gone: make sure nothing of its group outlives a stop
            if attempt.kill_at is not None:
                self._signal_group(attempt, signal.SIGKILL)

    def _watch(self, attempt: _Attempt) -> None:
        if attempt.pid is None:
            return
        attempt.pidfd = _pidfd(attempt.pid)
        if attempt.pidfd is not None:
            self._epoll.register(attempt.pidfd, select.EPOLLIN)

    def _signal_group(self, attempt: _Attempt, sig: int) -> None:
        if attempt.pid is None:
            return
        try:
            os.killpg(attempt.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _open_log(self, name: str, attempt: int) -> int:
        current = self.home.log_file(name)
        if attempt > 1 and current.exists():
            os.replace(current, self.home.log_file(name, attempt - 1))
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        return os.open(current, flags, 0o640)

    def _free_port(self) -> int:
        used = {a.master_port for a in self.attempts.values() if a.result is None}
        port = MASTER_PORT_BASE
        while True:
            if port not in used and _port_free(port):
                return port
            port += 1

    def _write_record(self, attempt: _Attempt) -> None:
        record = {
            "name": attempt.name,
            "attempt": attempt.attempt,
            "pid": attempt.pid,
            "startTicks": attempt.start_ticks,
            "startedAt": attempt.started_at,
            "masterPort": attempt.master_port,
        }
        atomic_write(self.records_dir / f"{attempt.name}.json", json.dumps(record), mode=0o644)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
