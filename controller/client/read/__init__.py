"""The read model gflowctl, the dashboard and the Python client share: what gflowd wrote, read
without it. ``state`` (the index, rows, status files and the records journal, which manifest is a
job's and whose, is gflowd running, node.yaml), ``objects`` (the Python client's typed results),
``logs``, ``events`` (repeats folded), ``usage`` (GPU usage series), ``expected`` (when waiting jobs
may start). Nothing here writes; ``gflowctl get jobs`` imports ``state`` alone, so keep this empty.
"""
