"""One user's backlog and file churn must not hold another user back (issue 32, holes 6 and 7).

A root gflowd on a shared spec dir (1777) with 8 fake GPUs. mallory (uid 65534) fills her folder
with one-GPU jobs that turn the GPUs over every second, and churns: creates and deletes .txt files
as fast as one process can and flips one of her manifests between a file and a symlink. alice
(uid 65533) submits jobs meanwhile, as herself; each must run within a generous timeout, and
gflowd's counters (run/index.json) must show that mallory's waiting jobs were not rewritten at each
turnover. The old code rewrote each waiting job's status at every turnover and passed once per
.txt file: alice waited 6-25 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
from helpers import read_index, run_as, wait_for, wait_phase

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two other users")

ALICE, MALLORY = 65533, 65534
BACKLOG = 2000
GPUS = "gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 8


@pytest.fixture
def shared():
    root = Path(tempfile.mkdtemp(prefix="gflow-fairness-"))
    os.chmod(root, 0o755)  # the users' jobs must reach their folders
    home = root / "home"
    spec = home / "jobs"
    spec.mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(spec, 0o1777)
    for name, uid in (("alice", ALICE), ("mallory", MALLORY)):
        (spec / name).mkdir()
        os.chown(spec / name, uid, uid)
    (root / "gpus.yaml").write_text(GPUS)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _backlog(folder: Path) -> int:
    for k in range(BACKLOG):
        (folder / f"m-{k:05d}.yaml").write_text(
            f"metadata: {{name: m-{k:05d}}}\nspec:\n  command: [sleep, '1']\n  resources: {{gpus: 1}}\n"
        )
    return 0


def _churn(folder: Path) -> None:
    """Until killed: .txt files created and deleted; flip.yaml a file, then a symlink, and so on."""
    junk = folder / "churn"
    junk.mkdir()
    text = "metadata: {name: m-flip}\nspec:\n  command: [sleep, '1']\n  resources: {gpus: 1}\n"
    (folder / "flip-target.txt").write_text(text)
    k = 0
    while True:
        path = junk / f"f-{k % 64}.txt"
        path.write_text("x")
        path.unlink()
        if k % 16 == 0:
            tmp = folder / ".flip.tmp"
            if k % 32 == 0:
                tmp.symlink_to("flip-target.txt")
            else:
                tmp.write_text(text)
            os.rename(tmp, folder / "flip.yaml")
        k += 1


def _fork_as(uid: int, work) -> int:
    pid = os.fork()
    if pid == 0:  # never returns into pytest
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            work()
        finally:
            os._exit(0)
    return pid


def _counters(home: Path) -> tuple[int, int, int]:
    """(passes, status writes, mallory's jobs that left Pending) as gflowd's index says."""
    index = read_index(home) or {}
    info = index.get("controller", {})
    jobs = index.get("jobs", {})
    moved = sum(1 for name, row in jobs.items() if name.startswith("m-") and row.get("phase") != "Pending")
    return info.get("passes", 0), info.get("statusWrites", 0), moved


def _stamp(path: Path) -> tuple[int, int, bytes]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def _waiting_events(home: Path) -> list[str]:
    lines = (home / "events.jsonl").read_text().splitlines()
    return [
        line
        for line in lines
        if '"object":"job/m-' in line.replace(" ", "")
        and any(f'"reason":"{r}"' in line.replace(" ", "") for r in ("Resources", "Priority", "Queued"))
    ]


def test_alice_runs_promptly_while_mallory_floods_and_churns(shared, gflowd):
    home = shared / "home"
    daemon = gflowd("--fake-gpus", shared / "gpus.yaml", home=home)
    assert run_as(MALLORY, lambda: _backlog(home / "jobs" / "mallory")) == (0, "")
    wait_for(
        lambda: len((read_index(home) or {}).get("jobs", {})) >= BACKLOG,
        timeout=120,
        message="gflowd to see mallory's backlog",
    )
    churner = _fork_as(MALLORY, lambda: _churn(home / "jobs" / "mallory"))
    try:
        last = home / "status" / f"m-{BACKLOG - 1:05d}.yaml"  # deep in her backlog: waits all along
        wait_for(last.exists, timeout=60, message=f"{last} to be written")
        stamp = _stamp(last)
        events0 = len(_waiting_events(home))
        passes0, writes0, moved0 = _counters(home)
        began = time.monotonic()
        for k in range(5):
            name = f"alice-{k}"
            text = f"metadata: {{name: {name}}}\nspec:\n  command: [sleep, '600']\n"
            assert run_as(
                ALICE, lambda name=name, text=text: (home / "jobs" / "alice" / f"{name}.yaml").write_text(text) and 0
            ) == (0, "")
            wait_phase(home, name, "Running", timeout=30)
        # mallory's jobs did turn over meanwhile: her backlog waited as it was, not rewritten each time
        wait_for(lambda: _counters(home)[2] >= moved0 + 8, timeout=60, message="mallory's GPUs to turn over")
        passes1, writes1, moved1 = _counters(home)
        took = time.monotonic() - began
        assert _stamp(last) == stamp, "a waiting job's status file was rewritten at a GPU turnover"
        # events about her waiting jobs: folded, at most BUDGET (20) a 10 s window, plus summaries
        assert len(_waiting_events(home)) - events0 <= 25 * (took / 10 + 2)
        resyncs = took / 1.0 + 2  # the fixture's gflowd resyncs every second
        assert passes1 > passes0
        # each start and end of hers is a write or two; a resync refreshes at most 64 lagging files
        assert writes1 - writes0 <= 4 * (moved1 - moved0 + 8) + 64 * resyncs, (writes1 - writes0, moved1 - moved0)
    finally:
        os.kill(churner, signal.SIGKILL)
        os.waitpid(churner, 0)
    assert daemon.proc.poll() is None
