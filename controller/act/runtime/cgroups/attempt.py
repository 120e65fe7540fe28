"""Per-attempt cgroups: create with limits, join, list, kill everything, read counters, remove, adopt.

Layout: below our base directory in each hierarchy (``Probe.dirs``) a *group* directory (``gflow``)
holds one cgroup per attempt, named by the caller (``train-3``). On cgroup v1 that is one directory
per controller, all with the same name; on cgroup v2 one directory. Hybrid machines (cgroup v1 plus
a cgroup2 mount without controllers) also get a cgroup v2 directory: membership there gives
``cgroup.kill`` and ``cpu.stat``.

Crash safety: every step is idempotent and every state lives in cgroupfs itself. ``create`` makes
the directories and writes the limits *before* anything joins, so no process ever runs
unconstrained; a ``create`` interrupted half-way leaves directories that ``names()`` lists and that
``adopt()`` returns with ``complete`` False, to be finished by ``create`` again or ``remove``d.

How a job should join: the forked child writes itself (``join(0)``) before it execs, so nothing it
starts can be outside. The supervisor itself stays outside: it is not charged for the job's memory,
and ``kill_all`` (which ``cgroup.kill`` makes atomic) refuses to run from inside the cgroup.
"""

from __future__ import annotations

import errno
import os
import signal
import time

from . import bpf_devices
from .devices import DeviceRule
from .discover import UNIFIED
from .fs import CgroupError, Cgroupfs, parse_keyed, parse_pids
from .probe import V2_CONTROLLERS, Probe

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def check_name(name: str) -> None:
    """A cgroup name is one path component of ``[A-Za-z0-9_.-]``, not starting with a dot."""
    if not name or len(name) > 200 or name[0] == "." or not set(name) <= _NAME_CHARS or name.startswith("cgroup."):
        raise CgroupError(f"bad cgroup name {name!r}: use 1-200 of A-Z a-z 0-9 _ . - not starting with '.'")


def format_cpus(cpus: frozenset[int] | set[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``0-2,5`` (the cpuset list format)."""
    ranges: list[str] = []
    ordered = sorted(cpus)
    start = prev = ordered[0] if ordered else 0
    for cpu in ordered[1:] + [None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(ranges) if ordered else ""


def parse_cpus(text: str) -> frozenset[int]:
    """``0-2,5`` -> ``{0, 1, 2, 5}``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return frozenset(cpus)


class Limits:
    """What the kernel should enforce for one attempt; None: not limited (left as it is when
    ``create`` completes an existing cgroup).

    ``deny_devices`` None leaves device access alone; a list (even empty) is what to deny on top
    of what the parent cgroup allows (the devices controller is wanted either way).
    """

    __slots__ = ("cpus", "deny_devices", "memory", "pids")

    def __init__(
        self,
        memory: int | None = None,
        cpus: frozenset[int] | set[int] | None = None,
        pids: int | None = None,
        deny_devices: list[DeviceRule] | None = None,
    ):
        problems = []
        if memory is not None and (not isinstance(memory, int) or memory < 4096):
            problems.append(f"memory must be a number of bytes >= 4096, not {memory!r}")
        if cpus is not None and (not cpus or not all(isinstance(c, int) and c >= 0 for c in cpus)):
            problems.append(f"cpus must be a non-empty set of CPU numbers, not {cpus!r}")
        if pids is not None and (not isinstance(pids, int) or pids < 1):
            problems.append(f"pids must be a number >= 1, not {pids!r}")
        if deny_devices is not None and not all(isinstance(d, DeviceRule) for d in deny_devices):
            problems.append("deny_devices must be a list of DeviceRule")
        if problems:
            raise ValueError("; ".join(problems))
        self.memory = memory
        self.cpus = frozenset(cpus) if cpus is not None else None
        self.pids = pids
        self.deny_devices = list(deny_devices) if deny_devices is not None else None

    def wanted(self) -> list[str]:
        """The features these limits need."""
        pairs = (("memory", self.memory), ("cpuset", self.cpus), ("pids", self.pids), ("devices", self.deny_devices))
        return [name for name, value in pairs if value is not None]

    def __repr__(self) -> str:
        cpus = format_cpus(self.cpus) if self.cpus else None
        return f"Limits(memory={self.memory}, cpus={cpus}, pids={self.pids}, deny_devices={self.deny_devices})"


class Stats:
    """Counters of one attempt's cgroup; None where this kernel or mode does not keep one."""

    __slots__ = ("cpu_usec", "memory_current", "memory_peak", "oom_kills", "pids_current", "pids_limit_hits")

    def __init__(self, **values: int | None):
        for name in self.__slots__:
            setattr(self, name, values.get(name))

    def to_dict(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self) -> str:
        return f"Stats({self.to_dict()})"


class Cgroups:
    """gflow's cgroups on this machine: a group directory per hierarchy, one cgroup per attempt.

    ``fs`` exists for the tests of the cgroup v2 paths, which hand in a fake kernel.
    """

    def __init__(self, probe: Probe, group: str = "gflow", fs: Cgroupfs | None = None):
        if probe.mode == "none":
            raise CgroupError(f"cannot use cgroups: {probe.reason}")
        check_name(group)
        self.probe = probe
        self.mode = probe.mode
        self.group = group
        self.fs = fs or Cgroupfs()
        self.group_dirs = {key: os.path.join(base, group) for key, base in probe.dirs.items()}

    # -- the group --------------------------------------------------------------------------------

    def prepare(self, leaf: str = "gflowd") -> None:
        """Make the group directories and hand controllers down to them. Idempotent.

        cgroup v2 lets a cgroup enable controllers for its children only while it has no processes
        of its own (except the root). If our base has processes and they are all this process,
        we move into a ``leaf`` sub-cgroup first, as systemd asks of a service with Delegate=yes.
        """
        if self.mode == "v2":
            base = self.probe.dirs[UNIFIED]
            wanted = [name for name in V2_CONTROLLERS if self.probe.features[name].available]
            self._enable(base, wanted, leaf)
            self.fs.mkdir(self.group_dirs[UNIFIED])
            self._enable(self.group_dirs[UNIFIED], wanted, None)
            return
        for key, directory in self.group_dirs.items():
            self.fs.mkdir(directory)
            if key == "cpuset":
                self._inherit_cpuset(directory, self.probe.dirs[key], None)
                try:  # each attempt's cpuset is then born with ours: two reads at its creation, not four and two writes
                    self.fs.write(os.path.join(directory, "cgroup.clone_children"), "1")
                except CgroupError:  # an older or stricter kernel: _inherit_cpuset copies them
                    pass

    def _enable(self, directory: str, controllers: list[str], leaf: str | None) -> None:
        control = os.path.join(directory, "cgroup.subtree_control")
        enabled = set(self.fs.read(control).split())
        missing = [name for name in controllers if name not in enabled]
        if not missing:
            return
        value = " ".join(f"+{name}" for name in missing)
        try:
            self.fs.write(control, value)
            return
        except CgroupError as exc:
            if exc.errno != errno.EBUSY or leaf is None:
                raise
        members = parse_pids(self.fs.read(os.path.join(directory, "cgroup.procs")))
        if set(members) - {os.getpid()}:
            raise CgroupError(
                f"cannot write {value!r} to {control}: cgroup v2 hands controllers down only from a cgroup "
                f"without processes, and {directory} has {len(members)} (pids {' '.join(map(str, members[:5]))}); "
                "run gflowd alone in its cgroup (systemd: Delegate=yes) or in a sub-cgroup of it",
                errno.EBUSY,
            )
        leaf_dir = os.path.join(directory, leaf)
        self.fs.mkdir(leaf_dir)
        self.fs.write(os.path.join(leaf_dir, "cgroup.procs"), str(os.getpid()))
        self.fs.write(control, value)

    def _inherit_cpuset(self, directory: str, parent: str, cpus: frozenset[int] | None) -> None:
        """A new v1 cpuset has no cpus and no mems, and nothing can join it until both are set."""
        for name in ("cpuset.mems", "cpuset.cpus"):
            own = os.path.join(directory, name)
            if name == "cpuset.cpus" and cpus is not None:
                self.fs.write(own, format_cpus(cpus))
            elif not self.fs.read(own).strip():
                inherited = self.fs.read(os.path.join(parent, name)).strip()
                if not inherited:  # a parent with an empty list: take what it effectively has
                    inherited = self.fs.read(os.path.join(parent, name.replace("cpuset.", "cpuset.effective_"))).strip()
                self.fs.write(own, inherited)

    def remove_group(self) -> None:
        """Remove the (empty) group directories; for uninstalling and for tests."""
        for directory in self.group_dirs.values():
            left = self.fs.subdirs(directory)
            if left:
                raise CgroupError(
                    f"cannot remove cgroup {directory}: attempts left in it: {' '.join(left)}", errno.EBUSY
                )
            self.fs.rmdir(directory)

    # -- attempts ---------------------------------------------------------------------------------

    def unsupported(self, limits: Limits) -> list[str]:
        """Every limit these cgroups cannot enforce, each with its reason."""
        return [
            f"{name}: {self.probe.features[name].reason}"
            for name in limits.wanted()
            if not self.probe.features[name].available
        ]

    def names(self) -> list[str]:
        """The attempts that have a cgroup in any hierarchy (half-created ones too)."""
        found: set[str] = set()
        for directory in self.group_dirs.values():
            found.update(self.fs.subdirs(directory))
        return sorted(found)

    def hierarchies(self, limits: Limits) -> list[str]:
        """The hierarchies (``Probe.dirs`` keys) an attempt with ``limits`` joins. cgroup v2: its
        one. cgroup v1: memory (limit, peak, OOM kills), devices (GPUs), CPU time (cpuacct), cgroup
        v2 where it is beside (kill); cpuset and pids only for a cpus or pids limit, and freezer only
        where cgroup v2 cannot kill. Each hierarchy is a mkdir, limits, two joins and an rmdir per
        attempt, all under the kernel's one cgroup lock: a burst of short jobs spent more time
        waiting for it than working."""
        if self.mode == "v2":
            return list(self.group_dirs)
        skip = set()
        if limits.cpus is None:
            skip.add("cpuset")  # an attempt cpuset without cpus is the group's: confines nothing
        if limits.pids is None:
            skip.add("pids")
        if self.probe.features["kill"].available:
            skip.add("freezer")  # kill_all uses cgroup.kill
        return [key for key in self.group_dirs if key not in skip]

    def adopt(self, name: str, hierarchies: list[str] | None = None) -> AttemptCgroup | None:
        """The cgroup of attempt ``name`` if any part of it exists (e.g. after gflowd restarted):
        in ``hierarchies`` (its launch record's ``keys``), or in every hierarchy when not known."""
        check_name(name)
        attempt = AttemptCgroup(self, name, hierarchies)
        return attempt if attempt.existing() else None

    def create(self, name: str, limits: Limits) -> AttemptCgroup:
        """Make (or complete) the cgroup of attempt ``name`` and write its limits; idempotent.

        Raises ``CgroupError`` naming every limit that cannot be enforced here, or the file a
        write failed on. Directories this call made are removed again on failure.
        """
        check_name(name)
        problems = self.unsupported(limits)
        if problems:
            raise CgroupError(f"cannot enforce for {name}: " + "; ".join(problems))
        attempt = AttemptCgroup(self, name, self.hierarchies(limits))
        made: list[str] = []
        try:
            for directory in attempt.dirs.values():
                if self.fs.mkdir(directory):
                    made.append(directory)
            attempt.apply(limits)
        except CgroupError:
            for directory in reversed(made):
                try:
                    self.fs.rmdir(directory)
                except CgroupError:
                    pass
            raise
        return attempt


class AttemptCgroup:
    """One attempt's cgroup: a directory per hierarchy it joins (``hierarchies``: all when None),
    all named ``name``."""

    def __init__(self, cgroups: Cgroups, name: str, hierarchies: list[str] | None = None):
        self.cgroups = cgroups
        self.fs = cgroups.fs
        self.name = name
        groups = cgroups.group_dirs
        keys = groups if hierarchies is None else [key for key in hierarchies if key in groups]
        self.dirs = {key: os.path.join(groups[key], name) for key in keys}

    def __repr__(self) -> str:
        return f"AttemptCgroup({self.name!r}, {self.cgroups.mode})"

    def _dir(self, feature: str) -> str:
        """The directory holding ``feature``'s files: the same hierarchy as the probed base."""
        key = self._key(feature)
        if key is None or key not in self.dirs:
            raise CgroupError(
                f"{feature} is not available: {self.cgroups.probe.features[feature].reason or 'not joined'}"
            )
        return self.dirs[key]

    def _key(self, feature: str) -> str | None:
        base = self.cgroups.probe.features[feature].directory
        for key, directory in self.cgroups.probe.dirs.items():
            if directory == base:
                return key
        return None

    def _has(self, feature: str) -> bool:
        """``feature`` is available here and this attempt joins its hierarchy."""
        return self.cgroups.probe.features[feature].available and self._key(feature) in self.dirs

    def existing(self) -> list[str]:
        return [key for key, directory in self.dirs.items() if os.path.isdir(directory)]

    @property
    def complete(self) -> bool:
        """Each of its hierarchies has its directory (False after a create that was killed half-way)."""
        return len(self.existing()) == len(self.dirs)

    # -- limits -----------------------------------------------------------------------------------

    def apply(self, limits: Limits) -> None:
        """Write ``limits``; ``create`` calls this before anything joins."""
        join = os.path.join
        if self.cgroups.mode == "v2":
            directory = self.dirs[UNIFIED]
            if limits.memory is not None:
                self.fs.write(join(directory, "memory.max"), str(limits.memory))
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    if self.fs.exists(join(directory, name)):  # swap off: the limit is the limit
                        self.fs.write(join(directory, name), value)
            if limits.pids is not None:
                self.fs.write(join(directory, "pids.max"), str(limits.pids))
            if limits.cpus is not None:
                self.fs.write(join(directory, "cpuset.cpus"), format_cpus(limits.cpus))
            if limits.deny_devices and self.cgroups.probe.features["devices"].available:
                # A program per apply: an adopted cgroup gets one more, which only denies again.
                # Nothing to deny (bound to every GPU): no program at all.
                try:
                    bpf_devices.deny(directory, limits.deny_devices)
                except bpf_devices.BpfError as exc:
                    raise CgroupError(exc.strerror or str(exc), exc.errno) from None
            return
        if limits.memory is not None:
            self._v1_memory(self._dir("memory"), limits.memory)
        if self._has("cpuset"):  # always: a v1 cpuset without cpus and mems cannot be joined
            self.cgroups._inherit_cpuset(self._dir("cpuset"), self.cgroups.group_dirs["cpuset"], limits.cpus)
        if limits.pids is not None:
            self.fs.write(join(self._dir("pids"), "pids.max"), str(limits.pids))
        if limits.deny_devices is not None:
            self._v1_deny_devices(self._dir("devices"), limits.deny_devices)

    def _v1_memory(self, directory: str, limit: int) -> None:
        """memory.limit_in_bytes, and memory.memsw (memory + swap) the same, so swap is no way out.

        The kernel keeps memsw >= limit: raising the limit of an adopted cgroup needs memsw first.
        """
        limit_file = os.path.join(directory, "memory.limit_in_bytes")
        memsw = os.path.join(directory, "memory.memsw.limit_in_bytes")
        has_memsw = self.fs.exists(memsw)
        try:
            self.fs.write(limit_file, str(limit))
        except CgroupError as exc:
            if exc.errno != errno.EINVAL or not has_memsw:
                raise
            self.fs.write(memsw, str(limit))
            self.fs.write(limit_file, str(limit))
            return
        if has_memsw:
            self.fs.write(memsw, str(limit))

    def _v1_deny_devices(self, directory: str, rules: list[DeviceRule]) -> None:
        """A new cgroup starts as a copy of its parent's device list; only the rules are denied.
        Denying again is a no-op, so an adopted cgroup is redone without ever widening access."""
        if rules:
            self.fs.write_each(os.path.join(directory, "devices.deny"), [str(rule) for rule in rules])

    # -- members ----------------------------------------------------------------------------------

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) into the cgroup in every hierarchy.

        Refuses a cgroup missing in some hierarchy before moving anything, so a process is never
        left half in (limited by memory, say, but not by pids).
        """
        missing = [directory for directory in self.dirs.values() if not os.path.isdir(directory)]
        if missing:
            raise CgroupError(
                f"cannot join cgroup {self.name}: {missing[0]} does not exist (create it first)", errno.ENOENT
            )
        for directory in self.dirs.values():
            self.fs.write(os.path.join(directory, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        """Every process in the cgroup, from ``cgroup.procs`` (exact: no /proc walk, no guessing)."""
        members: set[int] = set()
        for directory in self.dirs.values():
            text = self.fs.read_optional(os.path.join(directory, "cgroup.procs"))
            if text:
                members.update(parse_pids(text))
        return sorted(members)

    def kill_all(self, timeout: float = 10.0) -> None:
        """SIGKILL every member and wait until none is left; ``CgroupError`` if that takes > timeout.

        ``cgroup.kill`` where the kernel has it (atomic: a fork in flight dies too); else freeze
        (v1 freezer or v2 ``cgroup.freeze``) so nothing forks between listing and signalling, kill,
        thaw (a frozen v1 task dies only once thawed), and loop until empty.
        """
        members = self.pids()
        if os.getpid() in members:
            raise CgroupError(f"refusing to kill cgroup {self.name}: this process ({os.getpid()}) is in it")
        deadline = time.monotonic() + timeout
        unified = self.dirs.get(UNIFIED)
        if unified and self.fs.exists(os.path.join(unified, "cgroup.kill")):
            if members:
                self.fs.write(os.path.join(unified, "cgroup.kill"), "1")
            if self._wait_empty(time.monotonic() + timeout / 2):
                return  # else (never seen) fall back to signals for the other half
        while members:
            if time.monotonic() >= deadline:
                raise CgroupError(
                    f"cgroup {self.name} still has processes {members[:10]} after {timeout:g} s of SIGKILL"
                )
            self._freeze(True, deadline)
            try:
                for pid in self.pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            finally:
                self._freeze(False, deadline)
            self._wait_empty(min(deadline, time.monotonic() + 0.2))
            members = self.pids()

    def _wait_empty(self, deadline: float) -> bool:
        pause = 0.001
        while self.pids():
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return True

    def _freeze(self, frozen: bool, deadline: float) -> None:
        """Freeze or thaw with whichever freezer there is; freezing waits (bounded) until done."""
        if self.cgroups.mode == "v1" and os.path.isdir(self.dirs.get("freezer", "")):
            state = os.path.join(self.dirs["freezer"], "freezer.state")
            self.fs.write(state, "FROZEN" if frozen else "THAWED")
            done = lambda: self.fs.read(state).strip() == "FROZEN"
        elif self.cgroups.mode == "v2" and self.fs.exists(os.path.join(self.dirs[UNIFIED], "cgroup.freeze")):
            self.fs.write(os.path.join(self.dirs[UNIFIED], "cgroup.freeze"), "1" if frozen else "0")
            events = os.path.join(self.dirs[UNIFIED], "cgroup.events")
            done = lambda: parse_keyed(self.fs.read(events)).get("frozen") == 1
        else:
            return
        pause = 0.0005
        while frozen and not done() and time.monotonic() < deadline:  # a task in D state may hold it up
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    # -- counters ---------------------------------------------------------------------------------

    def oom_kills(self) -> int | None:
        """Just the OOM kill count (v2 ``memory.events``, v1 ``memory.oom_control``): one small read,
        cheap enough to poll where ``stats`` would read six files."""
        if not self._has("memory"):
            return None
        name = "memory.events" if self.cgroups.mode == "v2" else "memory.oom_control"
        text = self.fs.read_optional(os.path.join(self._dir("memory"), name))
        return parse_keyed(text).get("oom_kill") if text is not None else None

    def stats(self) -> Stats:
        """Peak and current memory, OOM kills, CPU time and pids counters, as far as kept here."""
        join, read = os.path.join, self.fs.read_optional
        values: dict[str, int | None] = {}

        def number(path: str) -> int | None:
            text = read(path)
            return int(text) if text and text.strip().isdigit() else None

        def keyed(path: str, key: str) -> int | None:
            text = read(path)
            return parse_keyed(text).get(key) if text is not None else None

        if self._has("memory"):
            directory = self._dir("memory")
            if self.cgroups.mode == "v2":
                values["memory_peak"] = number(join(directory, "memory.peak"))  # Linux 5.19
                values["memory_current"] = number(join(directory, "memory.current"))
                values["oom_kills"] = keyed(join(directory, "memory.events"), "oom_kill")
            else:
                values["memory_peak"] = number(join(directory, "memory.max_usage_in_bytes"))
                values["memory_current"] = number(join(directory, "memory.usage_in_bytes"))
                values["oom_kills"] = keyed(join(directory, "memory.oom_control"), "oom_kill")  # Linux 4.13
        if self._has("cputime"):
            directory = self._dir("cputime")
            if directory == self.dirs.get(UNIFIED):
                values["cpu_usec"] = keyed(join(directory, "cpu.stat"), "usage_usec")
            else:
                nanoseconds = number(join(directory, "cpuacct.usage"))
                values["cpu_usec"] = nanoseconds // 1000 if nanoseconds is not None else None
        if self._has("pids"):
            directory = self._dir("pids")
            values["pids_current"] = number(join(directory, "pids.current"))
            values["pids_limit_hits"] = keyed(join(directory, "pids.events"), "max")
        return Stats(**values)

    # -- the end ----------------------------------------------------------------------------------

    def remove(self, timeout: float = 10.0) -> None:
        """Remove the cgroup in every hierarchy (sub-cgroups a job made too); idempotent.

        A process that was just killed can keep the cgroup busy for a moment: EBUSY is retried
        until ``timeout``, then the error names the processes still there.
        """
        deadline = time.monotonic() + timeout
        for directory in self.dirs.values():
            self._remove_tree(directory, deadline)

    def _remove_tree(self, directory: str, deadline: float) -> None:
        # rmdir first, the children listed only when it is refused: a job rarely makes sub-cgroups,
        # and listing a cgroup's ~30 files cost more than its rmdir (4 listings per attempt)
        pause = 0.001
        listed = False
        while True:
            try:
                self.fs.rmdir(directory)
                return
            except CgroupError as exc:
                if exc.errno == errno.EBUSY and not listed:
                    listed = True
                    children = self.fs.subdirs(directory)
                    for child in children:
                        self._remove_tree(os.path.join(directory, child), deadline)
                    if children:
                        continue  # at once: it was busy with them
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    left = parse_pids(self.fs.read_optional(os.path.join(directory, "cgroup.procs")) or "")
                    raise CgroupError(
                        f"{exc}; processes still in it: {left[:10]}" if left else str(exc), exc.errno
                    ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
