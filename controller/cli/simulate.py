"""``gflowctl simulate``: replay a job trace through the controller's scheduler on a virtual clock
and print the figures (docs/simulator.md)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from controller.cli.common import CliError
from controller.sim.simulator import (
    POLICIES,
    TraceError,
    named_policy,
    plot,
    read_reservations,
    read_trace,
)
from controller.sim.simulator import simulate as run_simulation


def simulate(args: argparse.Namespace) -> int:
    inventory = _machine(Path(args.fake_gpus)) if getattr(args, "fake_gpus", None) else None
    if inventory is None and args.gpus < 1:
        raise CliError(f"--gpus: must be >= 1, got {args.gpus}")
    cpus = getattr(args, "cpus", None)
    if cpus is not None and cpus < 1:
        raise CliError(f"--cpus: must be >= 1, got {cpus}")
    names = [n.strip() for n in args.policy.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise CliError(
            f"--policy: unknown policy {', '.join(unknown) or repr(args.policy)}; choose from {', '.join(POLICIES)}"
        )
    policies = {name: named_policy(name) for name in names}
    if args.config:
        policies = {"config": _config_policy(Path(args.config))}
    if args.plot:
        try:
            import matplotlib  # noqa: F401  # lazy: the plot extra, only for --plot
        except ImportError:
            raise CliError(
                "--plot needs matplotlib: pip install 'gflow-controller[plot]' (or pip install matplotlib)"
            ) from None
    try:
        trace = read_trace(Path(args.trace))
        reservations = read_reservations(Path(args.reservations)) if args.reservations else []
    except TraceError as exc:
        raise CliError(str(exc)) from None
    results = {}
    for name, policy in policies.items():
        jobs = [_fresh(j) for j in trace]
        try:
            results[name] = run_simulation(jobs, args.gpus or 0, policy, name, cpus, reservations, inventory)
        except TraceError as exc:
            raise CliError(str(exc)) from None
    if args.output == "json":
        figures = {name: r.metrics for name, r in results.items()}
        print(json.dumps(next(iter(figures.values())) if len(figures) == 1 else figures, indent=2))
    else:
        _print_table(results)
    if args.plot:
        for result in results.values():
            for path in plot(result, Path(args.plot)):
                print(f"wrote {path}")
    return 0


def _machine(path: Path) -> list:
    """The GPUs of a fake-GPU file (api/fake_gpus.py), as the simulator's units."""
    from controller.api.fake_gpus import parse_fake_gpus  # lazy: only with --fake-gpus (a YAML parser)

    try:
        gpus = parse_fake_gpus(path.read_text())
    except OSError as exc:
        raise CliError(f"--fake-gpus: {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"--fake-gpus: {path}: {exc}") from None
    if not gpus:
        raise CliError(f"--fake-gpus: {path} lists no GPUs")
    return gpus


def _fresh(job):
    return replace(job, start=None, end=None, devices=())


def _config_policy(path: Path):
    from controller.api.config import (  # lazy: the config model (pydantic) only with --config
        ConfigError,
        load_config,
    )
    from controller.decide.policy import policy_from_config  # lazy: as above

    if not path.is_file():
        raise CliError(f"--config: {path} is not a file")
    try:
        return policy_from_config(load_config(path, {}))
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}h"


def _print_table(results: dict) -> None:
    rows = [
        ["POLICY", "JOBS", "UTIL", "MEAN WAIT", "P95 WAIT", "MAX WAIT", "MAX WAIT (LARGEST)", "MAKESPAN/LB", "SLOWDOWN"]
    ]
    for name, result in results.items():
        m = result.metrics
        largest = m["by_gpus"][max(m["by_gpus"], key=int)] if m["by_gpus"] else {"max_wait_s": 0.0}
        ratio = m["makespan_s"] / m["lower_bound_s"] if m["lower_bound_s"] else 1.0
        rows.append(
            [
                name,
                str(m["jobs"]),
                f"{m['utilization']:.3f}",
                _hours(m["mean_wait_s"]),
                _hours(m["p95_wait_s"]),
                _hours(m["max_wait_s"]),
                _hours(largest["max_wait_s"]),
                f"{ratio:.3f}",
                f"{m['mean_slowdown']:.1f}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
