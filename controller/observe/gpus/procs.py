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
