"""Reading tools about jobs: list (filtered, paged), one job, its log (head or tail, capped), why it
waits, and why it failed (``triage``). Each is a ``Client`` call; nothing here writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from controller.client.api import Client
from controller.client.errors import GflowError

MAX_LOG_BYTES = 64 * 1024  # an agent's context is precious: a huge log is cut to this
MAX_PAGE = 500
FINISHED = ("Succeeded", "Failed", "Cancelled")


def tools(client: Client) -> list[Callable[..., dict[str, Any]]]:
    def list_jobs(
        phase: str | None = None,
        label_selector: str | None = None,
        user: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> dict[str, Any]:
        """Jobs by name with phase, reason, GPUs, priority and owner; only those in `phase`
        (Pending, Running, Succeeded, Failed, Cancelled, Rejected), matching `label_selector`
        (team=vision) and run by `user`. Paged: at most `limit` (<= 500) from `offset`; `nextOffset`
        is where the next page starts (null on the last)."""
        if limit < 1 or offset < 0:
            raise GflowError("list_jobs: limit must be >= 1 and offset >= 0")
        from controller.client.read.state import manifest_owners  # lazy: only listings name owners

        owner = manifest_owners(client.home)
        jobs = [(j, owner(j.manifest)) for j in client.list(phase=phase, labels=label_selector)]
        if user is not None:
            jobs = [(j, u) for j, u in jobs if u == user]
        page = jobs[offset : offset + min(limit, MAX_PAGE)]
        keep = ("name", "phase", "reason", "message", "gpus", "devices", "priority", "queue_position", "sweep")
        end = offset + len(page)
        return {
            "jobs": [{**{k: getattr(j, k) for k in keep}, "user": u} for j, u in page],
            "total": len(jobs),
            "nextOffset": end if end < len(jobs) else None,
            "gflowdRunning": client.is_running(),
        }

    def get_job(name: str, events: int = 10) -> dict[str, Any]:
        """One job in detail: status, reason and message, conditions, and its most recent events."""
        from controller.cli.events import read_events  # lazy: only get_job reads events
        from controller.client.read.events import aggregate
        from controller.client.read.objects import Sweep

        job = client.get(name)
        kind = "sweep" if isinstance(job, Sweep) else "job"
        recent = aggregate(read_events(client.home, f"{kind}/{job.name}"))[-max(events, 0) :] if events else []
        return {
            "kind": kind,
            **dataclasses.asdict(job),
            "events": [{k: e.get(k) for k in ("type", "reason", "message", "count", "time")} for e in recent],
        }

    def get_logs(
        name: str,
        tail: int | None = 100,
        head: int | None = None,
        max_bytes: int = MAX_LOG_BYTES,
        attempt: int | None = None,
    ) -> dict[str, Any]:
        """A job's output (stdout and stderr): its last `tail` lines, or with `head` its first lines;
        at most `max_bytes` (<= 64 KiB; `truncated` says when cut). `attempt`: an earlier attempt's."""
        if (head is not None and head < 0) or (tail is not None and tail < 0) or max_bytes < 1:
            raise GflowError("get_logs: head and tail must be >= 0, max_bytes >= 1")
        cap = min(max_bytes, MAX_LOG_BYTES)
        text, cut = _read_log(client, name, head, tail, attempt, cap)
        return {"job": name, "log": text, "truncated": cut, "from": "head" if head is not None else "tail"}

    def explain_pending(name: str) -> dict[str, Any]:
        """Why a Pending job waits (reason and message, queue position, GPUs free and who holds the
        others) and what would let it start."""
        return client.explain_pending(name)

    def triage(name: str, attempt: int | None = None) -> dict[str, Any]:
        """Why a job failed, with the evidence: its reason, message and exit code, the log lines
        that match known failures (CUDA out of memory, host OOM, NCCL, GPU Xid, missing module,
        segfault) with their line numbers, the classified cause and its fix, and whether re-running
        it would help. `attempt`: an earlier attempt's log. The same report as `gflowctl triage`."""
        from controller.cli.triage import triage_report  # lazy: only triage classifies

        report = triage_report(client, name, attempt)
        report["advice"] = _advice(report["phase"], report["cause"], report["fix"])
        return report

    return [list_jobs, get_job, get_logs, explain_pending, triage]


def _read_log(
    client: Client, name: str, head: int | None, tail: int | None, attempt: int | None, cap: int
) -> tuple[str, bool]:
    """The log's first ``head`` lines (reading no further than that), else its last ``tail`` lines
    (all when None), cut to ``cap`` bytes from the end the agent asked for; and whether it was cut."""
    from controller.client.read.logs import log_chunks  # lazy: only logs read a log

    kind, slash, bare = name.rpartition("/")
    if (slash and kind not in ("job", "jobs")) or not bare:
        raise GflowError(f"{name!r}: use NAME or job/NAME")
    if head is not None:
        kept, lines = bytearray(), 0
        for chunk in log_chunks(client.home, bare, False, None, attempt):
            kept += chunk
            lines = kept.count(b"\n")
            if lines >= head or len(kept) > cap:
                break
        data = b"".join(bytes(kept).splitlines(keepends=True)[:head])
        cut = len(data) > cap
        return data[:cap].decode("utf-8", errors="ignore"), cut
    data, cut = b"", False
    for chunk in log_chunks(client.home, bare, False, tail, attempt):
        data += chunk
        if len(data) > cap:  # keep only the end: a huge log never sits whole in memory
            data, cut = data[-cap:], True
    return data.decode("utf-8", errors="ignore"), cut


def _advice(phase: str, cause: str | None, fix: str | None) -> str:
    if phase == "Running":
        return "the job is still running: read its log (get_logs) rather than re-running it"
    if phase == "Pending":
        return "the job has not failed, it waits: explain_pending says why"
    if phase == "Succeeded":
        return "the job succeeded: re-running is usually unnecessary"
    if phase == "Cancelled":
        return "the job was cancelled: confirm why before re-running it"
    if phase == "Rejected":
        return "the manifest is invalid: fix what the message names; re-running will not help"
    if fix:
        return f"{fix}; then rerun it (update_job first if its resources must change)"
    return "no known failure signature in the log's last lines: read the log (get_logs) before rerun"
