"""The crash-safe runtime: one supervisor process per attempt (``supervisor.py``), outliving gflowd.

gflowd's side of the protocol. Starting an attempt creates its record, ``run/attempts/<name>.<N>``
(``record.py``), with the launch record in it (the decision to start is on disk before anything
runs; a record whose launch region does not read was never handed over, and is removed), then
hands the path to the launcher zygote. Everything after that is read back from the record, so a
restarted gflowd knows exactly what happened while it was away:

    exit record                        -> the attempt ended (code, signal, reason)
    run record, supervisor alive       -> running (re-adopted; identity = pid AND start time)
    run record, supervisor gone        -> its job's processes are found and stopped (TERM, KILL
                                          after the grace period; ``orphans.py``), the attempt
                                          still holding its GPUs; then Lost: exit code unknown
    launch record only, no supervisor  -> it never began: started now (same attempt)

(A supervisor is alive while the record's flock is held.) Once the status file records the end,
the attempt's files go: the record, and whichever of ``<name>.<N>.stop|limits|sh|input|log`` it had.

Supervisors notify a datagram socket (``run/notify.sock``) on start and exit, and each one's
pidfd is watched as well, so an exit reaches the loop at once without polling.

A full disk. A launch whose records cannot be written (the record, the script, or the
supervisor's run record) is not a launch: nothing runs, and the attempt is *held*: ``observe``
reports it queued (reason DiskFull, or DiskError for another write error, the message naming the
file), so the job shows Pending, keeping the GPUs it was bound to; ``tick`` tries again with a
growing delay (0.5 s to 10 s) and launches it as soon as the write succeeds. A supervisor that
cannot write its exit record sends the record in its exit datagram (see ``supervisor.py``): the
exit is known at once, and its files are removed, as always, once the status file records it.

Attempts of a gflowd older than the record (``run/jobs/<name>/launch-<N>.json`` ...) are not
adopted: ``old_layout_problem`` makes gflowd refuse to start while any is left (docs/reliability.md).
"""

from __future__ import annotations

import collections
import errno
import fcntl
import hashlib
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

from controller.act.runtime import record
from controller.act.runtime.cgroups import (
    AttemptCgroup,
    CgroupError,
    Cgroupfs,
    Cgroups,
    Limits,
    Probe,
    gpu_deny_rules,
    probe_v2,
    setup,
)
from controller.act.runtime.cgroups import systemd_scope
from controller.act.runtime.cgroups.systemd_scope import Scope
from controller.act.runtime.command import LaunchError, build_process
from controller.act.runtime.login import Account, SystemFiles, account_of, login_env, system_files
from controller.act.runtime.orphans import MARKER_VARIABLE, attempt_processes, signal_processes
from controller.act.runtime.control_socket import unix_address
from controller.act.runtime.holds import DISK_FULL, Hold, hold
from controller.act.runtime.shim import MAIN_FILE
from controller.act.runtime.shim.procfs import descendants, start_ticks
from controller.api.export import ENV_ANNOTATION
from controller.model.plan import Launch, RunObservation
from controller.paths import Home
from controller.util.frames import frame
from controller.util.fsutil import describe, fsync_dir, lock_held
from controller.util.spares import PREFIX as SPARE_PREFIX
from controller.util.spares import Spares

log = logging.getLogger("gflowd.runtime")
SUPERVISOR_FILE = MAIN_FILE  # the shim, run as a plain file
MASTER_PORT_BASE = 29500
NEVER_BEGAN_AFTER = 5.0  # a launch handed to a live launcher gets this long to take its lock
NOTIFY_TIMEOUT = 0.2  # seconds a notice may wait for a supervisor's control socket
LAUNCH_PIPE_BYTES = 1 << 20  # the launcher's stdin: room for ~15,000 record paths
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
# Ended attempts' cgroups are removed by gflowd once a pass starts nothing (``_reap_cgroups``),
# not by their supervisors at the job's end: every rmdir takes the kernel's one cgroup lock (and a
# memory cgroup's teardown is heavy), which a flood's starts and joins queue on (a 1,000-job
# drain: ~14 % faster without them). An empty memory cgroup costs the kernel ~14 KiB plus ~2 KiB
# per CPU, so at most UNREMOVED_BYTES of them wait; beyond that the oldest go at once.
UNREMOVED_BYTES = 64 << 20
REAP_CHUNK = 128  # attempts' cgroups removed per turn of the idle loop (~35 ms), between passes
ORPHAN_CHECK = 0.2  # while stopping a dead supervisor's job: how often to look for its processes


@dataclass
class _Orphaned:
    """A job whose supervisor died without an exit record, being stopped by gflowd itself."""

    supervisor_pid: int
    kill_at: float  # monotonic
    processes: dict[int, int]  # pid -> start ticks, as last found
    stopped: int = 0  # how many processes were signalled in all


@dataclass
class _Attempt:
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
    orphaned: _Orphaned | None = None

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


def cgroup_group(root: Path) -> str:
    """The cgroup holding one gflowd's attempt cgroups: per home, so two controllers never meet."""
    return "gflow-" + hashlib.sha256(str(Path(root).absolute()).encode()).hexdigest()[:10]


def start_scope(request: str, home: Home) -> Scope | None:
    """Under systemd on cgroup v2, the delegated scope that holds this home's supervisors and the
    attempts' cgroups (``systemd_scope``), found or made; None elsewhere, or with ``--cgroups off``.
    Where it applies but cannot be had: ``required`` raises CgroupError, ``auto`` says why once."""
    if request == "off":
        return None
    try:
        scope = systemd_scope.ensure(cgroup_group(home.root))
    except CgroupError as exc:
        if request == "required":
            raise CgroupError(f"--cgroups required, but {exc}") from None
        log.warning("%s; until then running jobs share gflowd's own cgroup and die when its unit stops", exc)
        return None
    if scope is not None:
        log.info("jobs and their supervisors live in the systemd scope %s (%s)", scope.unit, scope.directory)
    elif systemd_scope.booted():
        log.info("cgroup v1 under systemd: jobs live in gflowd's own cgroup; give its unit KillMode=process "
                 "(docs/multi-user.md) or a stop of the unit stops them")
    return scope


def start_cgroups(request: str, home: Home, found: Probe | None = None, fs: Cgroupfs | None = None) -> tuple[Cgroups | None, Probe]:
    """``--cgroups auto|required|off`` -> the prepared cgroups (None: polling) and what to say about
    them, said once in the log. Raises CgroupError for ``required`` where they cannot be used.
    ``found`` and ``fs``: a probe and a cgroupfs other than this machine's (tests; or the probe of
    a systemd scope's directory)."""
    cgroups, found = setup(request, cgroup_group(home.root), found, fs)
    if cgroups is None:
        if request != "off":
            log.warning("%s; memory limits are enforced by polling each job's RSS every 100 ms instead", found.summary())
        return None, found
    log.info("limits the kernel enforces: %s", found.summary())
    return cgroups, found


def scope_probe(scope: Scope) -> Probe:
    """What the scope offers; for a user's gflowd, one line on what the admin must delegate."""
    found = probe_v2(scope.directory)
    wanted = ("memory", "pids", "cpuset")
    if scope.manager == "user" and not all(found.features[name].available for name in wanted):
        try:
            user = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            user = str(os.geteuid())
        log.warning("your user manager delegates only some of the controllers gflow limits jobs with (%s): %s",
                    found.summary(), systemd_scope.user_hint(user))
    return found


class SupervisorRuntime:
    allocates_devices = False  # reconcile binds the GPUs; the job sees those
    def __init__(self, home: Home, login_files: SystemFiles | None = None, python: str | None = None,
                 cgroups: str = "auto", device_dir: str = "/dev", cgroup_probe: Probe | None = None,
                 cgroupfs: Cgroupfs | None = None):
        self.home = home
        self.device_dir = device_dir
        self.scope = start_scope(cgroups, home) if cgroup_probe is None and cgroupfs is None else None
        if self.scope is not None:
            cgroup_probe = scope_probe(self.scope)
        self.cgroups, self.cgroup_probe = start_cgroups(cgroups, home, cgroup_probe, cgroupfs)
        self.cgroup_request = cgroups
        self.login_files = login_files if login_files is not None else system_files(os.environ.get("TZ"))
        self.python = python or sys.executable
        self.attempts_dir = home.run_dir / "attempts"
        self.attempts_dir.mkdir(parents=True, exist_ok=True)
        # purged records, rewritten for later attempts as soon as the purge's folder fsync made them
        # spares: only gflowd (one thread) and supervisors read records, and a supervisor holds the
        # record's lock (usable=unlocked) or checks after taking it that the record is still its own
        self.spares = Spares(self.attempts_dir, usable=record.unlocked, quiet=0.0)
        self.attempts: dict[str, _Attempt] = {}
        self._forgotten: list[tuple[str, _Attempt]] = []  # ended, recorded by the next status write
        self._unremoved: collections.deque[_Attempt] = collections.deque()  # ended; their cgroups wait (_reap_cgroups)
        self.max_unremoved = UNREMOVED_BYTES // ((14 + 2 * (os.cpu_count() or 1)) << 10)
        self._started = False  # an attempt started since the last purge
        self._reaping = False  # the last pass started nothing: tick() removes waiting cgroups
        self._epoll = select.epoll()
        self.notify_path = str(home.run_dir / "notify.sock")
        self._sock = self._bind_notify()
        # readable: observe() has news. The launcher writes to it too, when a supervisor it reuses
        # ended an attempt: such a supervisor does not exit, so no pidfd tells us, and its notice
        # datagram may be dropped (the kernel queues only net.unix.max_dgram_qlen, often 10)
        self._news_r, self._news_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._launcher: subprocess.Popen | None = None
        self._handing: list[Path] = []  # records to hand to the launcher (``_hand_over``)
        self._purged: list[Path] = []  # records purged: their supervisors may take new attempts (``_tell_purged``)
        # True from a pass's first start to the look that follows its starts (``observe`` in act):
        # when the pass also ended attempts, its starts reach the launcher after its purge, which
        # frees those supervisors for them. Handed over while the pass acted, a burst forked a
        # supervisor for nearly every job; held when nothing ends, a lone start would wait ~10 ms
        # for the pass's fsyncs for nothing.
        self._holding = False
        self.held_any = False  # an attempt is held (the disk refused its launch): the loop watches the free space
        self._ensure_launcher()  # now, not at the first start: an interpreter start costs ~50 ms

    # -- the Protocol --------------------------------------------------------------------------

    def start(self, launch: Launch) -> None:
        current = self.attempts.get(launch.name)
        if current is not None and current.attempt == launch.attempt and current.result is None:
            return  # idempotent
        self._holding = True
        self._started = True
        supervisors_files = {"log", "input"} if launch.job.spec.tty else {"log"}  # what it may write beside the record
        attempt = _Attempt(launch.name, launch.attempt, self._record_path(launch.name, launch.attempt), time.monotonic(),
                           extras=supervisors_files)
        attempt.master_port = self._free_port()
        attempt.time_limit = launch.job.spec.time_limit
        attempt.devices, attempt.device_uuids = tuple(launch.devices), tuple(launch.device_uuids)
        attempt.run_hash = launch.job.run_hash
        self.attempts[launch.name] = attempt
        if current is not None and current.result is not None:
            self._remove_files(current, keep_record=True)
        try:
            attempt.spec, attempt.script = self._launch_spec(launch, attempt)
        except LaunchError as exc:
            now = time.time()
            attempt.result = RunObservation(launch.name, launch.attempt, None, now, False, 127, None, now, str(exc))
            return
        self._launch(attempt)

    def stop(self, name: str, grace: float, reason: str = "Stopped") -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is not None or attempt.stop_sent:
            return
        if attempt.held:  # it never began: it ends here
            now = time.time()
            attempt.result = self._held_observation(attempt, running=False, finished_at=now, stop_reason=reason)
            self._poke()
            return
        if attempt.orphaned is not None:  # already being stopped; never more slowly than asked now
            attempt.orphaned.kill_at = min(attempt.orphaned.kill_at, time.monotonic() + grace)
            attempt.stop_sent = True
            return
        try:
            _write_request(attempt.written("stop"), {"reason": reason, "grace": grace})
        except OSError as exc:  # the supervisor then stops it as "Stopped" with the job's own grace
            log.warning("job/%s: cannot write its stop request (%s); stopping it anyway", name, describe(exc))
        if self._signal_supervisor(attempt, signal.SIGTERM):
            attempt.stop_sent = True

    def notify(self, name: str, text: str) -> None:
        """Show ``text`` on the terminals attached to tty job ``name`` (and in its log), through its
        supervisor's control socket. Best effort, and quick: a busy or gone supervisor costs at most
        NOTIFY_TIMEOUT."""
        attempt = self.attempts.get(name)
        spec = (attempt.spec or {}) if attempt is not None else {}
        if attempt is None or attempt.result is not None or not spec.get("tty") or not spec.get("control"):
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, unix_address(spec["control"]) as address:
                sock.settimeout(NOTIFY_TIMEOUT)
                sock.connect(address)
                sock.sendall(frame(b"H", {"mode": "notice", "text": text}))
        except OSError as exc:
            log.debug("job/%s: notice not shown (%s)", name, describe(exc))

    def set_time_limit(self, name: str, seconds: float | None) -> None:
        """An edited ``timeLimit`` reaches the running attempt's supervisor."""
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is not None or attempt.time_limit == seconds:
            return
        if attempt.held or attempt.orphaned is not None:
            return
        try:
            _write_request(attempt.written("limits"), {"timeLimit": seconds})
        except OSError:
            return  # asked again next pass
        if self._signal_supervisor(attempt, signal.SIGHUP):
            attempt.time_limit = seconds

    def observe(self) -> dict[str, RunObservation]:
        holding, self._holding = self._holding, False  # act's look at its starts: purge hands them over...
        holding = holding and bool(self._forgotten)  # ...when it frees supervisors they can take
        if not holding:
            self._hand_over()  # starts a pass left (its records could not be written: no purge)
        self._drain()
        out = {}
        for name, attempt in self.attempts.items():
            if attempt.result is None:
                self._refresh(attempt)
            if attempt.result is not None:
                out[name] = attempt.result
            elif attempt.held:
                out[name] = self._held_observation(attempt)
            else:
                out[name] = RunObservation(
                    name, attempt.attempt, attempt.job_pid, attempt.started_at or time.time(), True,
                    devices=attempt.devices, device_uuids=attempt.device_uuids, run_hash=attempt.run_hash,
                    message="started once its launch could be recorded" if attempt.was_held else "",
                    last_input=self._last_input(attempt),
                )
        if not holding:
            self._hand_over()  # relaunches decided just now
        return out

    def _last_input(self, attempt: _Attempt) -> float | None:
        """A tty job's last terminal input (wall time): the supervisor touches a stamp file, at most
        every few seconds (``INPUT_STAMP_EVERY``); its start time until someone types."""
        if not (attempt.spec or {}).get("tty"):
            return None
        try:
            return attempt.path("input").stat().st_mtime
        except OSError:
            return None

    def forget(self, name: str) -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is None:
            return
        del self.attempts[name]
        self._forgotten.append((name, attempt))

    def purge(self) -> None:
        forgotten, self._forgotten = self._forgotten, []
        for name, attempt in forgotten:
            self._remove_cgroup(attempt)
            self._remove_files(attempt, keep_record=True)
            control = (attempt.spec or {}).get("control")
            lost = attempt.result is not None and attempt.result.lost
            if control and lost and name not in self.attempts:  # left behind by a supervisor that was killed
                try:
                    os.unlink(control)
                except OSError:
                    pass
        self._tell_purged()
        self._reaping = not self._started  # a pass that started nothing: tick() removes cgroups
        self._started = False
        self._hand_over()  # after the purges: the launcher reuses the supervisors they freed
        if len(self._unremoved) > self.max_unremoved:
            self._reap_cgroups(0)
        if self.spares.fresh:
            # the renames on disk before a spare is rewritten: a machine crash must not bring back
            # an attempt's name on a file since rewritten as another attempt's record
            fsync_dir(self.attempts_dir)
            self.spares.synced()

    def tick(self, now: float) -> float | None:
        """Timed work: launches held back by the disk, dead supervisors' jobs being stopped, and
        launches no supervisor took. (KILL after grace for live supervisors is theirs to do.)"""
        due = None
        mono = time.monotonic()
        held_any = False
        for attempt in list(self.attempts.values()):
            if attempt.result is not None:
                continue
            when = None
            if attempt.held:
                held_any = True
                if attempt.held.due(mono):
                    self._launch(attempt)
                when = attempt.held.retry_at if attempt.held else attempt.submitted + NEVER_BEGAN_AFTER
            elif attempt.orphaned is not None:
                self._stop_orphaned(attempt, mono)
                if attempt.orphaned is not None:
                    when = min(mono + ORPHAN_CHECK, attempt.orphaned.kill_at)
            elif attempt.supervisor_pid is None and attempt.submitted:
                when = attempt.submitted + NEVER_BEGAN_AFTER
            if when is not None:
                at = now + max(0.0, when - mono)
                due = at if due is None else min(due, at)
        self.held_any = held_any and any(a.held and a.result is None for a in self.attempts.values())
        self._hand_over()
        if self._reaping and self._unremoved:  # between passes, a chunk at a time: the loop stays responsive
            self._reap_cgroups(REAP_CHUNK)
            if self._unremoved:
                due = now
        return due

    def retry_held(self) -> None:
        """Free space came back (the loop saw it): launches the disk refused are tried at the
        next ``tick``, and from a short delay again should they fail."""
        for attempt in self.attempts.values():
            if attempt.held and attempt.result is None:
                attempt.held.retry_soon()

    def job_pids(self) -> dict[str, set[int]]:
        """Each running job's process tree (its supervisor included)."""
        out: dict[str, set[int]] = {}
        for name, attempt in self.attempts.items():
            if attempt.result is not None:
                continue
            if attempt.orphaned is not None:
                out[name] = set(attempt.orphaned.processes)
            elif attempt.supervisor_pid:
                out[name] = {attempt.supervisor_pid, *descendants(attempt.supervisor_pid)}
        return out

    def wait_fds(self) -> list[int]:
        return [self._epoll.fileno(), self._sock.fileno(), self._news_r]

    def needs_polling(self) -> bool:
        return False

    def close(self) -> None:
        """gflowd is stopping: the launcher exits, supervisors and jobs keep running."""
        self._hand_over()
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
        os.close(self._news_r)
        os.close(self._news_w)
        self._reap_ended_cgroups()
        if self.cgroups is not None and not self.cgroups.names():  # jobs still running keep it
            try:
                self.cgroups.remove_group()
            except CgroupError:
                pass

    # -- adoption ------------------------------------------------------------------------------------

    def adopt(self) -> list[str]:
        """Rebuild what is known from ``run/attempts``; restart attempts that never began."""
        latest: dict[str, int] = {}
        stale: list[Path] = []
        entries = sorted(os.listdir(self.attempts_dir))
        self.spares.adopt(entry for entry in entries if entry.startswith(SPARE_PREFIX))
        for entry in entries:
            found = record.attempt_of(entry)
            if found is None:
                continue
            name, number = found
            if name in latest:
                stale.append(self._record_path(name, min(number, latest[name])))
            latest[name] = max(number, latest.get(name, 0))
        for path in stale:
            name, number = record.attempt_of(path.name) or ("", 0)
            self._remove_files(_Attempt(name, number, path, 0.0))
        adopted = []
        for name, number in sorted(latest.items()):
            attempt = _Attempt(name, number, self._record_path(name, number), 0.0)
            spec = (record.read(str(attempt.record), ("launch",)) or {}).get("launch")
            if spec is None:  # gflowd died writing it: never handed over, so never begun
                self._remove_files(attempt)
                continue
            attempt.master_port = int(spec.get("env", {}).get("MASTER_PORT", 0) or 0)
            attempt.time_limit = spec.get("timeLimit")
            attempt.devices = tuple(spec.get("devices") or ())
            attempt.device_uuids = tuple(spec.get("deviceUUIDs") or ())
            attempt.run_hash = str(spec.get("runHash") or "")
            attempt.spec, attempt.log_rotated = spec, True  # its log was rotated before the record was written
            self.attempts[attempt.name] = attempt
            self._refresh(attempt, adopting=True)
            if attempt.result is None and attempt.supervisor_pid is None and not self._alive(attempt):
                log.info("job/%s attempt %d was decided but never began: starting it now", attempt.name, number)
                self._launch(attempt)
            adopted.append(attempt.name)
        self._remove_stray_cgroups()
        self._hand_over()
        return adopted

    def _remove_stray_cgroups(self) -> None:
        """Cgroups no launch record names: made by a gflowd that died before writing the record."""
        if self.cgroups is None:
            return
        known = {((a.spec or {}).get("cgroup") or {}).get("name") for a in self.attempts.values()}
        for name in self.cgroups.names():
            if name in known:
                continue
            cgroup = self.cgroups.adopt(name)
            try:
                if cgroup is not None and not cgroup.pids():
                    cgroup.remove(timeout=2.0)
            except CgroupError as exc:
                log.warning("cannot remove the stray cgroup %s: %s", name, exc)

    # -- internals ---------------------------------------------------------------------------------------

    def _launch_spec(self, launch: Launch, attempt: _Attempt) -> tuple[dict, str | None]:
        """The launch record and the script's text. Writes nothing: see ``_write_launch``."""
        uid = gid = None
        groups: list[int] = []
        owner = launch.job.owner_uid
        switch = os.geteuid() == 0 and owner not in (-1, 0)
        try:
            entry = pwd.getpwuid(owner if switch else os.geteuid())
        except KeyError:
            if switch:
                raise LaunchError(f"the manifest's owner (uid {owner}) has no account on this machine") from None
            entry = None
        if switch:
            uid, gid = entry.pw_uid, entry.pw_gid
            groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
        account = account_of(entry) if entry is not None else Account(os.geteuid(), str(os.geteuid()), "/", "/bin/sh")
        # a job never sees gflowd's environment: its owner's login basics (login.py), then its own
        env = login_env(account, self.login_files, tty=bool(launch.job.spec.tty))
        basics = set(env)
        env["GFLOW_HOME"] = str(self.home.root)  # gflow's own: gflowctl in a job finds this instance
        script_path = attempt.path("sh")
        env_file = submitted_env_file(launch.job)
        # another user's job: its supervisor looks for the workingDir and the command as that user;
        # a job with the submitter's environment: its supervisor looks on that PATH
        process = build_process(launch, env, script_path, attempt.master_port, home=account.home,
                                check=not switch, check_command=not switch and env_file is None)
        # every process of the attempt inherits this: how its tree is found should its supervisor die
        process.env[MARKER_VARIABLE] = f"{launch.name}.{launch.attempt}.{os.urandom(8).hex()}"
        spec = launch.job.spec
        # the submitter's environment wins over the login basics only: spec.env and gflow's win over it
        above = sorted(k for k in process.env if k not in basics or k in spec.env)
        return {
            "name": launch.name,
            "attempt": launch.attempt,
            "generation": launch.generation,
            "argv": process.argv,
            "env": process.env,
            "cwd": process.cwd,
            "log": str(self.home.log_file(launch.name)),
            "uid": uid,
            "user": account.name,  # named in a start error
            "gid": gid,
            "groups": groups,
            "timeLimit": spec.time_limit,
            "memoryLimit": spec.resources.memory,
            "grace": spec.termination_grace_period if spec.termination_grace_period is not None else 10.0,
            "notify": self.notify_path,
            "decidedAt": time.time(),
            "bootId": boot_id(),  # a later gflowd tells a job lost to a reboot from one lost to a crash
            "runHash": launch.job.run_hash,
            "devices": list(launch.devices),
            "deviceUUIDs": list(launch.device_uuids),
            "condaEnv": spec.conda_env or None,
            "cpus": list(launch.cpus),
            "deviceMinors": list(launch.device_minors),
            "gpuMinors": list(launch.gpu_minors),
            "pidsLimit": spec.resources.pids,
            "tty": spec.tty,
            "envFile": env_file,  # read by the supervisor as the job's user (supervisor.py)
            "envAbove": above if env_file else None,
            # attach and exec: in a 0700 folder of the job's user (supervisor.py makes and serves it)
            "control": str(self.home.control_socket(uid if uid is not None else os.geteuid(), launch.name)),
        }, process.script

    def _launch(self, attempt: _Attempt) -> None:
        """Record the attempt and hand it to the launcher; if the disk refuses a record, hold it."""
        if self.cgroups is not None and attempt.spec is not None and "cgroup" not in attempt.spec:
            try:
                attempt.spec["cgroup"] = self._make_cgroup(attempt.name, attempt.attempt, attempt.spec)
            except CgroupError as exc:
                if self.cgroup_request == "required":
                    now = time.time()
                    attempt.result = RunObservation(attempt.name, attempt.attempt, None, now, False, 126, None, now, str(exc))
                    self._poke()
                    return
                log.warning("job/%s: %s; it runs without a cgroup (memory polled)", attempt.name, exc)
                attempt.spec["cgroup"] = None
        try:
            self._write_launch(attempt)
        except OSError as exc:
            self._hold(attempt, f"cannot record its launch: {describe(exc)}", exc.errno)
            return
        if attempt.held:
            log.info("job/%s attempt %d: its launch is recorded now; starting it", attempt.name, attempt.attempt)
        attempt.held = None
        attempt.submitted = time.monotonic()
        self._handing.append(attempt.record)

    def _write_launch(self, attempt: _Attempt) -> None:
        """The script, the rotated log, then the record (the decision, created whole before
        anything runs: ``record.py``). Not fsync'd: it must survive gflowd crashing, which the page
        cache does; a machine crash takes the job with it, and the status (fsync'd, written as
        Running in this same pass) then says Lost. Each step is skipped once done, so a retry redoes
        only what failed."""
        spec = attempt.spec or {}
        if attempt.script is not None:  # written before the record that names it: no temp file needed
            _write_file(attempt.written("sh"), attempt.script.encode(), 0o700, spec.get("uid"), spec.get("gid"))
            attempt.script = None
        if not attempt.log_rotated:
            self._rotate_log(attempt.name, attempt.attempt)
            attempt.log_rotated = True
        data = record.contents(spec)
        try:
            self.spares.create(attempt.record, data, 0o600, pad=True)
        except FileExistsError:  # handed over before (a retry); one that does not read was never finished
            if (record.read(str(attempt.record), ("launch",)) or {}).get("launch") is None:
                os.unlink(attempt.record)
                self.spares.create(attempt.record, data, 0o600, pad=True)

    def _make_cgroup(self, name: str, number: int, spec: dict) -> dict:
        """The attempt's cgroup with its limits written, before anything can join it; the launch
        file carries what the supervisor (and ``gflowctl exec``) needs to join and read it."""
        assert self.cgroups is not None
        features = self.cgroup_probe.features
        memory = spec.get("memoryLimit") if features["memory"].available else None
        cpus = frozenset(spec.get("cpus") or ()) if features["cpuset"].available and spec.get("cpus") else None
        pids = spec.get("pidsLimit") if features["pids"].available else None
        deny = None
        if features["devices"].available:  # every GPU but the bound ones; other devices as gflowd's
            deny = gpu_deny_rules(spec.get("deviceMinors") or (), spec.get("gpuMinors") or (), self.device_dir)
        attempt = self.cgroups.create(f"{name}-{number}", Limits(memory=memory, cpus=cpus, pids=pids, deny_devices=deny))
        return {
            "name": attempt.name,
            "group": self.cgroups.group,
            "probe": self.cgroup_probe.to_dict(),
            "keys": list(attempt.dirs),  # the hierarchies it joins (``Cgroups.hierarchies``)
            "procs": [os.path.join(directory, "cgroup.procs") for directory in attempt.dirs.values()],
            "memory": memory is not None,
            "leave": True,  # its supervisor leaves the emptied cgroup to gflowd (UNREMOVED_BYTES)
        }

    def _cgroup_of(self, attempt: _Attempt) -> AttemptCgroup | None:
        record = (attempt.spec or {}).get("cgroup")
        if not record or self.cgroups is None:
            return None
        try:
            return self.cgroups.adopt(record["name"], record.get("keys"))  # no keys: written before they were
        except CgroupError:
            return None

    def _remove_cgroup(self, attempt: _Attempt) -> None:
        """After the attempt's end is recorded: its cgroup, unless its supervisor removed it, goes
        on the list ``_reap_cgroups`` works through."""
        if attempt.cgroup_removed:
            return  # not even looked for: a missing cgroup's seven lookups cost ~0.3 ms
        if (attempt.spec or {}).get("cgroup"):
            self._unremoved.append(attempt)

    def _reap_ended_cgroups(self) -> None:
        """gflowd is stopping: the cgroups of every attempt that ended, its end recorded or not yet
        (its exit record holds the counters), go now; a running job's stay with it."""
        waiting = {id(attempt) for attempt in self._unremoved}
        for attempt in [*self.attempts.values(), *(attempt for _, attempt in self._forgotten)]:
            if attempt.cgroup_removed or not (attempt.spec or {}).get("cgroup") or id(attempt) in waiting:
                continue
            if attempt.result is not None or (record.read(str(attempt.record), ("exit",)) or {}).get("exit"):
                self._unremoved.append(attempt)
        self._reap_cgroups(len(self._unremoved))

    def _reap_cgroups(self, chunk: int) -> None:
        """Ended attempts' cgroups, oldest first: those beyond ``max_unremoved``, or ``chunk`` of
        them if more. A process still in one (none should be: its supervisor saw the tree gone) is
        killed first."""
        count = min(len(self._unremoved), max(len(self._unremoved) - self.max_unremoved, chunk))
        for _ in range(count):
            attempt = self._unremoved.popleft()
            cgroup = self._cgroup_of(attempt)
            if cgroup is None:
                continue
            try:
                if cgroup.pids():
                    cgroup.kill_all(timeout=5.0)
                cgroup.remove(timeout=5.0)
            except CgroupError as exc:
                log.warning("job/%s: cannot remove its cgroup: %s", attempt.name, exc)

    def limits_summary(self) -> str:
        """One line for ``gflowctl get node``: what the kernel enforces, or why nothing is."""
        if self.cgroups is None and self.cgroup_request != "off":
            return f"{self.cgroup_probe.summary()}; memory polled"
        return self.cgroup_probe.summary()

    def _hold(self, attempt: _Attempt, why: str, error: int | None) -> None:
        """The launch cannot be recorded now: nothing runs; the job shows Pending; retried later."""
        if not attempt.held:
            log.warning("job/%s attempt %d: %s; it starts once that can be written", attempt.name, attempt.attempt, why)
        attempt.held, attempt.was_held = hold(attempt.held, why, error, time.monotonic()), True
        attempt.submitted = 0.0
        self._poke()

    def _held_observation(self, attempt: _Attempt, running: bool = True, finished_at: float | None = None,
                          stop_reason: str = "") -> RunObservation:
        assert attempt.held is not None
        return RunObservation(
            attempt.name, attempt.attempt, None, time.time(), running,
            finished_at=finished_at, error="" if running else attempt.held.never_started(),
            **(attempt.held.pending() if running else {}), stop_reason=stop_reason,
            devices=attempt.devices, device_uuids=attempt.device_uuids, run_hash=attempt.run_hash,
        )

    def _poke(self) -> None:
        """Wake gflowd's loop: observe() has something new to say."""
        try:
            os.write(self._news_w, b"x")
        except BlockingIOError:
            pass

    def _hand_over(self) -> None:
        """The recorded launches, to the launcher: all of a pass in one write, so a burst wakes it
        once, not once per job (each wake-up preempted gflowd)."""
        if not self._handing:
            return
        data = "".join(f"{path}\n" for path in self._handing).encode()
        self._handing = []
        launcher = self._ensure_launcher()
        try:
            assert launcher.stdin is not None
            launcher.stdin.write(data)
            launcher.stdin.flush()
        except (OSError, ValueError):  # a line it read before dying is refused by its lock or its records
            log.warning("supervisor launcher died; starting a new one")
            self._launcher = None
            launcher = self._ensure_launcher()
            assert launcher.stdin is not None
            launcher.stdin.write(data)
            launcher.stdin.flush()

    def _tell_purged(self) -> None:
        """The launcher learns which records are purged: a supervisor done with one may now take a
        next attempt, as no signal of ours can be meant for it any more (supervisor.py). Only the
        launcher that is running: one started later never handed those out."""
        purged, self._purged = self._purged, []
        launcher = self._launcher
        if not purged or launcher is None or launcher.poll() is not None or launcher.stdin is None:
            return
        try:
            launcher.stdin.write("".join(f"purged {path}\n" for path in purged).encode())
            launcher.stdin.flush()
        except (OSError, ValueError):
            pass  # it died: its supervisors end once their attempts do

    def _ensure_launcher(self) -> subprocess.Popen:
        if self._launcher is None or self._launcher.poll() is not None:
            # -I -S: the supervisor needs only the standard library; isolated from the user's env
            self._launcher = subprocess.Popen(
                # in a systemd scope, the launcher moves itself to its supervisors' leaf before it
                # forks any: every supervisor is born there, and none is left behind in gflowd's unit
                [self.python, "-I", "-S", SUPERVISOR_FILE, "--launcher", str(self._news_w),
                 *([os.path.join(self.scope.supervisors, "cgroup.procs")] if self.scope is not None else [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(self._news_w,),  # it wakes us when a supervisor it reuses ended an attempt
                start_new_session=True,
            )
            assert self._launcher.stdin is not None
            try:  # a burst of starts is written at once; the launcher forks at its own pace
                fcntl.fcntl(self._launcher.stdin.fileno(), F_SETPIPE_SZ, LAUNCH_PIPE_BYTES)
            except OSError:
                pass  # the default 64 KiB: ~600 starts before gflowd waits for the launcher
        return self._launcher

    def _refresh(self, attempt: _Attempt, adopting: bool = False) -> None:
        """Re-read this attempt's records and decide what they mean."""
        if attempt.held:
            return  # nothing was handed over: tick() retries it
        exit_record = self._read(attempt, "exit")
        if exit_record is not None:
            attempt.result = _observation(attempt, exit_record)
            attempt.cgroup_removed = exit_record.get("cgroupRemoved") is True
            attempt.orphaned = None
            self._unwatch(attempt)
            return
        if attempt.orphaned is not None:
            self._stop_orphaned(attempt, time.monotonic())
            return
        if attempt.supervisor_pid is None:
            run_record = self._read(attempt, "run")
            if run_record is not None:
                attempt.supervisor_pid = run_record.get("supervisorPid")
                attempt.supervisor_ticks = run_record.get("supervisorStartTicks")
                attempt.job_pid = run_record.get("jobPid")
                attempt.job_ticks = run_record.get("jobStartTicks")
                attempt.started_at = float(run_record.get("startedAt") or time.time())
                if self._identity_ok(attempt):
                    self._watch(attempt)
        elif attempt.job_pid is None:  # recorded before the job ran (a direct spawn): its pid follows
            run_record = self._read(attempt, "run") or {}
            attempt.job_pid, attempt.job_ticks = run_record.get("jobPid"), run_record.get("jobStartTicks")
        if attempt.supervisor_pid is not None:
            if not self._identity_ok(attempt) or not self._alive(attempt):
                self._unwatch(attempt)
                # gone; look once more for an exit record written just before it went
                exit_record = self._read(attempt, "exit") or attempt.exit_note
                if exit_record is not None:
                    attempt.result = _observation(attempt, exit_record)
                else:
                    self._orphan(attempt)
            elif attempt.exit_note is not None:  # it lives on only to write the record the disk refused
                attempt.result = _observation(attempt, attempt.exit_note)
                self._unwatch(attempt)
            return
        # launch record only
        if attempt.submitted and time.monotonic() - attempt.submitted > NEVER_BEGAN_AFTER and not self._alive(attempt):
            level = logging.DEBUG if attempt.handover_warned else logging.WARNING
            log.log(level, "job/%s attempt %d: no supervisor took the launch; handing it over again", attempt.name, attempt.attempt)
            attempt.handover_warned = True
            self._launch(attempt)

    def _orphan(self, attempt: _Attempt) -> None:
        """Its supervisor died without an exit record: stop what is left of the job, then it is Lost.
        Until its processes are gone it is reported running, so its GPUs stay held."""
        supervisor = attempt.supervisor_pid or 0
        if self._rebooted(attempt):  # its pids (and start times) now name other processes: touch none
            attempt.result = self._lost(attempt, "")
            return
        processes = self._processes(attempt)
        if not processes:
            attempt.result = self._lost(attempt, f"its supervisor (pid {supervisor}) died without recording the exit "
                                                 "and the job's processes were gone; exit code unknown")
            return
        log.warning("job/%s attempt %d: its supervisor (pid %d) died; stopping the job's %d process(es): TERM now, "
                    "KILL after %gs", attempt.name, attempt.attempt, supervisor, len(processes), attempt.grace)
        attempt.orphaned = _Orphaned(supervisor, time.monotonic() + attempt.grace, processes, len(processes))
        signal_processes(processes, signal.SIGTERM)

    def _stop_orphaned(self, attempt: _Attempt, mono: float) -> None:
        orphaned = attempt.orphaned
        assert orphaned is not None
        found = self._processes(attempt)
        if not found:
            attempt.orphaned = None
            attempt.result = self._lost(attempt, f"its supervisor (pid {orphaned.supervisor_pid}) died without recording "
                                                 f"the exit; the job's {orphaned.stopped} process(es) were stopped; exit code unknown")
            log.warning("job/%s attempt %d: the job's processes are gone", attempt.name, attempt.attempt)
            self._poke()
            return
        new = {pid: ticks for pid, ticks in found.items() if orphaned.processes.get(pid) != ticks}
        orphaned.processes = found
        orphaned.stopped += len(new)
        if mono >= orphaned.kill_at:
            signal_processes(found, signal.SIGKILL)
            orphaned.kill_at = mono + 1.0  # and again, for anything forked meanwhile
        elif new:
            signal_processes(new, signal.SIGTERM)

    def _processes(self, attempt: _Attempt) -> dict[int, int]:
        """The attempt's live processes (pid -> start ticks): its cgroup's members where it has one
        (exact), else found by marker and process group (``orphans.py``)."""
        cgroup = self._cgroup_of(attempt)
        if cgroup is not None:
            try:
                members = cgroup.pids()
            except CgroupError:
                members = None
            if members is not None:
                ticks = {pid: start_ticks(pid) for pid in members}
                return {pid: tick for pid, tick in ticks.items() if tick is not None}
        return attempt_processes(attempt.job_pid, attempt.job_ticks, attempt.marker)

    def _lost(self, attempt: _Attempt, why: str) -> RunObservation:
        rebooted = rebooted_since((attempt.spec or {}).get("bootId"), boot_id())
        if rebooted:  # said instead of how its supervisor went: the reboot took them all
            why = f"{rebooted}; exit code unknown"
        return RunObservation(
            attempt.name, attempt.attempt, attempt.job_pid, attempt.started_at, False, None, None, time.time(), why,
            lost=True, devices=attempt.devices, device_uuids=attempt.device_uuids, run_hash=attempt.run_hash,
        )

    def _rebooted(self, attempt: _Attempt) -> bool:
        return bool(rebooted_since((attempt.spec or {}).get("bootId"), boot_id()))

    def _identity_ok(self, attempt: _Attempt) -> bool:
        if self._rebooted(attempt):  # a pid and start time from another boot may match anything
            return False
        pid = attempt.supervisor_pid
        return pid is not None and attempt.supervisor_ticks is not None and start_ticks(pid) == attempt.supervisor_ticks

    def _alive(self, attempt: _Attempt) -> bool:
        """A supervisor holds the attempt's lock for its whole life: a free lock means none is alive."""
        return lock_held(attempt.record)

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
                self._note(self._sock.recv(65536))
            except (BlockingIOError, OSError):
                break
        try:
            while os.read(self._news_r, 4096):
                pass
        except BlockingIOError:
            pass
        # pidfd readiness is consumed by unwatching in _refresh; nothing to read from epoll itself
        self._epoll.poll(0)

    def _note(self, datagram: bytes) -> None:
        """A supervisor's notice: ``start|exit|unlaunched NAME N [detail]``. Only root (or gflowd's
        own user) can write to the socket (mode 0600)."""
        what, _, rest = datagram.decode(errors="replace").partition(" ")
        name, _, rest = rest.partition(" ")
        number, _, detail = rest.partition(" ")
        attempt = self.attempts.get(name)
        if attempt is None or str(attempt.attempt) != number or attempt.result is not None or not detail:
            return
        if what == "unlaunched" and attempt.supervisor_pid is None and not attempt.held:
            full = any(f"({errno.errorcode[code]})" in detail for code in DISK_FULL)
            self._hold(attempt, f"cannot record its start: {detail}", DISK_FULL[0] if full else None)
        elif what == "exit":
            try:
                exit_record = json.loads(detail)
            except ValueError:
                return
            if isinstance(exit_record, dict) and exit_record.get("name") == name and exit_record.get("attempt") == attempt.attempt:
                attempt.exit_note = exit_record

    def _bind_notify(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            os.unlink(self.notify_path)
        except FileNotFoundError:
            pass
        with unix_address(self.notify_path) as address:
            sock.bind(address)
        os.chmod(self.notify_path, 0o600)
        sock.setblocking(False)
        return sock

    def _remove_files(self, attempt: _Attempt, keep_record: bool = False) -> None:
        """The record, then whichever other files the attempt may have had. ``keep_record``: an
        attempt that ended, whose record was read: kept as a spare for a later attempt's (one
        rename; freeing inodes slows every later file creation on some filesystems, spares.py)."""
        kinds = record.SUFFIXES if attempt.extras is None else [k for k in record.SUFFIXES if k in attempt.extras]
        if keep_record:
            self.spares.retire(attempt.record)
            self._purged.append(attempt.record)
        else:
            kinds = [None, *kinds]
        for kind in kinds:
            try:
                os.unlink(attempt.record if kind is None else attempt.path(kind))
            except FileNotFoundError:
                pass

    def _record_path(self, name: str, number: int) -> Path:
        return self.attempts_dir / record.record_name(name, number)

    @staticmethod
    def _read(attempt: _Attempt, region: str) -> dict | None:
        return (record.read(str(attempt.record), (region,)) or {}).get(region)

    def _rotate_log(self, name: str, attempt: int) -> None:
        current = self.home.log_file(name)
        if attempt > 1 and os.path.lexists(current):  # a symlink is moved, never followed
            os.replace(current, self.home.log_file(name, attempt - 1))

    def _free_port(self) -> int:
        used = {a.master_port for a in self.attempts.values() if a.result is None}
        port = MASTER_PORT_BASE
        while port in used or not _port_free(port):
            port += 1
        return port


def _observation(attempt: _Attempt, record: dict) -> RunObservation:
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
        devices=attempt.devices,
        device_uuids=attempt.device_uuids,
        run_hash=attempt.run_hash,
    )


def _write_request(path: Path, request: dict) -> None:
    """A stop or limits request, read by the supervisor only after the signal that follows it:
    written in place, no temp file (whose leftovers would need a listing of the folder to find)."""
    _write_file(path, json.dumps(request).encode(), 0o644)


def _write_file(path: Path, data: bytes, mode: int, uid: int | None = None, gid: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        if uid is not None:
            os.fchown(fd, uid, gid if gid is not None else -1)
    except OSError as exc:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    os.close(fd)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def submitted_env_file(job) -> str | None:
    """The file that keeps the submitter's environment (``api/export.py``), named by the manifest's
    annotation: a hidden file in the manifest's own folder, nowhere else; None without one."""
    name = job.job.metadata.annotations.get(ENV_ANNOTATION)
    if not name:
        return None
    if not name.startswith(".") or "/" in name or name in (".", ".."):
        raise LaunchError(f"annotation {ENV_ANNOTATION}: {name!r} must name a hidden file beside the manifest")
    return os.path.join(job.folder or ".", name)
