"""What a failed job's log says went wrong: a table of log patterns, each a cause and its fix.

One table, one place: a new failure signature is a new row (the causes are the status reasons of
SPEC section 4 where gflowd can know them). ``classify`` is pure: lines in, the matches out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Pattern:
    cause: str  # the status reason this signature stands for
    regex: re.Pattern[str]
    fix: str


def _p(cause: str, regex: str, fix: str) -> Pattern:
    return Pattern(cause, re.compile(regex), fix)


# first match wins per line: the more specific signature (an NCCL timeout) before the general one
PATTERNS: tuple[Pattern, ...] = (
    _p(
        "CUDAOutOfMemory",
        r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED",
        "the GPU's memory ran out: lower the batch size, or ask for a larger GPU (spec.resources.gpuType) "
        "or more GPUs; a Shared job needs a larger spec.resources.gpuMemory",
    ),
    _p(
        "OOMKilled",
        r"Out of memory: Killed process|oom-kill|\bMemoryError\b|Cannot allocate memory|^Killed$",
        "host RAM ran out: raise spec.resources.memory, or use fewer data-loader workers",
    ),
    _p(
        "NCCLTimeout",
        r"NCCL.*(timed out|[Tt]imeout)|Watchdog caught collective operation timeout",
        "a collective never completed: one rank died or hung; check every rank's log, and set "
        "NCCL_DEBUG=INFO to see which",
    ),
    _p(
        "NCCLError",
        r"NCCL (error|WARN)|nccl(Internal|System|UnhandledCuda|InvalidUsage)Error|NCCL_ERROR",
        "NCCL failed: set NCCL_DEBUG=INFO; on one machine try NCCL_P2P_DISABLE=1 or NCCL_SHM_DISABLE=1",
    ),
    _p(
        "MissingModule",
        r"ModuleNotFoundError: No module named|ImportError: ",
        "a Python module is missing in the job's environment: install it, or run the job in the "
        "environment that has it (spec.condaEnv, or the venv's python in spec.command)",
    ),
    _p(
        "Segfault",
        r"Segmentation fault|SIGSEGV|signal 11\b|core dumped",
        "the process crashed in native code: check the CUDA, driver and library versions match; "
        "run again with PYTHONFAULTHANDLER=1 for a stack",
    ),
)


@dataclass(frozen=True)
class Match:
    line: int  # 1-based, within the lines given
    text: str
    cause: str
    fix: str


def classify(lines: list[str], table: tuple[Pattern, ...] = PATTERNS) -> list[Match]:
    """Every line that matches a pattern, in order (the first pattern matching a line names it)."""
    found = []
    for number, text in enumerate(lines, 1):
        for pattern in table:
            if pattern.regex.search(text):
                found.append(Match(number, text.rstrip()[:500], pattern.cause, pattern.fix))
                break
    return found


def fix_for(cause: str) -> str | None:
    """The fix the table gives for ``cause`` (a status reason), if it knows one."""
    return next((p.fix for p in PATTERNS if p.cause == cause), None)
