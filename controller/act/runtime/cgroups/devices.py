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

import logging
import os
import re
import stat
import time
from collections.abc import Iterable

log = logging.getLogger("gflowd.runtime")

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
    return _char_minors(dev_dir, filter(_GPU_NODE.fullmatch, names), NVIDIA_MAJOR) - NVIDIA_CONTROL_MINORS


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


def amd_deny_rules(
    bound: Iterable[int], known: Iterable[int] = (), dev_dir: str = "/dev", sys_dir: str = "/sys"
) -> list[DeviceRule]:
    """Rules denying the render nodes of every AMD GPU in ``known`` (their render minors) but the
    ``bound`` ones, those GPUs' ``/dev/dri/cardN`` nodes (``drm_card_minors``), and ``/dev/kfd``
    to a job bound to no AMD GPU (a CPU or NVIDIA job); sorted."""
    bound = set(bound)
    others = set(known) - bound
    cards = drm_card_minors(others, sys_dir) if others else set()
    rules = [DeviceRule("c", DRM_MAJOR, minor) for minor in sorted(others | cards)]
    kfd = kfd_rule(dev_dir) if not bound else None
    return rules + ([kfd] if kfd is not None else [])


_DRM_NODE = re.compile(r"(card|renderD)(\d+)")


def drm_card_minors(render_minors: Iterable[int], sys_dir: str = "/sys") -> set[int]:
    """The minors of the ``cardN`` nodes on the same PCI device as the ``renderD<minor>`` nodes:
    each DRM node's ``SYS_DIR/class/drm/<node>/device`` links to its GPU's PCI device (its bus id,
    by which amdsmi names a GPU too: ``amdsmi_get_gpu_device_bdf``). A card no render node shares
    a device with (a BMC's VGA, another vendor's card) is not among them. Empty without sysfs,
    said once."""
    drm = os.path.join(sys_dir, "class", "drm")
    try:
        names = os.listdir(drm)
    except OSError:
        names = []
    device_of: dict[tuple[str, int], tuple[int, int]] = {}  # (kind, minor) -> its PCI device's folder
    for name in names:
        match = _DRM_NODE.fullmatch(name)
        if match is None:
            continue
        try:  # one stat through the links names the folder (os.path.realpath costs ~20 times more)
            st = os.stat(os.path.join(drm, name, "device"))
        except OSError:
            continue
        device_of[(match[1], int(match[2]))] = (st.st_dev, st.st_ino)
    wanted = {device_of[("renderD", m)] for m in render_minors if ("renderD", m) in device_of}
    if not wanted:
        _say_once(f"drm:{sys_dir}", f"no PCI device for the AMD render nodes in {drm}: their cardN nodes stay open")
    return {minor for (kind, minor), device in device_of.items() if kind == "card" and device in wanted}


# -- MIG: a MIG instance is reached through its parent's /dev/nvidiaN *and* the nvidia-caps nodes of
# its GPU instance and compute instance (/dev/nvidia-caps/nvidia-cap<M>, char <nvidia-caps major>:M).
# Each capability's minor is the "DeviceFileMinor: M" line of its ``access`` file under
# /proc/driver/nvidia/capabilities: gpu<minor>/mig/gi<G>/access, .../gi<G>/ci<C>/access, and the
# whole driver's mig/config (make and destroy instances) and mig/monitor (see every instance).
# As the NVIDIA container toolkit does, a MIG job gets its own instance's two caps; config and
# monitor only on request there, never here: every other cap is denied to every job.
_CAP_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)
_said: set[str] = set()


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        log.warning("%s", message)


def caps_major(proc_dir: str = "/proc") -> int | None:
    """The ``nvidia-caps`` char major from ``PROC_DIR/devices`` (the kernel picks it); None without one."""
    try:
        with open(os.path.join(proc_dir, "devices")) as f:
            text = f.read()
    except OSError:
        return None
    chars = text.split("Block devices:")[0]
    found = re.search(r"^\s*(\d+)\s+nvidia-caps\s*$", chars, re.MULTILINE)
    return int(found[1]) if found else None


_cap_minors: dict[tuple[str, str], int] = {}  # (proc_dir, capability) -> its minor, once read


def cap_minor(capability: str, proc_dir: str = "/proc") -> int | None:
    """The minor of a capability (``gpu0/mig/gi1``, ``gpu0/mig/gi1/ci0``, ``mig/config``): the
    ``DeviceFileMinor`` of its ``access`` file under ``PROC_DIR/driver/nvidia/capabilities``; None
    while it has none (no such instance). Kept once read: the driver numbers each capability by a
    fixed table (``/proc/driver/nvidia-caps/mig-minors``), so an instance made again gets the same."""
    key = (proc_dir, capability)
    if key in _cap_minors:
        return _cap_minors[key]
    try:
        with open(os.path.join(proc_dir, "driver", "nvidia", "capabilities", capability, "access")) as f:
            found = _CAP_MINOR.search(f.read())
    except OSError:
        return None
    if found is None:
        return None
    _cap_minors[key] = minor = int(found[1])
    return minor


def instance_caps(gpu: int, gi: int, ci: int) -> tuple[str, str]:
    """The capabilities of a MIG instance on the GPU of minor ``gpu``: its GPU instance's and its
    compute instance's (the NVIDIA container toolkit's paths)."""
    return f"gpu{gpu}/mig/gi{gi}", f"gpu{gpu}/mig/gi{gi}/ci{ci}"


def _caps_nodes(dev_dir: str, major: int) -> set[int]:
    """The minors of the char nodes of ``major`` in ``DEV_DIR/nvidia-caps``."""
    folder = os.path.join(dev_dir, "nvidia-caps")
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    return _char_minors(folder, names, major)


def _char_minors(folder: str, names: Iterable[str], major: int) -> set[int]:
    """The minors of the char device nodes among ``names`` in ``folder`` whose major is ``major``."""
    minors = set()
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major:
            minors.add(os.minor(st.st_rdev))
    return minors


def mig_caps_deny_rules(
    bound: Iterable[tuple[int, int, int]],
    known: Iterable[tuple[int, int, int]] = (),
    proc_dir: str = "/proc",
    dev_dir: str = "/dev",
) -> list[DeviceRule]:
    """Rules denying every nvidia-caps node but the GPU- and compute-instance caps of the ``bound``
    MIG instances, each (parent's minor, GPU instance id, compute instance id): the caps of the
    ``known`` instances (gflowd's inventory: a node nvidia-modprobe makes later is still denied),
    ``mig/config``, ``mig/monitor`` and the nodes in ``DEV_DIR/nvidia-caps``; sorted. Empty when
    the driver has no capabilities (no MIG support): said once if a MIG job starts."""
    bound = list(bound)
    root = os.path.join(proc_dir, "driver", "nvidia", "capabilities")
    major = caps_major(proc_dir) if os.path.isdir(root) else None  # one stat on a box without MIG support
    if major is None:
        if bound:
            _say_once(
                f"caps:{proc_dir}",
                f"no NVIDIA capabilities in {root} or no nvidia-caps in {proc_dir}/devices: "
                "MIG jobs' nvidia-caps nodes are not constrained",
            )
        return []
    allowed = set()
    for ids in bound:
        for capability in instance_caps(*ids):
            minor = cap_minor(capability, proc_dir)
            if minor is None:
                _say_once(f"cap:{proc_dir}:{capability}", f"no capability {capability} in {root}: the job is denied it")
            else:
                allowed.add(minor)
    others = [c for ids in set(known) - set(bound) for c in instance_caps(*ids)] + ["mig/config", "mig/monitor"]
    listed = {minor for minor in (cap_minor(capability, proc_dir) for capability in others) if minor is not None}
    denied = (listed | _caps_nodes(dev_dir, major)) - allowed
    return [DeviceRule("c", major, minor) for minor in sorted(denied)]
