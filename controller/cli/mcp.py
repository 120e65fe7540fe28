"""``gflowctl mcp [--read-only]``: gflow as tools for AI coding agents, an MCP server on stdio
(the official ``mcp`` Python SDK, the optional extra ``gflow-controller[mcp]``).

Every tool is a ``controller.client.Client`` call, so an agent sees and does what gflowctl does:
reading tools (``list_jobs``, ``get_job``, ``get_logs``, ``get_gpus``, ``explain_pending``,
``preview_submit``) and, unless ``--read-only``, acting ones (``submit``, ``cancel``, ``suspend``,
``resume``, ``set_priority``). Acting goes through the same spec-dir writes as gflowctl, so the
server has the permissions of the user who runs it and no more: a manifest it writes is that
user's, and gflowd runs the job as that user. A user error is the tool's error result, with
gflowctl's line. Nothing but the protocol may go to stdout.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from controller.cli.common import CliError
from controller.cli.events import read_events
from controller.client.api import Client
from controller.client.errors import GflowError
from controller.client.read.events import aggregate
from controller.client.read.objects import Sweep
from controller.paths import Home

READING = ("list_jobs", "get_job", "get_logs", "get_gpus", "explain_pending", "preview_submit")
ACTING = ("submit", "cancel", "suspend", "resume", "set_priority")
log = logging.getLogger("gflowctl.mcp")
MAX_LOG_BYTES = 64 * 1024  # an agent's context is precious: the tail of a huge log
INSTRUCTIONS = (
    "gflow schedules GPU jobs on this machine. list_jobs and get_job show jobs and why they wait; "
    "explain_pending says what would let a waiting job start; preview_submit checks a job before "
    "submit writes it. Jobs run as the user who runs this server, in workdir (give an absolute path)."
)


def _sdk() -> tuple[Any, type[Exception]]:
    """The server class and its tool-error type: ``MCPServer`` (mcp 2), else ``FastMCP`` (mcp 1)."""
    try:
        from mcp.server import MCPServer  # lazy: an optional extra, only for gflowctl mcp
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        try:
            # lazy: mcp 1.x (type-checked against 2.x, which the test extra installs)
            from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[attr-defined,no-redef]
            from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]
        except ImportError:
            raise CliError("gflowctl mcp needs the MCP Python SDK: pip install 'gflow-controller[mcp]'") from None
    return MCPServer, ToolError


def build_server(home: Home, read_only: bool = False) -> Any:
    """The MCP server with gflow's tools (only the reading ones when ``read_only``)."""
    server_class, tool_error = _sdk()
    from mcp.types import ToolAnnotations as annotations  # lazy: the SDK, as above

    client = Client(home.root, home.spec_dir)
    server = server_class("gflow", instructions=INSTRUCTIONS)

    def tool(fn: Callable[..., dict[str, Any]]) -> None:
        if read_only and fn.__name__ in ACTING:
            return

        @functools.wraps(fn)  # the SDK reads the tool's schema from the signature and docstring
        def guarded(*args: Any, **kwargs: Any) -> dict[str, Any]:
            try:
                return fn(*args, **kwargs)
            except GflowError as exc:  # the user's mistake: the message for the model to read
                raise tool_error(str(exc)) from None
            except PermissionError:  # a file of another user: say so, never their path or the raw text
                raise tool_error(f"{fn.__name__}: permission denied: that belongs to another user") from None
            except OSError as exc:  # the machine failing (a full disk): one line, no paths
                raise tool_error(f"{fn.__name__}: {exc.strerror or type(exc).__name__}") from None
            except Exception:  # a bug: the log has it, the model gets one line
                log.exception("mcp tool %s failed", fn.__name__)
                raise tool_error(f"{fn.__name__}: internal error; see gflowctl mcp's stderr") from None

        reads = fn.__name__ in READING
        server.tool(annotations=annotations(readOnlyHint=reads))(guarded)  # type: ignore[call-arg]  # its alias

    for fn in _tools(client):
        tool(fn)
    return server


def _tools(client: Client) -> list[Callable[..., dict[str, Any]]]:
    def list_jobs(phase: str | None = None, label_selector: str | None = None) -> dict[str, Any]:
        """Every job with its phase, reason, GPUs and priority; only those in `phase` (Pending,
        Running, Succeeded, Failed, Cancelled, Rejected) and matching `label_selector` (team=vision)."""
        jobs = client.list(phase=phase, labels=label_selector)
        keep = ("name", "phase", "reason", "message", "gpus", "devices", "priority", "queue_position", "sweep")
        return {"jobs": [{k: getattr(j, k) for k in keep} for j in jobs], "gflowdRunning": client.is_running()}

    def get_job(name: str, events: int = 10) -> dict[str, Any]:
        """One job in detail: status, reason and message, conditions, and its most recent events."""
        job = client.get(name)
        kind = "sweep" if isinstance(job, Sweep) else "job"
        recent = aggregate(read_events(client.home, f"{kind}/{job.name}"))[-max(events, 0) :] if events else []
        return {
            "kind": kind,
            **dataclasses.asdict(job),
            "events": [{k: e.get(k) for k in ("type", "reason", "message", "count", "time")} for e in recent],
        }

    def get_logs(name: str, tail: int = 100) -> dict[str, Any]:
        """The last `tail` lines of a job's output (stdout and stderr)."""
        text = client.logs(name, tail=max(tail, 0))
        assert isinstance(text, str)  # not following: the text, not a stream
        cut = len(text.encode()) > MAX_LOG_BYTES
        if cut:
            text = text.encode()[-MAX_LOG_BYTES:].decode("utf-8", errors="replace")
        return {"job": name, "log": text, "truncated": cut}

    def get_gpus() -> dict[str, Any]:
        """The machine's GPUs: index, name, memory, utilization, state (Free, Allocated, Shared,
        Unmanaged, Unhealthy) and the jobs on each."""
        return {"gpus": [dataclasses.asdict(g) for g in client.gpus()], "gflowdRunning": client.is_running()}

    def explain_pending(name: str) -> dict[str, Any]:
        """Why a Pending job waits (reason and message, queue position, GPUs free and who holds the
        others) and what would let it start."""
        return client.explain_pending(name)

    def preview_submit(
        command: list[str],
        workdir: str,
        gpus: int = 0,
        name: str | None = None,
        gpu_type: str | None = None,
        memory: str | None = None,
        time: str | None = None,
        priority: int | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """What submit would write (the manifest YAML), the admission verdict (errors, or a warning
        that it can never start here) and whether it would start now. Writes nothing."""
        return client.preview(
            command,
            workdir=workdir,
            gpus=gpus,
            name=name,
            gpu_type=gpu_type,
            memory=memory,
            time=time,
            priority=priority,
            env=env,
            labels=labels,
        )

    def submit(
        command: list[str],
        workdir: str,
        gpus: int = 0,
        name: str | None = None,
        gpu_type: str | None = None,
        memory: str | None = None,
        time: str | None = None,
        priority: int | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Submit a job: `command` runs (no shell) in `workdir` with `gpus` whole GPUs; `time` is a
        limit like 2h; `memory` a host RAM limit like 16Gi. Returns the job's name."""
        done = client.submit(
            command,
            workdir=workdir,
            gpus=gpus,
            name=name,
            gpu_type=gpu_type,
            memory=memory,
            time=time,
            priority=priority,
            env=env,
            labels=labels,
        )
        return dataclasses.asdict(done)

    def cancel(name: str) -> dict[str, Any]:
        """Stop a job (or sweep) for good."""
        return {"result": client.cancel(name)[0]}

    def suspend(name: str) -> dict[str, Any]:
        """Hold a job: a running one is stopped and returns to Pending until resumed."""
        return {"result": client.suspend(name)[0]}

    def resume(name: str) -> dict[str, Any]:
        """Release a suspended job."""
        return {"result": client.resume(name)[0]}

    def set_priority(name: str, priority: int) -> dict[str, Any]:
        """Set a job's priority (higher runs first); it takes effect while it waits or runs."""
        return {"result": client.set_priority(name, priority)}

    return [
        list_jobs,
        get_job,
        get_logs,
        get_gpus,
        explain_pending,
        preview_submit,
        submit,
        cancel,
        suspend,
        resume,
        set_priority,
    ]


def serve(home: Home, read_only: bool) -> int:
    """Serve on stdin/stdout until the agent closes them."""
    server = build_server(home, read_only)
    sys.stderr.write(f"gflowctl mcp: serving {home.root} on stdio{' (read-only)' if read_only else ''}\n")
    server.run()
    return 0
