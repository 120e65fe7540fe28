"""The expected-start plan (squeue --start): pure, table-driven."""

from __future__ import annotations

import pytest

from controller.client.read.expected import Start, plan_starts

NOW = 1000.0


@pytest.mark.parametrize(
    ("running", "pending", "expected"),
    [
        # the head waits for the running job's end; the next for both ahead of it
        (
            [("a", [0, 1], NOW + 3600)],
            [("b", 1, 1800.0), ("c", 2, None)],
            {
                "b": Start(NOW + 3600, "when job/a reaches its timeLimit"),
                "c": Start(NOW + 5400, "when job/a, job/b reach their timeLimit"),
            },
        ),
        # a job in the way without a timeLimit: not known, and named
        ([("a", [0], None)], [("b", 2, None)], {"b": Start(None, "unknown: job/a has no timeLimit")}),
        # the queue behind an unknown is unknown too, through the job that holds the GPUs then
        (
            [("a", [0, 1], None)],
            [("b", 2, 60.0), ("c", 1, None)],
            {"b": Start(None, "unknown: job/a has no timeLimit"), "c": Start(None, "unknown: job/b has no timeLimit")},
        ),
        # GPUs free now: it waits for something else (its reason)
        ([], [("b", 1, None)], {"b": Start(NOW, "its GPUs are free now; it waits for its reason")}),
        ([], [("b", 0, None)], {"b": Start(NOW, "needs no GPU")}),
        ([], [("b", 3, None)], {"b": Start(None, "needs 3 GPUs; this machine has 2")}),
        # the GPUs that free up first are taken: b takes GPU 1 (free at +10m), not GPU 0 (+1h)
        (
            [("a", [0], NOW + 3600), ("z", [1], NOW + 600)],
            [("b", 1, 60.0)],
            {"b": Start(NOW + 600, "when job/z reaches its timeLimit")},
        ),
    ],
)
def test_plan_starts(running, pending, expected):
    assert plan_starts(NOW, [0, 1], running, pending) == expected
