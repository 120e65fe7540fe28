"""A fake cgroup2 kernel on a temp dir, for the tests of the cgroup v2 paths (this machine's cgroup
v2 has no controllers, so memory.max & co. cannot be tested for real here).

It plays the kernel's part where a plain directory cannot: ``mkdir`` populates the interface files
of the controllers the parent enabled in ``cgroup.subtree_control``; writes are checked the way the
kernel checks them (unknown controller -> ENOENT, the no-internal-process rule -> EBUSY, a bad
number -> EINVAL, a missing file -> ENOENT); ``cgroup.procs`` moves a pid out of every other cgroup
and lists only live processes; ``cgroup.kill`` SIGKILLs the members (real child processes of the
test); ``rmdir`` refuses a cgroup with members or children. Every write is logged in ``writes``.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
from pathlib import Path

from helpers import pid_alive

from controller.act.runtime.cgroups import Cgroupfs

ORDER = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc")  # as the kernel lists them

_CONTROLLER_FILES = {
    "memory": {
        "memory.max": "max\n",
        "memory.swap.max": "max\n",
        "memory.oom.group": "0\n",
        "memory.current": "0\n",
        "memory.peak": "0\n",
        "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    },
    "pids": {"pids.max": "max\n", "pids.current": "0\n", "pids.events": "max 0\n"},
    "cpuset": {"cpuset.cpus": "\n", "cpuset.mems": "\n", "cpuset.cpus.effective": "0-3\n"},
    "cpu": {"cpu.max": "max 100000\n", "cpu.weight": "100\n"},
    "io": {"io.max": ""},
}


class FakeCgroup2(Cgroupfs):
    """cgroupfs semantics for the tree under ``root``; ``kill_file``/``peak_file`` off = older kernel."""

    def __init__(
        self,
        root: Path,
        controllers: str = "cpuset cpu io memory hugetlb pids",
        kill_file: bool = True,
        peak_file: bool = True,
    ):
        self.root = Path(root)
        self.kill_file = kill_file
        self.peak_file = peak_file
        self.writes: list[tuple[str, str]] = []  # (path relative to root, value)
        self.root.mkdir(parents=True, exist_ok=True)
        for name, text in {
            "cgroup.controllers": controllers + "\n",
            "cgroup.subtree_control": "\n",
            "cgroup.procs": "",
            "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
        }.items():
            (self.root / name).write_text(text)

    # -- helpers for tests --------------------------------------------------------------------------

    def cgroup(self, relative: str) -> Path:
        return self.root / relative

    def make(self, relative: str) -> Path:
        """mkdir the way the kernel would (for a test that plays another process)."""
        self._mkdir(str(self.root / relative))
        return self.root / relative

    def set(self, relative: str, text: str) -> None:
        """Let the 'kernel' change a counter (memory.events after an OOM kill, etc.)."""
        (self.root / relative).write_text(text)

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text()

    def written(self, name: str) -> list[tuple[str, str]]:
        return [(path, value) for path, value in self.writes if path.endswith("/" + name) or path == name]

    # -- the kernel's part --------------------------------------------------------------------------

    def _is_root(self, directory: Path) -> bool:
        return directory.resolve() == self.root.resolve()

    def _members(self, directory: Path) -> list[int]:
        try:
            text = (directory / "cgroup.procs").read_text()
        except FileNotFoundError:
            return []
        return [int(pid) for pid in text.split() if pid_alive(int(pid))]

    def _read(self, path: str) -> str:
        if os.path.basename(path) == "cgroup.procs":
            if not os.path.exists(path):
                raise FileNotFoundError(errno.ENOENT, "No such file", path)
            return "".join(f"{pid}\n" for pid in self._members(Path(path).parent))
        return super()._read(path)

    def _mkdir(self, path: str) -> None:
        directory = Path(path)
        parent = directory.parent
        if not (parent / "cgroup.procs").exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        os.mkdir(path)
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        files = {
            "cgroup.procs": "",
            "cgroup.controllers": " ".join(enabled) + "\n",
            "cgroup.subtree_control": "\n",
            "cgroup.events": "populated 0\nfrozen 0\n",
            "cgroup.freeze": "0\n",
            "cgroup.type": "domain\n",
            "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
        }
        if self.kill_file:
            files["cgroup.kill"] = ""
        for controller in enabled:
            files.update(_CONTROLLER_FILES.get(controller, {}))
        if not self.peak_file:
            files.pop("memory.peak", None)
        for name, text in files.items():
            (directory / name).write_text(text)

    def _rmdir(self, path: str) -> None:
        directory = Path(path)
        if not directory.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if any(child.is_dir() for child in directory.iterdir()) or self._members(directory):
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        shutil.rmtree(directory)

    def _write(self, path: str, value: str) -> None:
        target = Path(path)
        if not target.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        self.writes.append((str(target.relative_to(self.root)), value))
        directory, name = target.parent, target.name
        if name == "cgroup.subtree_control":
            self._subtree_control(directory, value)
        elif name == "cgroup.procs":
            self._move(directory, int(value) or os.getpid())
        elif name == "cgroup.kill":
            if value.strip() != "1":
                raise OSError(errno.EINVAL, "Invalid argument", path)
            for cgroup in [directory, *[p for p in directory.rglob("*") if p.is_dir()]]:
                for pid in self._members(cgroup):
                    os.kill(pid, signal.SIGKILL)
        elif name == "cgroup.freeze":
            if value.strip() not in ("0", "1"):
                raise OSError(errno.EINVAL, "Invalid argument", path)
            target.write_text(value.strip() + "\n")
            (directory / "cgroup.events").write_text(
                f"populated {int(bool(self._members(directory)))}\nfrozen {value.strip()}\n"
            )
        elif name in ("memory.max", "memory.swap.max", "pids.max"):
            if value.strip() != "max" and not value.strip().isdigit():
                raise OSError(errno.EINVAL, "Invalid argument", path)
            target.write_text(value.strip() + "\n")
        elif name == "cpuset.cpus":
            allowed = "".join(c for c in value if c not in "0123456789,-\n")
            if allowed:
                raise OSError(errno.EINVAL, "Invalid argument", path)
            target.write_text(value.strip() + "\n")
        else:
            target.write_text(value.strip() + "\n")

    def _subtree_control(self, directory: Path, value: str) -> None:
        offered = (directory / "cgroup.controllers").read_text().split()
        enabled = set((directory / "cgroup.subtree_control").read_text().split())
        for token in value.split():
            sign, controller = token[0], token[1:]
            if sign not in "+-" or controller not in offered:
                raise OSError(errno.ENOENT, "No such file or directory", str(directory / "cgroup.subtree_control"))
            if sign == "+":
                if self._members(directory) and not self._is_root(directory):
                    raise OSError(errno.EBUSY, "Device or resource busy", str(directory / "cgroup.subtree_control"))
                enabled.add(controller)
            else:
                enabled.discard(controller)
        (directory / "cgroup.subtree_control").write_text(" ".join(c for c in ORDER if c in enabled) + "\n")

    def _move(self, directory: Path, pid: int) -> None:
        if not self._is_root(directory) and (directory / "cgroup.subtree_control").read_text().split():
            raise OSError(errno.EBUSY, "Device or resource busy", str(directory / "cgroup.procs"))
        for procs in self.root.rglob("cgroup.procs"):
            kept = [p for p in procs.read_text().split() if int(p) != pid]
            procs.write_text("".join(f"{p}\n" for p in kept))
        with open(directory / "cgroup.procs", "a") as handle:
            handle.write(f"{pid}\n")
