"""``gflowctl mcp [--read-only]``: gflow as tools for AI coding agents, an MCP server on stdio
(the official ``mcp`` Python SDK, the optional extra ``gflow-controller[mcp]``). The server is
the ``controller.mcp`` package; this module is the verb's entry."""

from __future__ import annotations

from controller.paths import Home


def serve(home: Home, read_only: bool) -> int:
    """Serve on stdin/stdout until the agent closes them."""
    from controller.mcp.server import serve as serve_mcp  # lazy: gflowctl loads only the verb it runs

    return serve_mcp(home, read_only)
