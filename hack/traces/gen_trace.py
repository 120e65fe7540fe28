#!/usr/bin/env python3
"""Synthetic job traces for ``gflowctl simulate``: heavy-tailed durations, mixed 1/2/4/8-GPU jobs,
bursty arrivals, several users, a few priority levels, most jobs with a timeLimit.

    python hack/traces/gen_trace.py --jobs 200 --gpus 8 --seed 1 > hack/traces/small.csv
    python hack/traces/gen_trace.py --shape philly --jobs 10000 --gpus 64 --seed 7 > hack/traces/philly-shaped.csv

``--load`` is the offered load: GPU-seconds requested per second over GPU count (0.9 = the GPUs
would be 90% busy if every job started the moment it arrived). Arrivals are bursty: a two-state
Markov-modulated Poisson process (bursts at 4x the mean rate, lulls at 0.4x).

The ``philly`` shape follows the published characterisation of Microsoft's Philly cluster
(Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads",
USENIX ATC 2019, and the trace it released, github.com/msr-fiddle/philly-traces: 117,325 jobs
submitted 2017-08-07 .. 2017-12-22). See docs/simulator.md for the numbers used and how closely
they follow the paper.
"""

from __future__ import annotations

import argparse
import math
import random
import sys

SHAPES = {
    # size mix (GPUs: share of jobs), log-normal duration (median seconds, sigma), max duration,
    # share of jobs without a timeLimit, priority levels (value: share), user count (Zipf s=1.2)
    "synthetic": {
        "sizes": {1: 0.55, 2: 0.20, 4: 0.15, 8: 0.10},
        "median_s": 1800.0,
        "sigma": 1.5,
        "max_s": 3 * 86400.0,
        "no_limit": 0.2,
        "priorities": {0: 0.7, 5: 0.2, 10: 0.1},
        "users": 8,
    },
    "philly": {
        # Most Philly jobs use one GPU; multi-GPU jobs are a minority but hold most GPU time.
        "sizes": {1: 0.75, 2: 0.10, 4: 0.09, 8: 0.06},
        # Run times span minutes to weeks: a median of ~15 minutes with a tail beyond a day.
        "median_s": 900.0,
        "sigma": 2.0,
        "max_s": 14 * 86400.0,
        "no_limit": 0.2,
        "priorities": {0: 0.8, 5: 0.15, 10: 0.05},
        "users": 30,
    },
}


def _pick(rng: random.Random, weights: dict) -> object:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def generate(jobs: int, gpus: int, load: float, seed: int, shape: str) -> list[dict]:
    params = SHAPES[shape]
    rng = random.Random(seed)
    sizes = params["sizes"]
    mu, sigma, cap = math.log(params["median_s"]), params["sigma"], params["max_s"]
    mean_gpus = sum(size * share for size, share in sizes.items())
    mean_duration = min(math.exp(mu + sigma**2 / 2), cap)  # close enough: the cap bites rarely
    mean_gap = mean_gpus * mean_duration / (gpus * load)
    # Markov-modulated arrivals: a burst (4x rate) or a lull (0.4x), switching every ~50 arrivals,
    # weighted so the long-run mean gap stays ``mean_gap``.
    burst_rate, lull_rate, burst_share = 4.0, 0.4, 0.2
    mean_factor = burst_share / burst_rate + (1 - burst_share) / lull_rate
    users = [f"user{i:02d}" for i in range(params["users"])]
    user_weights = [1 / (i + 1) ** 1.2 for i in range(len(users))]
    rows = []
    now, bursting = 0.0, False
    for _ in range(jobs):
        if rng.random() < 1 / 50:
            bursting = rng.random() < burst_share
        rate = burst_rate if bursting else lull_rate
        now += rng.expovariate(1.0) * mean_gap / (rate * mean_factor)
        duration = min(max(rng.lognormvariate(mu, sigma), 10.0), cap)
        if rng.random() < params["no_limit"]:
            limit = ""
        else:  # users overestimate: 1.1x to 4x the run time, rounded up to 15 minutes
            limit = str(int(math.ceil(duration * rng.uniform(1.1, 4.0) / 900.0) * 900))
        rows.append(
            {
                "submit_s": f"{now:.0f}",
                "gpus": _pick(rng, sizes),
                "duration_s": f"{duration:.0f}",
                "time_limit_s": limit,
                "priority": _pick(rng, params["priorities"]),
                "user": rng.choices(users, weights=user_weights)[0],
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=64, help="cluster size the load is computed for")
    parser.add_argument("--load", type=float, default=0.9, help="offered load (default 0.9)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="synthetic")
    args = parser.parse_args()
    if args.jobs < 1 or args.gpus < 8 or not args.load > 0:
        parser.error("--jobs must be >= 1, --gpus >= 8 (the largest jobs use 8), --load > 0")
    rows = generate(args.jobs, args.gpus, args.load, args.seed, args.shape)
    out = sys.stdout
    out.write("submit_s,gpus,duration_s,time_limit_s,priority,user\n")
    for row in rows:
        out.write(
            f"{row['submit_s']},{row['gpus']},{row['duration_s']},{row['time_limit_s']},{row['priority']},{row['user']}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
