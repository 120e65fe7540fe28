"""``gflowctl mcp`` driven by the MCP SDK's own client over stdio, as an agent would: list the tools,
preview a job, submit it, read it back, and ask why a job waits for GPUs; ``--read-only`` offers
only the reading tools. A real gflowctl process serves a real gflowd's home on fake GPUs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import read_index, wait_for

mcp = pytest.importorskip("mcp", reason="the [mcp] extra (hack/setup.sh installs it with [test])")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

READING = {
    "list_jobs",
    "get_job",
    "get_logs",
    "explain_pending",
    "triage",
    "health",
    "get_gpus",
    "usage_stats",
    "queue_pressure",
    "list_reservations",
    "preview_submit",
    "preview_update",
}
ACTING = {"submit", "cancel", "suspend", "resume", "set_priority", "rerun", "update_job"}


def server(home: Path, *flags: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "controller.cli.main", "--home", str(home), "mcp", *flags],
        env=dict(os.environ),
    )


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content)
    return result.structured_content


async def preview1(client: Any, **job: Any) -> dict[str, Any]:
    """preview_submit of one job: its one result."""
    return (await call(client, "preview_submit", jobs=[job]))["results"][0]


def run(coroutine) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def test_an_agent_previews_submits_reads_and_asks_why_a_job_waits(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    work = tmp_path / "work"
    work.mkdir()

    async def session():
        async with Client(server(home)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == READING | ACTING

            preview = await preview1(client, command=["sleep", "60"], workdir=str(work), gpus=2, name="big")
            assert preview["valid"] and preview["errors"] == [] and preview["fitsNow"] is True
            assert "name: big" in preview["manifest"] and "gpus: 2" in preview["manifest"]
            assert "gflow.dev/environment" not in preview["manifest"]  # no file is written: apply -f of it must run
            assert not (home / "jobs" / "big.yaml").exists()  # a preview writes nothing
            never = await preview1(client, command=["true"], workdir=str(work), gpus=8)
            assert never["fitsNow"] is False and never["why"] == "can never start: needs 8 GPUs, this machine has 2"
            invalid = await preview1(client, command=["true"], workdir=str(work), memory="lots")
            assert not invalid["valid"] and invalid["errors"] == [
                "--memory: 'lots' is not a quantity; use a number with a unit like 16Gi, 500M or 512Mi"
            ]
            rejected = await preview1(client, command=["true"], workdir=str(work), env={"A B": "1"})
            assert not rejected["valid"] and "spec.env" in rejected["errors"][0] and rejected["manifest"]

            submitted = await call(
                client, "submit", jobs=[{"command": ["sleep", "60"], "workdir": str(work), "gpus": 2, "name": "big"}]
            )
            assert submitted["results"] == [
                {"ok": True, "kind": "job", "name": "big", "verb": "created", "warning": None}
            ]
            await asyncio.to_thread(wait_for, lambda: _phase(home, "big") == "Running", 30)
            job = await call(client, "get_job", name="big")
            assert job["phase"] == "Running" and job["gpus"] == 2 and sorted(job["devices"]) == [0, 1]
            assert any(e["reason"] == "Started" for e in job["events"])

            await call(client, "submit", jobs=[{"command": ["true"], "workdir": str(work), "gpus": 1, "name": "small"}])
            await asyncio.to_thread(wait_for, lambda: _reason(home, "small") == "Resources", 30)
            why = await call(client, "explain_pending", name="small")
            assert why["reason"] == "Resources" and why["gpusFree"] == 0 and why["gpusRequested"] == 1
            assert why["gpusHeldBy"] == ["big"] and why["queuePosition"] == 1
            assert why["explanation"].startswith("job/small waits: Resources (needs 1 GPU")
            assert "enough GPUs free up" in why["explanation"]

            # list_jobs reads the index, which may be written a moment after the status files
            await asyncio.to_thread(wait_for, lambda: _index_phase(home, "small") == "Pending", 30)
            listed = await call(client, "list_jobs", phase="Pending")
            assert [j["name"] for j in listed["jobs"]] == ["small"]
            # a user error is the tool's error, with gflowctl's line
            missing = await client.call_tool("get_job", {"name": "nope"})
            assert missing.is_error and missing.content[0].text.endswith(": job/nope not found")
            assert (await call(client, "cancel", name="big")) == {"result": "job/big cancelled"}
        await asyncio.to_thread(wait_for, lambda: _phase(home, "small") == "Succeeded", 30)
        # what the agent wrote is an ordinary manifest, the server user's
        stored = home / "jobs" / "small.yaml"
        assert stored.stat().st_uid == os.getuid() and f"workingDir: {work}" in stored.read_text()

    run(session())


def test_read_only_offers_only_the_reading_tools(home, gflowd, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)

    async def session():
        async with Client(server(home, "--read-only")) as client:
            assert {t.name for t in (await client.list_tools()).tools} == READING
            refused = await client.call_tool("submit", {"jobs": [{"command": ["true"], "workdir": "/tmp"}]})
            assert refused.is_error
            gpus = await call(client, "get_gpus")
            assert [g["state"] for g in gpus["gpus"]] == ["Free", "Free"]
        assert list((home / "jobs").iterdir()) == []

    run(session())


def test_without_the_sdk_gflowctl_mcp_says_what_to_install(home, tmp_path):
    # a Python that cannot import mcp: a module of that name that fails, first on the path
    shadow = tmp_path / "shadow"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "--home", str(home), "mcp"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr == "error: gflowctl mcp needs the MCP Python SDK: pip install 'gflow-controller[mcp]'\n"


def _status(home: Path, name: str) -> dict[str, Any]:
    from helpers import job_status

    return job_status(home, name) or {}


def _phase(home: Path, name: str) -> str | None:
    return _status(home, name).get("phase")


def _reason(home: Path, name: str) -> str | None:
    return _status(home, name).get("reason")


def _index_phase(home: Path, name: str) -> str | None:
    return (((read_index(home) or {}).get("jobs") or {}).get(name) or {}).get("phase")
