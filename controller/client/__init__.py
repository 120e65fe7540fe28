"""Client: the read model gflowctl and the dashboard share (index, rows, status, is gflowd running)."""
