#!/usr/bin/env python3
"""One user's flood through a real root gflowd (issue 32 hole 6): a fresh user (useradd) writes N
one-GPU jobs (files of 1000: a manifest is at most 1 MiB) into a 1777 spec dir on 2 fake GPUs, with
the default config (maxPendingJobsPerUser 1000). Prints how long until the last is Rejected/QueueLimit,
then another user's CPU job's submit->Running five times, gflowd's CPU, log and event bytes. Root only;
removes its user, home and processes.

    .venv/bin/python hack/bench/user_flood.py [N]      # default 20000
"""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "tests"))
sys.path.insert(0, str(TOP))
from helpers import Daemon, job_status, kill_jobs_of_home, read_index, run_as, wait_for  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
name = "gflow-flood-m"
subprocess.run(["userdel", name], capture_output=True)
subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name], check=True)
uid = pwd.getpwnam(name).pw_uid
root = Path(tempfile.mkdtemp(prefix="h3flood-"))
os.chmod(root, 0o755)
home = root / "home"
(home / "jobs").mkdir(parents=True)
os.chmod(home, 0o755)
os.chmod(home / "jobs", 0o1777)
fake = root / "gpus.yaml"
fake.write_text("gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 2)
d = Daemon(home, ["--fake-gpus", str(fake)], root, 1)
try:
    d.wait_ready(60)

    def write():
        for f in range(0, N, 1000):
            text = "".join(
                f"---\nmetadata: {{name: m-{i}}}\nspec:\n  command: [sleep, '600']\n  resources: {{gpus: 1}}\n"
                for i in range(f, min(N, f + 1000))
            )
            p = home / "jobs" / f".flood{f}.tmp"
            p.write_text(text)
            os.rename(p, home / "jobs" / f"flood{f}.yaml")
        return 0

    t0 = time.time()
    assert run_as(uid, write)[0] == 0
    wait_for(
        lambda: (job_status(home, f"m-{N - 1}") or {}).get("phase") == "Rejected",
        timeout=420,
        interval=0.5,
        message=lambda: str((read_index(home) or {}).get("counts")) + d.stderr()[-1500:],
    )
    print(f"flood of {N}: last job Rejected/QueueLimit after {time.time() - t0:.1f}s", flush=True)
    d.wait_pass(60)
    time.sleep(2)
    lat = []
    for k in range(5):
        (home / "jobs" / f".a{k}.tmp").write_text(f"metadata: {{name: alice-{k}}}\nspec:\n  command: ['true']\n")
        t1 = time.time()
        os.rename(home / "jobs" / f".a{k}.tmp", home / "jobs" / f"alice-{k}.yaml")
        wait_for(
            lambda: (job_status(home, f"alice-{k}") or {}).get("phase") in ("Running", "Succeeded"),
            timeout=120,
            interval=0.01,
        )
        lat.append(time.time() - t1)
    print("alice submit->Running (s):", [round(x, 2) for x in lat], flush=True)
    idx = read_index(home) or {}
    print("counts:", idx.get("counts"))
    with open(f"/proc/{d.pid}/stat") as f:
        fields = f.read().split(")")[1].split()
    print(
        f"gflowd CPU: {(int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'):.1f}s; stderr bytes: {len(d.stderr())}; events bytes: {(home / 'events.jsonl').stat().st_size if (home / 'events.jsonl').exists() else 0}"
    )
finally:
    d.terminate()
    kill_jobs_of_home(home)
    subprocess.run(["userdel", name], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)
