"""The local backend's cgroups: the systemd scope its supervisors live in, the group of this
home's attempt cgroups, and each attempt's cgroup from its launch to its removal (``AttemptCgroups``)."""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import pwd
from collections.abc import Iterable
from pathlib import Path

from controller.act.runtime import record
from controller.act.runtime.backends.local.attempt import Attempt
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
    systemd_scope,
)
from controller.act.runtime.cgroups.devices import amd_deny_rules, mig_caps_deny_rules
from controller.act.runtime.cgroups.systemd_scope import Scope
from controller.paths import Home

log = logging.getLogger("gflowd.runtime")
# Ended attempts' cgroups are removed by gflowd once a pass starts nothing, or REAP_QUIET after a
# pass that only ended some (``AttemptCgroups.reap``), not by their supervisors at the job's end: every rmdir takes the kernel's one cgroup lock (and a
# memory cgroup's teardown is heavy), which a flood's starts and joins queue on (a 1,000-job
# drain: ~14 % faster without them). An empty memory cgroup costs the kernel ~14 KiB plus ~2 KiB
# per CPU, so at most UNREMOVED_BYTES of them wait; beyond that the oldest go at once.
UNREMOVED_BYTES = 64 << 20
REAP_CHUNK = 128  # attempts' cgroups removed per turn of the idle loop (~35 ms), between passes
REAP_QUIET = 0.5  # seconds without a pass that ended attempts before their cgroups go (a drain's tail)


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
        log.info(
            "cgroup v1 under systemd: jobs live in gflowd's own cgroup; give its unit KillMode=process "
            "(docs/multi-user.md) or a stop of the unit stops them"
        )
    return scope


def start_cgroups(
    request: str, home: Home, found: Probe | None = None, fs: Cgroupfs | None = None
) -> tuple[Cgroups | None, Probe]:
    """``--cgroups auto|required|off`` -> the prepared cgroups (None: polling) and what to say about
    them, said once in the log. Raises CgroupError for ``required`` where they cannot be used.
    ``found`` and ``fs``: a probe and a cgroupfs other than this machine's (tests; or the probe of
    a systemd scope's directory)."""
    cgroups, found = setup(request, cgroup_group(home.root), found, fs)
    if cgroups is None:
        if request != "off":
            log.warning(
                "%s; memory limits are enforced by polling each job's RSS every 100 ms instead", found.summary()
            )
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
        log.warning(
            "your user manager delegates only some of the controllers gflow limits jobs with (%s): %s",
            found.summary(),
            systemd_scope.user_hint(user),
        )
    return found


class AttemptCgroups:
    """The attempts' cgroups (docs/cgroups.md): made with their limits before a launch, found again
    for an adopted attempt, and removed once its end is recorded, in chunks between passes."""

    def __init__(
        self,
        home: Home,
        request: str = "auto",
        device_dir: str = "/dev",
        probe: Probe | None = None,
        fs: Cgroupfs | None = None,
        proc_dir: str = "/proc",
        sys_dir: str = "/sys",
    ):
        self.request = request
        self.device_dir, self.proc_dir, self.sys_dir = device_dir, proc_dir, sys_dir
        self.scope = start_scope(request, home) if probe is None and fs is None else None
        if self.scope is not None:
            probe = scope_probe(self.scope)
        self.cgroups, self.probe = start_cgroups(request, home, probe, fs)
        self.unremoved: collections.deque[Attempt] = collections.deque()  # ended; their cgroups wait (``reap``)
        self.max_unremoved = UNREMOVED_BYTES // ((14 + 2 * (os.cpu_count() or 1)) << 10)

    def make(self, name: str, number: int, spec: dict) -> dict:
        """The attempt's cgroup with its limits written, before anything can join it; the launch
        file carries what the supervisor (and ``gflowctl exec``) needs to join and read it."""
        assert self.cgroups is not None
        features = self.probe.features
        memory = spec.get("memoryLimit") if features["memory"].available else None
        cpus = frozenset(spec.get("cpus") or ()) if features["cpuset"].available and spec.get("cpus") else None
        pids = spec.get("pidsLimit") if features["pids"].available else None
        deny = None
        if features["devices"].available:  # every GPU but the bound ones; other devices as gflowd's
            deny = gpu_deny_rules(spec.get("deviceMinors") or (), spec.get("gpuMinors") or (), self.device_dir)
            mig = {key: [(g, i, c) for g, i, c in spec.get(key) or ()] for key in ("migIds", "migKnown")}
            deny += mig_caps_deny_rules(mig["migIds"], mig["migKnown"], self.proc_dir, self.device_dir)
            amd = spec.get("amdMinors") or (), spec.get("amdGpuMinors") or ()
            deny += amd_deny_rules(*amd, self.device_dir, self.sys_dir)
        attempt = self.cgroups.create(
            f"{name}-{number}", Limits(memory=memory, cpus=cpus, pids=pids, deny_devices=deny)
        )
        return {
            "name": attempt.name,
            "group": self.cgroups.group,
            "probe": self.probe.to_dict(),
            "keys": list(attempt.dirs),  # the hierarchies it joins (``Cgroups.hierarchies``)
            "procs": [os.path.join(directory, "cgroup.procs") for directory in attempt.dirs.values()],
            "memory": memory is not None,
            "leave": True,  # its supervisor leaves the emptied cgroup to gflowd (UNREMOVED_BYTES)
        }

    def of(self, attempt: Attempt) -> AttemptCgroup | None:
        record = (attempt.spec or {}).get("cgroup")
        if not record or self.cgroups is None:
            return None
        try:
            return self.cgroups.adopt(record["name"], record.get("keys"))  # no keys: written before they were
        except CgroupError:
            return None

    def ended(self, attempt: Attempt) -> None:
        """After the attempt's end is recorded: its cgroup, unless its supervisor removed it, goes
        on the list ``reap`` works through."""
        if attempt.cgroup_removed:
            return  # not even looked for: a missing cgroup's seven lookups cost ~0.3 ms
        if (attempt.spec or {}).get("cgroup"):
            self.unremoved.append(attempt)

    def reap_ended(self, attempts: Iterable[Attempt]) -> None:
        """gflowd is stopping: the cgroups of every attempt that ended, its end recorded or not yet
        (its exit record holds the counters), go now; a running job's stay with it."""
        waiting = {id(attempt) for attempt in self.unremoved}
        for attempt in attempts:
            if attempt.cgroup_removed or not (attempt.spec or {}).get("cgroup") or id(attempt) in waiting:
                continue
            if attempt.result is not None or (record.read(str(attempt.record), ("exit",)) or {}).get("exit"):
                self.unremoved.append(attempt)
        self.reap(len(self.unremoved))

    def reap(self, chunk: int) -> None:
        """Ended attempts' cgroups, oldest first: those beyond ``max_unremoved``, or ``chunk`` of
        them if more. A process still in one (none should be: its supervisor saw the tree gone) is
        killed first."""
        count = min(len(self.unremoved), max(len(self.unremoved) - self.max_unremoved, chunk))
        for _ in range(count):
            attempt = self.unremoved.popleft()
            cgroup = self.of(attempt)
            if cgroup is None:
                continue
            try:
                if cgroup.pids():
                    cgroup.kill_all(timeout=5.0)
                cgroup.remove(timeout=5.0)
            except CgroupError as exc:
                log.warning("job/%s: cannot remove its cgroup: %s", attempt.name, exc)

    def remove_strays(self, known: set[str | None]) -> None:
        """Cgroups no launch record names (``known``): made by a gflowd that died before writing the record."""
        if self.cgroups is None:
            return
        for name in self.cgroups.names():
            if name in known:
                continue
            cgroup = self.cgroups.adopt(name)
            try:
                if cgroup is not None and not cgroup.pids():
                    cgroup.remove(timeout=2.0)
            except CgroupError as exc:
                log.warning("cannot remove the stray cgroup %s: %s", name, exc)

    def remove_group(self) -> None:
        """gflowd is stopping: the group goes too, unless running jobs keep it."""
        if self.cgroups is not None and not self.cgroups.names():
            try:
                self.cgroups.remove_group()
            except CgroupError:
                pass

    def limits_summary(self) -> str:
        """One line for ``gflowctl get node``: what the kernel enforces, or why nothing is."""
        if self.cgroups is None and self.request != "off":
            return f"{self.probe.summary()}; memory polled"
        return self.probe.summary()
