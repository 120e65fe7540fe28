"""Limits the kernel enforces: a cgroup per attempt for memory, cores, processes and devices.

The layer the supervisor calls (issue 18). It owns gflow's cgroups and nothing else: it does not
decide limits (the scheduler does) nor watch jobs (the supervisor does).

    found = resolve("auto")                 # probe(): v2, v1 or none, each feature with a reason
    cgroups = Cgroups(found); cgroups.prepare()
    attempt = cgroups.create("train-3", Limits(memory=8 << 30, cpus={0, 1}, pids=512,
                                               deny_devices=gpu_deny_rules([1])))
    # in the forked child, before exec:   attempt.join(0)
    attempt.stats().oom_kills; attempt.kill_all(); attempt.remove()
    # after a restart:                   cgroups.adopt("train-3")

``setup()`` does the first two lines with the operator's ``--cgroups auto|required|off``.
Modules: ``discover`` (where our cgroups are, from /proc), ``probe`` (what is usable, and why not),
``devices`` (the GPU deny-list), ``attempt`` (the per-attempt cgroup), ``fs`` (the I/O edge).
Standard library only, no import from the rest of the project: the supervisor stays cheap to start
(plain classes with ``__slots__``, not dataclasses, which cost ~15 ms to import).
"""

from __future__ import annotations

from .attempt import AttemptCgroup, Cgroups, Limits, Stats, check_name, format_cpus, parse_cpus
from .devices import DeviceRule, gpu_deny_rules, gpu_minors_in
from .fs import CgroupError, Cgroupfs
from .probe import FEATURES, MODES, Feature, Probe, probe, probe_v1, probe_v2, resolve

__all__ = [
    "FEATURES",
    "MODES",
    "AttemptCgroup",
    "CgroupError",
    "Cgroupfs",
    "Cgroups",
    "DeviceRule",
    "Feature",
    "Limits",
    "Probe",
    "Stats",
    "check_name",
    "format_cpus",
    "gpu_deny_rules",
    "gpu_minors_in",
    "parse_cpus",
    "probe",
    "probe_v1",
    "probe_v2",
    "resolve",
    "setup",
]


def setup(
    request: str, group: str = "gflow", found: Probe | None = None, fs: Cgroupfs | None = None
) -> tuple[Cgroups | None, Probe]:
    """``--cgroups auto|required|off``: the prepared cgroups (or None) and the probe to report.

    ``auto`` falls back to None with the probe's one-line reason (the caller logs it once and
    polls RSS as before); ``required`` raises ``CgroupError`` with that line instead.
    """
    found = resolve(request, found)
    if found.mode == "none":
        return None, found
    cgroups = Cgroups(found, group, fs)
    try:
        cgroups.prepare()
    except CgroupError as exc:
        if request == "required":
            raise CgroupError(f"--cgroups required, but {exc}") from None
        return None, Probe.none(str(exc))
    return cgroups, found
