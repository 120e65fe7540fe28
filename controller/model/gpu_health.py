"""When a GPU is Unhealthy beyond NVML's own errors: the Xid events that mean the hardware (not the
job) failed, uncorrectable ECC errors, retired pages waiting for a reset. One table, so docs, the
NVML reader and the tests agree. Xids from NVIDIA's catalog (docs.nvidia.com/deploy/xid-errors);
application Xids (13, 31, 43, 45, 68: a job's own fault) leave the GPU healthy."""

from __future__ import annotations

import time

RESET = "reset the GPU (nvidia-smi -r, or reboot) and restart gflowd"

# Xid -> what it means; each makes its GPU Unhealthy until gflowd restarts
XID_UNHEALTHY: dict[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


def xid_problem(xid: int, at: float) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(at))
    return f"Xid {xid} ({XID_UNHEALTHY[xid]}) at {when}: {RESET}"


def ecc_problem(uncorrected: int) -> str:
    return f"{uncorrected} uncorrectable ECC error{'s' if uncorrected != 1 else ''} since the driver loaded: {RESET}"


PAGES_PENDING = f"retired memory pages wait for a GPU reset: {RESET}"
