#!/usr/bin/env python3
"""Leave a filesystem the way a user's disk is after a busy minute: create and delete many empty
files next to a folder, so the inodes they held count as recently deleted (stdlib only).

    python3 hack/bench/churn_disk.py DIR [--files 30000]

On ext4 without a journal the inode allocator skips inodes freed in the last seconds (longer while
their inode table block is dirty), so every file created there afterwards costs more CPU
(docs/performance.md, "The filesystem"). ``hack/bench.py`` calls ``churn`` before its churned
drain; run alone, this prints how long the churn took and what creating a file costs before and
after it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def churn(folder: Path, files: int = 30_000) -> float:
    """Create ``files`` empty files in a fresh folder under ``folder``, then delete them all (and
    the folder); returns the wall seconds that took."""
    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix=".churn-", dir=folder))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        for i in range(files):
            os.close(os.open(scratch / str(i), flags, 0o600))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return time.perf_counter() - t0


def create_us(folder: Path, n: int = 300) -> float:
    """CPU (user + kernel) to create one empty file in a fresh folder under ``folder``: the median
    of 3 batches, in us. The probe folder is deleted afterwards."""
    probe = Path(tempfile.mkdtemp(prefix=".create-probe-", dir=folder))
    costs = []
    try:
        for batch in range(3):
            t0 = time.process_time()
            for i in range(n // 3):
                os.close(os.open(probe / f"{batch}-{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            costs.append((time.process_time() - t0) / (n // 3) * 1e6)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return statistics.median(costs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="a folder on the filesystem to churn")
    parser.add_argument("--files", type=int, default=30_000, help="files created then deleted (default 30000)")
    args = parser.parse_args()
    if not args.dir.is_dir():
        parser.error(f"{args.dir}: no such folder")
    if args.files < 1:
        parser.error(f"--files {args.files}: give at least 1")
    before = create_us(args.dir)
    took = churn(args.dir, args.files)
    after = create_us(args.dir)
    print(f"churned {args.files} files in {took:.2f} s; creating a file: {before:.0f} us before, {after:.0f} us after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
