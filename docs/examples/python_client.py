"""gflow from Python: a function as a job, a sweep as ``map``, results gathered as futures.

Run it where a gflowd serves your home (``gflowd up``), in an environment that has gflow and
cloudpickle (``pip install 'gflow-controller[client]'``)::

    python docs/examples/python_client.py

Each call below writes an ordinary manifest, so ``gflowctl get jobs`` shows the jobs, and
``gflowctl logs NAME`` their output. The functions run in this Python, with this environment and
this working directory, on the GPUs gflow gives them (``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import math
import os

from controller.client import Client


def train(lr: float, epochs: int = 3) -> dict:
    """Stands in for a training run: reads which GPU it got and returns its metrics."""
    loss = 1.0
    for _ in range(epochs):
        loss *= 1 - lr
    return {"lr": lr, "loss": round(loss, 4), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def main() -> None:
    client = Client()  # the home gflowctl uses: $GFLOW_HOME or ~/.local/share/gflow

    # 1. one call, one job; the future's result is the function's return value
    future = client.submit_function(train, 0.1, gpus=1, epochs=5, job_options={"time": "10m"})
    print(f"job/{future.job} submitted")
    print("one run:", future.result(timeout=600))

    # 2. a sweep over learning rates: one Sweep, at most two jobs at once, results in order
    rates = [0.3, 0.1, 0.03, 0.01]
    futures = client.map(train, rates, gpus=1, parallelism=2)
    print(f"sweep/{futures[0].sweep}: {len(futures)} jobs")
    results = [f.result(timeout=600) for f in futures]
    best = min(results, key=lambda r: r["loss"])
    print(f"best lr {best['lr']}: loss {best['loss']}")

    # 3. what the function raises comes back as the same exception, its remote traceback attached
    failing = client.submit_function(math.sqrt, -1, gpus=0)
    try:
        failing.result(timeout=600)
    except ValueError as exc:
        print(f"job/{failing.job} raised ValueError: {exc}")


if __name__ == "__main__":
    main()
