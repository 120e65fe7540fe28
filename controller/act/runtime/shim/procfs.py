"""What the shim reads from /proc: a process's identity (pid and kernel start time), the process
tree below a pid, and a tree's resident memory. Standard library only (the shim runs as a plain file)."""

from __future__ import annotations

import os


def slurp(path: str) -> bytes:
    """A small file's bytes with two system calls' worth of work (no buffered file object: its
    fstat, isatty and seek cost more than the read, in every supervisor loop)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks: with the pid, a process's identity."""
    try:
        data = slurp(f"/proc/{pid}/stat")
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2 :].split()[19])


_own: tuple[int, int | None] = (0, None)  # (pid, its start ticks): this process's, read once


def own_start_ticks() -> int | None:
    """``start_ticks`` of this process, read once per process (a supervisor writes it twice per attempt)."""
    global _own
    pid = os.getpid()
    if _own[0] != pid:
        _own = (pid, start_ticks(pid))
    return _own[1]


def _children_of(pid: int) -> list[int] | None:
    """Direct children from /proc/PID/task/*/children; None when the kernel lacks that file."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            kids.extend(int(x) for x in slurp(f"/proc/{pid}/task/{tid}/children").split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}"):
                return []
            return None
        except OSError:
            continue
    return kids


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself)."""
    found: list[int] = []
    stack = [root]
    fallback = None
    while stack:
        pid = stack.pop()
        kids = _children_of(pid)
        if kids is None:  # no /proc/PID/task/TID/children: build the map from /proc once
            if fallback is None:
                fallback = _ppid_map()
            kids = fallback.get(pid, [])
        for kid in kids:
            if kid not in found:
                found.append(kid)
                stack.append(kid)
    return found


def _ppid_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    return children


_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(slurp(f"/proc/{pid}/statm").split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total
