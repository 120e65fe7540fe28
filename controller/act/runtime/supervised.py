"""The crash-safe runtime: one supervisor process per attempt (``supervisor.py``), outliving gflowd.

gflowd's side of the protocol. Starting an attempt writes its launch file (atomically: the decision
to start is on disk before anything runs), then hands the path to the launcher zygote. Everything
after that is read back from the attempt's records, so a restarted gflowd knows exactly what
happened while it was away:

    exit record                        -> the attempt ended (code, signal, reason)
    run record, supervisor alive       -> running (re-adopted; identity = pid AND start time)
    run record, supervisor gone        -> Lost: it began, and nobody saw it end
    launch file only, no supervisor    -> it never began: started now (same attempt)

Supervisors notify a datagram socket (``run/notify.sock``) on start and exit, and each one's
pidfd is watched as well, so an exit reaches the loop at once without polling.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controller.act.runtime.command import LaunchError, build_process
from controller.act.runtime.supervisor import descendants, start_ticks
from controller.model.plan import Launch, RunObservation
from controller.paths import Home
from controller.util.fsutil import atomic_write, lock_held

log = logging.getLogger("gflowd.runtime")
SUPERVISOR_FILE = str(Path(__file__).with_name("supervisor.py"))
MASTER_PORT_BASE = 29500
NEVER_BEGAN_AFTER = 5.0  # a launch handed to a live launcher gets this long to take its lock


@dataclass
class _Attempt:
    name: str
    attempt: int
    dir: Path
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

    def path(self, kind: str) -> Path:
        suffix = "lock" if kind == "attempt" else "json"
        return self.dir / f"{kind}-{self.attempt}.{suffix}"


class SupervisorRuntime:
    def __init__(self, home: Home, base_env: dict[str, str] | None = None, python: str | None = None):
        self.home = home
        self.base_env = dict(base_env if base_env is not None else os.environ)
        self.python = python or sys.executable
        self.jobs_dir = home.run_dir / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.attempts: dict[str, _Attempt] = {}
        self._forgotten: list[tuple[str, _Attempt]] = []  # ended, recorded by the next status write
        self._epoll = select.epoll()
        self.notify_path = str(home.run_dir / "notify.sock")
        self._sock = self._bind_notify()
        self._launcher: subprocess.Popen | None = None
        self._ensure_launcher()  # now, not at the first start: an interpreter start costs ~50 ms

    # -- the Protocol --------------------------------------------------------------------------

    def start(self, launch: Launch) -> None:
        current = self.attempts.get(launch.name)
        if current is not None and current.attempt == launch.attempt and current.result is None:
            return  # idempotent
        job_dir = self.jobs_dir / launch.name
        job_dir.mkdir(exist_ok=True)
        attempt = _Attempt(launch.name, launch.attempt, job_dir, time.monotonic())
        attempt.master_port = self._free_port()
        attempt.time_limit = launch.job.spec.time_limit
        attempt.devices, attempt.device_uuids = tuple(launch.devices), tuple(launch.device_uuids)
        attempt.run_hash = launch.job.run_hash
        self.attempts[launch.name] = attempt
        if current is not None and current.result is not None:
            self._remove_files(current)
        try:
            spec = self._launch_spec(launch, attempt)
        except LaunchError as exc:
            now = time.time()
            attempt.result = RunObservation(launch.name, launch.attempt, None, now, False, 127, None, now, str(exc))
            return
        self._rotate_log(launch.name, launch.attempt)
        # The decision, on disk (atomically) before anything runs. Not fsync'd: it must survive
        # gflowd crashing, which the page cache does; a machine crash takes the job with it, and
        # the status (fsync'd, written as Running in this same pass) then says Lost.
        atomic_write(attempt.path("launch"), json.dumps(spec), mode=0o600, durable=False)
        self._submit(attempt)

    def stop(self, name: str, grace: float, reason: str = "Stopped") -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is not None or attempt.stop_sent:
            return
        atomic_write(attempt.path("stop"), json.dumps({"reason": reason, "grace": grace}), durable=False)
        if self._signal_supervisor(attempt, signal.SIGTERM):
            attempt.stop_sent = True

    def set_time_limit(self, name: str, seconds: float | None) -> None:
        """An edited ``timeLimit`` reaches the running attempt's supervisor."""
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is not None or attempt.time_limit == seconds:
            return
        atomic_write(attempt.path("limits"), json.dumps({"timeLimit": seconds}), durable=False)
        if self._signal_supervisor(attempt, signal.SIGHUP):
            attempt.time_limit = seconds

    def observe(self) -> dict[str, RunObservation]:
        self._drain()
        out = {}
        for name, attempt in self.attempts.items():
            if attempt.result is None:
                self._refresh(attempt)
            out[name] = attempt.result or RunObservation(
                name, attempt.attempt, attempt.job_pid, attempt.started_at or time.time(), True,
                devices=attempt.devices, device_uuids=attempt.device_uuids, run_hash=attempt.run_hash,
            )
        return out

    def forget(self, name: str) -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is None:
            return
        del self.attempts[name]
        self._forgotten.append((name, attempt))

    def purge(self) -> None:
        forgotten, self._forgotten = self._forgotten, []
        for name, attempt in forgotten:
            self._remove_files(attempt)
            if name in self.attempts:
                continue  # a new attempt runs from the same folder
            try:
                (attempt.dir / "supervisor.log").unlink()
                attempt.dir.rmdir()
            except OSError:
                pass

    def tick(self, now: float) -> float | None:
        # KILL after grace is the supervisor's job; only launches that never took hold need us
        due = None
        mono = time.monotonic()
        for attempt in self.attempts.values():
            if attempt.result is None and attempt.supervisor_pid is None and attempt.submitted:
                when = attempt.submitted + NEVER_BEGAN_AFTER
                due = now + max(0.0, when - mono) if due is None else min(due, now + max(0.0, when - mono))
        return due

    def job_pids(self) -> dict[str, set[int]]:
        """Each running job's process tree (its supervisor included)."""
        out: dict[str, set[int]] = {}
        for name, attempt in self.attempts.items():
            if attempt.result is None and attempt.supervisor_pid:
                out[name] = {attempt.supervisor_pid, *descendants(attempt.supervisor_pid)}
        return out

    def wait_fds(self) -> list[int]:
        return [self._epoll.fileno(), self._sock.fileno()]

    def needs_polling(self) -> bool:
        return False

    def close(self) -> None:
        """gflowd is stopping: the launcher exits, supervisors and jobs keep running."""
        if self._launcher is not None and self._launcher.stdin is not None:
            try:
                self._launcher.stdin.close()
            except OSError:
                pass
            try:
                self._launcher.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._launcher.kill()
        self._sock.close()

    # -- adoption ------------------------------------------------------------------------------------

    def adopt(self) -> list[str]:
        """Rebuild what is known from ``run/jobs``; restart attempts that never began."""
        adopted = []
        for job_dir in sorted(self.jobs_dir.iterdir() if self.jobs_dir.is_dir() else []):
            launches = sorted(job_dir.glob("launch-*.json"), key=lambda p: int(p.stem.split("-")[1]))
            if not launches:
                continue
            latest = launches[-1]
            for stale in launches[:-1]:
                self._remove_files(_Attempt(job_dir.name, int(stale.stem.split("-")[1]), job_dir, 0.0))
            number = int(latest.stem.split("-")[1])
            attempt = _Attempt(job_dir.name, number, job_dir, 0.0)
            spec = _read_json(latest) or {}
            attempt.master_port = int(spec.get("env", {}).get("MASTER_PORT", 0) or 0)
            attempt.time_limit = spec.get("timeLimit")
            attempt.devices = tuple(spec.get("devices") or ())
            attempt.device_uuids = tuple(spec.get("deviceUUIDs") or ())
            attempt.run_hash = str(spec.get("runHash") or "")
            self.attempts[attempt.name] = attempt
            self._refresh(attempt, adopting=True)
            if attempt.result is None and attempt.supervisor_pid is None and not self._alive(attempt):
                log.info("job/%s attempt %d was decided but never began: starting it now", attempt.name, number)
                attempt.submitted = time.monotonic()
                self._submit(attempt)
            adopted.append(attempt.name)
        return adopted

    # -- internals ---------------------------------------------------------------------------------------

    def _launch_spec(self, launch: Launch, attempt: _Attempt) -> dict:
        env = dict(self.base_env)
        uid = gid = None
        groups: list[int] = []
        owner = launch.job.owner_uid
        if os.geteuid() == 0 and owner not in (-1, 0):
            try:
                entry = pwd.getpwuid(owner)
            except KeyError:
                raise LaunchError(f"the manifest's owner (uid {owner}) has no account on this machine") from None
            uid, gid = entry.pw_uid, entry.pw_gid
            groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
            env.update({"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name})
        script_path = attempt.dir / f"script-{attempt.attempt}.sh"
        process = build_process(launch, env, script_path, attempt.master_port)
        if process.script is not None:
            atomic_write(script_path, process.script, mode=0o755, durable=False)
            if uid is not None:
                os.chown(script_path, uid, gid)
        spec = launch.job.spec
        return {
            "name": launch.name,
            "attempt": launch.attempt,
            "generation": launch.generation,
            "argv": process.argv,
            "env": process.env,
            "cwd": process.cwd,
            "log": str(self.home.log_file(launch.name)),
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "timeLimit": spec.time_limit,
            "memoryLimit": spec.resources.memory,
            "grace": spec.termination_grace_period if spec.termination_grace_period is not None else 10.0,
            "notify": self.notify_path,
            "decidedAt": time.time(),
            "runHash": launch.job.run_hash,
            "devices": list(launch.devices),
            "deviceUUIDs": list(launch.device_uuids),
        }

    def _submit(self, attempt: _Attempt) -> None:
        launcher = self._ensure_launcher()
        try:
            assert launcher.stdin is not None
            launcher.stdin.write(f"{attempt.path('launch')}\n".encode())
            launcher.stdin.flush()
        except (OSError, ValueError):
            log.warning("supervisor launcher died; starting a new one")
            self._launcher = None
            launcher = self._ensure_launcher()
            assert launcher.stdin is not None
            launcher.stdin.write(f"{attempt.path('launch')}\n".encode())
            launcher.stdin.flush()

    def _ensure_launcher(self) -> subprocess.Popen:
        if self._launcher is None or self._launcher.poll() is not None:
            # -I -S: the supervisor needs only the standard library; isolated from the user's env
            self._launcher = subprocess.Popen(
                [self.python, "-I", "-S", SUPERVISOR_FILE, "--launcher"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
            )
        return self._launcher

    def _refresh(self, attempt: _Attempt, adopting: bool = False) -> None:
        """Re-read this attempt's records and decide what they mean."""
        exit_record = _read_json(attempt.path("exit"))
        if exit_record is not None:
            attempt.result = _observation(attempt, exit_record)
            self._unwatch(attempt)
            return
        if attempt.supervisor_pid is None:
            run_record = _read_json(attempt.path("run"))
            if run_record is not None:
                attempt.supervisor_pid = run_record.get("supervisorPid")
                attempt.supervisor_ticks = run_record.get("supervisorStartTicks")
                attempt.job_pid = run_record.get("jobPid")
                attempt.started_at = float(run_record.get("startedAt") or time.time())
                if self._identity_ok(attempt):
                    self._watch(attempt)
        if attempt.supervisor_pid is not None:
            if not self._identity_ok(attempt) or not self._alive(attempt):
                # gone; look once more for an exit record written just before it went
                exit_record = _read_json(attempt.path("exit"))
                attempt.result = (
                    _observation(attempt, exit_record) if exit_record is not None else RunObservation(
                        attempt.name, attempt.attempt, attempt.job_pid, attempt.started_at, False, None, None,
                        time.time(), "its supervisor vanished without an exit record; exit code unknown", lost=True,
                        devices=attempt.devices, device_uuids=attempt.device_uuids, run_hash=attempt.run_hash,
                    )
                )
                self._unwatch(attempt)
            return
        # launch file only
        if attempt.submitted and time.monotonic() - attempt.submitted > NEVER_BEGAN_AFTER and not self._alive(attempt):
            log.warning("job/%s attempt %d: no supervisor took the launch; handing it over again", attempt.name, attempt.attempt)
            attempt.submitted = time.monotonic()
            self._submit(attempt)

    def _identity_ok(self, attempt: _Attempt) -> bool:
        pid = attempt.supervisor_pid
        return pid is not None and attempt.supervisor_ticks is not None and start_ticks(pid) == attempt.supervisor_ticks

    def _alive(self, attempt: _Attempt) -> bool:
        """A supervisor holds the attempt's lock for its whole life: a free lock means none is alive."""
        return lock_held(attempt.path("attempt"))

    def _signal_supervisor(self, attempt: _Attempt, sig: int) -> bool:
        if attempt.supervisor_pid is None:
            self._refresh(attempt)
        if attempt.supervisor_pid is None or not self._identity_ok(attempt):
            return False  # never signal a bare pid
        try:
            os.kill(attempt.supervisor_pid, sig)
            return True
        except ProcessLookupError:
            return False

    def _watch(self, attempt: _Attempt) -> None:
        if attempt.pidfd is not None or attempt.supervisor_pid is None:
            return
        try:
            attempt.pidfd = os.pidfd_open(attempt.supervisor_pid)
        except (OSError, AttributeError):
            return
        if not self._identity_ok(attempt):  # the pid was reused between the check and the open
            os.close(attempt.pidfd)
            attempt.pidfd = None
            return
        self._epoll.register(attempt.pidfd, select.EPOLLIN)

    def _unwatch(self, attempt: _Attempt) -> None:
        if attempt.pidfd is not None:
            try:
                self._epoll.unregister(attempt.pidfd)
            except OSError:
                pass
            os.close(attempt.pidfd)
            attempt.pidfd = None

    def _drain(self) -> None:
        while True:
            try:
                self._sock.recv(512)
            except (BlockingIOError, OSError):
                break
        # pidfd readiness is consumed by unwatching in _refresh; nothing to read from epoll itself
        self._epoll.poll(0)

    def _bind_notify(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            os.unlink(self.notify_path)
        except FileNotFoundError:
            pass
        sock.bind(self.notify_path)
        os.chmod(self.notify_path, 0o600)
        sock.setblocking(False)
        return sock

    def _remove_files(self, attempt: _Attempt) -> None:
        for kind in ("launch", "run", "exit", "stop", "limits", "attempt"):
            try:
                attempt.path(kind).unlink()
            except FileNotFoundError:
                pass
        try:
            (attempt.dir / f"script-{attempt.attempt}.sh").unlink()
        except FileNotFoundError:
            pass

    def _rotate_log(self, name: str, attempt: int) -> None:
        current = self.home.log_file(name)
        if attempt > 1 and current.exists():
            os.replace(current, self.home.log_file(name, attempt - 1))

    def _free_port(self) -> int:
        used = {a.master_port for a in self.attempts.values() if a.result is None}
        port = MASTER_PORT_BASE
        while port in used or not _port_free(port):
            port += 1
        return port


def _observation(attempt: _Attempt, record: dict) -> RunObservation:
    started = float(record.get("startedAt") or attempt.started_at or time.time())
    return RunObservation(
        attempt.name,
        attempt.attempt,
        record.get("jobPid") or attempt.job_pid,
        started,
        False,
        record.get("exitCode"),
        record.get("signal"),
        float(record.get("finishedAt") or time.time()),
        record.get("error") or "",
        reason=record.get("reason") or "",
        stop_reason=record.get("stopReason") or "",
        devices=attempt.devices,
        device_uuids=attempt.device_uuids,
        run_hash=attempt.run_hash,
    )


def _read_json(path: Path) -> dict | None:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True

