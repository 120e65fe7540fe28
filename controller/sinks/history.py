"""The job history: ``run/history.jsonl``, one compact line per finished attempt.

Status files describe jobs that exist; a finished job removed by TTL or ``finishedJobsHistory``
takes its status with it. ``gflowctl stats`` needs outcomes, waits, runtimes and GPU-hours over
days, so gflowd appends one line here whenever an attempt ends (or a job ends without running:
cancelled, dependency failed). Append-only with ``O_APPEND`` (see ``controller.util.jsonlog``), rotated
by size keeping one previous file, written without fsync: it is statistics, not state -- losing
the last lines in a power cut costs nothing the controller needs.

A line (keys kept short, ~250 bytes)::

    {"job": "train", "attempt": 1, "generation": 1, "phase": "Succeeded", "reason": "Completed",
     "final": true, "exitCode": 0, "created": 1.7e9, "start": 1.7e9, "end": 1.7e9, "wait": 3.2,
     "gpus": 2, "devices": [0, 1], "user": "alice", "labels": {"team": "vision"}, "gpuUsed": 0.8}

``gpuUsed``: utilization-weighted GPU-hours of the attempt (``status.gpuUsage.gpuHoursUsed``), when
its GPUs were sampled (NVML); absent otherwise.
"""

from __future__ import annotations

import json
import os
import pwd

from controller.paths import Home
from controller.util.jsonlog import append_lines

HISTORY_MAX_BYTES = 64 * 1024 * 1024


_users: dict[int, str] = {}


def user_name(uid: int) -> str:
    if uid < 0:
        uid = os.geteuid()  # a manifest whose owner is unknown runs as the controller's user
    if uid not in _users:
        try:
            _users[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _users[uid] = str(uid)
    return _users[uid]


def history_line(end) -> str:
    """One ``AttemptEnd`` (``controller.sinks.hooks``) as a history line."""
    record = {
        "job": end.name,
        "attempt": end.attempt,
        "generation": end.generation,
        "phase": end.phase,
        "reason": end.reason,
        "final": end.final,
        "exitCode": end.exit_code,
        "created": round(end.created, 3),
        "start": None if end.started is None else round(end.started, 3),
        "end": round(end.finished, 3),
        "wait": None if end.wait is None else round(end.wait, 3),
        "gpus": end.gpus,
        "devices": list(end.devices),
        "user": user_name(end.uid),
        "labels": end.labels,
    }
    if end.owner:
        record["sweep"] = end.owner
    if end.usage:  # CPU time and peak memory from the attempt's cgroup
        record.update({k: end.usage[k] for k in ("cpuSeconds", "peakMemoryBytes") if end.usage.get(k) is not None})
    if end.gpu_hours_used is not None:
        record["gpuUsed"] = end.gpu_hours_used
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"


class HistoryWriter:
    """Sink: appends the attempts each pass ended."""

    def __init__(self, home: Home, max_bytes: int = HISTORY_MAX_BYTES):
        self.path = home.history_file
        self.max_bytes = max_bytes

    def consume(self, facts) -> None:
        if facts.ended:
            append_lines(self.path, [history_line(end) for end in facts.ended], self.max_bytes)

    def close(self) -> None:
        pass
