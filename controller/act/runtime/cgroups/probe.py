"""Which cgroup mode is usable here, per feature, with one sentence for everything that is not.

Modes, tried in this order:

- ``v2``: our own cgroup v2 directory is writable (root, or delegated to us) and offers the memory
  controller in ``cgroup.controllers``; attempts live under it.
- ``v1``: the cgroup v1 memory, cpuset, pids, devices, cpuacct and freezer hierarchies, each used
  where our own cgroup in it is writable. A writable cgroup v2 mounted beside them (hybrid) is used
  too, without controllers, for ``cgroup.kill`` and ``cpu.stat``.
- ``none``: neither; ``reason`` says why in one sentence (not root and not delegated, read-only,
  absent).

``probe()`` only reads; creating directories and enabling controllers is ``Cgroups.prepare()``.
``resolve()`` applies the operator's ``auto|required|off``. Features: ``memory`` (limit, OOM kill
count, peak), ``cpuset`` (cores), ``pids`` (process cap), ``devices`` (GPU deny-list), ``cputime``
(accounting), ``freezer`` and ``kill`` (``cgroup.kill``: kill every member at once).
"""

from __future__ import annotations

import os

from . import bpf_devices
from .discover import UNIFIED, Located, locate, parse_mountinfo, parse_proc_cgroup
from .fs import CgroupError, Cgroupfs

FEATURES = ("memory", "cpuset", "pids", "devices", "cputime", "freezer", "kill")
MODES = ("auto", "required", "off")
V2_CONTROLLERS = ("memory", "pids", "cpuset")  # the cgroup v2 controllers we enable for attempts

KILL_MIN_KERNEL = (5, 14)  # cgroup.kill appeared in Linux 5.14


class Feature:
    """One feature: available, and where (a directory), or why not (one sentence)."""

    __slots__ = ("directory", "name", "reason")

    def __init__(self, name: str, directory: str | None = None, reason: str = ""):
        self.name = name
        self.directory = directory
        self.reason = reason

    @property
    def available(self) -> bool:
        return self.directory is not None

    def __repr__(self) -> str:
        return f"Feature({self.name}, {self.directory or 'unavailable: ' + self.reason})"


class Probe:
    """The result of probing: ``mode``, the base directory per hierarchy, and every feature."""

    __slots__ = ("dirs", "features", "mode", "reason")

    def __init__(self, mode: str, dirs: dict[str, str], features: dict[str, Feature], reason: str = ""):
        self.mode = mode  # "v2" | "v1" | "none"
        self.dirs = dirs  # hierarchy key (a v1 controller, or "unified") -> our base directory in it
        self.features = features
        self.reason = reason  # why mode is "none"

    @classmethod
    def none(cls, reason: str) -> Probe:
        return cls("none", {}, {name: Feature(name, reason=reason) for name in FEATURES}, reason)

    @property
    def usable(self) -> bool:
        """What ``required`` demands: a mode, and the memory controller in it."""
        return self.mode != "none" and self.features["memory"].available

    def available(self) -> list[str]:
        return [name for name in FEATURES if self.features[name].available]

    def unavailable(self) -> dict[str, str]:
        return {name: f.reason for name, f in self.features.items() if not f.available}

    def summary(self) -> str:
        """One line for the log and ``gflowctl get node``."""
        if self.mode == "none":
            return f"cgroups unavailable: {self.reason}"
        reasons: dict[str, list[str]] = {}  # one sentence may cover several features: say it once
        for name, reason in self.unavailable().items():
            reasons.setdefault(reason, []).append(name)
        missing = "".join(f"; no {', '.join(names)}: {reason}" for reason, names in reasons.items())
        return f"cgroup {self.mode}: {', '.join(self.available())}{missing}"

    def to_dict(self) -> dict:
        """Plain data for a launch file: a supervisor rebuilds the probe without probing again."""
        return {
            "mode": self.mode,
            "dirs": dict(self.dirs),
            "features": {n: {"directory": f.directory, "reason": f.reason} for n, f in self.features.items()},
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Probe:
        features = {n: Feature(n, f.get("directory"), f.get("reason", "")) for n, f in data.get("features", {}).items()}
        for name in FEATURES:
            features.setdefault(name, Feature(name, reason="not probed"))
        return cls(data.get("mode", "none"), dict(data.get("dirs", {})), features, data.get("reason", ""))

    def __repr__(self) -> str:
        return f"Probe({self.summary()})"


def unwritable(directory: str, files: tuple[str, ...] = ("cgroup.procs",)) -> str:
    """Why we cannot manage cgroups below ``directory`` (one sentence), or "" when we can."""
    if not os.path.isdir(directory):
        return f"{directory} does not exist"
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return f"{directory} is on a read-only mount"
    except OSError as exc:
        return f"cannot stat {directory}: {exc.strerror}"
    for target in (directory, *(os.path.join(directory, name) for name in files)):
        if not os.access(target, os.W_OK):
            return f"{target} is not writable by uid {os.geteuid()} (not root, and not delegated to this user)"
    return ""


def _kernel_at_least(version: tuple[int, int]) -> bool:
    release = os.uname().release.split("-")[0].split(".")
    try:
        return (int(release[0]), int(release[1])) >= version
    except (IndexError, ValueError):
        return False


def _kill_feature(unified: str | None, why_not: str) -> Feature:
    if unified is None:
        return Feature("kill", reason=why_not)
    if not _kernel_at_least(KILL_MIN_KERNEL):
        return Feature("kill", reason="cgroup.kill needs Linux 5.14; kill_all freezes the cgroup and signals")
    return Feature("kill", unified)


def probe_v2(base: str, fs: Cgroupfs | None = None) -> Probe:
    """cgroup v2 with ``base`` (our own cgroup, or a delegated one) as the parent of gflow's cgroups."""
    fs = fs or Cgroupfs()
    problem = unwritable(base, ("cgroup.procs", "cgroup.subtree_control"))
    if problem:
        return Probe.none(f"cgroup v2: {problem}")
    try:
        offered = set(fs.read(os.path.join(base, "cgroup.controllers")).split())
    except CgroupError as exc:
        return Probe.none(f"cgroup v2: {exc}")
    if "memory" not in offered:
        listed = " ".join(sorted(offered)) or "none"
        return Probe.none(
            f"cgroup v2 at {base} offers no memory controller (cgroup.controllers: {listed}): "
            "the controllers are bound to cgroup v1 or not delegated"
        )
    features = {name: Feature(name, reason="") for name in FEATURES}
    for name in V2_CONTROLLERS:
        if name in offered:
            features[name] = Feature(name, base)
        else:
            features[name] = Feature(name, reason=f"cgroup v2 at {base} does not offer the {name} controller")
    bpf_problem = bpf_devices.unavailable_reason(base)  # root and a kernel with cgroup BPF: ~1 ms
    features["devices"] = Feature("devices", base) if not bpf_problem else Feature("devices", reason=bpf_problem)
    features["cputime"] = Feature("cputime", base)  # cpu.stat usage_usec is core: no controller needed
    features["freezer"] = Feature("freezer", base)  # cgroup.freeze is core too (Linux 5.2)
    features["kill"] = _kill_feature(base, "")
    return Probe("v2", {UNIFIED: base}, features)


_V1_FEATURE = {"memory": "memory", "cpuset": "cpuset", "pids": "pids", "devices": "devices", "freezer": "freezer"}


def probe_v1(located: dict[str, Located]) -> Probe:
    """cgroup v1, one hierarchy per controller, plus cgroup v2 beside it for kill and CPU time."""
    dirs: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for key, where in located.items():
        if where.path is None:
            reasons[key] = where.reason
            continue
        problem = (
            f"{where.path} is on a read-only mount" if where.mount and where.mount.read_only else unwritable(where.path)
        )
        if problem:
            reasons[key] = problem
        else:
            dirs[key] = where.path
    features: dict[str, Feature] = {}
    for feature, key in _V1_FEATURE.items():
        features[feature] = (
            Feature(feature, dirs[key])
            if key in dirs
            else Feature(feature, reason=reasons.get(key, f"no {key} hierarchy"))
        )
    if "cpuacct" in dirs:
        features["cputime"] = Feature("cputime", dirs["cpuacct"])
    elif UNIFIED in dirs:
        features["cputime"] = Feature("cputime", dirs[UNIFIED])
    else:
        features["cputime"] = Feature("cputime", reason=reasons.get("cpuacct", "no cpuacct hierarchy"))
    features["kill"] = _kill_feature(
        dirs.get(UNIFIED),
        f"no writable cgroup v2 for cgroup.kill ({reasons.get(UNIFIED, 'absent')}); kill_all freezes and signals",
    )
    if not any(features[name].available for name in ("memory", "cpuset", "pids", "devices")):
        first = next(iter(reasons.values()), "no cgroup v1 hierarchy")
        return Probe.none(f"cgroup v1: {first}")
    return Probe("v1", dirs, features)


def probe(proc: str = "/proc/self", fs: Cgroupfs | None = None) -> Probe:
    """Find our cgroups from ``proc``/cgroup and ``proc``/mountinfo and probe v2, then v1."""
    fs = fs or Cgroupfs()
    try:
        mounts = parse_mountinfo(fs.read(os.path.join(proc, "mountinfo")))
        own = parse_proc_cgroup(fs.read(os.path.join(proc, "cgroup")))
    except CgroupError as exc:
        return Probe.none(str(exc))
    located = locate(mounts, own)
    unified = located[UNIFIED]
    v2 = probe_v2(unified.path, fs) if unified.path else Probe.none(unified.reason)
    if v2.mode == "v2":
        return v2
    v1 = probe_v1(located)
    if v1.mode == "v1":
        return v1
    return Probe.none(f"{v2.reason}; and {v1.reason}")


def resolve(request: str, found: Probe | None = None) -> Probe:
    """Apply ``--cgroups auto|required|off``; ``required`` raises ``CgroupError`` saying why not."""
    if request not in MODES:
        raise CgroupError(f"--cgroups must be one of {', '.join(MODES)}, not {request!r}")
    if request == "off":
        return Probe.none("cgroups are off (--cgroups off)")
    found = found if found is not None else probe()
    if request == "required" and not found.usable:
        why = found.reason if found.mode == "none" else found.features["memory"].reason
        raise CgroupError(f"--cgroups required, but {why}")
    return found
