"""Why a failed attempt died: its exit, its cgroup's OOM kills, its GPUs' Xid events and its log's
tail, classified into one status reason with the fix in one line and the evidence.

One table, one place: a new failure signature is a new row (the causes are the status reasons of
SPEC section 4). gflowd (``decide/exits.py``), ``gflowctl triage`` and the MCP ``triage`` tool all
call ``classify``. Pure: facts in, a ``Finding`` out.

Order of trust: the kernel's word (an OOM kill in the job's cgroup), then the GPU's (an Xid on its
GPUs while it ran), then the signal (SIGSEGV), then the log. In the log only the tail counts, and
the LAST matching line wins: an early warning ("out of memory, retrying with a smaller batch")
does not name a failure that a later traceback explains. An attempt that exited 0 is never
classified, whatever its log says.
"""

from __future__ import annotations

import re
import signal as signal_mod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from controller.model.gpu_health import XID_UNHEALTHY

LOG_TAIL_BYTES = 64 * 1024  # what the runtime reads of an ended attempt's log
NEAR_END_LINES = 200  # a log line further from the end than this is history, not the cause


@dataclass(frozen=True)
class Pattern:
    cause: str  # the status reason this signature stands for
    regex: re.Pattern[str]
    fix: str


def _p(cause: str, regex: str, fix: str) -> Pattern:
    return Pattern(cause, re.compile(regex), fix)


FIXES = {
    "CUDAOutOfMemory": "the GPU's memory ran out: lower the batch size (or use gradient accumulation, "
    "activation checkpointing, mixed precision), or ask for a larger GPU (spec.resources.gpuType) or more GPUs",
    "OOMKilled": "host RAM ran out: raise spec.resources.memory, or use fewer data-loader workers",
    "NCCLTimeout": "a collective never completed: one rank died or hung; read every rank's log, "
    "set NCCL_DEBUG=INFO to see which, and TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
    "NCCLError": "NCCL failed: rerun with NCCL_DEBUG=INFO; on one machine try NCCL_P2P_DISABLE=1 or NCCL_SHM_DISABLE=1",
    "GPUXid": "the GPU reported a fault while the job ran: rerun it (gflowd keeps a failed GPU out of use); "
    "if it repeats, reset the GPU (nvidia-smi -r) or check the driver",
    "Segfault": "the process crashed in native code: check that the CUDA, driver and library versions match; "
    "rerun with PYTHONFAULTHANDLER=1 for a Python stack",
    "MissingModule": "a Python module is missing in the job's environment: install it there, or run the job "
    "with the python that has it (activate the venv you submitted from, spec.condaEnv, or the venv's python in spec.command)",
}

# First match wins per line: the more specific signature (an NCCL timeout) before the general one.
# Each regex is what a library or the kernel prints when it gives up, checked against real logs
# (tests/fixtures/failure_logs/, SOURCES.md there names where each came from).
PATTERNS: tuple[Pattern, ...] = (
    _p(
        "CUDAOutOfMemory",
        r"CUDA out of memory|CUDA error: out of memory|torch\.(cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
        r"|RESOURCE_EXHAUSTED: Out of memory|cudaErrorMemoryAllocation"
        # the driver API (numba, KeOps, pygpu); TensorFlow's "failed to alloc N bytes on host:" is pinned
        # host memory it retries smaller, not the GPU's
        r"|(?<!on host: )CUDA_ERROR_OUT_OF_MEMORY"
        # CuPy (and Chainer quoting it): "Out of memory allocating 25,600,000 bytes", before v6
        # "out of memory to allocate 163840000 bytes"
        r"|cupy\.cuda\.memory\.OutOfMemoryError|[Oo]ut of memory (allocating [\d,]+|to allocate \d+) bytes"
        # PyTorch before 1.0
        r"|cuda runtime error \(2\) : out of memory|THCudaCheck FAIL .*error=2 : out of memory",
        FIXES["CUDAOutOfMemory"],
    ),
    _p(
        "NCCLTimeout",
        # torch.distributed's watchdog, its blocking wait, and the heartbeat monitor that kills a
        # rank whose watchdog is itself stuck. Not "Some NCCL operations have failed or timed out"
        # nor "Exception (either an error or timeout) detected by watchdog": an NCCL error says those too
        r"Watchdog caught collective operation timeout|timed out in blocking wait|Timeout at NCCL work"
        r"|Heartbeat monitor timed out|watchdog got stuck for \d+ seconds",
        FIXES["NCCLTimeout"],
    ),
    _p(
        "NCCLError",
        # not a bare "c10::DistBackendError": torch throws it for a timeout as well
        r"NCCL error|nccl(Internal|System|UnhandledCuda|InvalidUsage|InvalidArgument|Remote)Error|NCCL_ERROR",
        FIXES["NCCLError"],
    ),
    _p(
        "MissingModule",
        r"^\s*(ModuleNotFoundError: No module named|ImportError: )",
        FIXES["MissingModule"],
    ),
    _p(
        "Segfault",
        r"Segmentation fault|Fatal Python error: Segmentation fault|SIGSEGV",
        FIXES["Segfault"],
    ),
    _p(
        "OOMKilled",
        # the kernel's line, globally ("Out of memory: Killed process") or in a cgroup ("Memory cgroup
        # out of memory: Killed process")
        r"^\s*MemoryError\b|[Oo]ut of memory: Killed process|^Killed$"
        r"|DefaultCPUAllocator: can't allocate memory",  # PyTorch refused host memory  # Killed: a shell's word for its child's SIGKILL
        FIXES["OOMKilled"],
    ),
    _p(
        "GPUXid",
        # the driver's kernel log line ("NVRM: Xid (PCI:0000:cb:00): 13, pid=..., ..."), in a log that
        # quotes dmesg; NVML's events (classify's xids) are the first source
        r"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): \d+,",
        FIXES["GPUXid"],
    ),
)

XID_IN_LOG = re.compile(r"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): (\d+),")

# A library that caught the error and went on says so on the line or the next ("| WARNING: ran
# out of memory with exception: ...;" then " Skipping batch"): a warning, not the failure
RECOVERED = re.compile(r"[Ss]kipping|[Rr]etrying|recover(ing|ed)? from|[Hh]alving|falling back")


# Xids a job's own code causes (docs.nvidia.com/deploy/xid-errors); the hardware ones are XID_UNHEALTHY's
XID_APPLICATION: dict[int, str] = {
    13: "graphics engine exception (an illegal memory access or an assert in a kernel)",
    31: "GPU memory page fault (an illegal address in a kernel)",
    43: "GPU stopped processing (the job's kernel faulted)",
    45: "preemptive cleanup after an earlier error",
    68: "video processor exception",
}


APPLICATION_XID_FIX = (
    "the job's own GPU code faulted: rerun with CUDA_LAUNCH_BLOCKING=1 to find the call "
    "(or under compute-sanitizer); the GPU itself is fine"
)


def xid_meaning(xid: int) -> str:
    return XID_UNHEALTHY.get(xid) or XID_APPLICATION.get(xid) or "see NVIDIA's Xid catalog"


# What a launcher puts before each line of a rank's output: torchrun --tee ("[default1]:"), torch's
# own rank prefix ("[rank3]: "), Ray's worker prefix ("(pid=3959, ip=172.31.41.219) ")
LAUNCHER_PREFIX = re.compile(r"^(\[(default|rank)\d+\]: ?|\(pid=\d+(, ip=[\d.]+)?\) )")


def _bare(text: str) -> str:
    return LAUNCHER_PREFIX.sub("", text, count=1)


# NCCL_DEBUG=INFO's chatter names settings ("NCCL_IB_TIMEOUT set by environment"), not failures
INFO = re.compile(r"\bNCCL INFO\b")


@dataclass(frozen=True)
class Match:
    line: int  # 1-based, within the lines given
    text: str
    cause: str
    fix: str


def match_lines(lines: Sequence[str], table: tuple[Pattern, ...] = PATTERNS) -> list[Match]:
    """Every line that matches a pattern, in order (the first pattern matching a line names it)."""
    found = []
    for number, text in enumerate(lines, 1):
        if INFO.search(text):
            continue
        bare = _bare(text)
        for pattern in table:
            if pattern.regex.search(bare):
                following = lines[number] if number < len(lines) else ""
                if not (RECOVERED.search(bare) or RECOVERED.search(following)):
                    found.append(Match(number, text.rstrip()[:500], pattern.cause, pattern.fix))
                break
    return found


class Finding(NamedTuple):
    """``reason`` "" when nothing is known beyond the exit (the status stays ``Error``)."""

    reason: str
    message: str  # what happened and the fix, one line
    evidence: tuple[str, ...]  # the facts it rests on: counters, Xids, "line N: text"


NOTHING = Finding("", "", ())


def signal_name(number: int) -> str:
    try:
        return signal_mod.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(
    exit_code: int | None,
    signal: int | None,
    oom_kills: int | None,
    xids: Iterable[tuple[int, int]],
    log_tail_lines: Sequence[str],
    first_line: int = 1,
    python: str = "",
) -> Finding:
    """The cause of an ended attempt. ``xids``: (gpu index, Xid) seen on its GPUs while it ran;
    ``first_line``: the number of the tail's first line in the whole log (for the evidence);
    ``python``: the job's python, named when a module is missing."""
    if exit_code == 0 and not signal:
        return NOTHING
    facts = [f"exit code {exit_code}" + (f", killed by {signal_name(signal)}" if signal else "")]
    if oom_kills:
        facts.append(f"the job's cgroup counted {oom_kills} OOM kill{'s' if oom_kills != 1 else ''}")
        return Finding("OOMKilled", f"the kernel killed it for host memory: {FIXES['OOMKilled']}", tuple(facts))
    xids = list(xids)
    if xids:
        gpu, xid = next(((g, x) for g, x in xids if x in XID_UNHEALTHY), xids[-1])
        facts += [f"GPU {g}: Xid {x} ({xid_meaning(x)})" for g, x in xids]
        fix = FIXES["GPUXid"] if xid not in XID_APPLICATION else APPLICATION_XID_FIX
        return Finding("GPUXid", f"GPU {gpu} reported Xid {xid} ({xid_meaning(xid)}) while it ran: {fix}", tuple(facts))
    start = max(len(log_tail_lines) - NEAR_END_LINES, 0)
    matches = match_lines(log_tail_lines[start:])
    if signal == signal_mod.SIGSEGV or (exit_code == 128 + signal_mod.SIGSEGV and not signal):
        lines = [m for m in matches if m.cause == "Segfault"][-1:]
        return Finding(
            "Segfault",
            f"it crashed with a segmentation fault: {FIXES['Segfault']}",
            tuple(facts + _cited(lines, start, first_line)),
        )
    # a caught ImportError's traceback (an optional import, printed and survived) is history
    matches = [m for m in matches if m.cause != "MissingModule" or _ended_the_program(log_tail_lines[start:], m)]
    if not matches or _explained_later(log_tail_lines[start:], matches[-1]):
        return NOTHING
    last = matches[-1]
    quoted = last.text.strip()
    if len(quoted) > 160:
        quoted = quoted[:157] + "..."
    fix = last.fix
    logged_xid = XID_IN_LOG.search(last.text)
    if last.cause == "GPUXid" and logged_xid:
        number = int(logged_xid.group(1))
        fix = f"Xid {number} ({xid_meaning(number)}): " + (APPLICATION_XID_FIX if number in XID_APPLICATION else fix)
    if last.cause == "MissingModule" and python:
        fix = f"the job's python is {python}; {fix}"
        facts.append(f"the job's python: {python}")
    return Finding(last.cause, f"{quoted}: {fix}", tuple(facts + _cited([last], start, first_line)))


TRACEBACK = "Traceback (most recent call last):"
# Python prints a chain of exceptions as tracebacks joined by one of these: the chain is one failure,
# and its first exception (a CUDA OOM whose handler failed in turn) is the cause
CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# a launcher's exception that only reports a child's failure: the child's own lines say why
WRAPPERS = re.compile(r"ChildFailedError|CalledProcessError")


def _explained_later(lines: Sequence[str], last: Match) -> bool:
    """A Python traceback after the last matching line ends in an exception no pattern names (a
    KeyError after an early "out of memory, retrying" warning): that exception is the failure.
    A traceback chained to the matching one (``During handling of the above exception``) is not."""
    lines = [_bare(text) for text in lines]
    starts = [i for i, text in enumerate(lines, 1) if text.startswith(TRACEBACK)]
    if not starts:
        return False
    first = len(starts) - 1
    while first > 0 and _chained(lines, starts[first]):
        first -= 1
    if starts[first] <= last.line:
        return False
    summary = next((text for text in lines[starts[-1] :] if text and not text[0].isspace()), "")
    return bool(summary) and not WRAPPERS.search(summary)


# a launcher's own log line after its child died (torchrun's "E1129 02:36:32.396000 10789
# torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)"): glog's form
LAUNCHER_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")


def _ended_the_program(lines: Sequence[str], last: Match) -> bool:
    """Whether the exception on ``last``'s line ended the program: after it the log holds nothing
    but teardown (blank lines, tracebacks chained to it, a launcher's log lines and its traceback
    reporting the child's exit, other ranks' lines). A library that printed the traceback of an
    optional import and carried on printed more: that traceback is not why the job failed."""
    prefix = LAUNCHER_PREFIX.match(lines[last.line - 1])
    own = prefix.group(0) if prefix else ""
    summary = _bare(lines[last.line - 1]).strip()
    at = last.line  # 0-based: the line after the exception's
    while at < len(lines):
        text = _bare(lines[at]).strip()
        if (own and not lines[at].startswith(own)) or not text or LAUNCHER_LOG.match(text):
            at += 1  # another rank's line, the launcher's, a blank one
        elif text in CHAINED:
            at, summary = _traceback_end(lines, at + 1)  # the chain goes on to its own last exception
        elif text.startswith(TRACEBACK):
            return bool(WRAPPERS.search(_traceback_end(lines, at)[1]))  # a launcher reporting its child
        else:
            return summary.endswith(":")  # only the rest of a message that starts on the next line (numpy's)
    return True


def _traceback_end(lines: Sequence[str], start: int) -> tuple[int, str]:
    """(0-based index after its exception line, that line) of the first traceback from ``start``."""
    for at in range(start, len(lines)):
        text = _bare(lines[at])
        if text.strip() and not text[0].isspace() and not text.startswith(TRACEBACK):
            return at + 1, text.strip()
    return len(lines), ""


def _chained(lines: Sequence[str], start: int) -> bool:
    """Whether the traceback on (1-based) line ``start`` continues the one before it."""
    before = next((text.strip() for text in reversed(lines[: start - 1]) if text.strip()), "")
    return before in CHAINED


def _cited(matches: list[Match], start: int, first_line: int) -> list[str]:
    if not first_line:  # the log is longer than its tail: count from the tail's start
        return [f"log tail line {m.line + start}: {m.text}" for m in matches]
    return [f"log line {m.line + start + first_line - 1}: {m.text}" for m in matches]


def fix_for(cause: str) -> str | None:
    """The fix the table gives for ``cause`` (a status reason), if it knows one."""
    return FIXES.get(cause)
