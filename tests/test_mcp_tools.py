"""Every tool of ``gflowctl mcp`` driven by the official MCP SDK's own client over stdio, as an agent
would, against a real gflowd on fake GPUs: health, usage stats, queue pressure, reservations,
triage, rerun, update and its preview, submit of several jobs (scripts, dependencies, retries,
sweeps, venvs, shared GPUs, start times), logs from the head or the tail, list_jobs by user and
paged, resources an agent subscribes to, gflow's version, and ``--read-only`` refusing every
writing tool."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import job_status, read_index, wait_for

mcp = pytest.importorskip("mcp", reason="the [mcp] extra (hack/setup.sh installs it with [test])")
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

import controller  # noqa: E402

WRITING = {"submit", "cancel", "suspend", "resume", "set_priority", "rerun", "update_job"}


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


async def error(client: Any, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, result.structured_content)
    return result.content[0].text.removeprefix(f"Error executing tool {tool}: ")  # the SDK's prefix


async def submit(client: Any, *jobs: dict[str, Any]) -> dict[str, Any]:
    return await call(client, "submit", jobs=list(jobs))


async def until(predicate, timeout: float = 60) -> Any:
    return await asyncio.to_thread(wait_for, predicate, timeout)


def run(coroutine) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 180))


def phase(home: Path, name: str) -> str | None:
    return (job_status(home, name) or {}).get("phase")


def _succeeded_again(status: dict[str, Any] | None, first_end: str) -> bool:
    return bool(status) and status.get("phase") == "Succeeded" and status.get("completionTime") != first_end


def listed(home: Path, name: str) -> dict[str, Any]:
    """The job's row in the index (what list_jobs and queue_pressure read), written after the status."""
    return ((read_index(home) or {}).get("jobs") or {}).get(name) or {}


def test_the_server_names_gflows_version_and_offers_every_tool(home, gflowd, fake_gpus):
    gflowd("--fake-gpus", fake_gpus)

    async def session():
        async with Client(server(home)) as client:
            assert client.server_info.name == "gflow" and client.server_info.version == controller.__version__
            names = {t.name for t in (await client.list_tools()).tools}
            assert names >= WRITING and len(names) == 19
            health = await call(client, "health")
            assert health["gflowdRunning"] is True and health["version"] == controller.__version__
            assert health["gpus"] == 2 and health["gpusByState"] == {"Free": 2}
            assert health["nodeAgeSeconds"] is not None and health["nodeAgeSeconds"] < 60

    run(session())


def test_queue_pressure_reservations_and_usage_stats(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    (home / "jobs" / "hold.yaml").write_text(
        "kind: Reservation\nmetadata: {name: hold}\nspec:\n  users: [root]\n  gpus: 1\n  start: '+2h'\n  duration: 1h\n"
    )
    work = str(tmp_path)

    async def session():
        async with Client(server(home)) as client:
            await submit(client, {"command": ["true"], "workdir": work, "name": "quick"})
            await until(lambda: listed(home, "quick").get("phase") == "Succeeded")
            await submit(
                client,
                {"command": ["sleep", "120"], "workdir": work, "name": "big", "gpus": 2, "time": "10m"},
                {"command": ["true"], "workdir": work, "name": "small", "gpus": 1, "time": "10m"},
            )
            await until(lambda: listed(home, "small").get("reason") == "Resources")
            await until(lambda: listed(home, "big").get("phase") == "Running")
            pressure = await call(client, "queue_pressure")
            assert (pressure["running"], pressure["pending"]) == (1, 1)
            assert pressure["pendingByReason"] == {"Resources": 1} and pressure["pendingByUser"] == {"root": 1}
            assert pressure["gpusRequestedByPending"] == 1 and pressure["gpusFree"] == 0
            assert pressure["gpusBusy"] == 2 and pressure["pressure"] == 0.5 and pressure["queueHead"] == ["small"]

            await until(lambda: ((read_index(home) or {}).get("reservations") or {}).get("hold"))
            held = (await call(client, "list_reservations"))["reservations"]
            assert [(r["name"], r["users"], r["phase"]) for r in held] == [("hold", ["root"], "Pending")]
            assert held[0]["end"] - held[0]["start"] == 3600
            assert (await call(client, "list_reservations", active_only=True))["reservations"] == []

            stats = await call(client, "usage_stats", since="1h")
            assert stats["outcomes"]["Succeeded"] == 1 and stats["running"] == 1 and stats["pending"] == 1
            assert stats["byUser"]["root"]["succeeded"] == 1
            assert (await error(client, "usage_stats", since="a while")).startswith("since: ")
            await call(client, "cancel", name="big")

    run(session())


def test_submit_takes_scripts_dependencies_retries_sweeps_venvs_and_several_jobs(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    work = str(tmp_path)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)

    async def session():
        async with Client(server(home)) as client:
            jobs = [
                {
                    "script": "#!/bin/bash\n#SBATCH --time=5:00\necho hi from $GFLOW_JOB_NAME\n",
                    "workdir": work,
                    "name": "first",
                },
                {"command": ["sh", "-c", "exit 3"], "workdir": work, "name": "flaky", "retries": 1, "after": ["@"]},
                {"command": ["sh", "-c", "echo lr=$LR"], "workdir": work, "name": "grid", "params": {"LR": [1, 2]}},
                {
                    "command": ["sh", "-c", "echo $VIRTUAL_ENV $(command -v python) $MODE"],
                    "workdir": work,
                    "name": "inventory",
                    "venv": str(venv),
                    "env": {"MODE": "x"},
                },
                {
                    "command": ["true"],
                    "workdir": work,
                    "name": "later",
                    "start_after": "+2h",
                    "gpus": 1,
                    "shared": True,
                    "gpu_memory": "10Gi",
                },
                {"command": ["true"], "workdir": "relative", "name": "lost"},
            ]
            # conda is not installed here: admission (gflowd's) says so, which shows the field arrives
            conda = {"command": ["true"], "workdir": work, "name": "conda", "conda_env": "torch"}
            preview = (await call(client, "preview_submit", jobs=[*jobs, conda]))["results"]
            verdicts = [(p["name"], p["valid"]) for p in preview]
            assert verdicts == [(j["name"], j["name"] not in ("lost", "conda")) for j in [*jobs, conda]], preview
            assert preview[5]["errors"] == ["workdir: 'relative' is not an absolute path"]
            assert preview[6]["errors"][0].startswith("spec.condaEnv: conda is not installed here")
            assert preview[1]["dependsOnThisCall"] == ["first"]  # "@": the job before, not yet written
            assert list((home / "jobs").iterdir()) == []  # a preview writes nothing

            done = (await submit(client, *jobs))["results"]
            assert [(r["ok"], r.get("kind")) for r in done] == [(True, "job")] * 2 + [(True, "sweep")] + [
                (True, "job")
            ] * 2 + [(False, None)]
            await until(lambda: phase(home, "first") == "Succeeded")
            assert (home / "logs" / "first.log").read_text() == "hi from first\n"
            await until(lambda: phase(home, "flaky") == "Failed")
            flaky = job_status(home, "flaky")
            assert flaky["attempt"] == 2 and flaky["exitCode"] == 3  # one retry
            assert "first" in (home / "jobs" / "flaky.yaml").read_text()  # after: ["@"] is the job before
            await until(lambda: phase(home, "grid-0") == "Succeeded" and phase(home, "grid-1") == "Succeeded")
            assert {(home / "logs" / f"grid-{i}.log").read_text() for i in (0, 1)} == {"lr=1\n", "lr=2\n"}
            await until(lambda: phase(home, "inventory") == "Succeeded")
            assert (home / "logs" / "inventory.log").read_text() == f"{venv} {venv}/bin/python x\n"
            later = (home / "jobs" / "later.yaml").read_text()
            assert "startAfter:" in later and "sharing: Shared" in later
            assert 'gpuMemory: "10Gi"' in later
            await until(lambda: (job_status(home, "later") or {}).get("reason") == "StartAfter")
            assert not (home / "jobs" / "lost.yaml").exists()
            assert (await error(client, "submit", jobs=[jobs[5]])) == "workdir: 'relative' is not an absolute path"

    run(session())


def test_logs_come_from_the_head_or_the_tail_capped(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)

    async def session():
        async with Client(server(home)) as client:
            await submit(client, {"command": ["seq", "2000"], "workdir": str(tmp_path), "name": "count"})
            await until(lambda: phase(home, "count") == "Succeeded")
            head = await call(client, "get_logs", name="count", head=3)
            assert (head["log"], head["truncated"], head["from"]) == ("1\n2\n3\n", False, "head")
            tail = await call(client, "get_logs", name="count", tail=2)
            assert (tail["log"], tail["truncated"]) == ("1999\n2000\n", False)
            capped = await call(client, "get_logs", name="count", tail=None, max_bytes=20)
            assert capped["truncated"] and len(capped["log"]) <= 20 and capped["log"].endswith("1999\n2000\n")
            first = await call(client, "get_logs", name="count", head=1000, max_bytes=10)
            assert first["truncated"] and first["log"] == "1\n2\n3\n4\n5\n"
            assert "must be >= 0" in await error(client, "get_logs", name="count", head=-1)

    run(session())


def test_list_jobs_filters_by_user_and_pages(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    names = [f"j{i}" for i in range(5)]

    async def session():
        async with Client(server(home)) as client:
            await submit(client, *({"command": ["true"], "workdir": str(tmp_path), "name": n} for n in names))
            await until(lambda: all(listed(home, n).get("phase") == "Succeeded" for n in names))
            first = await call(client, "list_jobs", limit=2)
            assert [j["name"] for j in first["jobs"]] == ["j0", "j1"] and first["total"] == 5
            assert first["nextOffset"] == 2 and {j["user"] for j in first["jobs"]} == {"root"}
            last = await call(client, "list_jobs", limit=2, offset=4)
            assert [j["name"] for j in last["jobs"]] == ["j4"] and last["nextOffset"] is None
            assert (await call(client, "list_jobs", user="root"))["total"] == 5
            assert (await call(client, "list_jobs", user="nobody"))["jobs"] == []
            assert "limit must be >= 1" in await error(client, "list_jobs", limit=0)

    run(session())


def test_triage_names_the_cause_the_evidence_and_the_fix(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    oom = "echo step 1; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1\n"
    missing = "echo \"ModuleNotFoundError: No module named 'torchvision'\" >&2; exit 1\n"

    async def session():
        async with Client(server(home)) as client:
            await submit(
                client,
                {"script": oom, "workdir": str(tmp_path), "name": "oom", "gpus": 1},
                {"script": missing, "workdir": str(tmp_path), "name": "imports"},
                {"command": ["sleep", "120"], "workdir": str(tmp_path), "name": "busy"},
            )
            await until(lambda: phase(home, "oom") == "Failed" and phase(home, "imports") == "Failed")
            why = await call(client, "triage", name="oom")
            assert (why["phase"], why["exitCode"], why["cause"]) == ("Failed", 1, "CUDAOutOfMemory")
            assert [(e["line"], e["cause"]) for e in why["evidence"]] == [(2, "CUDAOutOfMemory")]
            assert "CUDA out of memory" in why["evidence"][0]["text"] and "batch size" in why["fix"]
            assert "rerun" in why["advice"]
            module = await call(client, "triage", name="imports")
            assert module["cause"] == "MissingModule" and "spec.condaEnv" in module["fix"]
            await until(lambda: phase(home, "busy") == "Running")
            busy = await call(client, "triage", name="busy")
            assert busy["cause"] is None and busy["advice"].startswith("the job is still running")
            assert (await error(client, "triage", name="ghost")).endswith("job/ghost not found")
            await call(client, "cancel", name="busy")

    run(session())


@pytest.mark.parametrize(
    "line, cause",
    [
        ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "CUDAOutOfMemory"),
        ("torch.OutOfMemoryError: CUDA out of memory.", "CUDAOutOfMemory"),
        ("Killed", "OOMKilled"),
        ("MemoryError", "OOMKilled"),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", "NCCLTimeout"),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, ncclInternalError",
            "NCCLError",
        ),
        ("ModuleNotFoundError: No module named 'apex'", "MissingModule"),
        ("ImportError: libcudart.so.12: cannot open shared object file", "MissingModule"),
        ("bash: line 1: 4242 Segmentation fault (core dumped) python train.py", "Segfault"),
        ("epoch 3 loss 0.12", None),
    ],
)
def test_the_pattern_table_classifies_each_failure(line, cause):
    from controller.mcp.failures import PATTERNS, classify  # here: the other tests run on code without it

    found = classify([line])
    assert [m.cause for m in found] == ([cause] if cause else [])
    assert all(p.fix for p in PATTERNS)


def test_rerun_and_update_with_its_preview(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    work = str(tmp_path)

    async def session():
        async with Client(server(home)) as client:
            await submit(
                client,
                {"command": ["sh", "-c", "echo ran"], "workdir": work, "name": "once"},
                {"command": ["true"], "workdir": work, "name": "queued", "start_after": "+2h"},
                {"command": ["sleep", "120"], "workdir": work, "name": "busy"},
            )
            await until(lambda: phase(home, "once") == "Succeeded")
            first_end = job_status(home, "once")["completionTime"]
            assert (await call(client, "rerun", name="once")) == {"result": "job/once rerun requested"}
            # one read of the status: between two, the rerun's Running status (no completionTime) may land
            await until(lambda: _succeeded_again(job_status(home, "once"), first_end))

            manifest = home / "jobs" / "queued.yaml"
            await until(lambda: (job_status(home, "queued") or {}).get("reason") == "StartAfter")
            before = manifest.read_text()
            preview = await call(client, "preview_update", name="queued", gpus=1, priority=5, time="1h", after=["once"])
            assert (
                preview["valid"]
                and preview["written"] is False
                and preview["effect"] == "applies before the job starts"
            )
            assert "gpus: 1" in preview["manifest"] and "priority: 5" in preview["manifest"]
            assert "1h" in preview["manifest"].split("timeLimit:")[1].splitlines()[0]
            assert "- job: once" in preview["manifest"]
            assert manifest.read_text() == before  # a preview writes nothing
            bad = await call(client, "preview_update", name="queued", memory="lots")
            assert not bad["valid"] and "spec.resources.memory" in bad["errors"][0]
            updated = await call(client, "update_job", name="queued", gpus=1, priority=5)
            assert updated["written"] and "gpus: 1" in manifest.read_text() and "priority: 5" in manifest.read_text()
            await until(lambda: listed(home, "queued").get("priority") == 5)

            await until(lambda: phase(home, "busy") == "Running")
            refused = await error(client, "update_job", name="busy", gpus=2)
            assert refused.startswith("job/busy is Running: only priority and time take effect")
            assert (await call(client, "update_job", name="busy", priority=7))[
                "effect"
            ] == "takes effect on the running attempt"
            assert "only a finished job can be rerun" in await error(client, "rerun", name="busy")
            await call(client, "cancel", name="busy")

    run(session())


def test_read_only_refuses_every_writing_tool(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    manifest = home / "jobs" / "mine.yaml"
    manifest.write_text(
        f"kind: Job\nmetadata: {{name: mine}}\nspec:\n  command: [sleep, '120']\n  workingDir: {tmp_path}\n"
    )
    wait_for(lambda: phase(home, "mine") == "Running")
    before = manifest.read_text()
    calls = {
        "submit": {"jobs": [{"command": ["true"], "workdir": str(tmp_path)}]},
        "cancel": {"name": "mine"},
        "suspend": {"name": "mine"},
        "resume": {"name": "mine"},
        "set_priority": {"name": "mine", "priority": 9},
        "rerun": {"name": "mine"},
        "update_job": {"name": "mine", "priority": 9},
    }
    assert set(calls) == WRITING

    async def session():
        async with Client(server(home, "--read-only")) as client:
            offered = {t.name for t in (await client.list_tools()).tools}
            assert not offered & WRITING and "triage" in offered and "preview_update" in offered
            for tool, arguments in calls.items():
                result = await client.call_tool(tool, arguments)
                assert result.is_error and "Unknown tool" in result.content[0].text, tool
            preview = await call(client, "preview_update", name="mine", priority=9)
            assert preview["valid"] and "priority: 9" in preview["manifest"]

    run(session())
    assert manifest.read_text() == before and [p.name for p in (home / "jobs").iterdir()] == ["mine.yaml"]
    assert phase(home, "mine") == "Running"
    manifest.unlink()


def test_an_agent_subscribes_to_a_job_and_hears_when_it_changes(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)

    async def session():
        async with Client(server(home)) as client:
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert uris == {"gflow://jobs"} and templates == {"gflow://jobs/{name}", "gflow://jobs/{name}/logs"}
            wanted = ["gflow://jobs/watched", "gflow://jobs/watched/logs"]
            async with client.listen(resource_subscriptions=wanted) as events:
                await submit(
                    client, {"command": ["sh", "-c", "echo hello"], "workdir": str(tmp_path), "name": "watched"}
                )
                heard: set[str] = set()
                async for event in events:
                    heard.add(event.uri)
                    if heard == set(wanted):
                        break
            job = json.loads((await client.read_resource("gflow://jobs/watched")).contents[0].text)
            assert job["name"] == "watched" and job["phase"] in ("Pending", "Running", "Succeeded")
            await until(lambda: phase(home, "watched") == "Succeeded")
            log = (await client.read_resource("gflow://jobs/watched/logs")).contents[0].text
            assert log == "hello\n"
            every = json.loads((await client.read_resource("gflow://jobs")).contents[0].text)
            assert [j["name"] for j in every["jobs"]] == ["watched"]

    run(session())


@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")  # that protocol is the point here
def test_a_client_on_an_older_protocol_subscribes_with_resources_subscribe(home, gflowd, fake_gpus, tmp_path):
    gflowd("--fake-gpus", fake_gpus)
    heard: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            await heard.put(str(message.params.uri))

    async def session():
        async with Client(server(home), mode="legacy", message_handler=on_message) as client:
            assert client.server_capabilities.resources.subscribe is True
            await client.subscribe_resource("gflow://jobs/old")
            await submit(client, {"command": ["true"], "workdir": str(tmp_path), "name": "old"})
            assert await asyncio.wait_for(heard.get(), 60) == "gflow://jobs/old"
            await until(lambda: phase(home, "old") == "Succeeded")
            await client.unsubscribe_resource("gflow://jobs/old")

    run(session())
