"""What /proc says of a GPU process NVML lists: its command name and its user. NVML reports host
PIDs; a process in another PID namespace (or gone) is not visible here, and both are then ""."""

from __future__ import annotations

import os

from controller.util.security import user_name


def process_name(pid: int) -> str:
    """The command name (``/proc/PID/comm``), for ``ignoreProcesses`` and the messages."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            return handle.read().decode(errors="replace").strip()
    except OSError:
        return ""


def process_user(pid: int) -> str:
    """The user the process runs as (the owner of ``/proc/PID``), for who holds a GPU's memory."""
    try:
        return user_name(os.stat(f"/proc/{pid}").st_uid)
    except OSError:
        return ""


def process_started(pid: int) -> float | None:
    """When the process started (epoch seconds, from ``/proc/PID/stat`` and the boot time), for the
    age of memory nobody owns; None when not visible here."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # starttime: field 22 of stat, the 20th after the command's ")"
    except (OSError, IndexError, ValueError):
        return None
    return _boot_time() + ticks / os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0.0


def process_alive(pid: int) -> bool:
    """Whether ``/proc/PID`` exists: NVML may charge memory to a pid that is long gone (the driver
    keeps its context until a reset), or to one in another PID namespace."""
    return os.path.exists(f"/proc/{pid}")


def process_marker(pid: int, variable: str) -> str:
    """The value of ``variable`` in the process's environment (``/proc/PID/environ``, readable by
    root and by the process's own user), "" when it has none or it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return ""
    needle = variable.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(needle):
            return entry[len(needle) :].decode(errors="replace")
    return ""


def process_ticks(pid: int) -> int | None:
    """The process's kernel start time in clock ticks: with the pid, its identity (a pid reused
    later never has the same); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
