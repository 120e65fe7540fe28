"""Under systemd on cgroup v2: a delegated transient scope that holds gflow's supervisors and jobs.

Why: a service's own cgroup belongs to systemd. If gflowd put jobs in it, `systemctl restart gflowd`
would either kill them (KillMode=control-group) or fail with 219/CGROUP (the new main process goes
into the unit's root cgroup, which has controllers enabled for the jobs' cgroups: cgroup v2's
no-internal-processes rule). systemd's answer (https://systemd.io/CGROUP_DELEGATION/, and Slurm's
``slurmstepd.scope``): processes that must outlive the service live in a *scope* of their own,
registered with ``StartTransientUnit`` (``systemd-run --scope``) and ``Delegate=yes``, whose subtree is then ours.

Layout, per gflow home (``unit`` is ``<group>.scope``, group = the per-home id of ``cgroup_group``)::

    <scope>/supervisors/      the keeper (the scope's first process) and the launcher with its supervisors
    <scope>/<group>/<attempt> one cgroup per attempt (``Cgroups``, with the scope as its base)

The scope is made once per boot and found again by every later gflowd (restart, crash, upgrade);
its keeper (``sleep infinity``) keeps it alive while no job runs. The system manager serves root's
gflowd; an ordinary user's gflowd asks its user manager, which delegates only
what the admin lets it (memory and pids by default).

No D-Bus library and no bus daemon: ``systemd-run --scope`` (``StartTransientUnit`` on the
manager's own socket, then it execs the keeper: the scope's first process is in place the moment
it exists) and ``systemctl show`` ship with systemd. The pure parts (``decide``, ``scope_argv``,
``parse_show``) are functions of data; ``ensure`` is the I/O edge.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time

from .discover import UNIFIED, parse_mountinfo, parse_proc_cgroup
from .fs import CgroupError, Cgroupfs, parse_pids

SUPERVISORS = "supervisors"  # the leaf of the keeper, the launcher and every supervisor
KEEPER = ("sleep", "infinity")
APPEAR_TIMEOUT = 15.0  # seconds for systemd to move the keeper into the new scope (a busy box)
CALL_TIMEOUT = 30.0  # seconds for one systemctl call
DELEGATE_DROPIN = "/etc/systemd/system/user@.service.d/delegate.conf"


class Decision:
    """Whether to use a scope, and on which manager (``system`` | ``user``), or why not."""

    __slots__ = ("manager", "reason")

    def __init__(self, manager: str | None, reason: str = ""):
        self.manager = manager
        self.reason = reason

    def __repr__(self) -> str:
        return f"Decision({self.manager or 'no scope: ' + self.reason})"


def decide(booted: bool, proc_cgroup: str, euid: int) -> Decision:
    """Use a scope when systemd is PID 1 and cgroup v2 is the only hierarchy (no v1 controllers):
    root's gflowd on the system manager, anyone else's on their own user manager."""
    if not booted:
        return Decision(None, "not booted with systemd (/run/systemd/system is absent)")
    own = parse_proc_cgroup(proc_cgroup)
    if UNIFIED not in own:
        return Decision(None, "no cgroup v2 line in /proc/self/cgroup")
    v1 = sorted(key for key in own if key != UNIFIED)
    if v1:
        return Decision(None, f"cgroup v1 controllers are mounted ({', '.join(v1)}): gflowd uses them directly")
    return Decision("system" if euid == 0 else "user")


OOM_POLICY_SINCE = 253  # scopes take OOMPolicy= from systemd 253; before, they ignore OOM kills


def scope_argv(manager: str, unit: str, description: str, systemd_version: int | None = None) -> list[str]:
    """``systemd-run --scope``: registers itself (``StartTransientUnit`` with its own pid, over the
    manager's own socket: no D-Bus daemon needed) as the scope, delegated to us and collected by
    systemd once its last process is gone (a reboot, an admin's stop), then execs the keeper.

    From systemd 253 a scope has an OOM policy, by default ``stop``: one job killed by the kernel
    at its memory limit would make systemd stop the scope, every other job with it. ``continue``
    leaves OOM kills to the job's own cgroup (``memory.oom.group``), as gflow reports them."""
    oom = ["--property=OOMPolicy=continue"] if (systemd_version or 0) >= OOM_POLICY_SINCE else []
    return [
        "systemd-run",
        *(["--user"] if manager == "user" else []),
        "--scope",
        "--quiet",
        "--collect",
        f"--unit={unit}",
        "--property=Delegate=yes",
        *oom,
        f"--description={description}",
        "--",
        *KEEPER,
    ]


def parse_systemd_version(text: str) -> int | None:
    """``systemd 252 (252.39-1~deb12u2)`` (the first line of ``systemctl --version``) -> 252."""
    words = text.split()
    return int(words[1]) if len(words) > 1 and words[0] == "systemd" and words[1].isdigit() else None


def systemd_version() -> int | None:
    try:
        done = subprocess.run(["systemctl", "--version"], capture_output=True, text=True, timeout=CALL_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_systemd_version(done.stdout)


def manager_socket(manager: str) -> str:
    """The manager's own socket, which systemctl and systemd-run use (root, or --user)."""
    if manager == "system":
        return "/run/systemd/private"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    return os.path.join(runtime, "systemd", "private")


def show_argv(manager: str, unit: str) -> list[str]:
    return [
        "systemctl",
        *(["--user"] if manager == "user" else []),
        "show",
        "--property=ActiveState",
        "--property=ControlGroup",
        "--property=Delegate",
        unit,
    ]


def parse_show(text: str) -> dict[str, str]:
    """``Key=Value`` lines of ``systemctl show`` -> a dict (values may contain ``=``)."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def user_hint(user: str) -> str:
    """What an admin enables so that an ordinary user's gflowd gets a delegated scope with limits."""
    return (
        f"ask the admin to run `loginctl enable-linger {user}` (a user manager that outlives your logins) and, "
        f"for limits, to delegate the controllers with a drop-in {DELEGATE_DROPIN} "
        "holding `[Service]` `Delegate=cpu cpuset io memory pids`"
    )


class Scope:
    """The scope found or made: its unit name, cgroup directory and the supervisors' leaf."""

    __slots__ = ("created", "directory", "manager", "unit")

    def __init__(self, unit: str, manager: str, directory: str, created: bool):
        self.unit = unit
        self.manager = manager
        self.directory = directory
        self.created = created

    @property
    def supervisors(self) -> str:
        return os.path.join(self.directory, SUPERVISORS)

    def __repr__(self) -> str:
        return f"Scope({self.unit} at {self.directory})"


def booted() -> bool:
    """sd_booted(3): systemd is PID 1."""
    return os.path.isdir("/run/systemd/system")


def _environment(manager: str) -> dict[str, str]:
    env = dict(os.environ)
    if manager == "user":  # a gflowd started by cron or su may lack it; the user bus lives there
        env.setdefault("XDG_RUNTIME_DIR", f"/run/user/{os.geteuid()}")
    return env


def _run(argv: list[str], manager: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT,
            env=_environment(manager),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CgroupError(f"systemd scope: {argv[0]} failed: {exc}") from None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")


def _unified_mount(fs: Cgroupfs) -> str:
    for mount in parse_mountinfo(fs.read("/proc/self/mountinfo")):
        if mount.fstype == "cgroup2" and mount.root == "/":
            return mount.point
    raise CgroupError("systemd scope: no cgroup2 mount showing the whole hierarchy in /proc/self/mountinfo")


def _cgroup_of(pid: int, fs: Cgroupfs) -> str | None:
    try:
        return parse_proc_cgroup(fs.read(f"/proc/{pid}/cgroup")).get(UNIFIED)
    except CgroupError:
        return None


def _user_manager_problem(manager: str) -> str:
    if manager != "user":
        return ""
    socket = manager_socket(manager)
    if os.path.exists(socket):
        return ""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    return f"no systemd user manager for {user} ({socket} is absent): " + user_hint(user)


def find(unit: str, manager: str, fs: Cgroupfs | None = None) -> Scope | None:
    """The live scope ``unit`` (a gflowd before us made it), or None."""
    fs = fs or Cgroupfs()
    done = _run(show_argv(manager, unit), manager)
    shown = parse_show(done.stdout)
    if done.returncode != 0 or shown.get("ActiveState") != "active" or not shown.get("ControlGroup"):
        return None
    directory = os.path.join(_unified_mount(fs), shown["ControlGroup"].lstrip("/"))
    return Scope(unit, manager, directory, created=False) if os.path.isdir(directory) else None


def create(
    unit: str,
    manager: str,
    description: str,
    fs: Cgroupfs | None = None,
    clock=time.monotonic,
    timeout: float = APPEAR_TIMEOUT,
) -> Scope:
    """Start the keeper through ``systemd-run --scope``; wait until it runs inside the new scope."""
    fs = fs or Cgroupfs()
    argv = scope_argv(manager, unit, description, systemd_version())
    try:  # detached: its own session, none of our descriptors; stderr only until it is in the scope
        keeper = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
            cwd="/",
            env=_environment(manager),
        )
    except OSError as exc:
        raise CgroupError(f"systemd scope: cannot run {argv[0]}: {exc}") from None
    assert keeper.stderr is not None
    try:
        deadline = clock() + timeout
        while True:  # systemd-run execs the keeper once the scope holds it
            where = _cgroup_of(keeper.pid, fs)
            if where is not None and where.rstrip("/").endswith("/" + unit):
                break
            if keeper.poll() is not None:
                said = _first_line(keeper.stderr.read().decode(errors="replace"))
                raise CgroupError(f"systemd scope: systemd-run --scope --unit={unit} failed: {said}")
            if clock() >= deadline:
                raise CgroupError(
                    f"systemd scope: {unit} did not appear within {timeout:g}s "
                    f"(systemd-run, pid {keeper.pid}, is still in {where})"
                )
            time.sleep(0.02)
    except BaseException:
        keeper.kill()
        keeper.wait()
        raise
    finally:
        keeper.stderr.close()
    return Scope(unit, manager, os.path.join(_unified_mount(fs), where.lstrip("/")), created=True)


def settle(scope: Scope, fs: Cgroupfs | None = None) -> None:
    """Every process in the scope's root (the keeper, once) moves to ``supervisors``: the root may then
    hand controllers down (no internal processes). Idempotent; a gflowd killed half-way redoes it."""
    fs = fs or Cgroupfs()
    fs.mkdir(scope.supervisors)
    for pid in parse_pids(fs.read(os.path.join(scope.directory, "cgroup.procs"))):
        try:
            fs.write(os.path.join(scope.supervisors, "cgroup.procs"), str(pid))
        except CgroupError as exc:
            if _cgroup_of(pid, fs) is not None:  # gone meanwhile is fine
                raise CgroupError(f"systemd scope: cannot move pid {pid} out of {scope.directory}: {exc}") from None


def ensure(group: str, fs: Cgroupfs | None = None, decision: Decision | None = None) -> Scope | None:
    """The scope for this gflow home, found or made and settled; None where no scope applies (not
    systemd, or cgroup v1). Raises ``CgroupError`` (one line) when it applies but cannot be had."""
    fs = fs or Cgroupfs()
    if decision is None:
        decision = decide(booted(), fs.read("/proc/self/cgroup"), os.geteuid())
    if decision.manager is None:
        return None
    problem = _user_manager_problem(decision.manager)
    if problem:
        raise CgroupError(problem)
    unit = f"{group}.scope"
    scope = find(unit, decision.manager, fs)
    if scope is None:
        scope = create(unit, decision.manager, f"gflow jobs and supervisors of {group}", fs)
    settle(scope, fs)
    return scope
