"""Slurm's words -> ours, pure: ``squeue --json`` and ``sacct`` output parsed, Slurm's states and
pending reasons mapped onto a ``RunObservation`` (``observation``), the record each attempt
handed to Slurm keeps (``SlurmRecord``, ``run/slurm/<name>.json``) and the comment that finds a
submission again after a crash."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controller.model.plan import RunObservation
from controller.paths import Home

RUNNING_STATES = {"CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}
QUEUED_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
# Slurm's pending reasons -> ours (SPEC: Pending reasons are CamelCase, one word)
PENDING_REASONS = {
    "Resources": "Resources",
    "Priority": "Priority",
    "Dependency": "Dependency",
    "BeginTime": "StartAfter",
    "JobHeldUser": "Held",
    "JobHeldAdmin": "Held",
    "None": "Queued",
    "": "Queued",
}


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` shows it (the fields we use)."""

    job_id: str
    state: str
    reason: str = ""
    comment: str = ""
    exit_status: int = 0  # the wait status: code << 8 | signal
    nodes: str = ""
    gres_detail: tuple[str, ...] = ()
    submit_time: float = 0.0
    start_time: float = 0.0
    end_time: float = 0.0


@dataclass
class SlurmRecord:
    """``run/slurm/<name>.json``: one attempt handed to Slurm."""

    name: str
    attempt: int
    generation: int
    comment: str
    options: list[str]
    script: str
    run_hash: str = ""
    time_limit: float | None = None
    job_id: str | None = None
    devices: list[int] = field(default_factory=list)
    node: str = ""
    submitted_at: float = 0.0
    error: str = ""  # the submission itself failed (sbatch's message)
    stop_sent: bool = False
    failed_before: int = 0  # the job's failed attempts when this one was decided (RunObservation)
    log_owner: int | None = None  # the job's user, who owns its log: a tail is read only from a log of theirs


def home_id(home: Home) -> str:
    """Tells this gflowd's Slurm jobs from another home's (or another user's) on the same cluster."""
    return hashlib.sha1(str(home.root.resolve()).encode()).hexdigest()[:8]


def comment_for(home_key: str, name: str, generation: int, attempt: int) -> str:
    return f"gflow:{home_key}:{name}:g{generation}:a{attempt}"


# -- pure: Slurm's words -> ours --------------------------------------------------------------------


def _state_text(value: Any) -> str:
    if isinstance(value, list):  # Slurm >= 23.02 gives a list of flags
        return str(value[0]) if value else ""
    return str(value or "")


def _exit_status(value: Any) -> int:
    if isinstance(value, dict):  # Slurm >= 23.02: {"status": [...], "return_code": {...}, "signal": {...}}
        code = value.get("return_code")
        code = code.get("number", 0) if isinstance(code, dict) else code or 0
        sig = value.get("signal", {})
        sig = sig.get("id", {}).get("number", 0) if isinstance(sig, dict) and isinstance(sig.get("id"), dict) else 0
        return (int(code or 0) << 8) | int(sig or 0)
    return int(value or 0)


def _number(value: Any) -> float:
    if isinstance(value, dict):  # Slurm >= 23.02: {"set": true, "number": N}
        value = value.get("number", 0)
    return float(value or 0)


def parse_squeue(text: str) -> list[SlurmJob]:
    """``squeue --json`` output -> jobs. Raises ValueError on output that is not squeue's JSON."""
    data = json.loads(text)
    jobs = []
    for item in data.get("jobs", []):
        jobs.append(
            SlurmJob(
                job_id=str(item.get("job_id")),
                state=_state_text(item.get("job_state")),
                reason=str(item.get("state_reason") or ""),
                comment=str(item.get("comment") or ""),
                exit_status=_exit_status(item.get("exit_code")),
                nodes=str(item.get("nodes") or ""),
                gres_detail=tuple(str(g) for g in item.get("gres_detail") or ()),
                submit_time=_number(item.get("submit_time")),
                start_time=_number(item.get("start_time")),
                end_time=_number(item.get("end_time")),
            )
        )
    return jobs


SACCT_FIELDS = "JobIDRaw,State,ExitCode,NodeList,Submit,Start,End"


def _sacct_time(text: str) -> float:
    if not text or text in ("Unknown", "None"):
        return 0.0

    try:
        return datetime.fromisoformat(text).timestamp()  # sacct prints the cluster's local time
    except ValueError:
        return 0.0


def parse_sacct(text: str) -> list[SlurmJob]:
    """``sacct -n -P -X -o JobIDRaw,State,ExitCode,NodeList,Submit,Start,End`` -> jobs (the
    allocation lines only). ``CANCELLED by 0`` is CANCELLED; ``ExitCode`` is ``code:signal``."""
    jobs = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 7 or not parts[0].strip():
            continue
        job_id, state, exit_code, nodes, submit, start, end = (p.strip() for p in parts[:7])
        code, _, sig = exit_code.partition(":")
        status = (int(code) << 8 if code.isdigit() else 0) | (int(sig) & 0x7F if sig.isdigit() else 0)
        nodes = "" if nodes in ("None assigned", "(null)") else nodes
        jobs.append(
            SlurmJob(
                job_id,
                state.split()[0] if state else "",
                "",
                "",
                status,
                nodes,
                (),
                _sacct_time(submit),
                _sacct_time(start),
                _sacct_time(end),
            )
        )
    return jobs


# one GRES entry of a node's detail: ``gpu:h100:2(IDX:0-1)``; a node's detail lists every type it
# gave, comma-joined (``gpu:h100:1(IDX:1),gpu:a100:1(IDX:2)``), and an index list has commas too
_GRES_ENTRY = re.compile(r"(?P<head>[^,()]+)(?:\((?P<inside>[^()]*)\))?")
_INDEX_LIST = re.compile(r"IDX:(?P<list>\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)")


def gres_devices(gres_detail: tuple[str, ...] | list[str]) -> list[int]:
    """The GPU indices Slurm allocated, from ``squeue --json``'s ``gres_detail`` (one string per
    node) or ``scontrol show job -d``'s ``GRES=``: every GPU type's entry, e.g.
    ``("gpu:h100:1(IDX:1),gpu:a100:1(IDX:2)",)`` -> ``[1, 2]``; ``gpu:2(IDX:0-1)``,
    ``IDX:0-2,5`` ranges, a ``gres:`` or ``gres/`` prefix too. Other GRES (``nic``, ``shard``),
    ``(null)`` and entries without indices (``IDX:N/A``, a count-only GRES) give none."""
    devices: set[int] = set()
    for detail in gres_detail:
        for entry in _GRES_ENTRY.finditer(detail or ""):
            head = entry["head"].strip().removeprefix("gres:").removeprefix("gres/")
            indices = _INDEX_LIST.search(entry["inside"] or "")
            if head.split(":")[0] != "gpu" or not indices:
                continue
            for part in indices["list"].split(","):
                low, _, high = part.partition("-")
                devices.update(range(int(low), int(high or low) + 1))
    return sorted(devices)


def _reason_text(reason: str) -> str:
    return "queued" if reason in ("", "None") else reason


def observation(record: SlurmRecord, job: SlurmJob | None, now: float, memory_exceeded: bool = False) -> RunObservation:
    """What gflowd's reconcile needs to know about one attempt, from Slurm's view of it.

    ``memory_exceeded``: slurmstepd wrote "Exceeded job memory limit" into the job's output. Without
    cgroups Slurm enforces ``--mem`` by polling (OverMemoryKill) and reports the kill as FAILED,
    not OUT_OF_MEMORY; its message is the only trace."""
    base: dict[str, Any] = dict(
        devices=tuple(record.devices),
        run_hash=record.run_hash,
        failed_before=record.failed_before,
        external_id=record.job_id or "",
        node=record.node,
    )
    started = record.submitted_at or now
    if record.error:  # never submitted: no process ran, so no exit code (not a shell's 127)
        return RunObservation(
            record.name, record.attempt, None, started, False, None, None, started, record.error, **base
        )
    if record.job_id is None:  # decided, not yet handed over
        return RunObservation(
            record.name,
            record.attempt,
            None,
            started,
            True,
            queued="Queued",
            message="being submitted to Slurm",
            **base,
        )
    if job is None:
        return RunObservation(
            record.name,
            record.attempt,
            None,
            started,
            False,
            None,
            None,
            now,
            f"Slurm job {record.job_id} is no longer known to Slurm (finished longer ago than its MinJobAge, "
            "or purged); exit code unknown",
            lost=True,
            **base,
        )
    ident = f"Slurm job {job.job_id}"
    if job.state in QUEUED_STATES:
        reason = PENDING_REASONS.get(job.reason, re.sub(r"[^A-Za-z0-9]", "", job.reason.split(",")[0]) or "Queued")
        text = "requeued" if job.state.startswith("REQUEUE") else "pending"
        return RunObservation(
            record.name,
            record.attempt,
            None,
            job.submit_time or started,
            True,
            queued=reason,
            message=f"{ident} is {text} in Slurm ({_reason_text(job.reason)})",
            **base,
        )
    where = f" on {job.nodes}" if job.nodes else ""
    gpus = f", GPUs {','.join(map(str, record.devices))}" if record.devices else ""
    if job.state in RUNNING_STATES:
        return RunObservation(
            record.name,
            record.attempt,
            None,
            job.start_time or started,
            True,
            message=f"{ident} running{where}{gpus}",
            **base,
        )
    code, sig = job.exit_status >> 8, job.exit_status & 0x7F
    exit_code = 128 + sig if sig else code
    finished = job.end_time or now
    begun = job.start_time or started
    kw: dict[str, Any] = {}
    if job.state == "COMPLETED":
        pass
    elif job.state == "FAILED" and memory_exceeded:
        kw["reason"] = "OOMKilled"
    elif job.state == "FAILED":
        if exit_code == 0:
            kw["error"] = f"{ident} failed in Slurm ({job.reason or 'no reason given'})"
    elif job.state == "TIMEOUT":
        kw["reason"] = "DeadlineExceeded"
        exit_code = exit_code or 128 + 15
    elif job.state == "OUT_OF_MEMORY":
        kw["reason"] = "OOMKilled"
        exit_code = exit_code or 128 + 9
    elif job.state in ("NODE_FAIL", "BOOT_FAIL"):
        kw["lost"] = True
        kw["error"] = f"{ident}: node {job.nodes or '?'} failed (Slurm {job.state})"
    elif job.state == "CANCELLED":
        kw["error"] = f"{ident} was cancelled in Slurm"
        exit_code = exit_code or 128 + 15
    else:  # PREEMPTED, DEADLINE, ...
        kw["error"] = f"{ident} ended {job.state} in Slurm"
        exit_code = exit_code or 1
    return RunObservation(
        record.name, record.attempt, None, begun, False, exit_code, sig or None, finished, **kw, **base
    )
