"""The MCP server: gflow's tools (``jobs``, ``machine``, ``submitting``, ``acting``) and resources
on the official ``mcp`` SDK (2.x ``MCPServer``, else 1.x ``FastMCP``), named with gflow's version.

Every tool is a ``controller.client.Client`` call, so an agent sees and does what gflowctl does,
with the permissions of the user who runs the server and no more. ``--read-only`` registers only
the reading tools. A user error is the tool's error result with gflowctl's line; a file of
another user is "permission denied", never its path or text. Nothing but the protocol goes to
stdout.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import controller
from controller.cli.common import CliError
from controller.client.api import Client
from controller.client.errors import GflowError
from controller.mcp import acting, jobs, machine, resources, submitting
from controller.paths import Home

log = logging.getLogger("gflowctl.mcp")
INSTRUCTIONS = (
    "gflow schedules GPU jobs on this machine. health says whether gflowd runs; list_jobs and get_job "
    "show jobs and why they wait; explain_pending says what would let a waiting job start; "
    "queue_pressure and get_gpus what is free; triage why a job failed and the fix. preview_submit "
    "checks jobs before submit writes them, preview_update before update_job. Jobs run as the user "
    "who runs this server, in workdir (give an absolute path). Subscribe to gflow://jobs, "
    "gflow://jobs/NAME or gflow://jobs/NAME/logs to hear when they change."
)


def _sdk() -> tuple[Any, type[Exception], bool]:
    """The server class, its tool-error type, and whether it is mcp 2 (``MCPServer``)."""
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
        return MCPServer, ToolError, False
    return MCPServer, ToolError, True


def tool_sets(client: Client) -> tuple[list[Callable[..., dict[str, Any]]], list[Callable[..., dict[str, Any]]]]:
    """(reading tools, writing tools)."""
    previews, writes = acting.tools(client)
    preview_submit, submit = submitting.tools(client)
    return [*jobs.tools(client), *machine.tools(client), preview_submit, *previews], [submit, *writes]


def build_server(home: Home, read_only: bool = False) -> Any:
    """The MCP server with gflow's tools (only the reading ones when ``read_only``) and resources."""
    server_class, tool_error, modern = _sdk()
    from mcp.types import ToolAnnotations as annotations  # lazy: the SDK, as above

    client = Client(home.root, home.spec_dir)
    reading, writing = tool_sets(client)
    if modern:
        from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated  # lazy: the SDK

        bus = InMemorySubscriptionBus()
        legacy: dict[str, set[Any]] = {}  # uri -> sessions that sent resources/subscribe (pre-2026 clients)

        async def publish(uri: str) -> None:
            await bus.publish(ResourceUpdated(uri=uri))  # subscriptions/listen streams (2026-07-28)
            for session in list(legacy.get(uri, ())):
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # that client went away: forget it
                    legacy[uri].discard(session)

        @contextlib.asynccontextmanager
        async def lifespan(_server: Any) -> AsyncIterator[None]:
            import anyio  # lazy: the SDK's event loop library

            async with anyio.create_task_group() as group:
                group.start_soon(resources.watch, client, publish)
                yield
                group.cancel_scope.cancel()

        server = server_class(
            "gflow", version=controller.__version__, instructions=INSTRUCTIONS, subscriptions=bus, lifespan=lifespan
        )
        _legacy_subscriptions(server, legacy)
    else:
        server = server_class("gflow", instructions=INSTRUCTIONS)
        server._mcp_server.version = controller.__version__  # FastMCP 1.x takes no version argument

    def guard(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
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

        return guarded

    for fn in reading:
        server.tool(annotations=annotations(readOnlyHint=True))(guard(fn))  # type: ignore[call-arg]
    if not read_only:
        for fn in writing:
            server.tool(annotations=annotations(readOnlyHint=False))(guard(fn))  # type: ignore[call-arg]
    resources.register(server, client, {fn.__name__: guard(fn) for fn in reading})
    return server


def _legacy_subscriptions(server: Any, legacy: dict[str, set[Any]]) -> None:
    """``resources/subscribe`` and ``unsubscribe`` for clients on a protocol before 2026-07-28 (the
    SDK serves only ``subscriptions/listen`` by itself); ``publish`` notifies the sessions kept here."""
    from mcp import types  # lazy: the SDK

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        legacy.setdefault(str(params.uri), set()).add(ctx.session)
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        legacy.get(str(params.uri), set()).discard(ctx.session)
        return types.EmptyResult()

    lowlevel = server._lowlevel_server  # MCPServer builds it; it takes extra handlers
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)


def serve(home: Home, read_only: bool) -> int:
    """Serve on stdin/stdout until the agent closes them."""
    server = build_server(home, read_only)
    sys.stderr.write(f"gflowctl mcp: serving {home.root} on stdio{' (read-only)' if read_only else ''}\n")
    server.run()
    return 0
