"""``gflowctl mcp [--read-only]``: gflow as tools for AI coding agents, an MCP server on stdio
(the official ``mcp`` Python SDK, the optional extra ``gflow-controller[mcp]``). The server is
the ``controller.mcp`` package (docs/mcp.md); this module is the verb's entry, imported only when
the verb runs."""

from __future__ import annotations

from controller.mcp.server import build_server, serve

__all__ = ["build_server", "serve"]
