"""A small home that fills up recovers as soon as space is freed (issue 32, hole 8;
docs/reliability.md, "A full disk").

A real root gflowd on a 6 MiB tmpfs home (the spec dir lives elsewhere, as an admin's would), a
burst of short jobs, then the disk filled to the last block: new jobs are held Pending/DiskFull.
Once the filler is deleted they must all run within a generous timeout, and at no time may spare
status files (``.spare.*``, util/spares.py) hold space the disk needs: the old code kept up to
4,096 of them, which took back every block an admin freed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from helpers import fill_filesystem, job_status, wait_for, wait_phase, write_manifest

from controller.util.spares import FREE_FLOOR, FREE_SHARE, PREFIX

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs home")

SIZE = "6m"


@pytest.fixture
def small():
    """(home on a 6 MiB tmpfs, spec dir beside it); unmounted and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="gflow-small-"))
    home, spec = root / "home", root / "jobs"
    home.mkdir()
    spec.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "tmpfs", str(home)], check=True)
    try:
        yield home, spec
    finally:
        for _attempt in range(50):  # the daemon fixture stops gflowd and its jobs first
            if subprocess.run(["umount", str(home)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(home)], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def spare_bytes(home: Path) -> tuple[int, int]:
    """(how many spares, the bytes they hold) in the status and attempts folders."""
    count = size = 0
    for folder in (home / "status", home / "run" / "attempts"):
        for entry in os.scandir(folder) if folder.is_dir() else ():
            if entry.name.startswith(PREFIX):
                try:
                    size += entry.stat(follow_symlinks=False).st_blocks * 512
                    count += 1
                except FileNotFoundError:
                    pass
    return count, size


def within_bound(home: Path) -> bool:
    st = os.statvfs(home)
    free = st.f_bavail * st.f_frsize
    _count, size = spare_bytes(home)
    allowed = 0 if free + size < FREE_FLOOR else (free + size) // FREE_SHARE
    return size <= allowed


def submit(spec: Path, names: list[str]) -> None:
    for name in names:
        write_manifest(spec, f"{name}.yaml", f"metadata: {{name: {name}}}\nspec:\n  command: [true]\n")


def test_a_full_small_home_recovers_once_space_is_freed_and_spares_never_hold_it(small, gflowd):
    home, spec = small
    daemon = gflowd("--spec-dir", spec, "--resync", "600s", home=home)  # no resync pass to retry for us
    burst = [f"burst-{k}" for k in range(60)]
    submit(spec, burst)

    def burst_done():
        assert within_bound(home), f"spares beyond their bound: {spare_bytes(home)}"
        return all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in burst)

    wait_for(burst_done, timeout=120, interval=0.1, message=lambda: f"the burst to finish\n{daemon.stderr()[-2000:]}")
    for name in burst[:30]:  # removed jobs' status files become spares too (when there is room)
        (spec / f"{name}.yaml").unlink()
    wait_for(lambda: job_status(home, burst[0]) is None, timeout=30, message="deleted jobs to go")
    assert within_bound(home), spare_bytes(home)

    fill_filesystem(home)
    late = [f"late-{k}" for k in range(5)]
    submit(spec, late)
    # until gflowd's backoff says its next try is 30 s away (a disk full for ~30 s): the old code
    # then waited that long after the free; now the loop sees the space come back within a pass
    wait_for(
        lambda: "retrying in 30.0s" in daemon.stderr(),
        timeout=120,
        interval=0.2,
        message=lambda: f"gflowd's backoff to reach its cap on the full disk\n{daemon.stderr()[-2000:]}",
    )
    assert within_bound(home), spare_bytes(home)
    (home / "filler").unlink()
    (home / "filler2").unlink()
    for name in late:  # generous (a pass takes milliseconds), yet shorter than the old code's 30 s
        wait_phase(home, name, "Succeeded", timeout=20, daemon=daemon)
    assert within_bound(home), spare_bytes(home)
    assert (home / "status" / "burst-59.yaml").exists()


def _replace_all(spares, folder: Path, files: list[Path], text: bytes) -> None:
    with spares.batch() as batch:
        for path in files:
            batch.add(path, text, durable=False)
    spares.synced()


def test_spares_take_at_most_a_share_of_the_free_space_and_none_when_little_is_free(tmp_path):
    from controller.util.spares import Spares

    free = [FREE_FLOOR * 2]
    spares = Spares(tmp_path, clock=lambda: 0.0, free=lambda: free[0])
    files = [tmp_path / f"job-{k}.yaml" for k in range(40)]
    _replace_all(spares, tmp_path, files, b"x" * 3000)
    _replace_all(spares, tmp_path, files, b"y" * 3000)  # each first version kept: room for all
    assert len(spares) == 40 and spares.bytes <= (free[0] + spares.bytes) // FREE_SHARE
    free[0] = FREE_FLOOR - 1  # a small disk, or a nearly full one: nothing more is kept
    fresh = Spares(tmp_path, clock=lambda: 0.0, free=lambda: free[0])
    _replace_all(fresh, tmp_path, files, b"z" * 3000)
    assert len(fresh) == 0
    fresh.adopt(n for n in os.listdir(tmp_path) if n.startswith(PREFIX))  # a restart adopts within the bound
    assert len(fresh) == 0 and not [n for n in os.listdir(tmp_path) if n.startswith(PREFIX)]


@pytest.mark.e2e
def test_a_full_disk_gets_the_spares_blocks_back_before_the_write_is_retried(small):
    from controller.util.spares import Spares

    home, _ = small
    folder = home / "status"
    folder.mkdir()
    spares = Spares(folder, clock=lambda: 0.0, free=lambda: 1 << 40)  # as on a big disk: spares are kept
    files = [folder / f"job-{k}.yaml" for k in range(20)]
    _replace_all(spares, folder, files, b"a" * 4096)
    _replace_all(spares, folder, files, b"b" * 4096)
    assert len(spares) == 20
    fill_filesystem(home)
    with pytest.raises(OSError) as refused:
        _replace_all(spares, folder, [folder / "new.yaml"], b"c" * 8192)
    assert refused.value.errno == errno.ENOSPC
    assert len(spares) == 0 and not [n for n in os.listdir(folder) if n.startswith(PREFIX)]
    _replace_all(spares, folder, [folder / "new.yaml"], b"c" * 8192)  # the retry finds the room they held
    assert (folder / "new.yaml").read_bytes() == b"c" * 8192
