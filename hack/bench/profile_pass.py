#!/usr/bin/env python3
"""Profile one incremental reconcile pass in-process on an existing home (no gflowd running).

    .venv/bin/python hack/bench/profile_pass.py HOME [--fake-gpus F] [--edits 5] [--cprofile]

Loads the home the way gflowd does (status files, adoption, a first full pass), then rewrites one
manifest at a time with a new priority and times ``reconcile_once`` for that change alone. Prints
``incremental_pass_inproc_ms: p50`` and, with --cprofile, the top functions of the last pass; on
stderr, the start-up's time and how many pydantic Job models it built (settled jobs need none).
The end-to-end figure (file rename → status written, through inotify) is hack/bench.py's
``incremental_pass_ms``; this one isolates the pass itself.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from controller.api.config import ControllerConfig
from controller.daemon.loop import Controller
from controller.model.documents import AdmittedJob, model_built
from controller.model.plan import Memory
from controller.observe.gpus.inventory import FakeInventory
from controller.paths import Home


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("home")
    parser.add_argument("--fake-gpus")
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    home = Home.resolve(args.home, None)
    config = ControllerConfig.model_validate({"fake_gpus": args.fake_gpus} if args.fake_gpus else {})
    inventory = (
        FakeInventory(Path(args.fake_gpus).absolute()) if args.fake_gpus else FakeInventory(Path("/nonexistent"))
    )
    ctl = Controller(home, config, inventory)
    t = time.perf_counter()
    ctl.memory = Memory.loaded(*ctl.recorder.load())
    ctl.runtime.adopt()
    ctl.reconcile_once(full=True)
    print(
        f"# start-up (load + first full pass): {(time.perf_counter() - t) * 1000:.0f} ms, {len(ctl.states)} jobs",
        file=sys.stderr,
    )
    admitted = [d for d in ctl.store.documents() if isinstance(d, AdmittedJob)]
    print(f"# pydantic Job models built by then: {sum(map(model_built, admitted))} of {len(admitted)}", file=sys.stderr)
    manifests = sorted(p for p in home.spec_dir.rglob("*.yaml"))[: args.edits]
    times = []
    profiler = cProfile.Profile() if args.cprofile else None
    for i, path in enumerate(manifests):
        text = path.read_text()
        if re.search(r"^  priority: -?\d+$", text, re.M):
            text = re.sub(r"^  priority: -?\d+$", f"  priority: {100 + i}", text, flags=re.M)
        else:
            text = text.replace("spec:\n", f"spec:\n  priority: {100 + i}\n", 1)
        tmp = path.with_name("." + path.name + ".tmp")
        tmp.write_text(text)
        os.rename(tmp, path)
        ctl.mark_dirty(str(path))
        if profiler is not None and i == len(manifests) - 1:
            profiler.enable()
        t = time.perf_counter()
        ctl.reconcile_once()
        times.append((time.perf_counter() - t) * 1000)
        if profiler is not None and i == len(manifests) - 1:
            profiler.disable()
    print(f"incremental_pass_inproc_ms: {statistics.median(times):.1f} (all: {', '.join(f'{x:.1f}' for x in times)})")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
