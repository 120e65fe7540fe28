"""The crash-safe runtime: one supervisor process per attempt (the shim, ``act/runtime/shim/``), outliving gflowd.

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
cannot write its exit record sends the record in its exit datagram (see ``shim/exits.py``): the
exit is known at once, and its files are removed, as always, once the status file records it.

Attempts of a gflowd older than the record (``run/jobs/<name>/launch-<N>.json`` ...) are not
adopted: ``home_problem`` (``backends/local/__init__.py``) makes gflowd refuse to start while any
is left (docs/reliability.md).

Rooms. ``SupervisorRuntime`` is the Protocol and the attempts' life (start, stop, observe,
adopt, purge); it works with collaborators, each with one job: ``attempt.py`` (what is known of
one attempt, and the observations its records give), ``launch_record.py`` (what a launch
writes), ``launcher_pipe.py`` (gflowd's end of the shim's launcher), ``news.py`` (notices,
pidfds, wake-ups), ``attempt_cgroups.py`` (the attempts' cgroups, made and reaped),
``launching.py`` (an attempt recorded and handed over, or held), ``dead_supervisors.py`` (a dead
supervisor's job stopped by gflowd), and ``holds.py`` (a launch the disk refused, shared with
every backend).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from controller.act.runtime import record
from controller.act.runtime.backends.local.attempt import (
    Attempt,
    exit_observation,
    held_observation,
    running_checkpoint,
)
from controller.act.runtime.backends.local.attempt_cgroups import REAP_CHUNK, REAP_QUIET, AttemptCgroups
from controller.act.runtime.backends.local.dead_supervisors import DeadSupervisors
from controller.act.runtime.backends.local.launch_record import (
    MASTER_PORT_BASE,
    launch_record,
    port_free,
    write_request,
)
from controller.act.runtime.backends.local.launcher_pipe import LauncherPipe
from controller.act.runtime.backends.local.launching import Launches
from controller.act.runtime.backends.local.news import News
from controller.act.runtime.cgroups import Cgroupfs, Cgroups, Probe
from controller.act.runtime.command import LaunchError
from controller.act.runtime.control_socket import unix_address
from controller.act.runtime.holds import DISK_FULL
from controller.act.runtime.login import SystemFiles, system_files
from controller.act.runtime.shim.procfs import descendants
from controller.model.plan import Launch, RunObservation
from controller.paths import Home
from controller.util.frames import frame
from controller.util.fsutil import describe, fsync_dir
from controller.util.spares import PREFIX as SPARE_PREFIX
from controller.util.spares import Spares

log = logging.getLogger("gflowd.runtime")
NEVER_BEGAN_AFTER = 5.0  # a launch handed to a live launcher gets this long to take its lock
NOTIFY_TIMEOUT = 0.2  # seconds a notice may wait for a supervisor's control socket
ORPHAN_CHECK = 0.2  # while stopping a dead supervisor's job: how often to look for its processes


class SupervisorRuntime:
    allocates_devices = False  # reconcile binds the GPUs; the job sees those

    def __init__(
        self,
        home: Home,
        login_files: SystemFiles | None = None,
        python: str | None = None,
        cgroups: str = "auto",
        device_dir: str = "/dev",
        cgroup_probe: Probe | None = None,
        cgroupfs: Cgroupfs | None = None,
        proc_dir: str = "/proc",
        sys_dir: str = "/sys",
    ):
        self.home = home
        self.cgroup_keeper = AttemptCgroups(home, cgroups, device_dir, cgroup_probe, cgroupfs, proc_dir, sys_dir)
        self.login_files = login_files if login_files is not None else system_files(os.environ.get("TZ"))
        self.attempts_dir = home.run_dir / "attempts"
        self.attempts_dir.mkdir(parents=True, exist_ok=True)
        # purged records, rewritten for later attempts as soon as the purge's folder fsync made them
        # spares: only gflowd (one thread) and supervisors read records, and a supervisor holds the
        # record's lock (usable=unlocked) or checks after taking it that the record is still its own
        self.spares = Spares(self.attempts_dir, usable=record.unlocked, quiet=0.0)
        self.attempts: dict[str, Attempt] = {}
        self._forgotten: list[tuple[str, Attempt]] = []  # ended, recorded by the next status write
        self._started = False  # an attempt started since the last purge
        self._reaping = False  # the last pass started and ended nothing: tick() removes waiting cgroups
        self._reap_at: float | None = None  # or from then (monotonic): the last pass only ended attempts
        self.notify_path = str(home.run_dir / "notify.sock")
        self.news = News(self.notify_path)
        self.dead = DeadSupervisors(self.cgroup_keeper, self.news.poke)
        self.launcher = LauncherPipe(python or sys.executable, self.news.write_fd, self.cgroup_keeper.scope)
        self.launches = Launches(home, self.spares, self.cgroup_keeper, self.launcher, self.news)
        # True from a pass's first start to the look that follows its starts (``observe`` in act):
        # when the pass also ended attempts, its starts reach the launcher after its purge, which
        # frees those supervisors for them. Handed over while the pass acted, a burst forked a
        # supervisor for nearly every job; held when nothing ends, a lone start would wait ~10 ms
        # for the pass's fsyncs for nothing.
        self._holding = False
        self.held_any = False  # an attempt is held (the disk refused its launch): the loop watches the free space
        self.launcher.ensure()  # now, not at the first start: an interpreter start costs ~50 ms

    @property
    def cgroups(self) -> Cgroups | None:
        """The prepared cgroups (None: memory is polled)."""
        return self.cgroup_keeper.cgroups

    # -- the Protocol --------------------------------------------------------------------------

    def start(self, launch: Launch) -> None:
        current = self.attempts.get(launch.name)
        if current is not None and current.attempt == launch.attempt and current.result is None:
            return  # idempotent
        self._holding = True
        self._started = True
        supervisors_files = {"log", "input"} if launch.job.spec.tty else {"log"}  # what it may write beside the record
        if launch.job.spec.checkpoint is not None:
            supervisors_files |= {"ckpt", "ckpt.new"}  # its latest confirmation (shim/checkpoint.py)
        attempt = Attempt(
            launch.name,
            launch.attempt,
            self._record_path(launch.name, launch.attempt),
            time.monotonic(),
            extras=supervisors_files,
        )
        attempt.master_port = self._free_port()
        attempt.time_limit = launch.job.spec.time_limit
        attempt.devices, attempt.device_uuids = tuple(launch.devices), tuple(launch.device_uuids)
        attempt.run_hash = launch.job.run_hash
        attempt.failed_before = launch.failed
        self.attempts[launch.name] = attempt
        if current is not None and current.result is not None:
            self._remove_files(current, keep_record=True)
        try:
            attempt.spec, attempt.script = launch_record(launch, attempt, self.home, self.login_files, self.notify_path)
        except LaunchError as exc:
            now = time.time()
            attempt.result = RunObservation(launch.name, launch.attempt, None, now, False, 127, None, now, str(exc))
            return
        self.launches.launch(attempt)

    def stop(self, name: str, grace: float, reason: str = "Stopped") -> None:
        attempt = self.attempts.get(name)
        if attempt is None or attempt.result is not None or attempt.stop_sent:
            return
        if attempt.held:  # it never began: it ends here
            now = time.time()
            attempt.result = held_observation(attempt, running=False, finished_at=now, stop_reason=reason)
            self.news.poke()
            return
        if attempt.orphaned is not None:  # already being stopped; never more slowly than asked now
            attempt.orphaned.kill_at = min(attempt.orphaned.kill_at, time.monotonic() + grace)
            attempt.stop_sent = True
            return
        try:
            write_request(attempt.written("stop"), {"reason": reason, "grace": grace})
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
            write_request(attempt.written("limits"), {"timeLimit": seconds})
        except OSError:
            return  # asked again next pass
        if self._signal_supervisor(attempt, signal.SIGHUP):
            attempt.time_limit = seconds

    def observe(self) -> dict[str, RunObservation]:
        holding, self._holding = self._holding, False  # act's look at its starts: purge hands them over...
        holding = holding and bool(self._forgotten)  # ...when it frees supervisors they can take
        if not holding:
            self.launcher.hand_over()  # starts a pass left (its records could not be written: no purge)
        for notice in self.news.drain():
            self._note(notice)
        out = {}
        for name, attempt in self.attempts.items():
            if attempt.result is None:
                self._refresh(attempt)
            if attempt.result is not None:
                out[name] = attempt.result
            elif attempt.held:
                out[name] = held_observation(attempt)
            else:
                out[name] = RunObservation(
                    name,
                    attempt.attempt,
                    attempt.job_pid,
                    attempt.started_at or time.time(),
                    True,
                    devices=attempt.devices,
                    device_uuids=attempt.device_uuids,
                    run_hash=attempt.run_hash,
                    failed_before=attempt.failed_before,
                    message="started once its launch could be recorded" if attempt.was_held else "",
                    last_input=self._last_input(attempt),
                    checkpoint=running_checkpoint(attempt),
                )
        if not holding:
            self.launcher.hand_over()  # relaunches decided just now
        return out

    def _last_input(self, attempt: Attempt) -> float | None:
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
            self.cgroup_keeper.ended(attempt)
            self._remove_files(attempt, keep_record=True)
            control = (attempt.spec or {}).get("control")
            lost = attempt.result is not None and attempt.result.lost
            if control and lost and name not in self.attempts:  # left behind by a supervisor that was killed
                try:
                    os.unlink(control)
                except OSError:
                    pass
        self.launcher.tell_purged()
        # a pass that started nothing removes cgroups from tick(); one that ended attempts, only
        # once REAP_QUIET went by without another: a drain's tail is all ends, and its rmdirs (the
        # kernel's one cgroup lock) would hold back the last jobs' ends (tests/test_cgroups_runtime.py)
        self._reaping = not self._started and not forgotten
        self._reap_at = time.monotonic() + REAP_QUIET if forgotten and not self._started else None
        self._started = False
        self.launcher.hand_over()  # after the purges: the launcher reuses the supervisors they freed
        if len(self.cgroup_keeper.unremoved) > self.cgroup_keeper.max_unremoved:
            self.cgroup_keeper.reap(0)
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
                    self.launches.launch(attempt)
                when = attempt.held.retry_at if attempt.held else attempt.submitted + NEVER_BEGAN_AFTER
            elif attempt.orphaned is not None:
                self.dead.stop(attempt, mono)
                if attempt.orphaned is not None:
                    when = min(mono + ORPHAN_CHECK, attempt.orphaned.kill_at)
            elif attempt.supervisor_pid is None and attempt.submitted:
                when = attempt.submitted + NEVER_BEGAN_AFTER
            if when is not None:
                at = now + max(0.0, when - mono)
                due = at if due is None else min(due, at)
        self.held_any = held_any and any(a.held and a.result is None for a in self.attempts.values())
        self.launcher.hand_over()
        if self._reap_at is not None and self.cgroup_keeper.unremoved and not self._reaping:
            if mono < self._reap_at:
                at = now + (self._reap_at - mono)
                return at if due is None else min(due, at)
            self._reaping, self._reap_at = True, None
        if (
            self._reaping and self.cgroup_keeper.unremoved
        ):  # between passes, a chunk at a time: the loop stays responsive
            self.cgroup_keeper.reap(REAP_CHUNK)
            if self.cgroup_keeper.unremoved:
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
        return self.news.fds()

    def needs_polling(self) -> bool:
        return False

    def close(self) -> None:
        """gflowd is stopping: the launcher exits, supervisors and jobs keep running."""
        self.launcher.close()
        self.news.close()
        self.cgroup_keeper.reap_ended([*self.attempts.values(), *(attempt for _, attempt in self._forgotten)])
        self.cgroup_keeper.remove_group()  # unless jobs still running keep it

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
            self._remove_files(Attempt(name, number, path, 0.0))
        adopted = []
        for name, number in sorted(latest.items()):
            attempt = Attempt(name, number, self._record_path(name, number), 0.0)
            spec = (record.read(str(attempt.record), ("launch",)) or {}).get("launch")
            if spec is None:  # gflowd died writing it: never handed over, so never begun
                self._remove_files(attempt)
                continue
            attempt.master_port = int(spec.get("env", {}).get("MASTER_PORT", 0) or 0)
            attempt.time_limit = spec.get("timeLimit")
            attempt.devices = tuple(spec.get("devices") or ())
            attempt.device_uuids = tuple(spec.get("deviceUUIDs") or ())
            attempt.run_hash = str(spec.get("runHash") or "")
            attempt.failed_before = int(spec.get("failedBefore") or 0)
            attempt.spec, attempt.log_rotated = spec, True  # its log was rotated before the record was written
            self.attempts[attempt.name] = attempt
            self._refresh(attempt, adopting=True)
            if attempt.result is None and attempt.supervisor_pid is None and not attempt.supervisor_alive():
                log.info("job/%s attempt %d was decided but never began: starting it now", attempt.name, number)
                self.launches.launch(attempt)
            adopted.append(attempt.name)
        self.cgroup_keeper.remove_strays(
            {((a.spec or {}).get("cgroup") or {}).get("name") for a in self.attempts.values()}
        )
        self.launcher.hand_over()
        return adopted

    # -- internals ---------------------------------------------------------------------------------------

    def limits_summary(self) -> str:
        """One line for ``gflowctl get node``: what the kernel enforces, or why nothing is."""
        return self.cgroup_keeper.limits_summary()

    def _refresh(self, attempt: Attempt, adopting: bool = False) -> None:
        """Re-read this attempt's records and decide what they mean."""
        if attempt.held:
            return  # nothing was handed over: tick() retries it
        exit_record = self._read(attempt, "exit")
        if exit_record is not None:
            attempt.result = exit_observation(attempt, exit_record)
            attempt.cgroup_removed = exit_record.get("cgroupRemoved") is True
            attempt.orphaned = None
            self.news.unwatch(attempt)
            return
        if attempt.orphaned is not None:
            self.dead.stop(attempt, time.monotonic())
            return
        if attempt.supervisor_pid is None:
            run_record = self._read(attempt, "run")
            if run_record is not None:
                attempt.supervisor_pid = run_record.get("supervisorPid")
                attempt.supervisor_ticks = run_record.get("supervisorStartTicks")
                attempt.job_pid = run_record.get("jobPid")
                attempt.job_ticks = run_record.get("jobStartTicks")
                attempt.started_at = float(run_record.get("startedAt") or time.time())
                if attempt.supervisor_is_ours():
                    self.news.watch(attempt, attempt.supervisor_is_ours)
        elif attempt.job_pid is None:  # recorded before the job ran (a direct spawn): its pid follows
            run_record = self._read(attempt, "run") or {}
            attempt.job_pid, attempt.job_ticks = run_record.get("jobPid"), run_record.get("jobStartTicks")
        if attempt.supervisor_pid is not None:
            if not attempt.supervisor_is_ours() or not attempt.supervisor_alive():
                self.news.unwatch(attempt)
                # gone; look once more for an exit record written just before it went
                exit_record = self._read(attempt, "exit") or attempt.exit_note
                if exit_record is not None:
                    attempt.result = exit_observation(attempt, exit_record)
                else:
                    self.dead.found_dead(attempt)
            elif attempt.exit_note is not None:  # it lives on only to write the record the disk refused
                attempt.result = exit_observation(attempt, attempt.exit_note)
                self.news.unwatch(attempt)
            return
        # launch record only
        if (
            attempt.submitted
            and time.monotonic() - attempt.submitted > NEVER_BEGAN_AFTER
            and not attempt.supervisor_alive()
        ):
            level = logging.DEBUG if attempt.handover_warned else logging.WARNING
            log.log(
                level,
                "job/%s attempt %d: no supervisor took the launch; handing it over again",
                attempt.name,
                attempt.attempt,
            )
            attempt.handover_warned = True
            self.launches.launch(attempt)

    def _signal_supervisor(self, attempt: Attempt, sig: int) -> bool:
        if attempt.supervisor_pid is None:
            self._refresh(attempt)
        if attempt.supervisor_pid is None or not attempt.supervisor_is_ours():
            return False  # never signal a bare pid
        try:
            os.kill(attempt.supervisor_pid, sig)
            return True
        except ProcessLookupError:
            return False

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
            self.launches.hold(attempt, f"cannot record its start: {detail}", DISK_FULL[0] if full else None)
        elif what == "exit":
            try:
                exit_record = json.loads(detail)
            except ValueError:
                return
            if (
                isinstance(exit_record, dict)
                and exit_record.get("name") == name
                and exit_record.get("attempt") == attempt.attempt
            ):
                attempt.exit_note = exit_record

    def _remove_files(self, attempt: Attempt, keep_record: bool = False) -> None:
        """The record, then whichever other files the attempt may have had. ``keep_record``: an
        attempt that ended, whose record was read: kept as a spare for a later attempt's (one
        rename; freeing inodes slows every later file creation on some filesystems, spares.py)."""
        kinds: list[str | None] = [k for k in record.SUFFIXES if attempt.extras is None or k in attempt.extras]
        if keep_record:
            self.spares.retire(attempt.record)
            self.launcher.purged.append(attempt.record)
        else:
            kinds = [None, *kinds]  # None: the record itself
        for kind in kinds:
            try:
                os.unlink(attempt.record if kind is None else attempt.path(kind))
            except FileNotFoundError:
                pass

    def _record_path(self, name: str, number: int) -> Path:
        return self.attempts_dir / record.record_name(name, number)

    @staticmethod
    def _read(attempt: Attempt, region: str) -> dict | None:
        return (record.read(str(attempt.record), (region,)) or {}).get(region)

    def _free_port(self) -> int:
        used = {a.master_port for a in self.attempts.values() if a.result is None}
        port = MASTER_PORT_BASE
        while port in used or not port_free(port):
            port += 1
        return port
