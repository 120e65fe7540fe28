#!/usr/bin/env python3
"""One user's backlog and file churn against another user's latency (issue 32, holes 6 and 7).

    python hack/bench/fairness.py [--jobs 20000] [--samples 10] [--mode backlog,churn] [--max-pending 0] [--keep]

A real root gflowd (8 fake GPUs, default settings, ``--log-level info``) on a temp home whose spec
dir is shared (1777, sticky). mallory (uid 65534) writes ``--jobs`` one-GPU manifests (``sleep
2``) into her sub-folder, so the GPUs turn over about four times a second while the rest wait.
Then alice (a system user made for the run) submits ``--samples`` CPU-only jobs one after another, each written into
her sub-folder as herself; submit->Running is the time from the manifest's rename into place to
its status file saying Running (polled every 5 ms). CPU-only, so the figure is the controller's
own latency, not a wait for a GPU to turn over.

``backlog``: alice's samples with mallory's backlog waiting. ``churn``: the same while mallory
also creates and deletes ``.txt`` files in a folder of her own as fast as one process can, and
flips one of her manifests between a file and a symlink to it. Printed per mode: alice's median,
p90 (nearest rank) and max, gflowd's CPU (% of one core) and the bytes its log grew during the samples.

Needs root (two other users). Every process it started is stopped, and the temp home removed
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import math
import os
import pwd
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from helpers import kill_jobs_of_home  # noqa: E402  (the test suite's cleanup: jobs, supervisors, cgroups)

MALLORY = 65534  # nobody
ALICE = -1  # set in main()
ALICE_NAME = "gflowbench-alice"  # made for the run (useradd --system), removed after: her jobs need an account
GPUS = "gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 8
HZ = os.sysconf("SC_CLK_TCK")
PHASE_RE = re.compile(rb"^  phase: \"?(\w+)", re.M)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="mallory's waiting one-GPU jobs (default 20000)")
    parser.add_argument("--samples", type=int, default=10, help="alice's jobs per mode (default 10)")
    parser.add_argument("--mode", default="backlog,churn", help="backlog, churn or both (default)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one sample may take (default 120)")
    parser.add_argument("--keep", action="store_true", help="keep the temp home (its path is printed)")
    parser.add_argument(
        "--max-pending",
        type=int,
        default=0,
        help="gflowd's --max-pending-jobs-per-user (default 0: no limit, so all of mallory's "
        "jobs wait, the worst case; gflowd's own default, 1000, rejects the rest)",
    )
    args = parser.parse_args()
    modes = [m for m in args.mode.split(",") if m]
    if os.geteuid() != 0:
        parser.error("needs root: mallory and alice are other users")
    if not set(modes) <= {"backlog", "churn"}:
        parser.error("--mode takes backlog, churn or both")
    root = Path(tempfile.mkdtemp(prefix="gflow-fairness-"))
    os.chmod(root, 0o755)
    children: list[int] = []
    daemon = None
    global ALICE
    try:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ALICE_NAME],
            check=False,
            stderr=subprocess.DEVNULL,
        )  # left by a killed run: used again
        ALICE = pwd.getpwnam(ALICE_NAME).pw_uid
        daemon, home = _start(root, args.max_pending)
        print(f"# gflowd pid {daemon.pid}, home {home}; load {os.getloadavg()[0]:.2f}", flush=True)
        began = time.monotonic()
        _as_user(MALLORY, lambda: _write_backlog(home / "jobs" / "mallory", args.jobs))
        last = home / "status" / f"m-{args.jobs - 1:05d}.yaml"
        _wait(lambda: last.exists() or daemon.poll() is not None, 3600, "gflowd to see mallory's backlog")
        print(f"backlog_seen_s: {time.monotonic() - began:.1f} ({args.jobs} jobs)", flush=True)
        for mode in modes:
            if mode == "churn":
                children.append(_fork_as(MALLORY, lambda: _churn(home / "jobs" / "mallory")))
            _measure(mode, home, daemon.pid, args.samples, args.timeout, root)
        return 0
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
            kill_jobs_of_home(root / "home")  # and scrubs the home's cgroups
        subprocess.run(["userdel", ALICE_NAME], check=False)
        if args.keep:
            print(f"# kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _start(root: Path, max_pending: int) -> tuple[subprocess.Popen, Path]:
    home = root / "home"
    jobs = home / "jobs"
    jobs.mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(jobs, 0o1777)
    for name, uid in (("alice", ALICE), ("mallory", MALLORY)):
        (jobs / name).mkdir()
        os.chown(jobs / name, uid, uid)
    (root / "gpus.yaml").write_text(GPUS)
    argv = [
        sys.executable,
        "-m",
        "controller.daemon",
        "--home",
        str(home),
        "--fake-gpus",
        str(root / "gpus.yaml"),
        "--log-level",
        "info",
        "--max-pending-jobs-per-user",
        str(max_pending),
    ]
    env = dict(os.environ, GFLOW_HOME=str(home), PYTHONPATH=str(ROOT))
    with open(root / "gflowd.log", "wb") as log:
        daemon = subprocess.Popen(argv, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    _wait(lambda: (home / "run" / "index.json").exists() or daemon.poll() is not None, 60, "gflowd to start")
    if daemon.poll() is not None:
        raise SystemExit((root / "gflowd.log").read_text())
    return daemon, home


def _measure(mode: str, home: Path, pid: int, samples: int, timeout: float, root: Path) -> None:
    log = root / "gflowd.log"
    cpu0, log0, wall0 = _cpu(pid), log.stat().st_size, time.monotonic()
    took = []
    for k in range(samples):
        name = f"a-{mode}-{k:02d}"
        start = _as_user(ALICE, lambda: _submit(home / "jobs" / "alice", name))
        status = home / "status" / f"{name}.yaml"
        deadline = time.monotonic() + timeout
        while _phase(status) != b"Running":
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} not Running after {timeout:.0f} s")
            time.sleep(0.005)
        took.append(time.monotonic() - start)
        _as_user(ALICE, lambda: os.unlink(home / "jobs" / "alice" / f"{name}.yaml"))
    wall = time.monotonic() - wall0
    cpu = (_cpu(pid) - cpu0) / wall * 100
    grew = log.stat().st_size - log0
    p90 = sorted(took)[max(0, math.ceil(0.9 * len(took)) - 1)]  # nearest rank
    print(
        f"{mode}: alice submit->Running median {statistics.median(took):.3f} s, p90 {p90:.3f} s, max {max(took):.3f} s "
        f"(n={samples}); gflowd CPU {cpu:.0f} % of a core, log +{grew} bytes in {wall:.1f} s; "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )


def _submit(folder: Path, name: str) -> float:
    """Write alice's manifest the way an editor saves: a temp file renamed into place."""
    text = f"metadata: {{name: {name}}}\nspec:\n  command: [sleep, '600']\n"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(text)
    os.rename(tmp, folder / f"{name}.yaml")
    return time.monotonic()


def _write_backlog(folder: Path, jobs: int) -> None:
    for k in range(jobs):
        (folder / f"m-{k:05d}.yaml").write_text(
            f"metadata: {{name: m-{k:05d}}}\nspec:\n  command: [sleep, '2']\n  resources: {{gpus: 1}}\n"
        )


def _churn(folder: Path) -> None:
    """mallory's churn, until killed: .txt files created and deleted, one manifest flipped
    between a regular file and a symlink to a copy of it."""
    junk = folder / "churn"
    junk.mkdir(exist_ok=True)
    flip, target = folder / "flip.yaml", folder / "flip-target.yml.txt"
    text = "metadata: {name: m-flip}\nspec:\n  command: [sleep, '2']\n  resources: {gpus: 1}\n"
    target.write_text(text)
    k = 0
    while True:
        path = junk / f"f-{k % 64}.txt"
        path.write_text("x")
        path.unlink()
        if k % 16 == 0:
            tmp = folder / ".flip.tmp"
            if k % 32 == 0:
                tmp.symlink_to(target.name)
            else:
                tmp.write_text(text)
            os.rename(tmp, flip)
        k += 1


def _as_user(uid: int, work) -> float:
    """Run ``work()`` in a child that dropped to ``uid``; its float result (e.g. a monotonic time)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(write_fd, repr(work() or 0.0).encode())
            os._exit(0)
        except BaseException as exc:
            os.write(2, f"as uid {uid}: {exc}\n".encode())
            os._exit(1)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        out = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"a child as uid {uid} failed")
    return float(out)


def _fork_as(uid: int, work) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            work()
        finally:
            os._exit(0)
    return pid


def _phase(status: Path) -> bytes | None:
    try:
        found = PHASE_RE.search(status.read_bytes())
    except OSError:
        return None
    return found.group(1) if found else None


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def _wait(test, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
