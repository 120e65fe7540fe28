"""``gflowctl triage NAME [--attempt N]``: why a job failed, the fix, and the evidence (the log lines
that match a known failure, with their numbers; the exit; what gflowd counted), on one screen.

``triage_report`` is also the MCP ``triage`` tool's (``controller/mcp/jobs.py``): gflowd's status
reason comes first (it alone saw the cgroup's OOM kills and the GPUs' Xids); the log's tail,
classified by the same table (``controller/model/failures.py``), gives the lines behind it.
"""

from __future__ import annotations

import sys
from typing import Any

from controller.client.api import Client
from controller.client.errors import GflowError
from controller.model.failures import FIXES, LOG_TAIL_BYTES, NEAR_END_LINES, classify, match_lines
from controller.model.reasons import Phase, Reason

EVIDENCE_LINES = 10  # matching log lines shown: one screen


def read_tail(client: Client, name: str, attempt: int | None) -> tuple[list[str], int]:
    """The log's last ``LOG_TAIL_BYTES`` as lines, and the first one's number in the log (the whole
    log streams by once to count its lines; only its tail is kept). No log: no lines."""
    from controller.client.read.logs import log_chunks  # lazy: only triage and logs read a log

    newlines, size, kept = 0, 0, b""
    try:
        for chunk in log_chunks(client.home, name, False, None, attempt):
            newlines += chunk.count(b"\n")
            size += len(chunk)
            kept = (kept + chunk)[-LOG_TAIL_BYTES:]
    except GflowError:  # no log (it never started) or not the reader's: the status is the evidence
        return [], 1
    lines = kept.decode("utf-8", "replace").splitlines()
    if size > len(kept) and lines:
        lines = lines[1:]  # its first line is cut
    total = newlines + (1 if kept and not kept.endswith(b"\n") else 0)
    return lines, total - len(lines) + 1


def triage_report(client: Client, name: str, attempt: int | None = None) -> dict[str, Any]:
    """Why job ``name`` (its latest attempt, or ``attempt``) failed: ``failed`` False when it did not."""
    from controller.client.read.objects import Sweep  # lazy: only a sweep named here needs its class

    job = client.get(name)
    if isinstance(job, Sweep):
        raise GflowError(f"sweep/{job.name}: triage takes one job (its jobs are {job.name}-0, {job.name}-1, ...)")
    current = attempt is None or attempt == job.attempt
    if attempt is not None and not 1 <= attempt <= (job.attempt or 0):
        raise GflowError(f"job/{job.name} has no attempt {attempt} (attempts 1 to {job.attempt or 0})")
    failed = not current or job.phase == Phase.Failed or job.reason == Reason.BackOff
    out: dict[str, Any] = {
        "job": job.name,
        "phase": job.phase,
        "reason": job.reason,
        "message": job.message,
        "exitCode": job.exit_code if current else None,
        "attempt": attempt if attempt is not None else job.attempt,
        "failed": failed,
        "cause": None,
        "fix": None,
        "facts": [],
        "evidence": [],
    }
    if not failed:
        return out
    lines, first = read_tail(client, job.name, None if current else attempt)  # the latest: logs/NAME.log
    exit_code = out["exitCode"]
    finding = classify(exit_code if exit_code is not None else -1, None, None, (), lines, first)
    start = max(len(lines) - NEAR_END_LINES, 0)
    out["evidence"] = [
        {"line": m.line + start + first - 1, "text": m.text, "cause": m.cause, "fix": m.fix}
        for m in match_lines(lines[start:])[-EVIDENCE_LINES:]
    ]
    if current and job.reason in FIXES:  # gflowd's own classification first: it saw the counters
        out["cause"], out["fix"] = job.reason, FIXES[job.reason]
    elif finding.reason:
        out["cause"], out["fix"] = finding.reason, FIXES[finding.reason]
    out["facts"] = [f"exit code {exit_code}"] if exit_code is not None else []
    if current and job.message:
        said = job.message.replace(f": {out['fix']}", "") if out["fix"] else job.message  # the fix is above
        out["facts"].append(f"status: {job.reason}: {said if len(said) <= 240 else said[:237] + '...'}")
    return out


def triage(client: Client, name: str, attempt: int | None) -> int:
    report = triage_report(client, name, attempt)
    out = sys.stdout
    if not report["failed"]:
        how = f"{report['phase']} ({report['reason']})" if report["reason"] else report["phase"]
        out.write(f"job/{report['job']} did not fail: it is {how}\n")
        return 0
    cause = report["cause"] or "Error (no known failure signature; read its log: gflowctl logs " + report["job"] + ")"
    exit_code = report["exitCode"]
    out.write(
        f"job/{report['job']} attempt {report['attempt']} failed: {cause}"
        + (f" (exit code {exit_code})" if exit_code is not None else "")
        + "\n"
    )
    if report["fix"]:
        out.write(f"fix: {report['fix']}\n")
    out.write("evidence:\n")
    for fact in report["facts"]:
        out.write(f"  {fact}\n")
    for line in report["evidence"]:
        text = line["text"] if len(line["text"]) <= 200 else line["text"][:197] + "..."
        out.write(f"  log line {line['line']}: {text}\n")
    if not report["evidence"]:
        out.write("  no log line matches a known failure\n")
    return 0
