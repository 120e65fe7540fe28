"""Starting the job: fork it (it waits on a pipe), write the run record, let it exec; or, for a job
of our own user without a terminal, spawn it directly (posix_spawn). Either way a job never runs
unrecorded. Standard library only."""

from __future__ import annotations

import errno
import os
import sys
import time

try:  # in the project; run as a plain file (shim/main.py), the modules beside this one and above it
    from controller.act.runtime import record
    from controller.act.runtime.control_socket import open_terminal
    from controller.act.runtime.holds import DISK_FULL
    from controller.act.runtime.shim.child import (
        JOB_DEFAULT_SIGNALS,
        UnsafeLogFile,
        become_job,
        find_program,
        home_cgroups,
        job_environment,
        join_cgroup,
        open_job_log,
        start_failure,
    )
    from controller.act.runtime.shim.procfs import own_start_ticks, start_ticks
except ImportError:
    import record  # type: ignore[no-redef]
    from child import (  # type: ignore[no-redef]
        JOB_DEFAULT_SIGNALS,
        UnsafeLogFile,
        become_job,
        find_program,
        home_cgroups,
        job_environment,
        join_cgroup,
        open_job_log,
        start_failure,
    )
    from control_socket import open_terminal  # type: ignore[no-redef]
    from holds import DISK_FULL  # type: ignore[no-redef]
    from procfs import own_start_ticks, start_ticks  # type: ignore[no-redef]


TYPE_CHECKING = False  # not typing's: the shim loads the standard library's least (type checkers read it as theirs)
if TYPE_CHECKING:
    from typing import Any

    from controller.act.runtime.control_socket import Control


class NotLaunched(Exception):
    """The attempt could not be recorded (e.g. the disk is full): the job must not run."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def describe_error(exc: OSError) -> str:
    """``No space left on device (ENOSPC) writing /h/run/jobs/a/run-1.json``."""
    name = errno.errorcode.get(exc.errno or 0, "")
    where = f" writing {os.fsdecode(exc.filename)}" if exc.filename else ""
    return f"{exc.strerror or exc}{f' ({name})' if name else ''}{where}"


def waitpid(pid: int) -> int | None:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return None


class JobStart:
    """The supervisor's start of its job (mixed into ``Supervisor``, whose fields it sets: ``job_pid``,
    ``job_status``, ``stuck_in_cgroup``; the run record goes into ``fd``)."""

    record_path: str
    fd: int | None
    spec: dict[str, Any]
    control: Control | None
    job_pid: int
    job_status: int | None
    stuck_in_cgroup: bool

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
            become_job(spec, log_fd, go_r, go_w, err_r, err_w, terminal[1] if terminal else None)
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
            waitpid(pid)
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
            self.job_status = waitpid(pid)
            code, _, message = b"".join(chunks).decode(errors="replace").partition(" ")
            return (int(code) if code.isdigit() else 126), message
        return 0, ""

    def _write_run(self, job_pid: int | None) -> None:
        """The run record, in place, not fsync'd: it must survive gflowd crashing (the page cache
        does), not the machine crashing (which kills the job too); this keeps ~1 ms off every start."""
        assert self.fd is not None
        record.write_run(
            self.fd,
            {
                "name": self.spec.get("name"),
                "attempt": self.spec.get("attempt"),
                "supervisorPid": os.getpid(),
                "supervisorStartTicks": own_start_ticks(),
                "jobPid": job_pid,
                "jobStartTicks": start_ticks(job_pid) if job_pid else None,
                "startedAt": time.time(),
            },
        )

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
        return (pids is None or pids >= 2) and home_cgroups(procs) is not None

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
            program = find_program(spec["argv"][0], env)
            step = "cgroup"
            join_cgroup(procs, keep="folder")
            try:
                step = "command"
                pid = os.posix_spawn(
                    program,
                    spec["argv"],
                    env,
                    setsid=True,
                    setsigdef=JOB_DEFAULT_SIGNALS,
                    file_actions=[
                        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                        (os.POSIX_SPAWN_DUP2, log_fd, 1),
                        (os.POSIX_SPAWN_DUP2, log_fd, 2),
                    ],
                )
            finally:
                if procs:
                    self._step_out(procs)
        except Exception as exc:
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
            join_cgroup(home_cgroups(procs) or [], keep="file")
        except OSError as exc:
            self.stuck_in_cgroup = True
            sys.stderr.write(f"supervisor: cannot leave the attempt's cgroup: {exc}\n")
