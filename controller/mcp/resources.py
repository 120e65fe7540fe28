"""Jobs and logs as MCP resources an agent can read and subscribe to:

* ``gflow://jobs`` -- every job's summary row;
* ``gflow://jobs/{name}`` -- one job (status, conditions);
* ``gflow://jobs/{name}/logs`` -- the tail of its log (64 KiB at most).

``watch`` polls what gflowd writes (the jobs index, the logs' sizes) and publishes a
``ResourceUpdated`` for each URI whose content changed, which the SDK delivers to every
``subscriptions/listen`` stream that asked for it. Polling keeps gflowd unaware of MCP.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from controller.client.api import Client

POLL_SECONDS = 0.5
JOBS_URI = "gflow://jobs"


def job_uri(name: str) -> str:
    return f"{JOBS_URI}/{name}"


def logs_uri(name: str) -> str:
    return f"{JOBS_URI}/{name}/logs"


def register(server: Any, client: Client, read: dict[str, Callable[..., dict[str, Any]]]) -> None:
    """The three resources, read through the reading tools (one code path, one permission check)."""

    @server.resource(JOBS_URI, name="jobs", mime_type="application/json", description="every job, by name")
    def jobs() -> str:
        return json.dumps(read["list_jobs"](limit=500))

    @server.resource(job_uri("{name}"), name="job", mime_type="application/json", description="one job in detail")
    def job(name: str) -> str:
        return json.dumps(read["get_job"](name=name), default=str)

    @server.resource(logs_uri("{name}"), name="job-logs", mime_type="text/plain", description="a job's log, its tail")
    def logs(name: str) -> str:
        return read["get_logs"](name=name, tail=None)["log"]


def snapshot(client: Client, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """URI -> a token that changes when the resource's content does: a job's row; its log's identity
    and size, looked at while the job runs or when its row changed since ``before`` (a job that ran
    between two looks is seen; a finished job's log, which no longer grows, costs nothing)."""
    from controller.client.read.state import job_rows  # lazy: as every reader

    rows = job_rows(client.home)
    before = before or {}
    out: dict[str, Any] = {JOBS_URI: rows}
    for name, row in rows.items():
        uri, log = job_uri(name), logs_uri(name)
        out[uri] = row
        if row.get("phase") != "Running" and before.get(uri) == row:
            if log in before:
                out[log] = before[log]  # unchanged since the job stopped
            continue
        try:
            stat = os.stat(client.home.log_file(name))
        except OSError:
            continue
        out[log] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return out


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The URIs whose token differs (a job that appeared or went away included)."""
    return sorted(uri for uri in before.keys() | after.keys() if before.get(uri) != after.get(uri))


async def watch(client: Client, publish: Callable[[str], Any]) -> None:
    """Until cancelled: every POLL_SECONDS, publish each URI that changed since the last look."""
    import anyio  # lazy: the SDK's event loop library, only under gflowctl mcp

    before = await anyio.to_thread.run_sync(snapshot, client)
    while True:
        await anyio.sleep(POLL_SECONDS)
        try:
            after = await anyio.to_thread.run_sync(snapshot, client, before)
        except OSError:  # a file swapped mid-read: look again next time
            continue
        for uri in changed(before, after):
            await publish(uri)
        before = after
