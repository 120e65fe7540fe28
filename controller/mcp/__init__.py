"""gflow's MCP server (``gflowctl mcp``): ``server`` builds it from the tool modules, one per area
(``jobs``: reading jobs and logs, ``machine``: health, GPUs, usage, queue pressure and reservations,
``submitting``: previews and submits, ``acting``: changes to existing jobs), and ``resources`` serves
jobs and logs as resources an agent can subscribe to. ``failures`` is the table of log patterns that
name why a job failed. Nothing here imports the SDK at module level but ``server``."""
