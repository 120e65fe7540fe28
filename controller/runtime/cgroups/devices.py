"""Device allow-lists: the nodes every process needs, and the GPU nodes of a binding.

A rule is the cgroup v1 ``devices.allow`` syntax, ``c 195:1 rwm``. An attempt with an allow-list
gets ``STANDARD_DEVICES`` (what runc allows every container: null, zero, full, random, urandom,
tty, ptmx, the pseudo-terminals) plus what it is given; a GPU job's list comes from
``gpu_device_rules`` and a CPU job's is empty, so it opens no GPU node at all.

NVIDIA's GPU nodes are ``/dev/nvidiaN`` = ``c 195:N`` where N is NVML's *minor number* (not the
index), ``nvidiactl`` = 195:255 and ``nvidia-modeset`` = 195:254; ``nvidia-uvm`` and
``nvidia-uvm-tools`` get a major number at module load time. So the control nodes are read from
the device folder (``stat``), with the fixed numbers and /proc/devices as fall-backs; tests point the
folder at nodes they made with mknod.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

NVIDIA_MAJOR = 195
ANY = None  # ``*`` in a rule's major or minor


class DeviceRule:
    """``kind major:minor access``; kind ``c`` (char), ``b`` (block) or ``a`` (all); None is ``*``."""

    __slots__ = ("kind", "major", "minor", "access")

    def __init__(self, kind: str, major: int | None, minor: int | None, access: str = "rwm"):
        if kind not in ("a", "b", "c"):
            raise ValueError(f"device rule kind must be a, b or c, not {kind!r}")
        if not access or set(access) - set("rwm"):
            raise ValueError(f"device rule access must be letters of 'rwm', not {access!r}")
        self.kind, self.major, self.minor, self.access = kind, major, minor, access

    def __str__(self) -> str:
        def number(n: int | None) -> str:
            return "*" if n is None else str(n)

        return f"{self.kind} {number(self.major)}:{number(self.minor)} {self.access}"

    def __repr__(self) -> str:
        return f"DeviceRule({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceRule) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    @classmethod
    def parse(cls, text: str) -> DeviceRule:
        """``c 195:1 rwm`` (as in devices.list); ValueError with the text when malformed."""
        try:
            kind, numbers, access = text.split()
            major, minor = numbers.split(":")
            return cls(kind, None if major == "*" else int(major), None if minor == "*" else int(minor), access)
        except ValueError:
            raise ValueError(f"not a device rule (want like 'c 195:1 rwm'): {text!r}") from None


STANDARD_DEVICES: tuple[DeviceRule, ...] = (
    DeviceRule("c", 1, 3),  # /dev/null
    DeviceRule("c", 1, 5),  # /dev/zero
    DeviceRule("c", 1, 7),  # /dev/full
    DeviceRule("c", 1, 8),  # /dev/random
    DeviceRule("c", 1, 9),  # /dev/urandom
    DeviceRule("c", 5, 0),  # /dev/tty
    DeviceRule("c", 5, 2),  # /dev/ptmx
    DeviceRule("c", 136, ANY),  # /dev/pts/*
)

# Control nodes: (name, major, minor) with None where the number is dynamic.
_CONTROL_NODES = (
    ("nvidiactl", NVIDIA_MAJOR, 255),
    ("nvidia-modeset", NVIDIA_MAJOR, 254),
    ("nvidia-uvm", None, 0),
    ("nvidia-uvm-tools", None, 1),
)


def char_majors(proc_devices: str) -> dict[str, int]:
    """The ``Character devices:`` section of /proc/devices: driver name -> major."""
    majors: dict[str, int] = {}
    in_char = False
    for line in proc_devices.splitlines():
        if line.endswith(":"):
            in_char = line.startswith("Character")
            continue
        parts = line.split()
        if in_char and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return majors


def _node_numbers(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def gpu_device_rules(minors: Iterable[int], dev_dir: str = "/dev", proc_devices: str = "/proc/devices") -> list[DeviceRule]:
    """Rules for the GPUs with these NVML minor numbers and the control nodes; [] for no GPUs."""
    minors = sorted(set(minors))
    if not minors:
        return []  # a CPU job: not even nvidiactl
    rules = [DeviceRule("c", NVIDIA_MAJOR, minor) for minor in minors]
    majors: dict[str, int] | None = None
    for name, major, minor in _CONTROL_NODES:
        numbers = _node_numbers(os.path.join(dev_dir, name))
        if numbers is None and major is None:
            if majors is None:
                try:
                    with open(proc_devices) as handle:
                        majors = char_majors(handle.read())
                except OSError:
                    majors = {}
            # the uvm driver registers one major for both nodes under the name "nvidia-uvm"
            if "nvidia-uvm" in majors:
                numbers = (majors["nvidia-uvm"], minor)
        elif numbers is None:
            numbers = (major, minor)
        if numbers is not None:
            rules.append(DeviceRule("c", numbers[0], numbers[1]))
    return rules
