"""The Slurm backend: the same reconcile loop, with Slurm running the jobs (``gflowd --backend slurm``).

``SlurmRuntime`` implements the ``Runtime`` Protocol with Slurm's own commands: ``sbatch
--parsable`` to start an attempt, ``squeue --json`` to watch, ``scancel`` to stop, ``scontrol
update`` for an edited time limit. The translation of a spec into sbatch options is shared with
``gflowctl export slurm`` (``controller.export.slurm``).

Division of labour. gflowd still admits, orders and gates jobs (dependencies, ``startAfter``,
retries, sweep ``parallelism``): a job is submitted when gflowd would have started it locally,
so ``dependsOn`` keeps its three conditions and a failed parent cancels its children exactly as
on one box. Slurm queues, places and allocates: the local GPU scheduler binds nothing
(``allocates_devices``), and the devices Slurm gave come back from ``squeue``'s ``gres_detail``.
While Slurm holds a job in its queue, the job is ``Pending`` with Slurm's reason
(``Resources``, ``Priority``, ``Dependency``...).

Crash safety, as with the local supervisor. Each attempt has a record ``run/slurm/<name>.json``,
written (fsync'd) *before* ``sbatch`` runs, and again with the Slurm job id once it returns. Every
submission carries ``--comment=gflow:<home id>:<name>:g<generation>:a<attempt>``; before any
``sbatch`` the runtime looks for a Slurm job with that comment and adopts it instead. So a
controller killed between ``sbatch`` and its records never submits twice; a restarted controller
re-adopts its Slurm jobs from the records (``adopt``).

Slurm states map onto our observations (``observation``, pure): PENDING/REQUEUED -> queued with
the reason; CONFIGURING/RUNNING/COMPLETING/SUSPENDED -> running; COMPLETED -> exit 0; FAILED ->
its exit code; TIMEOUT -> DeadlineExceeded; OUT_OF_MEMORY -> OOMKilled; CANCELLED (not by us) and
PREEMPTED -> failed with that said; NODE_FAIL/BOOT_FAIL and a job Slurm no longer knows -> Lost.

A full disk. An attempt whose record (or log file, or script) cannot be written is not submitted:
it is held, reported queued as DiskFull (or DiskError) with ``held`` set, so the job shows Pending,
and ``tick`` tries again with a growing delay, as the local runtime does.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from controller.act.runtime.backends.local.attempt import read_log_tail
from controller.act.runtime.backends.slurm.words import (
    QUEUED_STATES,
    RUNNING_STATES,
    SACCT_FIELDS,
    SlurmJob,
    SlurmRecord,
    comment_for,
    gres_devices,
    home_id,
    observation,
    parse_sacct,
    parse_squeue,
)
from controller.act.runtime.command import LaunchError, expand_home
from controller.act.runtime.holds import Hold, hold
from controller.act.runtime.shim.child import UnsafeLogFile, open_job_log
from controller.export import workdir
from controller.export.slurm import UnmappedGpuType, job_body, nice_options, sbatch_options, slurm_env, slurm_time
from controller.model.plan import Launch, RunObservation
from controller.paths import Home
from controller.util.fsutil import atomic_write, describe

log = logging.getLogger("gflowd.slurm")

POLL_INTERVAL = 1.0  # seconds between squeue calls while some attempt is live
COMMAND_TIMEOUT = 30.0


@dataclass
class _Held:
    """An attempt not submitted because the disk refused one of its files; retried by ``tick``."""

    launch: Launch
    hold: Hold
    rotated: bool  # the previous attempt's log was moved aside already


# -- the runtime ------------------------------------------------------------------------------------


class SlurmRuntime:
    allocates_devices = True  # Slurm picks the GPUs: reconcile binds none

    def __init__(
        self,
        home: Home,
        settings: Any = None,
        base_env: dict[str, str] | None = None,
        poll_interval: float = POLL_INTERVAL,
    ):
        self.home = home
        self.partition = getattr(settings, "partition", None)
        self.account = getattr(settings, "account", None)
        self.extra_args = list(getattr(settings, "extra_args", None) or [])
        self.gpu_types = dict(getattr(settings, "gpu_types", None) or {})
        self.env = dict(base_env if base_env is not None else os.environ)
        self.poll_interval = poll_interval
        self.dir = home.run_dir / "slurm"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = home_id(home)
        self.records: dict[str, SlurmRecord] = {}
        self._forgotten: list[SlurmRecord] = []  # ended, recorded by the next status write (see purge)
        self._jobs: dict[str, SlurmJob] = {}
        self._listed_at = -1e9
        self._results: dict[str, RunObservation] = {}
        self._accounting: bool | None = None  # does sacct answer? (no slurmdbd: it does not)
        self._held: dict[str, _Held] = {}

    # -- the Protocol --------------------------------------------------------------------------

    def start(self, launch: Launch) -> None:
        current = self.records.get(launch.name)
        if current is not None and current.attempt == launch.attempt:
            return  # idempotent
        held = self._held.get(launch.name)
        if held is not None and held.launch.attempt == launch.attempt:
            return  # held: tick() tries it again
        if current is not None:
            self._remove(current)
        self._try_start(launch)

    def _try_start(self, launch: Launch) -> None:
        held = self._held.get(launch.name)
        if held is not None and held.launch.attempt != launch.attempt:
            held = None
        rotated = held is not None and held.rotated
        try:
            if not rotated:
                self._rotate_log(launch.name, launch.attempt)  # before the new attempt's log may be created
                rotated = True
            self._start(launch, fresh=held is not None)  # a retry looks in Slurm first: sbatch may have run
        except OSError as exc:  # not submitted: held, and tried again by tick()
            self.records.pop(launch.name, None)
            why = f"cannot record its submission: {describe(exc)}"
            if held is None:
                log.warning(
                    "job/%s attempt %d: %s; it is submitted once that can be written", launch.name, launch.attempt, why
                )
            self._held[launch.name] = _Held(
                launch, hold(held.hold if held else None, why, exc.errno, time.monotonic()), rotated
            )
            return
        self._held.pop(launch.name, None)

    def _start(self, launch: Launch, fresh: bool) -> None:

        try:
            options, script = self._translate(launch)
        except LaunchError as exc:
            now = time.time()
            record = SlurmRecord(
                launch.name,
                launch.attempt,
                launch.generation,
                "",
                [],
                "",
                launch.job.run_hash,
                submitted_at=now,
                error=str(exc),
                failed_before=launch.failed,
            )
            self.records[launch.name] = record
            self._save(record)
            return
        record = SlurmRecord(
            launch.name,
            launch.attempt,
            launch.generation,
            comment_for(self.key, launch.name, launch.generation, launch.attempt),
            options,
            script,
            launch.job.run_hash,
            launch.job.spec.time_limit,
            submitted_at=time.time(),
            failed_before=launch.failed,
            # slurmstepd writes the log as the job's user: the manifest's owner when root submits for them
            log_owner=launch.job.owner_uid if os.geteuid() == 0 and launch.job.owner_uid > 0 else os.geteuid(),
        )
        self.records[launch.name] = record
        self._save(record)  # the decision, durable, before sbatch: a restart finds it
        self._submit(record, fresh)

    def stop(self, name: str, grace: float, reason: str = "Stopped") -> None:
        """scancel: Slurm sends TERM, then KILL after its KillWait (cluster-wide; ``grace`` cannot
        change it). Suspend, cancel, delete and deadlines all cancel the Slurm job; a resumed job is
        submitted again as its next attempt, as it is restarted on one box."""
        held = self._held.get(name)
        if held is not None and name not in self._results:  # never submitted: it ends here
            now = time.time()
            self._results[name] = RunObservation(
                name,
                held.launch.attempt,
                None,
                now,
                False,
                None,
                None,
                now,
                held.hold.never_started(),
                stop_reason=reason,
            )
            return
        record = self.records.get(name)
        if record is None or record.stop_sent or record.error or record.job_id is None:
            return
        if self._run(["scancel", record.job_id], check=True) is not None:  # else: tried again next pass
            record.stop_sent = True
            self._save(record, durable=False)
            self._listed_at = -1e9

    def notify(self, name: str, text: str) -> None:
        """A cluster job has no terminal of ours: nothing to show it on."""

    def set_time_limit(self, name: str, seconds: float | None) -> None:
        record = self.records.get(name)
        if record is None or record.job_id is None or record.time_limit == seconds:
            return

        limit = "UNLIMITED" if seconds is None else slurm_time(seconds)
        # raising a limit needs Slurm operator rights; gflowd enforces the edited limit either way
        self._run(["scontrol", "update", f"JobId={record.job_id}", f"TimeLimit={limit}"], check=False)
        record.time_limit = seconds
        self._save(record, durable=False)

    def observe(self) -> dict[str, RunObservation]:
        if any(r.job_id is not None and not r.error and r.name not in self._results for r in self.records.values()):
            self._refresh()
        now = time.time()
        out = {}
        for name, held in self._held.items():
            out[name] = self._results.get(name) or RunObservation(
                name,
                held.launch.attempt,
                None,
                now,
                True,
                **held.hold.pending(),
            )
        for name, record in self.records.items():
            if name in self._results:
                out[name] = self._results[name]
                continue
            job = self._jobs.get(record.job_id or "") if record.job_id else None
            if job is None and record.job_id is not None and not record.error:
                job = self._from_accounting(record.job_id)  # squeue forgets after MinJobAge; sacct does not
            if job is not None and job.state in RUNNING_STATES and not record.devices:
                devices = gres_devices(job.gres_detail)
                if devices or job.nodes:
                    record.devices, record.node = devices, job.nodes
                    self._save(record, durable=False)
            if job is not None and job.nodes and not record.node:
                record.node = job.nodes
            if job is not None and job.state not in RUNNING_STATES | QUEUED_STATES and not record.devices:
                record.devices = self._reported_devices(record)  # it ended before squeue showed it running
            oom = job is not None and job.state == "FAILED" and self._memory_exceeded(record.name)
            obs = observation(record, job, now, oom)
            if not obs.running and obs.exit_code and not obs.lost:
                obs = replace(obs, **self._log_tail(record))  # why it failed, as on one box (docs/failures.md)
            if not obs.running:
                self._results[name] = obs  # an end is final: no more squeue for it
            out[name] = obs
        return out

    def forget(self, name: str) -> None:
        if name in self._held and name in self._results:
            del self._held[name], self._results[name]
            return
        record = self.records.get(name)
        if record is None or name not in self._results:
            return
        self.records.pop(name, None)
        self._results.pop(name, None)
        self._forgotten.append(record)  # its files go with purge(), once the status shows the end

    def purge(self) -> None:
        forgotten, self._forgotten = self._forgotten, []
        for record in forgotten:
            if record.name not in self.records:  # a next attempt reuses the same file names
                self._remove(record)

    def tick(self, now: float) -> float | None:
        """Submits held attempts when due; returns when the next try is."""
        mono = time.monotonic()
        for name, held in list(self._held.items()):
            if held.hold.due(mono) and name not in self._results:
                self._try_start(held.launch)
        due = [now + max(0.0, h.hold.retry_at - mono) for n, h in self._held.items() if n not in self._results]
        return min(due) if due else None

    def job_pids(self) -> dict[str, set[int]]:
        return {}  # the jobs' processes are on the cluster's nodes

    def wait_fds(self) -> list[int]:
        return []

    def needs_polling(self) -> bool:
        return any(name not in self._results for name in self.records) or bool(self._held)

    def close(self) -> None:
        pass

    @property
    def held_any(self) -> bool:
        """An attempt is held (the disk refused one of its files): the loop watches the free space."""
        return any(name not in self._results for name in self._held)

    def retry_held(self) -> None:
        """Free space came back: held submissions are tried at the next ``tick``."""
        for name, held in self._held.items():
            if name not in self._results:
                held.hold.retry_soon()

    def limits_summary(self) -> str | None:
        """Slurm enforces the limits on its nodes: nothing to say about this machine's."""
        return None

    def adopt(self) -> list[str]:
        """Rebuild from ``run/slurm``: records with a job id are watched again; a record whose
        ``sbatch`` may or may not have happened is matched by comment, else submitted now."""
        adopted = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                record = SlurmRecord(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("ignoring unreadable Slurm record %s: %s", path, exc)
                continue
            self.records[record.name] = record
            if record.job_id is None and not record.error:
                log.info(
                    "job/%s attempt %d: its submission was interrupted; checking Slurm first",
                    record.name,
                    record.attempt,
                )
                self._submit(record, fresh=True)
            adopted.append(record.name)
        return adopted

    # -- internals -------------------------------------------------------------------------------

    def _translate(self, launch: Launch) -> tuple[list[str], str]:
        """The sbatch options and script for one attempt (LaunchError: a user error, e.g. workingDir)."""
        spec = launch.job.spec
        root = os.geteuid() == 0
        other = root and launch.job.owner_uid > 0
        try:  # ~ is the owner's home, never gflowd's
            owner_home = pwd.getpwuid(launch.job.owner_uid if other else os.geteuid()).pw_dir
        except KeyError:
            owner_home = None
        working_dir = expand_home(spec.working_dir, owner_home) if spec.working_dir else None
        cwd = workdir(working_dir, launch.job.folder or ".")
        # another user's folder is looked for by Slurm as that user: gflowd, as root, would tell
        # them about folders they cannot see
        if not other and not os.path.isdir(cwd):
            raise LaunchError(f"workingDir {cwd} does not exist or is not a folder")
        try:
            options = sbatch_options(
                spec,
                launch.name,
                chdir=cwd,
                output=str(self.home.log_file(launch.name).absolute()),
                partition=self.partition,
                account=self.account,
                # root may lower a nice, but not for another user's job: only as far as its owner could
                operator=root and not other,
                gates=False,
                gpu_types=self.gpu_types,
                own_deadline=True,  # the checkpoint signal comes ``before`` gflowd's stop, not Slurm's rounded one
            )
        except UnmappedGpuType as exc:
            raise LaunchError(f"{exc}, or run gflowd with --slurm-gpu-types {exc.gpu_type}=TYPE") from None
        if root and launch.job.owner_uid > 0:  # as the local runtime drops to the manifest's owner
            try:
                gid = pwd.getpwuid(launch.job.owner_uid).pw_gid
            except KeyError:
                raise LaunchError(f"the manifest's owner uid {launch.job.owner_uid} is not a user here") from None
            options += [f"--uid={launch.job.owner_uid}", f"--gid={gid}"]
            log_path = self.home.log_file(launch.name)  # slurmstepd opens it as the job's user
            try:
                os.close(open_job_log(str(log_path), launch.job.owner_uid, gid))
            except UnsafeLogFile as exc:
                raise LaunchError(str(exc)) from None
        options += self.extra_args
        env = slurm_env(launch.name, spec, attempt=str(launch.attempt), generation=str(launch.generation))
        devices_file = self._devices_file(launch.name)
        atomic_write(devices_file, "", mode=0o644, durable=False)
        if root and launch.job.owner_uid > 0:
            os.chown(devices_file, launch.job.owner_uid, -1)
        # the GPUs Slurm gave, as the job sees them; best effort (the node may not share our disk)
        report = f'echo "${{CUDA_VISIBLE_DEVICES-}}" > {shlex.quote(str(devices_file))} 2>/dev/null || true'
        mapped = nice_options(spec.priority, root and not other)[1]  # what became of the priority, said in the script
        script = "\n".join(["#!/bin/bash", *mapped, report, *job_body(spec, env)]) + "\n"
        return options, script

    def _submit(self, record: SlurmRecord, fresh: bool = False) -> None:
        """sbatch, unless Slurm already has this attempt. ``fresh``: list Slurm's jobs now (after a
        restart); else a listing from this pass will do, since this gflowd wrote no record for the
        attempt before, so no earlier sbatch of it can exist (belt and braces)."""
        existing = self._find(record.comment, fresh)
        if existing is not None:
            log.info(
                "job/%s attempt %d is already Slurm job %s: adopted, not submitted again",
                record.name,
                record.attempt,
                existing.job_id,
            )
            record.job_id = existing.job_id
            self._save(record)
            return
        script_path = self.dir / f"{record.name}.sh"
        atomic_write(script_path, record.script, mode=0o600, durable=False)
        try:
            result = subprocess.run(
                ["sbatch", "--parsable", *record.options, f"--comment={record.comment}", str(script_path)],
                capture_output=True,
                text=True,
                env=self.env,
                timeout=COMMAND_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            record.error = f"sbatch could not run: {exc}"
            self._save(record)
            return
        if result.returncode != 0:
            lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
            record.error = "sbatch refused the job: " + (
                lines[-1].strip() if lines else f"exit code {result.returncode}"
            )
            self._save(record)
            return
        record.job_id = result.stdout.strip().split(";")[0]
        self._save(record)
        self._listed_at = -1e9  # see it in the next observe

    def _find(self, comment: str, fresh: bool) -> SlurmJob | None:
        self._refresh(force=fresh)
        matches = [j for j in self._jobs.values() if j.comment == comment]
        return max(matches, key=lambda j: int(j.job_id)) if matches else None

    def _refresh(self, force: bool = False) -> None:
        mono = time.monotonic()
        if not force and mono - self._listed_at < self.poll_interval:
            return
        argv = ["squeue", "--json", "--states=all"]
        if os.geteuid() != 0:
            argv.append("--me")
        result = self._run(argv, check=True)
        if result is None:
            return  # keep the last listing; the next pass tries again
        try:
            self._jobs = {j.job_id: j for j in parse_squeue(result.stdout)}
        except ValueError as exc:
            log.warning("squeue --json gave no JSON (%s); is this Slurm 21.08 or newer?", exc)
            return
        self._listed_at = mono

    def _run(self, argv: list[str], check: bool) -> subprocess.CompletedProcess | None:
        try:
            result = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=COMMAND_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("%s failed: %s", argv[0], exc)
            return None
        if result.returncode != 0:
            log.warning(
                "%s failed: %s", " ".join(argv[:2]), result.stderr.strip().splitlines()[-1:] or result.returncode
            )
            return None if check else result
        return result

    def _save(self, record: SlurmRecord, durable: bool = True) -> None:
        atomic_write(self.dir / f"{record.name}.json", json.dumps(asdict(record)), mode=0o600, durable=durable)

    def _remove(self, record: SlurmRecord) -> None:
        self.records.pop(record.name, None)
        self._results.pop(record.name, None)
        for path in (self.dir / f"{record.name}.json", self.dir / f"{record.name}.sh", self._devices_file(record.name)):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def _from_accounting(self, job_id: str) -> SlurmJob | None:
        if self._accounting is False:
            return None
        result = self._run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", SACCT_FIELDS], check=True)
        if result is None:
            self._accounting = False  # e.g. "Slurm accounting storage is disabled": do not ask again
            return None
        self._accounting = True
        found = [j for j in parse_sacct(result.stdout) if j.job_id == job_id]
        return found[0] if found else None

    def _memory_exceeded(self, name: str) -> bool:
        """slurmstepd's own words at the end of the job's output (see ``observation``)."""
        try:  # never through a symlink, never a FIFO: the job's user owns the log's name
            fd = os.open(self.home.log_file(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 8192))
                return b"Exceeded job memory limit" in handle.read()
        except OSError:
            return False

    def _log_tail(self, record: SlurmRecord) -> dict[str, Any]:
        """The end of a failed attempt's output (``--output``, on our disk when the node shares it),
        for the classification every backend shares (controller/model/failures.py): read once,
        when the end is first seen, the way the local runtime reads it (no link, no fifo, one
        hard link, owned by the job's user)."""
        lines, first = read_log_tail(str(self.home.log_file(record.name)), owner=record.log_owner)
        return {"log_tail": tuple(lines), "log_first_line": first}

    def _devices_file(self, name: str) -> Path:
        return self.dir / f"{name}.devices"

    def _reported_devices(self, record: SlurmRecord) -> list[int]:
        """What the job's own CUDA_VISIBLE_DEVICES said (its script writes it at start): Slurm
        forgets a finished job's GRES indices."""
        try:
            text = self._devices_file(record.name).read_text().strip()
        except OSError:
            return []
        return [int(d) for d in text.split(",") if d.strip().isdigit()]

    def _rotate_log(self, name: str, attempt: int) -> None:
        current = self.home.log_file(name)
        if attempt > 1 and os.path.lexists(current):  # a symlink is moved, never followed
            os.replace(current, self.home.log_file(name, attempt - 1))


def check_slurm(env: dict[str, str] | None = None) -> str | None:
    """None when ``squeue --json`` answers; else a one-line reason gflowd prints before exiting."""
    try:
        result = subprocess.run(
            ["squeue", "--json", "--states=all", "--me"],
            capture_output=True,
            text=True,
            env=env,
            timeout=COMMAND_TIMEOUT,
        )
    except FileNotFoundError:
        return "squeue not found: install Slurm's client commands (Debian: slurm-client) or use --backend local"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"squeue did not answer: {exc}"
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return f"squeue failed: {lines[-1] if lines else result.returncode} (is slurmctld up? SLURM_CONF?)"
    try:
        parse_squeue(result.stdout)
    except ValueError:
        return "squeue --json gave no JSON: the Slurm backend needs Slurm 21.08 or newer"
    return None
