"""What the local backend writes to launch an attempt: the launch record (``launch_record``, the
decision, in ``record.py``'s format), the files beside it, and the stop and limits requests."""

from __future__ import annotations

import errno
import json
import os
import pwd
import socket
import time
from pathlib import Path

from controller.act.runtime.backends.local.attempt import Attempt, boot_id
from controller.act.runtime.command import LaunchError, build_process
from controller.act.runtime.login import Account, SystemFiles, account_of, login_env
from controller.act.runtime.orphans import MARKER_VARIABLE
from controller.api.export import ENV_ANNOTATION
from controller.model.plan import Launch
from controller.paths import Home

MASTER_PORT_BASE = 29500


def launch_record(
    launch: Launch, attempt: Attempt, home: Home, login_files: SystemFiles, notify_path: str
) -> tuple[dict, str | None]:
    """The launch record (what the supervisor runs, and how) and the script's text. Writes nothing.
    Raises LaunchError for a user's error (an unknown owner, a missing workingDir...)."""
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
    if switch and entry is not None:  # (switch without an entry raised above)
        uid, gid = entry.pw_uid, entry.pw_gid
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    account = account_of(entry) if entry is not None else Account(os.geteuid(), str(os.geteuid()), "/", "/bin/sh")
    # a job never sees gflowd's environment: its owner's login basics (login.py), then its own
    env = login_env(account, login_files, tty=bool(launch.job.spec.tty))
    basics = set(env)
    env["GFLOW_HOME"] = str(home.root)  # gflow's own: gflowctl in a job finds this instance
    script_path = attempt.path("sh")
    env_file = submitted_env_file(launch.job)
    # another user's job: its supervisor looks for the workingDir and the command as that user;
    # a job with the submitter's environment: its supervisor looks on that PATH
    process = build_process(
        launch,
        env,
        script_path,
        attempt.master_port,
        home=account.home,
        check=not switch,
        check_command=not switch and env_file is None,
    )
    # every process of the attempt inherits this: how its tree is found should its supervisor die
    process.env[MARKER_VARIABLE] = f"{launch.name}.{launch.attempt}.{os.urandom(8).hex()}"
    spec = launch.job.spec
    checkpoint = checkpoint_launch(launch, home, uid)
    if checkpoint is not None:
        process.env.update(checkpoint_env(launch, checkpoint["file"], checkpoint["signal"]))
    # the submitter's environment wins over the login basics only: spec.env and gflow's win over it
    above = sorted(k for k in process.env if k not in basics or k in spec.env)
    return {
        "name": launch.name,
        "attempt": launch.attempt,
        "generation": launch.generation,
        "argv": process.argv,
        "env": process.env,
        "cwd": process.cwd,
        "log": str(home.log_file(launch.name)),
        "uid": uid,
        "user": account.name,  # named in a start error
        "gid": gid,
        "groups": groups,
        "timeLimit": spec.time_limit,
        "memoryLimit": spec.resources.memory,
        "grace": spec.termination_grace_period if spec.termination_grace_period is not None else 10.0,
        "notify": notify_path,
        "decidedAt": time.time(),
        "bootId": boot_id(),  # a later gflowd tells a job lost to a reboot from one lost to a crash
        "runHash": launch.job.run_hash,
        "failedBefore": launch.failed,  # the retries used: a restart that finds only this record counts them
        "devices": list(launch.devices),
        "deviceUUIDs": list(launch.device_uuids),
        "condaEnv": spec.conda_env or None,
        "cpus": list(launch.cpus),
        "deviceMinors": list(launch.device_minors),
        "gpuMinors": list(launch.gpu_minors),
        "amdMinors": list(launch.amd_minors),
        "amdGpuMinors": list(launch.amd_gpu_minors),
        "migIds": [list(ids) for ids in launch.mig_ids],
        "migKnown": [list(ids) for ids in launch.mig_known],
        "pidsLimit": spec.resources.pids,
        "tty": spec.tty,
        "envFile": env_file,  # read by the supervisor as the job's user (shim/child.py)
        "envAbove": above if env_file else None,
        # attach and exec: in a 0700 folder of the job's user (the shim makes and serves it)
        "control": str(home.control_socket(uid if uid is not None else os.geteuid(), launch.name)),
        "checkpoint": checkpoint,  # the handshake the supervisor keeps (shim/checkpoint.py)
    }, process.script


def checkpoint_launch(launch: Launch, home: Home, uid: int | None) -> dict | None:
    """spec.checkpoint as the supervisor keeps it, with the confirmation file's path (made by the supervisor)."""
    wanted = launch.job.spec.checkpoint
    if wanted is None:
        return None
    socket_path = home.control_socket(uid if uid is not None else os.geteuid(), launch.name)
    return {
        "signal": wanted.signal,
        "before": wanted.before,
        "grace": wanted.grace,
        "scope": wanted.scope,
        "file": str(socket_path.with_suffix(".checkpoint")),
    }


def checkpoint_env(launch: Launch, confirmation_file: str, signal_name: str) -> dict[str, str]:
    """What a checkpointing job is told (docs/checkpoint.md): where to confirm, how many attempts
    came before (as SLURM_RESTART_COUNT), and whether an earlier one confirmed a checkpoint."""
    env = {
        "GFLOW_CHECKPOINT_FILE": confirmation_file,
        "GFLOW_CHECKPOINT_SIGNAL": signal_name,  # USR1: what to trap
        "GFLOW_RESTART_COUNT": str(max(launch.attempt - 1, 0)),
    }
    if launch.resume:
        env["GFLOW_RESUME"] = "1"
    return env


def write_request(path: Path, request: dict) -> None:
    """A stop or limits request, read by the supervisor only after the signal that follows it:
    written in place, no temp file (whose leftovers would need a listing of the folder to find)."""
    write_file(path, json.dumps(request).encode(), 0o644)


def write_file(path: Path, data: bytes, mode: int, uid: int | None = None, gid: int | None = None) -> None:
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


def port_free(port: int) -> bool:
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
