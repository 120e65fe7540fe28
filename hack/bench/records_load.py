"""``recorder.load`` on a big home (hack/bench/make_home.py), in-process: CPU seconds (best of 3)
and the bytes per record the loaded records hold (tracemalloc), then with the index rows the
recorder keeps per job.

    python hack/bench/records_load.py HOME

Read-only on a home whose records journal is current; the first run after make_home (or on a
home written by an older gflowd) reads the YAML and writes the journal, as a gflowd start does.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc

from controller.paths import Home
from controller.record.recorder import Recorder


def main(root: str) -> None:
    home = Home.resolve(root)
    Recorder(home).load()  # the journal, once, if it is missing or stale
    best = float("inf")
    for _ in range(3):
        recorder = Recorder(home)
        started = time.process_time()
        states = recorder.load()[0]
        best = min(best, time.process_time() - started)
        del recorder, states
        gc.collect()
    print(f"load: {best:.3f} s of CPU (best of 3)")
    tracemalloc.start()
    recorder = Recorder(home)
    states = recorder.load()[0]
    gc.collect()
    records, _ = tracemalloc.get_traced_memory()
    recorder.write_index({"pid": 0})
    gc.collect()
    with_rows, _ = tracemalloc.get_traced_memory()
    count = max(len(states), 1)
    print(
        f"{len(states)} records: {records / count:.0f} B/record; with the index rows {with_rows / count:.0f} B/record"
    )


if __name__ == "__main__":
    main(sys.argv[1])
