"""gflowd's start on an existing home: wall time and gflowd's CPU (utime+stime, every thread) at the
moment ``run/index.json`` names the new pid; optionally what it imported until then.

    python hack/bench/start_cpu.py HOME [--importtime FILE]

Runs the ``gflowd`` beside the interpreter running it (a regular install's, to measure what users
get; ``python -m controller.daemon`` without one), with ``--fake-gpus`` of 8 H100s, stops it after.
Prints ``WALL_S CPU_S``. For old/new pairs, run it with each install's python on each one's own
copy of a home (after one start on the copy: ``cp -a`` changes every inode, so that first start
re-parses every manifest).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from make_home import GPUS  # hack/bench/, the script's own folder: first on sys.path

PID = re.compile(rb'"controller":\{"pid":(\d+)')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("home", type=Path)
    parser.add_argument("--importtime", type=Path, help="write gflowd's -X importtime lines up to ready here")
    args = parser.parse_args()
    script = Path(sys.executable).with_name("gflowd")
    gflowd = [str(script)] if script.exists() else [sys.executable, "-m", "controller.daemon"]
    env = dict(os.environ, GFLOW_HOME=str(args.home))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if args.importtime:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    with tempfile.TemporaryDirectory(prefix="start-cpu-") as scratch:
        gpus = Path(scratch) / "gpus.yaml"
        gpus.write_text(GPUS)
        err_path = Path(scratch) / "stderr"
        t0 = time.perf_counter()
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [*gflowd, "--home", str(args.home), "--fake-gpus", str(gpus), "--log-level", "warning"],
                env=env,
                stdin=subprocess.DEVNULL,
                stderr=err,
                cwd=scratch,
            )
        try:
            while not _names(args.home, proc.pid):
                if proc.poll() is not None:
                    sys.stderr.write(err_path.read_text(errors="replace"))
                    return 1
                time.sleep(0.002)
            wall = time.perf_counter() - t0
            with open(f"/proc/{proc.pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            if args.importtime:
                lines = err_path.read_text(errors="replace").splitlines()
                args.importtime.write_text("".join(f"{line}\n" for line in lines if line.startswith("import time:")))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    print(f"{wall:.3f} {cpu:.2f}")
    return 0


def _names(home: Path, pid: int) -> bool:
    try:
        with open(home / "run" / "index.json", "rb") as handle:
            found = PID.search(handle.read(512))
    except OSError:
        return False
    return found is not None and int(found.group(1)) == pid


if __name__ == "__main__":
    sys.exit(main())
