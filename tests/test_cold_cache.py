"""What gflowd keeps between starts (the parse cache, the records journal) never outlives the file
it stands for: a manifest or a status file changed while gflowd was down is read again, even when
its size and its mtime are what they were (``cp -p``, ``touch -r``, ``tar x``, coarse timestamps)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

from controller.model.records import JOB_FIELDS, JobState
from controller.observe.inotify import SpecWatch
from controller.observe.manifests import ManifestStore
from controller.observe.snapshot import DEEP_EVERY, SnapshotBuilder
from controller.observe.watch import Watches
from controller.paths import Home
from controller.record.recorder import Recorder
from controller.util import records_journal as journal
from tests.helpers import job_status, read_status, wait_for, write_manifest

T0 = 1_800_000_000.0


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


def _waiting(name: str, message: str) -> JobState:
    return JobState(name=name, phase="Pending", reason="Unschedulable", message=message, created=T0)


def test_a_restart_reads_waiting_jobs_from_the_journal_and_a_changed_status_file_from_its_yaml(tmp_path):
    """The first start after status files were written reads their YAML and leaves every record in
    the journal; the next start reads the journal, except for a file changed since (the file wins)."""
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    Recorder(home, clock=lambda: T0).write_states({n: _waiting(n, "needs 9 GPUs") for n in ("a", "b")}, [])
    home.records_journal.unlink(missing_ok=True)
    first = Recorder(home).load()[0]
    assert {n: s.message for n, s in first.items()} == {"a": "needs 9 GPUs", "b": "needs 9 GPUs"}
    entries = journal.read(str(home.records_journal), JOB_FIELDS).last
    assert set(entries) == {"a", "b"} and JobState.from_row(entries["a"][4]) == first["a"]

    with patch("controller.record.recorder.load_own", side_effect=AssertionError("read from the YAML")):
        assert Recorder(home).load()[0] == first  # no status file read
    status = home.status_file("b")
    staged = status.with_name(".b.tmp")
    staged.write_text(status.read_text().replace("needs 9 GPUs", "needs 10 GPUs"))
    staged.replace(status)  # as gflowd's atomic write: a new inode, behind the journal's back
    again = Recorder(home).load()[0]
    assert (again["a"].message, again["b"].message) == ("needs 9 GPUs", "needs 10 GPUs")


# -- the resync tick: deep only when inotify may have missed something ------------------------------


def _ticks(builder, watches, n: int) -> list[bool]:
    return [SnapshotBuilder.resync_is_deep(builder, watches) for _ in range(n)]


def test_a_watched_spec_dir_has_one_deep_resync_in_deep_every_and_every_one_when_the_watch_misses(tmp_path):
    spec = tmp_path / "jobs"
    spec.mkdir()
    (spec / "a.yaml").write_text("spec:\n  command: [echo]\n")
    store = ManifestStore(spec, lambda p: f"jobs/{os.path.basename(p)}")
    store.scan()
    builder = SimpleNamespace(deep_next=True, _quiet_ticks=0, store=store)
    watch = SpecWatch(str(spec), lambda *paths: None, lambda path: True)
    watch.start()
    try:
        watches = Watches(watch)
        quiet = [False] * (DEEP_EVERY - 1)
        assert _ticks(builder, watches, 2 * DEEP_EVERY) == [True, *quiet, True, *quiet]
        builder.deep_next = True  # a pass failed
        assert _ticks(builder, watches, 2) == [True, False]
        assert _ticks(builder, Watches(), 3) == [True, True, True]  # no watch at all

        # a manifest read through a symlinked folder (to a hidden one, which no watch covers)
        (spec / ".hidden").mkdir()
        (spec / ".hidden" / "b.yaml").write_text("spec:\n  command: [echo]\n")
        (spec / "linked").symlink_to(spec / ".hidden")
        store.scan()
        assert store.through_symlinks() and len(store.documents()) == 2
        assert _ticks(builder, watches, 3) == [True, True, True]
        (spec / "linked").unlink()
        store.scan()
        assert _ticks(builder, watches, 2) == [False, False]  # quiet again

        # the spec dir deleted (and made again): its new files reach no watch
        shutil.rmtree(spec)
        spec.mkdir()
        wait_for(lambda: not watch.complete, message="the watch to notice its folder gone")
        assert _ticks(builder, watches, 3) == [True, True, True]
    finally:
        watch.stop()
        watch.join(5)
    assert _ticks(builder, watches, 2) == [True, True]  # a stopped watch


def test_a_clean_stop_journals_the_waiting_jobs_so_the_next_start_reads_no_yaml(home, gflowd, monkeypatch):
    """A pass journals finished records only; a waiting job's status file written during the run
    was read as YAML by the next start (7,000 of them: the first restart's extra second). A clean
    stop journals them: the restart reads no status file's YAML and gets the very record."""
    write_manifest(home / "jobs", "held.yaml", _manifest(1))
    daemon = gflowd()
    wait_for(lambda: (job_status(home, "held") or {}).get("priority") == 1, message="held admitted with priority 1")
    assert daemon.terminate() == 0

    import controller.record.recorder as recorder_module

    read_as_yaml: list[str] = []
    real_load_own = recorder_module.load_own
    monkeypatch.setattr(recorder_module, "load_own", lambda text: read_as_yaml.append(text) or real_load_own(text))
    states = Recorder(Home.resolve(home)).load()[0]
    assert read_as_yaml == []
    assert states["held"] == JobState.from_status(read_status(home, "held"))
