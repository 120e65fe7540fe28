"""GPU isolation on cgroup v2: a BPF device program that denies the GPUs an attempt was not bound to.

cgroup v2 has no devices controller; the kernel asks a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program
instead (runc's devicefilter.go, crun's ebpf.c and systemd's bpf-devices.c emit the same kind).
No well-kept Python library loads one, and the program is a dozen instructions, so this module
writes them by hand and loads them with the bpf(2) syscall through ctypes.

The program is a deny-list like the v1 rules in devices.py: every device stays as the parent
cgroup allows it, except the NVIDIA GPU nodes (char major 195) whose minor is neither bound nor a
control node (nvidiactl 195:255, nvidia-modeset 195:254; nvidia-uvm has its own major and is
untouched). Unlike the v1 rules it needs no list of the GPUs to deny: any other 195:N is denied.

It is attached with ``BPF_F_ALLOW_MULTI`` so programs above (systemd's) still run: the kernel
allows an access only when every program on the path allows it. The cgroup holds the program;
it goes away with the cgroup, so there is nothing to detach.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterable

from .devices import NVIDIA_CONTROL_MINORS, NVIDIA_MAJOR, DeviceRule

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351, "riscv64": 280}
_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
_BPF_PROG_TYPE_CGROUP_DEVICE = 15
_BPF_CGROUP_DEVICE = 6
_BPF_F_ALLOW_MULTI = 2
_BPF_DEVCG_DEV_CHAR = 2
_ATTR_SIZE = 128  # bigger than any bpf_attr member we use; the kernel wants the rest zero

# The instructions we use (linux/bpf_common.h, linux/bpf.h).
_LDX_MEM_W = 0x61  # dst = *(u32 *)(src + off)
_ALU32_AND_K = 0x54  # w_dst &= imm
_MOV64_K = 0xB7  # dst = imm
_JEQ_K = 0x15  # if dst == imm: pc += off
_JNE_K = 0x55  # if dst != imm: pc += off
_EXIT = 0x95
_JA = 0x05  # pc += off
_DEVICE_TYPE = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR

_LICENSE = b"GPL"  # no GPL-only helper is called, but systemd and crun say GPL too: harmless


class BpfError(OSError):
    """Loading or attaching the device program failed; the message says which and why."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def gpu_filter(bound: Iterable[int]) -> bytes:
    """The program: deny char 195:N unless N is bound or a control node; allow everything else.

    Its context is ``struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32 minor;}`` where
    the low 16 bits of access_type are the device type."""
    allowed = sorted(set(bound) | NVIDIA_CONTROL_MINORS)
    body = [
        _insn(_LDX_MEM_W, dst=2, src=1, off=0),  # r2 = access_type
        _insn(_ALU32_AND_K, dst=2, imm=0xFFFF),  # r2 = device type
        _insn(_LDX_MEM_W, dst=3, src=1, off=4),  # r3 = major
        _insn(_LDX_MEM_W, dst=4, src=1, off=8),  # r4 = minor
    ]
    # Jumps count from the next instruction; the tail is: [allowed checks] deny(2) allow(2).
    checks = len(allowed)
    body.append(_insn(_JNE_K, dst=2, off=1 + checks + 2, imm=_BPF_DEVCG_DEV_CHAR))  # not char: allow
    body.append(_insn(_JNE_K, dst=3, off=checks + 2, imm=NVIDIA_MAJOR))  # not NVIDIA: allow
    for i, minor in enumerate(allowed):
        body.append(_insn(_JEQ_K, dst=4, off=checks - i - 1 + 2, imm=minor))  # bound/control: allow
    body += [_insn(_MOV64_K, dst=0, imm=0), _insn(_EXIT)]  # deny
    body += [_insn(_MOV64_K, dst=0, imm=1), _insn(_EXIT)]  # allow
    return b"".join(body)


def deny_filter(rules: Iterable[DeviceRule]) -> bytes:
    """The program for v1-style deny ``rules`` (devices.py): deny a device one of them matches,
    allow every other. Only ``rwm`` rules: gflowd denies a GPU wholly."""
    rules = list(rules)
    bad = [str(rule) for rule in rules if rule.access != "rwm"]
    if bad:
        raise ValueError(f"BPF device rules must deny rwm, not: {', '.join(bad)}")
    if not rules:  # a job bound to every GPU: the deny tail would be unreachable, which the verifier refuses
        return _insn(_MOV64_K, dst=0, imm=1) + _insn(_EXIT)
    header = [
        _insn(_LDX_MEM_W, dst=2, src=1, off=0),  # r2 = access_type
        _insn(_ALU32_AND_K, dst=2, imm=0xFFFF),  # r2 = device type
        _insn(_LDX_MEM_W, dst=3, src=1, off=4),  # r3 = major
        _insn(_LDX_MEM_W, dst=4, src=1, off=8),  # r4 = minor
    ]
    blocks = []
    for rule in rules:
        wanted = [(2, _DEVICE_TYPE.get(rule.kind)), (3, rule.major), (4, rule.minor)]
        tests = [(register, value) for register, value in wanted if value is not None]  # None: any
        block = [_insn(_JNE_K, dst=reg, off=len(tests) - i, imm=value) for i, (reg, value) in enumerate(tests)]
        blocks.append(block)  # a JA to deny follows: each mismatch jumps past it to the next rule
    body, after = [], sum(len(block) + 1 for block in blocks)
    for block in blocks:
        body += block
        after -= len(block) + 1
        body.append(_insn(_JA, off=after + 2))  # past the later rules and allow: to deny
    tail = [_insn(_MOV64_K, dst=0, imm=1), _insn(_EXIT), _insn(_MOV64_K, dst=0, imm=0), _insn(_EXIT)]
    return b"".join(header + body + tail)


def _bpf(cmd: int, attr: bytes) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise BpfError(0, f"bpf(2): unknown syscall number on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr.ljust(_ATTR_SIZE, b"\0"), _ATTR_SIZE)
    result = libc.syscall(ctypes.c_long(number), ctypes.c_int(cmd), buf, ctypes.c_uint(_ATTR_SIZE))
    if result < 0:
        errno = ctypes.get_errno()
        raise BpfError(errno, os.strerror(errno))
    return result


def load(program: bytes) -> int:
    """Load a cgroup device program; its fd. BpfError with the verifier's log when refused.

    Loaded without a log first, as libbpf does: the verifier's log of a long program (a MIG box's
    hundred caps rules) overflows a 4 KiB buffer, and a full one fails the load with ENOSPC."""
    insns = ctypes.create_string_buffer(program, len(program))
    license = ctypes.create_string_buffer(_LICENSE)

    def attr(log: ctypes.Array[ctypes.c_char] | None) -> bytes:
        return struct.pack(
            "<IIQQIIQ",
            _BPF_PROG_TYPE_CGROUP_DEVICE,
            len(program) // 8,
            ctypes.addressof(insns),
            ctypes.addressof(license),
            1 if log is not None else 0,  # log_level: the verifier explains a refusal
            len(log) if log is not None else 0,
            ctypes.addressof(log) if log is not None else 0,
        )

    try:
        return _bpf(_BPF_PROG_LOAD, attr(None))
    except BpfError as exc:
        error = exc
    log = ctypes.create_string_buffer(4096)
    try:  # again, for the verifier's word on why
        return _bpf(_BPF_PROG_LOAD, attr(log))
    except BpfError:
        pass
    detail = log.value.decode(errors="replace").strip().splitlines()
    why = f" ({detail[-1]})" if detail else ""
    raise BpfError(error.errno, f"cannot load the BPF device program: {error.strerror}{why}") from None


def attach(program_fd: int, cgroup_dir: str) -> None:
    """Attach a loaded device program to the cgroup v2 directory, beside any others (ALLOW_MULTI)."""
    try:
        cgroup_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BpfError(exc.errno, f"cannot open cgroup {cgroup_dir}: {exc.strerror}") from None
    try:
        _bpf(_BPF_PROG_ATTACH, struct.pack("<IIII", cgroup_fd, program_fd, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI))
    except BpfError as exc:
        raise BpfError(exc.errno, f"cannot attach the BPF device program to {cgroup_dir}: {exc.strerror}") from None
    finally:
        os.close(cgroup_fd)


def deny(cgroup_dir: str, rules: Iterable[DeviceRule]) -> None:
    """Deny the v1-style ``rules`` in ``cgroup_dir`` and below; every other device as the parent allows."""
    _load_and_attach(deny_filter(rules), cgroup_dir)


def _load_and_attach(program: bytes, cgroup_dir: str) -> None:
    program_fd = load(program)
    try:
        attach(program_fd, cgroup_dir)
    finally:
        os.close(program_fd)  # the cgroup keeps its own reference


def confine_gpus(cgroup_dir: str, bound: Iterable[int]) -> None:
    """Deny, in ``cgroup_dir`` and below, every GPU node but the ``bound`` minors (none: a CPU job)."""
    _load_and_attach(gpu_filter(bound), cgroup_dir)


def unavailable_reason(scratch_parent: str) -> str:
    """Empty when a device program loads and attaches here (tried on a scratch child cgroup of
    ``scratch_parent``); else one sentence why not."""
    scratch = os.path.join(scratch_parent, f"gflow-bpf-probe-{os.getpid()}")
    try:
        os.mkdir(scratch)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot make a scratch cgroup to try a BPF device program: {exc.strerror}"
    try:
        confine_gpus(scratch, ())
    except BpfError as exc:
        return f"device isolation is unavailable on cgroup v2: {exc.strerror}"
    finally:
        try:
            os.rmdir(scratch)
        except OSError:
            pass
    return ""
