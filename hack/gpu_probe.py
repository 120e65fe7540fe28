#!/usr/bin/env python3
"""What a process really sees of the GPUs, through the CUDA driver API alone (no toolkit, no torch).

The payload of the jobs ``hack/gpu-acceptance.py`` runs, and the "foreign process" it starts outside
gflow. Standard library only: ``ctypes`` on ``libcuda.so.1``, which the NVIDIA driver installs.
It writes one JSON document (``--out FILE``, atomically, rewritten as it goes: ``phase`` is
``ready`` once the devices are listed and the memory allocated, ``done`` at the end) and prints the
last one on stdout. It never raises on a CUDA error: the error is in the JSON, so the caller can
tell "cuInit failed" (what device isolation may cause) from a bug.

CUDA driver API calls (CUDA Driver API reference, docs.nvidia.com/cuda/cuda-driver-api):
  6.3 Initialization     cuInit(unsigned int Flags)                       Flags must be 0
  6.5 Device Management  cuDeviceGetCount(int *count)
                         cuDeviceGet(CUdevice *device, int ordinal)
                         cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
                                    "[domain]:[bus]:[device].[function]", 13 chars with the NUL
                         cuDeviceGetName(char *name, int len, CUdevice dev)
                         cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
  6.8 Context Management cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
                         cuCtxSetCurrent(CUcontext ctx), cuCtxSynchronize(void)
                         cuCtxDestroy_v2(CUcontext ctx)
  6.6 Primary Context    cuDevicePrimaryCtxRetain / cuDevicePrimaryCtxRelease_v2 (only where a
                         driver no longer exports cuCtxCreate_v2)
  6.13 Memory Management cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
                         cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
                         cuMemFree_v2(CUdeviceptr dptr)
  6.2 Error Handling     cuGetErrorName(CUresult error, const char **pStr)
CUdevice is an int, CUdeviceptr a 64-bit unsigned integer, CUcontext a pointer, CUresult an int.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import re
import signal
import sys
import time
from typing import Any

CUDA_SUCCESS = 0
MIB = 1 << 20
_BUS_ID = re.compile(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*$")


def normalize_bus_id(text: str) -> str:
    """One spelling for a PCI address, so NVML's and CUDA's can be compared.

    NVML and nvidia-smi say ``00000000:3B:00.0`` (8-digit domain, upper case); CUDA says
    ``0000:3b:00.0`` or ``0000:3B:00.0``. Both become ``0000:3b:00.0``. A missing domain means 0.
    Raises ValueError for anything that is not a PCI address.
    """
    match = _BUS_ID.match(text)
    if match is None:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"


class CudaError(Exception):
    def __init__(self, call: str, code: int, name: str, text: str = ""):
        super().__init__(f"{call} returned {name} ({code})")
        self.call, self.code, self.name = call, code, name
        self.text = text  # the driver's words for it (cuGetErrorString): "out of memory"


class Cuda:
    """The few driver API entry points the probe uses, with their C signatures declared."""

    def __init__(self, library: str = "libcuda.so.1"):
        self.lib = ctypes.CDLL(library)
        c_int, c_uint, c_size_t, c_void_p = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p
        devptr = ctypes.c_uint64
        signatures: dict[str, list[Any]] = {
            "cuInit": [c_uint],
            "cuDeviceGetCount": [ctypes.POINTER(c_int)],
            "cuDeviceGet": [ctypes.POINTER(c_int), c_int],
            "cuDeviceGetPCIBusId": [ctypes.c_char_p, c_int, c_int],
            "cuDeviceGetName": [ctypes.c_char_p, c_int, c_int],
            "cuDeviceTotalMem_v2": [ctypes.POINTER(c_size_t), c_int],
            "cuCtxCreate_v2": [ctypes.POINTER(c_void_p), c_uint, c_int],
            "cuCtxSetCurrent": [c_void_p],
            "cuCtxSynchronize": [],
            "cuCtxDestroy_v2": [c_void_p],
            "cuDevicePrimaryCtxRetain": [ctypes.POINTER(c_void_p), c_int],
            "cuDevicePrimaryCtxRelease_v2": [c_int],
            "cuMemAlloc_v2": [ctypes.POINTER(devptr), c_size_t],
            "cuMemsetD8_v2": [devptr, ctypes.c_ubyte, c_size_t],
            "cuMemFree_v2": [devptr],
            "cuGetErrorName": [c_int, ctypes.POINTER(ctypes.c_char_p)],
            "cuGetErrorString": [c_int, ctypes.POINTER(ctypes.c_char_p)],
        }
        self.fn: dict[str, Any] = {}
        for name, argtypes in signatures.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:  # an old or future driver without this symbol
                continue
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            self.fn[name] = fn

    def has(self, name: str) -> bool:
        return name in self.fn

    def error_name(self, code: int) -> str:
        if "cuGetErrorName" in self.fn:
            text = ctypes.c_char_p()
            if self.fn["cuGetErrorName"](code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
                return text.value.decode(errors="replace")
        return f"CUresult {code}"

    def error_string(self, code: int) -> str:
        if "cuGetErrorString" in self.fn:
            text = ctypes.c_char_p()
            if self.fn["cuGetErrorString"](code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
                return text.value.decode(errors="replace")
        return ""

    def call(self, name: str, *args: Any) -> None:
        if name not in self.fn:
            raise CudaError(name, -1, "symbol not found in libcuda.so.1")
        code = self.fn[name](*args)
        if code != CUDA_SUCCESS:
            raise CudaError(name, code, self.error_name(code), self.error_string(code))

    # -- the calls, typed --------------------------------------------------------------------

    def init(self) -> None:
        self.call("cuInit", 0)

    def device_count(self) -> int:
        count = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def bus_id(self, dev: int) -> str:
        buf = ctypes.create_string_buffer(64)  # 13 is enough by the docs; room for a longer domain
        self.call("cuDeviceGetPCIBusId", buf, len(buf), dev)
        return buf.value.decode(errors="replace")

    def name(self, dev: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, len(buf), dev)
        return buf.value.decode(errors="replace")

    def total_memory(self, dev: int) -> int:
        size = ctypes.c_size_t()
        self.call("cuDeviceTotalMem_v2", ctypes.byref(size), dev)
        return size.value

    def create_context(self, dev: int) -> tuple[int, bool]:
        """A context on ``dev``, current to this thread. Returns (handle, is_primary)."""
        ctx = ctypes.c_void_p()
        if self.has("cuCtxCreate_v2"):
            self.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
            return ctx.value or 0, False
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.call("cuCtxSetCurrent", ctx)
        return ctx.value or 0, True

    def set_current(self, ctx: int) -> None:
        self.call("cuCtxSetCurrent", ctypes.c_void_p(ctx))

    def destroy_context(self, ctx: int, dev: int, primary: bool) -> None:
        if primary:
            self.call("cuDevicePrimaryCtxRelease_v2", dev)
        else:
            self.call("cuCtxDestroy_v2", ctypes.c_void_p(ctx))

    def alloc(self, size: int) -> int:
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(ptr), size)
        return ptr.value

    def memset(self, ptr: int, value: int, size: int) -> None:
        self.call("cuMemsetD8_v2", ptr, value, size)

    def synchronize(self) -> None:
        self.call("cuCtxSynchronize")

    def free(self, ptr: int) -> None:
        self.call("cuMemFree_v2", ptr)


class Stop(Exception):
    """SIGTERM/SIGINT: free what we hold and report, like a well-behaved job."""


def _on_signal(signum: int, _frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # a second TERM (process group and pid) must not cut the cleanup short
        signal.signal(sig, signal.SIG_IGN)
    raise Stop(signal.Signals(signum).name)


def write_json(path: str | None, doc: dict[str, Any]) -> None:
    if not path:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        json.dump(doc, out)
    os.replace(tmp, path)


def try_open(path: str) -> str:
    """``ok`` or the errno name of opening a device node read-write (what CUDA does)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    os.close(fd)
    return "ok"


def own_cgroups() -> list[str]:
    try:
        with open("/proc/self/cgroup") as handle:
            return [line.strip() for line in handle if line.strip()]
    except OSError:
        return []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="List and use GPUs through the CUDA driver API; print JSON.")
    parser.add_argument("--out", help="write the JSON document here too (atomically, as it progresses)")
    parser.add_argument(
        "--clear-visible",
        action="store_true",
        help="unset CUDA_VISIBLE_DEVICES before cuInit (tries to escape the binding)",
    )
    parser.add_argument(
        "--use",
        choices=("none", "first", "all"),
        default="first",
        help="devices to create a context and allocate memory on (default first)",
    )
    parser.add_argument("--alloc-mib", type=int, default=64, help="MiB to allocate on each used device")
    parser.add_argument(
        "--alloc-step-mib", type=int, default=0, help="allocate in chunks of this many MiB (0: one allocation)"
    )
    parser.add_argument("--step-interval", type=float, default=0.0, help="seconds between chunks")
    parser.add_argument("--busy", type=float, default=0.0, help="seconds of cuMemsetD8 loops on the first used device")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to keep contexts and memory afterwards")
    parser.add_argument("--release-file", help="end the busy phase and the hold early once this file exists")
    parser.add_argument(
        "--open-node",
        action="append",
        default=[],
        metavar="PATH",
        help="also try to open this device node (e.g. another job's /dev/nvidiaN)",
    )
    parser.add_argument(
        "--exit-on-error",
        action="store_true",
        help="a failed allocation is printed to stderr as CUDA programs print it, and the probe exits 1",
    )
    parser.add_argument("--library", default="libcuda.so.1")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    doc: dict[str, Any] = {
        "pid": os.getpid(),
        "phase": "starting",
        "tStart": time.time(),
        "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GFLOW_JOB_NAME")},
        "clearedVisible": False,
        "cgroups": own_cgroups(),
        "init": None,
        "devices": [],
        "used": [],
        "busy": None,
        "nodes": {path: try_open(path) for path in args.open_node},
        "error": None,
    }
    if args.clear_visible and "CUDA_VISIBLE_DEVICES" in os.environ:
        del os.environ["CUDA_VISIBLE_DEVICES"]  # read by the driver at cuInit
        doc["clearedVisible"] = True
    held: list[dict[str, Any]] = []  # {ctx, dev, primary, ptrs}
    cuda: Cuda | None = None
    try:
        try:
            cuda = Cuda(args.library)
        except OSError as exc:
            doc["init"] = {"ok": False, "error": f"cannot load {args.library}: {exc}"}
            return _finish(doc, args, "done")
        doc["tFirstCudaCall"] = time.time()
        try:
            cuda.init()
            doc["init"] = {"ok": True, "error": None}
        except CudaError as exc:
            doc["init"] = {"ok": False, "error": str(exc), "code": exc.code}
            return _finish(doc, args, "done")
        for ordinal in range(cuda.device_count()):
            dev = cuda.device(ordinal)
            raw = cuda.bus_id(dev)
            doc["devices"].append(
                {
                    "ordinal": ordinal,
                    "pciBusId": normalize_bus_id(raw),
                    "rawPciBusId": raw,
                    "name": cuda.name(dev),
                    "totalMemory": cuda.total_memory(dev) if cuda.has("cuDeviceTotalMem_v2") else None,
                }
            )
        targets = {"none": [], "first": doc["devices"][:1], "all": doc["devices"]}[args.use]
        for device in targets:
            _use(cuda, device, args, doc, held)
        failed = [u for u in doc["used"] if u.get("error")]
        if failed and args.exit_on_error:  # as a training script ends: the CUDA error's words on stderr, exit 1
            print(f"gpu_probe: CUDA error: {failed[0].get('errorText') or failed[0]['error']}", file=sys.stderr)
            print(f"gpu_probe: {failed[0]['error']}", file=sys.stderr, flush=True)
            _finish(doc, args, "failed")
            return 1
        doc["tReady"] = time.time()
        _finish(doc, args, "ready", final=False)
        busy = next((h for h in held if h["ptrs"]), None)
        if args.busy > 0 and busy is not None:
            doc["busy"] = _busy(cuda, busy, args.busy, args.release_file)
        _hold(args)
        return _finish(doc, args, "done")
    except Stop as stop:
        doc["stoppedBy"] = str(stop)
        return _finish(doc, args, "stopped")
    except CudaError as exc:
        doc["error"] = str(exc)
        return _finish(doc, args, "done")
    finally:
        _release(cuda, held)


def _use(
    cuda: Cuda, device: dict[str, Any], args: argparse.Namespace, doc: dict[str, Any], held: list[dict[str, Any]]
) -> None:
    """Context + allocation (+ one memset) on one device, added to ``held`` as it grows (a stop
    midway still frees it); CUDA errors are recorded, not raised."""
    entry: dict[str, Any] = {
        "ordinal": device["ordinal"],
        "pciBusId": device["pciBusId"],
        "context": False,
        "allocated": 0,
        "error": None,
    }
    doc["used"].append(entry)
    handle: dict[str, Any] = {"ctx": 0, "dev": 0, "primary": False, "ptrs": [], "sizes": []}
    held.append(handle)
    try:
        handle["dev"] = cuda.device(device["ordinal"])
        handle["ctx"], handle["primary"] = cuda.create_context(handle["dev"])
        entry["context"] = True
        total = args.alloc_mib * MIB
        step = args.alloc_step_mib * MIB or total
        while entry["allocated"] < total:
            size = min(step, total - entry["allocated"])
            ptr = cuda.alloc(size)
            handle["ptrs"].append(ptr)
            handle["sizes"].append(size)
            cuda.memset(ptr, 0xA5, size)  # touch it: memory that is used, not just reserved
            cuda.synchronize()
            entry["allocated"] += size
            if entry["allocated"] < total and args.step_interval > 0:
                write_json(args.out, doc | {"phase": "allocating"})
                time.sleep(args.step_interval)
    except CudaError as exc:
        entry["error"], entry["errorText"] = str(exc), exc.text


def _busy(cuda: Cuda, handle: dict[str, Any], seconds: float, release_file: str | None) -> dict[str, Any]:
    """Back-to-back cuMemsetD8 over the largest buffer for ``seconds`` (or until the release file
    appears): the GPU is busy, the host thread waits on it."""
    cuda.set_current(handle["ctx"])
    size = max(handle["sizes"])
    ptr = handle["ptrs"][handle["sizes"].index(size)]
    started = time.monotonic()
    count = 0
    while time.monotonic() - started < seconds and not (release_file and os.path.exists(release_file)):
        for _ in range(8):
            cuda.memset(ptr, count & 0xFF, size)
            count += 1
        cuda.synchronize()
    return {"seconds": round(time.monotonic() - started, 3), "memsets": count, "bytes": size}


def _hold(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline:
        if args.release_file and os.path.exists(args.release_file):
            return
        time.sleep(0.1)


def _release(cuda: Cuda | None, held: list[dict[str, Any]]) -> None:
    if cuda is None:
        return
    for handle in held:
        try:
            if handle["ctx"]:
                cuda.set_current(handle["ctx"])
            for ptr in handle["ptrs"]:
                cuda.free(ptr)
            if handle["ctx"]:
                cuda.destroy_context(handle["ctx"], handle["dev"], handle["primary"])
        except (CudaError, Stop):
            pass  # exiting frees it all anyway


def _finish(doc: dict[str, Any], args: argparse.Namespace, phase: str, final: bool = True) -> int:
    doc["phase"] = phase
    doc["tEnd" if final else "tWritten"] = time.time()
    write_json(args.out, doc)
    if final:
        print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
