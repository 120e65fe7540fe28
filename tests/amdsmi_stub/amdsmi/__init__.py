"""A stand-in for the ``amdsmi`` Python package (ROCm's SMI binding), at the hardware edge only.

gflowd imports it through the ordinary import path (a test puts ``tests/amdsmi_stub`` on PYTHONPATH
in gflowd's environment). It answers from the JSON file ``FAKE_AMDSMI_FILE`` names, read again on
every call so a test can change the GPUs under a running gflowd (as the NVML stand-in does):

    {"initError": "text"?,            # amdsmi_init raises AmdSmiLibraryException
     "hangMs": 600000?,               # every call blocks this long (a hung driver)
     "gpus": [{"name": "AMD Instinct MI300X", "uuid": "...", "memoryTotal": bytes,
               "vramUsedMB": int, "gfx": percent | "N/A", "renderMinor": 128, "cardMinor": 0,
               "processes": [{"pid": 123, "vram": bytes}], "uncorrectable": 0,
               "fail": "amdsmi_get_gpu_activity"?}]}   # that call raises for this GPU

Function names, arguments and return shapes follow amdsmi 7.0's ``amdsmi_interface.py``.
"""

from __future__ import annotations

import json
import os
import time
from enum import IntEnum
from typing import Any


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int, text: str = ""):
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = text or "AMDSMI_STATUS_INVAL"

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"


class AmdSmiParameterException(AmdSmiException):
    pass


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class _Handle:
    """amdsmi's processor handle (a ctypes pointer there); here the GPU's place in the file."""

    def __init__(self, index: int):
        self.index = index


_initialized = False


def _data() -> dict[str, Any]:
    with open(os.environ["FAKE_AMDSMI_FILE"]) as handle:
        data = json.load(handle)
    if data.get("hangMs"):  # a driver in trouble: every call blocks this long
        time.sleep(data["hangMs"] / 1000)
    return data


def _gpu(handle: _Handle, call: str) -> dict[str, Any]:
    if not _initialized:
        raise AmdSmiLibraryException(32, "AMDSMI_STATUS_NOT_INIT")
    if not isinstance(handle, _Handle):
        raise AmdSmiParameterException(handle)
    gpus = _data().get("gpus") or []
    if handle.index >= len(gpus):
        raise AmdSmiLibraryException(2, "AMDSMI_STATUS_NOT_FOUND")
    gpu = gpus[handle.index]
    if gpu.get("fail") == call:
        raise AmdSmiLibraryException(8, "AMDSMI_STATUS_IO")
    return gpu


def amdsmi_init(flag: int = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    global _initialized
    error = _data().get("initError")
    if error:
        raise AmdSmiLibraryException(2, str(error))
    _initialized = True


def amdsmi_shut_down() -> None:
    global _initialized
    _initialized = False


def amdsmi_get_processor_handles() -> list[_Handle]:
    if not _initialized:
        raise AmdSmiLibraryException(32, "AMDSMI_STATUS_NOT_INIT")
    return [_Handle(i) for i in range(len(_data().get("gpus") or []))]


def amdsmi_get_gpu_device_uuid(handle: _Handle) -> str:
    return str(
        _gpu(handle, "amdsmi_get_gpu_device_uuid").get("uuid") or f"{handle.index:08x}-0000-1000-8000-000000000000"
    )


def amdsmi_get_gpu_asic_info(handle: _Handle) -> dict[str, Any]:
    gpu = _gpu(handle, "amdsmi_get_gpu_asic_info")
    return {"market_name": gpu.get("name", "AMD Instinct MI300X"), "vendor_id": 0x1002, "device_id": 0x74A1}


def amdsmi_get_gpu_enumeration_info(handle: _Handle) -> dict[str, Any]:
    gpu = _gpu(handle, "amdsmi_get_gpu_enumeration_info")
    return {
        "drm_render": gpu.get("renderMinor", 128 + handle.index),
        "drm_card": gpu.get("cardMinor", handle.index),
        "hsa_id": handle.index,
        "hip_id": handle.index,
        "hip_uuid": "",
    }


def amdsmi_get_gpu_memory_total(handle: _Handle, mem_type: int) -> int:
    return int(_gpu(handle, "amdsmi_get_gpu_memory_total").get("memoryTotal", 192 << 30))


def amdsmi_get_gpu_vram_usage(handle: _Handle) -> dict[str, int]:
    gpu = _gpu(handle, "amdsmi_get_gpu_vram_usage")
    used = int(gpu.get("vramUsedMB", 0)) + sum(p.get("vram", 0) for p in gpu.get("processes") or []) // (1 << 20)
    return {"vram_total": int(gpu.get("memoryTotal", 192 << 30)) >> 20, "vram_used": used}


def amdsmi_get_gpu_activity(handle: _Handle) -> dict[str, Any]:
    gpu = _gpu(handle, "amdsmi_get_gpu_activity")
    return {"gfx_activity": gpu.get("gfx", 0), "umc_activity": "N/A", "mm_activity": "N/A"}


def amdsmi_get_gpu_process_list(handle: _Handle) -> list[dict[str, Any]]:
    gpu = _gpu(handle, "amdsmi_get_gpu_process_list")
    return [
        {
            "name": str(p.get("name", "")),
            "pid": int(p["pid"]),
            "mem": int(p.get("vram", 0)),
            "engine_usage": {"gfx": 0, "enc": 0},
            "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": int(p.get("vram", 0))},
            "cu_occupancy": "N/A",
        }
        for p in gpu.get("processes") or []
    ]


def amdsmi_get_gpu_total_ecc_count(handle: _Handle) -> dict[str, int]:
    gpu = _gpu(handle, "amdsmi_get_gpu_total_ecc_count")
    return {"correctable_count": 0, "uncorrectable_count": int(gpu.get("uncorrectable", 0)), "deferred_count": 0}
