"""The AMD GPU inventory, through amdsmi (the ROCm SMI library's Python binding; ``gflow-controller[amd]``).

Observes only, like the NVML reader (``nvml.py``): no amdsmi (package, library or driver missing)
gives no GPUs and ``describe()`` says why in one sentence; nothing here raises. A per-device error
makes only that GPU ``healthy=False`` with the error text, and so does an uncorrectable ECC count
(RAS) above zero. ``index`` is left to the inventory (``inventory.merge``: AMD ids continue after
NVIDIA's); ``local_index`` is the GPU's place in amdsmi's order, which is ROCR's (``ROCR_VISIBLE_DEVICES``),
and ``minor`` is its DRM render node's minor (``/dev/dri/renderD<minor>``, for device isolation).

amdsmi's Python API moved between ROCm 6.0 and 7.0; the differences handled here, each read from
its ``amdsmi_interface.py``: ``amdsmi_get_gpu_process_list`` returns process dicts (7.x) or process
handles to pass to ``amdsmi_get_gpu_process_info`` (6.0-6.2); the render minor comes from
``amdsmi_get_gpu_enumeration_info`` (7.x), else from ``amdsmi_get_gpu_drm_render_minor`` (6.x), else
the GPU is reported without one (then its job gets no render node of its own: unhealthy).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from controller.model.gpus import Gpu, GpuProcess
from controller.observe.gpus.procs import process_name, process_started, process_user

log = logging.getLogger("gflowd.gpus")
MIB = 1 << 20
VRAM = 0  # AmdSmiMemoryType.VRAM


def amd_present(device_dir: str = "/dev") -> bool:
    """Whether this machine may have AMD GPUs: the ROCm compute node ``kfd`` exists. Cheap; the
    amdsmi binding is imported only then, so a box without AMD GPUs never pays for it."""
    return os.path.exists(os.path.join(device_dir, "kfd"))


class AmdInventory:
    """GPUs as amdsmi reports them; implements ``controller.observe.gpus.inventory.Inventory``.
    ``amdsmi_init`` runs once, in the constructor; ``close()`` calls ``amdsmi_shut_down``."""

    LIBRARY, INIT = "amdsmi", "amdsmi_init"  # what the guard's messages name (guard.py)

    def __init__(self) -> None:
        self.available = False
        self.reason = ""
        self._smi: Any = None
        self._errors: dict[str, str] = {}
        try:
            import amdsmi  # lazy: only on a machine with /dev/kfd
        except ImportError:
            self.reason = "the amdsmi package is not installed (pip install 'gflow-controller[amd]')"
            return
        except Exception as exc:  # the binding loads libamd_smi.so at import: a missing library lands here
            self.reason = f"amdsmi could not load ({type(exc).__name__}: {exc})"
            return
        self._smi = amdsmi
        try:
            amdsmi.amdsmi_init()
        except Exception as exc:
            self.reason = f"amdsmi_init failed ({_text(exc)})"
            return
        self.available = True

    def describe(self) -> str:
        if self.available:
            return "amdsmi"
        return f"no amdsmi: {self.reason}"

    def read(self) -> list[Gpu]:
        """Every GPU amdsmi lists, in its order (ROCR's). Never raises."""
        if not self.available:
            return []
        try:
            handles = list(self._smi.amdsmi_get_processor_handles())
        except Exception as exc:
            self._note("handles", f"amdsmi cannot list GPUs: {_text(exc)}")
            return []
        self._note("handles", "")
        return [self._read_one(local, handle) for local, handle in enumerate(handles)]

    def close(self) -> None:
        if self.available:
            self.available = False
            try:
                self._smi.amdsmi_shut_down()
            except Exception as exc:
                log.debug("amdsmi_shut_down failed: %s", exc)

    # -- internals ----------------------------------------------------------------------------

    def _read_one(self, local: int, handle: Any) -> Gpu:
        smi = self._smi
        step = "amdsmi_get_gpu_device_uuid"
        uuid, name, total, used, utilization, minor = "", f"AMD GPU {local}", 0, 0, None, None
        processes: tuple[GpuProcess, ...] = ()
        try:
            uuid = str(smi.amdsmi_get_gpu_device_uuid(handle))
            step = "amdsmi_get_gpu_asic_info"
            name = str(smi.amdsmi_get_gpu_asic_info(handle).get("market_name") or name)
            name = name if "amd" in name.lower() else f"AMD {name}"  # the vendor in get gpus' NAME
            minor = self._render_minor(handle)
            step = "amdsmi_get_gpu_memory_total"
            total = int(smi.amdsmi_get_gpu_memory_total(handle, getattr(smi, "AmdSmiMemoryType", _Vram).VRAM))
            step = "amdsmi_get_gpu_vram_usage"
            used = int(smi.amdsmi_get_gpu_vram_usage(handle).get("vram_used") or 0) * MIB  # amdsmi says MB
            step = "amdsmi_get_gpu_activity"
            activity = smi.amdsmi_get_gpu_activity(handle).get("gfx_activity")
            utilization = activity if isinstance(activity, int) else None  # "N/A": not reported
            step = "amdsmi_get_gpu_process_list"
            processes = self._processes(handle)
            step = "amdsmi_get_gpu_total_ecc_count"
            error = self._ras(handle)
        except Exception as exc:
            error = f"amdsmi: {step} failed on AMD GPU {local}: {_text(exc)}"
        self._note(str(local), error)
        return Gpu(
            index=local,  # the inventory renumbers it after the NVIDIA GPUs
            uuid=uuid or f"amd-{local}",
            name=name,
            memory_total=total,
            memory_used=used,
            utilization=utilization,
            processes=processes,
            healthy=not error,
            error=error,
            minor=minor,
            vendor="amd",
            local_index=local,
        )

    def _render_minor(self, handle: Any) -> int | None:
        smi = self._smi
        if hasattr(smi, "amdsmi_get_gpu_enumeration_info"):
            render = smi.amdsmi_get_gpu_enumeration_info(handle).get("drm_render")
            return render if isinstance(render, int) else None
        if hasattr(smi, "amdsmi_get_gpu_drm_render_minor"):
            return int(smi.amdsmi_get_gpu_drm_render_minor(handle))
        return None

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        smi = self._smi
        found = []
        for item in smi.amdsmi_get_gpu_process_list(handle):
            info = item if isinstance(item, dict) else smi.amdsmi_get_gpu_process_info(handle, item)
            pid = int(info.get("pid") or 0)
            if pid <= 0:
                continue
            vram = (info.get("memory_usage") or {}).get("vram_mem")
            used = int(vram if isinstance(vram, int) else info.get("mem") or 0)
            found.append(
                GpuProcess(
                    pid,
                    used,
                    process_name(pid) or str(info.get("name") or ""),
                    None,
                    process_user(pid),
                    process_started(pid),
                )
            )
        return tuple(found)

    def _ras(self, handle: Any) -> str:
        """Unhealthy on uncorrectable ECC errors (RAS); a GPU without ECC reporting is healthy."""
        try:
            counts = self._smi.amdsmi_get_gpu_total_ecc_count(handle)
        except Exception:
            return ""  # not supported (consumer GPUs): nothing to say
        uncorrectable = counts.get("uncorrectable_count")
        if isinstance(uncorrectable, int) and uncorrectable > 0:
            return f"{uncorrectable} uncorrectable ECC errors (amdsmi RAS): drain it and reset the GPU"
        return ""

    def _note(self, key: str, message: str) -> None:
        previous = self._errors.get(key, "")
        if message and message != previous:
            log.warning("%s", message)
        elif not message and previous:
            log.info("amdsmi: %s recovered", f"AMD GPU {key}" if key.isdigit() else key)
        self._errors[key] = message


class _Vram:
    VRAM = VRAM  # amdsmi without the AmdSmiMemoryType enum takes the plain number


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
