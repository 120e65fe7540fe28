"""The job's side of the shim: what runs in the forked child before it execs the job (join the
attempt's cgroup, drop privileges, enter the working directory, read the submitter's environment),
the job's log file opened safely, and the start errors a user reads. Standard library only."""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import warnings  # noqa: F401  os.execvpe imports it lazily; after setuid the stdlib may be unreadable

try:  # in the project; run as a plain file (shim/main.py), the module in the folder above and beside
    from controller.act.runtime.control_socket import enter_terminal
    from controller.act.runtime.shim import cgroup_files
except ImportError:
    import cgroup_files  # type: ignore[no-redef,import-not-found]
    from control_socket import enter_terminal  # type: ignore[no-redef]


class UnsafeLogFile(Exception):
    """The job's log path is something we must not write through (a symlink, a FIFO, a hard link)."""


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


def become_job(
    spec: dict, log_fd: int, go_r: int, go_w: int, err_r: int, err_w: int, tty_fd: int | None = None
) -> None:
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
            if gid is None:  # gflowd names both; never run under a group that was not chosen
                raise OSError(errno.EINVAL, "the launch record names a uid but no gid")
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
        return (
            (127, f"workingDir {spec.get('cwd')} does not exist")
            if missing
            else (126, f"workingDir {spec.get('cwd')}: {text}{who}")
        )
    if step == "command" and spec.get("condaEnv"):
        what = f"condaEnv {spec['condaEnv']}: conda ({argv[0]})"
        return (127, f"{what} not found") if missing else (126, f"{what}: {text}{who}")
    if step == "command":
        return (127, f"command not found: {argv[0]!r}") if missing else (126, f"command {argv[0]!r}: {text}{who}")
    if step == "user":
        return 126, f"cannot switch to uid {spec.get('uid')}: {text}"
    if step == "environment":
        return (
            126,
            f"the submitter's environment {spec.get('envFile')}: {text} (resubmit, or remove the manifest's annotation gflow.dev/environment)",
        )
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


def join_cgroup(procs: list[str], keep: str = "") -> None:
    """In the job's forked child, before exec: move this process into the attempt's cgroup, one
    ``cgroup.procs`` per hierarchy (gflowd made them and wrote the limits first). Also what
    ``gflowctl exec`` does to run a command inside a job's limits, and how a supervisor steps in
    to spawn its job and back out (``keep``: what it keeps open for the next time, ``cgroup_files``)."""
    for path in procs:
        cgroup_files.join(path, keep)


JOB_DEFAULT_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ)
_home: dict[str, str] | None = None  # hierarchy mount point -> this process's own cgroup.procs there


def home_cgroups(procs: list[str]) -> list[str] | None:
    """This process's own ``cgroup.procs`` in the hierarchy of each of ``procs`` (an attempt's), to
    step back out after spawning its job inside; None if one is unknown."""
    global _home
    if _home is None:
        try:
            discover = cgroups_package().discover
            with open("/proc/self/mountinfo") as mountinfo, open("/proc/self/cgroup") as own:
                located = discover.locate(
                    discover.parse_mountinfo(mountinfo.read()), discover.parse_proc_cgroup(own.read())
                )
        except (OSError, ImportError, ValueError):
            located = {}
        _home = {
            where.mount.point: os.path.join(where.path, "cgroup.procs")
            for where in located.values()
            if where.path is not None and where.mount is not None
        }
    found = []
    for path in procs:
        mine = _home_of(path.rsplit("/", 2)[0])  # .../PARENT/ATTEMPT/cgroup.procs
        if mine is None:
            return None
        if mine not in found:
            found.append(mine)
    return found


_home_by_parent: dict[str, str | None] = {}  # an attempt folder's parent -> our cgroup.procs in its hierarchy


def _home_of(parent: str) -> str | None:
    """Our own ``cgroup.procs`` in the hierarchy that holds the folder ``parent`` (the longest
    mount point above it); the answer kept per folder: every attempt of a home shares its parent."""
    assert _home is not None
    if parent not in _home_by_parent:
        if len(_home_by_parent) >= 64:
            _home_by_parent.clear()
        point = max(
            (point for point in _home if (parent + "/").startswith(point.rstrip("/") + "/")), key=len, default=None
        )
        _home_by_parent[parent] = None if point is None else _home[point]
    return _home_by_parent[parent]


def find_program(name: str, env: dict) -> str:
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
    (``python -I -S shim/main.py``) the project is not importable: the package in the folder above is.
    Found once (a failed import searches every folder on the path)."""
    global _cgroups
    if _cgroups is None:
        _cgroups = _find_cgroups_package()
    return _cgroups


def _find_cgroups_package():
    try:
        from controller.act.runtime import cgroups  # lazy: only jobs with a cgroup need it
    except ImportError:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # act/runtime/, above shim/
        if here not in sys.path:
            sys.path.insert(0, here)
        import cgroups  # type: ignore[no-redef]  # lazy: the package beside this file, stdlib only
    return cgroups


_last_cgroups: tuple[dict, str, object] | None = None  # (probe, group, Cgroups): every attempt of a home has the same


def attempt_cgroup(record: dict | None):
    """The attempt's cgroup as the launch record describes it (``AttemptCgroup``), or None. The
    ``Cgroups`` of the last launch record is kept while the next one's probe and group are equal
    (comparing the two dicts costs far less than building a ``Probe`` again for each attempt)."""
    global _last_cgroups
    if not record:
        return None
    package = cgroups_package()
    probe, group = record["probe"], record["group"]
    if _last_cgroups is None or _last_cgroups[0] != probe or _last_cgroups[1] != group:
        fs = package.Cgroupfs(opener=cgroup_files.open_in_group)  # its counters read relative to the group folder
        _last_cgroups = (probe, group, package.Cgroups(package.Probe.from_dict(probe), group, fs=fs))
    return package.AttemptCgroup(_last_cgroups[2], record["name"], record.get("keys"))
