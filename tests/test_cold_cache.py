"""What gflowd keeps between starts (the parse cache, the records journal) never outlives the file
it stands for: a manifest or a status file changed while gflowd was down is read again, even when
its size and its mtime are what they were (``cp -p``, ``touch -r``, ``tar x``, coarse timestamps)."""

from __future__ import annotations

import os
from pathlib import Path

from controller.observe.manifests import ManifestStore
from tests.helpers import job_status, wait_for, write_manifest


def _rewrite_keeping_size_and_mtime(path: Path, text: str) -> None:
    """Rewrite ``path`` in place (same inode) with ``text`` of the same length, then put its old
    mtime back: only the ctime, which the kernel sets, says the file changed."""
    before = os.stat(path)
    assert len(text.encode()) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(text.encode())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def _manifest(priority: int) -> str:
    return f"metadata: {{name: held}}\nspec:\n  command: [sleep, '30']\n  suspend: true\n  priority: {priority}\n"


def test_a_restart_reads_again_a_manifest_changed_with_its_old_size_and_mtime(tmp_path):
    spec = tmp_path / "jobs"
    spec.mkdir()
    path = spec / "held.yaml"
    path.write_text(_manifest(1))
    cache = tmp_path / "cache.json"
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    store.scan()
    store.save_cache(force=True)
    assert [d.priority for d in store.documents()] == [1]

    _rewrite_keeping_size_and_mtime(path, _manifest(2))

    restarted = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}", cache)
    restarted.scan()
    assert (restarted.parses, restarted.cache_hits) == (1, 0)
    assert [d.priority for d in restarted.documents()] == [2]
    # and a running store's resync sees such an edit too
    _rewrite_keeping_size_and_mtime(path, _manifest(3))
    assert restarted.scan() == {str(path)}
    assert [d.priority for d in restarted.documents()] == [3]


def test_gflowd_restarted_runs_the_spec_written_while_it_was_down(home, gflowd):
    daemon = gflowd()
    path = write_manifest(home / "jobs", "held.yaml", _manifest(1))
    wait_for(lambda: (job_status(home, "held") or {}).get("priority") == 1, message="held admitted with priority 1")
    assert daemon.terminate() == 0

    _rewrite_keeping_size_and_mtime(path, _manifest(2))

    again = gflowd()
    wait_for(
        lambda: (job_status(home, "held") or {}).get("priority") == 2,
        message=lambda: f"the new spec's priority in the status: {job_status(home, 'held')}\n{again.stderr()}",
    )
