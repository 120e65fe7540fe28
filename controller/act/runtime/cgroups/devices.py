"""Device deny-lists: the GPU nodes a job was not bound to, and nothing else (Slurm's way).

A rule is the cgroup v1 ``devices.deny`` syntax, ``c 195:0 rwm``. An attempt's devices cgroup
starts as a copy of its parent's (the kernel's rule for a new cgroup), so a job may open every
device gflowd may: /dev/fuse, /dev/kvm, /dev/net/tun, /dev/infiniband/* (RDMA for NCCL) stay
usable. Only GPUs are constrained, as Slurm's ConstrainDevices constrains only the GRES devices:
``gpu_deny_rules`` denies every ``/dev/nvidiaN`` the job was not bound to (a CPU job: all of them).

NVIDIA's GPU nodes are ``/dev/nvidiaN`` = ``c 195:N`` where N is NVML's *minor number* (not the
index). The GPUs to deny are the union of those gflowd knows (its inventory, including GPUs it
does not manage, say excluded by ``--gpus``) and the ``nvidiaN`` nodes in the device folder, so a
GPU missing from one of them is still denied. The control nodes (``nvidiactl`` 195:255,
``nvidia-modeset`` 195:254, ``nvidia-uvm``, ``nvidia-uvm-tools``) stay open: CUDA's
initialisation opens them, and without a GPU node they reach no GPU. Tests point the folder at
nodes they made with mknod.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterable

NVIDIA_MAJOR = 195
NVIDIA_CONTROL_MINORS = frozenset({254, 255})  # nvidia-modeset, nvidiactl: never a GPU
ANY = None  # ``*`` in a rule's major or minor
_GPU_NODE = re.compile(r"nvidia(\d+)")
SETTLED_NS = 1_000_000_000  # a folder unchanged this long before a listing: the listing saw its last change
_listings: dict[str, tuple[tuple[int, int, int], frozenset[int]]] = {}  # dev_dir -> (its stat, its GPU minors)


class DeviceRule:
    """``kind major:minor access``; kind ``c`` (char), ``b`` (block) or ``a`` (all); None is ``*``."""

    __slots__ = ("access", "kind", "major", "minor")

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


def gpu_minors_in(dev_dir: str) -> set[int]:
    """The minor numbers of the ``nvidiaN`` char nodes (major 195) in ``dev_dir``; empty if none.

    Read again only when the folder changed: listing /dev and matching each name was ~0.5 ms of
    gflowd's loop per launch. A node added, removed or renamed changes the folder's mtime; kept only
    from a listing made when the folder had not changed for SETTLED_NS (its mtime ticks coarsely,
    so a change made just after a listing could otherwise carry the mtime the listing saw)."""
    try:
        st = os.stat(dev_dir)
    except OSError:
        return set()
    key = (st.st_dev, st.st_ino, st.st_mtime_ns)
    cached = _listings.get(dev_dir)
    if cached is not None and cached[0] == key:
        return set(cached[1])
    listed_at = time.time_ns()
    minors = _gpu_nodes(dev_dir)
    if minors is None:
        return set()
    if st.st_mtime_ns < listed_at - SETTLED_NS:
        _listings[dev_dir] = (key, frozenset(minors))
    return minors


def _gpu_nodes(dev_dir: str) -> set[int] | None:
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return None
    minors = set()
    for name in names:
        if not _GPU_NODE.fullmatch(name):
            continue
        try:
            st = os.stat(os.path.join(dev_dir, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == NVIDIA_MAJOR:
            minors.add(os.minor(st.st_rdev))
    return minors - NVIDIA_CONTROL_MINORS


def gpu_deny_rules(bound: Iterable[int], known: Iterable[int] = (), dev_dir: str = "/dev") -> list[DeviceRule]:
    """Rules denying every GPU but the ``bound`` ones (NVML minor numbers): the GPUs in ``known``
    (gflowd's inventory) and those with a node in ``dev_dir``, minus ``bound``; sorted."""
    denied = (set(known) | gpu_minors_in(dev_dir)) - set(bound) - NVIDIA_CONTROL_MINORS
    return [DeviceRule("c", NVIDIA_MAJOR, minor) for minor in sorted(denied)]


# -- AMD: ROCm opens /dev/kfd (the compute driver, one node for every GPU) and the GPU's DRM render
# node /dev/dri/renderD<minor> (char 226:minor); ROCR_VISIBLE_DEVICES alone does not isolate.
DRM_MAJOR = 226


def kfd_rule(dev_dir: str = "/dev") -> DeviceRule | None:
    """The rule for ``DEV_DIR/kfd`` (its major is dynamic: read from the node); None without one."""
    try:
        st = os.stat(os.path.join(dev_dir, "kfd"))
    except OSError:
        return None
    return DeviceRule("c", os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else None


def amd_deny_rules(bound: Iterable[int], known: Iterable[int] = (), dev_dir: str = "/dev") -> list[DeviceRule]:
    """Rules denying the render nodes of every AMD GPU in ``known`` (their render minors) but the
    ``bound`` ones, and ``/dev/kfd`` to a job bound to no AMD GPU (a CPU or NVIDIA job); sorted."""
    bound = set(bound)
    rules = [DeviceRule("c", DRM_MAJOR, minor) for minor in sorted(set(known) - bound)]
    kfd = kfd_rule(dev_dir) if not bound else None
    return rules + ([kfd] if kfd is not None else [])
