"""The NVML GPU inventory, through nvidia-ml-py (module ``pynvml``). SPEC.md section 5.

Observes only. No NVML (package, library or driver missing) is normal: ``available`` is False,
``read()`` returns no GPUs and ``describe()`` says so in one sentence; nothing here raises.
A per-device NVML error (GPU_IS_LOST included) makes only that GPU ``healthy=False`` with the
error text; transient errors (Unknown, Timeout, ...) are retried a few times, quickly.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from controller.model.gpu_health import PAGES_PENDING, XID_UNHEALTHY, ecc_problem, xid_problem
from controller.model.gpus import Gpu, GpuProcess
from controller.model.mig import mig_profile_of
from controller.observe.gpus.procs import process_alive, process_name, process_started, process_user

log = logging.getLogger("gflowd.gpus")
T = TypeVar("T")

# NVML return codes (nvml.h); numbers, so this module does not need pynvml to import.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6  # nvmlDeviceGetProcessUtilization: no sample since the timestamp (the processes were idle)
INSUFFICIENT_SIZE = 7  # the process list grew between the size query and the fetch
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
XIDS_KEPT = 32  # per GPU: the Xid events kept for the failure of the jobs that ran on it
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
ARGUMENT_VERSION_MISMATCH = 25
NOT_READY = 27
UNKNOWN = 999
TRANSIENT = frozenset({UNKNOWN, TIMEOUT, INSUFFICIENT_SIZE, NOT_READY})

ATTEMPTS = 3  # per NVML call; waits 10 ms then 20 ms: a persistently failing GPU costs ~30 ms
MEMORY_V2 = 0x02000028  # nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
UNCORRECTED, VOLATILE = 1, 0  # nvmlDeviceGetTotalEccErrors: double-bit errors since the driver loaded
UNSUPPORTED = frozenset({NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND})


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class NvmlInventory:
    """GPUs as NVML reports them; implements ``controller.observe.gpus.inventory.Inventory``.

    ``nvmlInit`` runs once, in the constructor; ``close()`` calls ``nvmlShutdown``.
    """

    def __init__(self) -> None:
        self.available = False
        self.reason = ""  # why not available: one sentence
        self.driver = ""
        self._closed = False
        self._nv: Any = None
        self._lock = threading.Lock()
        self._known: dict[int, Gpu] = {}  # last good record per index: a lost GPU keeps its identity
        self._errors: dict[int | str, str] = {}  # last error logged per index (log changes, not every pass)
        self._topology: tuple[tuple[str, ...], dict[tuple[int, int], int]] | None = None
        self._util_seen: dict[int, int] = {}  # per GPU: the newest process-utilization sample read (us)
        self._xid_sets: dict[int, Any] = {}  # per GPU: its Xid event set; None: the driver has none for it
        self._xid_failed: dict[int, str] = {}  # per GPU: the critical Xid seen, until gflowd restarts
        # per GPU: its last Xid events (wall time, Xid), any kind: an ended job's failure names them
        self._xid_log: dict[int, list[tuple[float, int]]] = {}
        try:
            import pynvml  # lazy: the NVML binding loads only when gflowd reads real GPUs
        except ImportError:
            self.reason = "the nvidia-ml-py package (module pynvml) is not installed"
            return
        self._nv = pynvml
        try:
            self._call(pynvml.nvmlInit)
        except pynvml.NVMLError as exc:
            self.reason = self._init_failure(exc)
            return
        except Exception as exc:  # a broken library (missing symbols, bad ABI): still "no NVML"
            self.reason = f"NVML could not be initialized ({type(exc).__name__}: {exc})"
            return
        self.available = True
        try:
            self.driver = str(self._call(pynvml.nvmlSystemGetDriverVersion))
        except Exception:
            self.driver = ""

    # -- the Inventory protocol ---------------------------------------------------------------

    def describe(self) -> str:
        if self.available:
            return f"NVML (driver {self.driver})" if self.driver else "NVML"
        if self._closed:
            return "NVML (closed)"
        return f"no NVML: {self.reason}; running CPU jobs only"

    def read(self) -> list[Gpu]:
        """Every GPU NVML counts, in index order. Never raises."""
        with self._lock:
            if not self.available:
                return []
            nv = self._nv
            try:
                count = int(self._call(nv.nvmlDeviceGetCount))
            except Exception as exc:  # the driver went away: keep the GPUs visible, but unusable
                message = f"NVML cannot count GPUs: {self._explain(exc)}"
                self._note("count", message)
                return [
                    Gpu(g.index, g.uuid, g.name, g.memory_total, healthy=False, error=message)
                    for g in sorted(self._known.values(), key=lambda g: g.index)
                ]
            self._note("count", "")
            gpus = [self._read_one(index) for index in range(count)]
            for gone in [i for i in self._known if i >= count]:
                del self._known[gone]
            return self._with_mig(gpus, count)

    # -- MIG ----------------------------------------------------------------------------------

    def _with_mig(self, gpus: list[Gpu], count: int) -> list[Gpu]:
        """Each MIG-enabled GPU replaced by its instances, the units a job gets; their ids continue
        after the ``count`` physical GPUs, in NVML order (parent, then instance index), as Slurm
        counts gres. A GPU whose MIG mode NVML cannot tell stays whole."""
        whole: list[Gpu] = []
        instances: list[Gpu] = []
        for gpu in gpus:
            found = self._mig_instances(gpu)
            if found is None:
                whole.append(gpu)
            else:
                instances += found
        return whole + [replace(g, index=count + n) for n, g in enumerate(instances)]

    def _mig_instances(self, parent: Gpu) -> list[Gpu] | None:
        """The MIG instances of ``parent`` (index not assigned yet), or None when MIG is off."""
        nv = self._nv
        try:
            handle = self._call(nv.nvmlDeviceGetHandleByIndex, parent.index)
            current, _pending = self._call(nv.nvmlDeviceGetMigMode, handle)
        except Exception:  # no MIG on this GPU or driver (NOT_SUPPORTED, FUNCTION_NOT_FOUND)
            return None
        if int(current) != 1:  # NVML_DEVICE_MIG_ENABLE
            return None
        found = []
        try:
            slots = int(self._call(nv.nvmlDeviceGetMaxMigDeviceCount, handle))
            for local in range(slots):
                try:
                    mig = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, local)
                except nv.NVMLError as exc:
                    if _code(exc) == NOT_FOUND:  # an empty slot: no instance made there
                        continue
                    raise
                name = str(self._call(nv.nvmlDeviceGetName, mig))
                total, used = self._memory(mig)
                found.append(
                    Gpu(
                        -1,
                        str(self._call(nv.nvmlDeviceGetUUID, mig)),
                        parent.name,
                        total,
                        used,
                        None,  # NVML has no utilization for a MIG device
                        self._processes(mig),
                        healthy=parent.healthy,  # an Xid or ECC fault of the GPU is every instance's
                        error=parent.error,
                        minor=parent.minor,  # a MIG job opens its parent's /dev/nvidiaN (and its caps)
                        numa_node=parent.numa_node,
                        cpus=parent.cpus,
                        parent=parent.index,
                        profile=mig_profile_of(name),
                        local_index=local,
                        mig_ids=self._mig_ids(mig),
                    )
                )
        except Exception as exc:
            self._note(f"mig{parent.index}", f"NVML error reading MIG instances of GPU {parent.index}: {exc}")
            return []  # MIG is on: the GPU is no whole unit, and its instances are unknown this pass
        self._note(f"mig{parent.index}", "")
        return found

    def _mig_ids(self, mig: Any) -> tuple[int, int] | None:
        """The instance's (GPU instance id, compute instance id): they name its nvidia-caps nodes
        (docs/mig.md). None when this NVML cannot say (the caps stay as the parent's)."""
        nv = self._nv
        try:
            return int(self._call(nv.nvmlDeviceGetGpuInstanceId, mig)), int(
                self._call(nv.nvmlDeviceGetComputeInstanceId, mig)
            )
        except Exception:
            return None

    # -- topology -----------------------------------------------------------------------------

    def topology(self) -> dict[tuple[int, int], int]:
        """NVML common-ancestor level for every ordered pair (i, j), i != j, of GPU indices.

        Levels are NVML's ``nvmlGpuTopologyLevel_t``: 0 same board, 10 single PCIe switch,
        20 multiple switches, 30 host bridge, 40 same NUMA node/CPU, 50 across CPUs (SMP
        interconnect); smaller is closer. ``result[(i, j)] == result[(j, i)]``. Pairs NVML cannot
        answer for (unsupported, a lost GPU) are left out; no NVML or no support at all gives
        ``{}``. Never raises. An answer with no errors other than "not supported" is cached
        while the GPUs (by UUID, in index order) stay the same; otherwise it is asked again.
        """
        with self._lock:
            if not self.available:
                return {}
            nv = self._nv
            try:
                count = int(self._call(nv.nvmlDeviceGetCount))
            except Exception:
                return {}
            handles: dict[int, Any] = {}
            uuids: list[str] = []
            for index in range(count):
                try:
                    handle = self._call(nv.nvmlDeviceGetHandleByIndex, index)
                    uuids.append(str(self._call(nv.nvmlDeviceGetUUID, handle)))
                    handles[index] = handle
                except Exception:
                    uuids.append("")
            key = tuple(uuids)
            if self._topology is not None and self._topology[0] == key:
                return dict(self._topology[1])
            result: dict[tuple[int, int], int] = {}
            complete = len(handles) == count
            for i in sorted(handles):
                for j in sorted(handles):
                    if j <= i:
                        continue
                    try:
                        level = int(self._call(nv.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j]))
                    except Exception as exc:
                        if _code(exc) != NOT_SUPPORTED:  # "not supported" will not change: cacheable
                            complete = False
                        continue
                    result[(i, j)] = result[(j, i)] = level
            if complete:
                self._topology = (key, dict(result))
            return result

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """``nvmlShutdown`` (once). Afterwards ``read()`` returns no GPUs."""
        with self._lock:
            if not self.available:
                return
            self.available = False
            self._closed = True
            for events in self._xid_sets.values():
                if events is not None:
                    try:
                        self._nv.nvmlEventSetFree(events)
                    except Exception as exc:
                        log.debug("nvmlEventSetFree failed: %s", exc)
            try:
                self._nv.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown failed: %s", exc)

    def __enter__(self) -> NvmlInventory:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _is_nvml_error(self, exc: BaseException) -> bool:
        return self._nv is not None and isinstance(exc, self._nv.NVMLError)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """One NVML call, retried a few quick times on transient errors (a loop, not tenacity: its
        import, with asyncio's and random's, cost every gflowd start ~8 ms)."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fn(*args)
            except Exception as exc:
                if attempt == ATTEMPTS or not (_code(exc) in TRANSIENT and self._is_nvml_error(exc)):
                    raise
            time.sleep(min(0.01 * 2 ** (attempt - 1), 0.05))  # 10 ms, then 20 ms
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _init_failure(self, exc: BaseException) -> str:
        code = _code(exc)
        if code == LIBRARY_NOT_FOUND:
            return "the NVML library libnvidia-ml.so.1 was not found (no NVIDIA driver installed)"
        if code == DRIVER_NOT_LOADED:
            return "the NVIDIA driver is not loaded"
        if code == NO_PERMISSION:
            return "no permission to use NVML (check the /dev/nvidia* device permissions)"
        return f"nvmlInit failed ({exc})"

    def _explain(self, exc: BaseException) -> str:
        text = str(exc) or type(exc).__name__
        if _code(exc) == GPU_IS_LOST:
            return f"{text} (NVML_ERROR_GPU_IS_LOST: it fell off the bus or hung; a GPU reset or reboot is needed)"
        return text

    def _note(self, key: int | str, message: str) -> None:
        """Log an error when it first appears and when it clears, not on every pass."""
        previous = self._errors.get(key, "")
        if message and message != previous:
            log.warning("%s", message)
        elif not message and previous:
            log.info("NVML: %s recovered", f"GPU {key}" if isinstance(key, int) else key)
        self._errors[key] = message

    def _read_one(self, index: int) -> Gpu:
        nv = self._nv
        step = "nvmlDeviceGetHandleByIndex"
        try:
            handle = self._call(nv.nvmlDeviceGetHandleByIndex, index)
            step = "nvmlDeviceGetUUID"
            uuid = str(self._call(nv.nvmlDeviceGetUUID, handle))
            step = "nvmlDeviceGetName"
            name = str(self._call(nv.nvmlDeviceGetName, handle))
            step = "nvmlDeviceGetMemoryInfo"
            total, used = self._memory(handle)
            step = "nvmlDeviceGetUtilizationRates"
            utilization = self._utilization(handle)
            step = "nvmlDeviceGetComputeRunningProcesses"
            processes = self._processes(handle)
            if processes:
                step = "nvmlDeviceGetProcessUtilization"
                processes = self._with_utilization(index, handle, processes)
            step = "health (Xid events, ECC, retired pages)"
            problem = self._health(index, handle)
        except Exception as exc:  # NVMLError, or a library that does not behave: this GPU only
            message = f"NVML error on GPU {index} ({step}): {self._explain(exc)}"
            self._note(index, message)
            known = self._known.get(index)
            return Gpu(
                index,
                known.uuid if known else f"GPU-unknown-{index}",
                known.name if known else "unknown",
                known.memory_total if known else 0,
                healthy=False,
                error=message,
            )
        self._note(index, f"GPU {index} is unhealthy: {problem}" if problem else "")
        minor, cpus = self._placement(handle)
        gpu = Gpu(index, uuid, name, total, used, utilization, processes, not problem, problem, minor=minor, cpus=cpus)
        if self._xid_log.get(index):  # what a job that ran here may have died of (decide/exits.py)
            gpu = dataclasses.replace(gpu, xids=tuple(self._xid_log[index]))
        self._known[index] = gpu
        return gpu

    def _placement(self, handle: Any) -> tuple[int | None, tuple[int, ...]]:
        """The device node's minor number and the cores near the GPU (its CPU affinity), for the
        devices cgroup and the cpuset; (None, empty) where NVML does not say."""
        nv = self._nv
        minor: int | None = None
        cpus: set[int] = set()
        try:  # neither changes while the driver is loaded, but a call is cheap; no retries
            minor = int(nv.nvmlDeviceGetMinorNumber(handle))
        except Exception:  # not supported (e.g. on some platforms): the index stands in
            minor = None
        try:
            masks = nv.nvmlDeviceGetCpuAffinity(handle, max(1, (os.cpu_count() or 64) // 64 + 1))
            for word, mask in enumerate(masks):
                cpus.update(word * 64 + bit for bit in range(64) if int(mask) >> bit & 1)
        except Exception:
            cpus = set()
        return minor, tuple(sorted(cpus))

    def _memory(self, handle: Any) -> tuple[int, int]:
        nv = self._nv
        try:  # v2 reports "used" without the driver's reservation, like nvidia-smi
            mem = self._call(nv.nvmlDeviceGetMemoryInfo, handle, MEMORY_V2)
        except nv.NVMLError as exc:
            if _code(exc) not in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH, NOT_SUPPORTED):
                raise
            mem = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
        return int(mem.total), int(mem.used)

    def _health(self, index: int, handle: Any) -> str:
        """Why the GPU is unhealthy though it answers: a critical Xid (sticky), uncorrectable ECC
        errors, retired pages pending a reset; "" when none (or the driver cannot say)."""
        self._read_xids(index, handle)
        if index in self._xid_failed:
            return self._xid_failed[index]
        nv = self._nv
        try:
            uncorrected = int(self._call(nv.nvmlDeviceGetTotalEccErrors, handle, UNCORRECTED, VOLATILE))
        except nv.NVMLError as exc:
            if _code(exc) not in UNSUPPORTED:
                raise
            uncorrected = 0
        if uncorrected:
            return ecc_problem(uncorrected)
        try:
            pending = int(self._call(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle))
        except nv.NVMLError as exc:
            if _code(exc) not in UNSUPPORTED:
                raise
            pending = 0
        return PAGES_PENDING if pending else ""

    def _read_xids(self, index: int, handle: Any) -> None:
        """Drain the GPU's Xid events without waiting; a critical one marks it for good."""
        nv = self._nv
        if index not in self._xid_sets:
            try:
                events = nv.nvmlEventSetCreate()
                nv.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
                self._xid_sets[index] = events
            except Exception as exc:  # not supported here (vGPU, WSL, old driver): no Xid watch
                log.debug("no Xid events for GPU %d: %s", index, exc)
                self._xid_sets[index] = None
        events = self._xid_sets[index]
        for _ in range(64):  # a bound, should a driver flood events
            if events is None:
                return
            try:  # not through _call: TIMEOUT is "no event", not a transient error
                data = nv.nvmlEventSetWait_v2(events, 0)
            except nv.NVMLError as exc:
                if _code(exc) != TIMEOUT:
                    log.debug("reading Xid events of GPU %d: %s", index, exc)
                return
            xid = int(data.eventData)
            seen = self._xid_log.setdefault(index, [])
            seen.append((time.time(), xid))
            del seen[:-XIDS_KEPT]
            if xid in XID_UNHEALTHY and index not in self._xid_failed:
                self._xid_failed[index] = xid_problem(xid, time.time())
            log.warning("GPU %d: Xid %d%s", index, xid, f" ({XID_UNHEALTHY[xid]})" if xid in XID_UNHEALTHY else "")

    def _utilization(self, handle: Any) -> int | None:
        nv = self._nv
        try:
            return int(self._call(nv.nvmlDeviceGetUtilizationRates, handle).gpu)
        except nv.NVMLError as exc:
            if _code(exc) in (NOT_SUPPORTED, NO_PERMISSION):
                return None
            raise

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        nv = self._nv
        try:
            found = self._call(nv.nvmlDeviceGetComputeRunningProcesses_v3, handle)
        except nv.NVMLError as exc:
            if _code(exc) == NOT_SUPPORTED:
                return ()
            if _code(exc) != FUNCTION_NOT_FOUND:
                raise
            found = self._call(nv.nvmlDeviceGetComputeRunningProcesses_v2, handle)  # drivers < 510
        return tuple(
            GpuProcess(
                int(p.pid),
                int(p.usedGpuMemory or 0),
                process_name(int(p.pid)),
                user=process_user(int(p.pid)),
                started=process_started(int(p.pid)),
                gone=not process_alive(int(p.pid)),
            )
            for p in found
        )

    def _with_utilization(self, index: int, handle: Any, processes: tuple[GpuProcess, ...]) -> tuple[GpuProcess, ...]:
        """Each process's SM utilization: the mean of the driver's samples since the last read (a
        process with none was idle: 0). Unsupported (older GPUs, vGPU): left None."""
        nv = self._nv
        try:
            samples = self._call(nv.nvmlDeviceGetProcessUtilization, handle, self._util_seen.get(index, 0))
        except nv.NVMLError as exc:
            if _code(exc) in (NOT_FOUND, 0):  # 0: pynvml raises NVMLError(SUCCESS) for an empty answer
                samples = []
            elif _code(exc) in (NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND):
                return processes
            else:
                raise
        sums: dict[int, list[int]] = {}
        for sample in samples:
            sums.setdefault(int(sample.pid), []).append(int(sample.smUtil))
            self._util_seen[index] = max(self._util_seen.get(index, 0), int(sample.timeStamp))
        return tuple(
            replace(p, utilization=round(sum(sums[p.pid]) / len(sums[p.pid])) if p.pid in sums else 0)
            for p in processes
        )
