"""Where our own cgroups are on disk: pure parsing of /proc/self/mountinfo and /proc/self/cgroup.

No path is assumed. /proc/self/cgroup says which cgroup we are in, per hierarchy (``4:memory:/a/b``
for cgroup v1, ``0::/a/b`` for cgroup v2); mountinfo says where each hierarchy is mounted and which
part of it (its ``root`` field: a container may see only its own subtree). Our directory in a
hierarchy is the mount point joined with our path relative to that root.

Functions of text only, so every layout (hybrid, pure v2, container, a comounted ``cpu,cpuacct``)
is a table test.
"""

from __future__ import annotations

import os

# The cgroup v1 controllers this layer uses, each in its own hierarchy (or comounted with others).
V1_CONTROLLERS = ("memory", "cpuset", "pids", "devices", "cpuacct", "freezer")
UNIFIED = "unified"  # the key of the cgroup v2 hierarchy among the per-hierarchy directories


class Mount:
    """One cgroup or cgroup2 mount from mountinfo."""

    __slots__ = ("fstype", "options", "point", "read_only", "root")

    def __init__(self, root: str, point: str, fstype: str, options: frozenset[str], read_only: bool):
        self.root = root
        self.point = point
        self.fstype = fstype
        self.options = options  # superblock options: the controllers of a v1 hierarchy
        self.read_only = read_only

    def __repr__(self) -> str:
        return f"Mount({self.fstype} {self.point} root={self.root} {sorted(self.options)})"


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo`` octal."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts, in mount order."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        per_mount = set(fields[5].split(","))
        superblock = frozenset(tail[2].split(","))
        mounts.append(
            Mount(
                _unescape(fields[3]), _unescape(fields[4]), tail[0], superblock, "ro" in per_mount or "ro" in superblock
            )
        )
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Our cgroup path per controller; the cgroup v2 path under the key ``unified``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            paths[UNIFIED] = path
            continue
        for controller in controllers.split(","):
            if controller and not controller.startswith("name="):
                paths[controller] = path
    return paths


class Located:
    """Our directory in one hierarchy, or why there is none."""

    __slots__ = ("mount", "path", "reason")

    def __init__(self, path: str | None, mount: Mount | None, reason: str = ""):
        self.path = path
        self.mount = mount
        self.reason = reason

    def __repr__(self) -> str:
        return f"Located({self.path!r}, reason={self.reason!r})"


def _inside(mount: Mount, cgroup_path: str) -> str | None:
    """The directory of ``cgroup_path`` under ``mount``, or None when the mount does not show it."""
    root = mount.root.rstrip("/")
    if cgroup_path != root and not cgroup_path.startswith(root + "/"):
        return None
    rest = cgroup_path[len(root) :].strip("/")
    return os.path.join(mount.point, rest) if rest else mount.point


def locate(mounts: list[Mount], own: dict[str, str]) -> dict[str, Located]:
    """Our directory for each of ``V1_CONTROLLERS`` and for ``unified``, each with a reason if absent."""
    found: dict[str, Located] = {}
    for key in (*V1_CONTROLLERS, UNIFIED):
        if key == UNIFIED:
            candidates = [m for m in mounts if m.fstype == "cgroup2"]
            what = "cgroup v2 (cgroup2)"
        else:
            candidates = [m for m in mounts if m.fstype == "cgroup" and key in m.options]
            what = f"the cgroup v1 {key} controller"
        if not candidates:
            found[key] = Located(None, None, f"{what} is not mounted")
            continue
        path = own.get(key)
        if path is None:
            found[key] = Located(None, None, f"/proc/self/cgroup has no line for {what}")
            continue
        for mount in candidates:
            directory = _inside(mount, path.removesuffix(" (deleted)"))
            if directory is not None:
                found[key] = Located(directory, mount)
                break
        else:
            found[key] = Located(None, None, f"our cgroup {path} of {what} is outside every mount of it")
    return found
