"""Status files replaced by rewriting hidden spare inodes (controller/util/spares.py): no inode
created once spares are ready, readers never see half a file, a spare is never visible under a
status name, and a writer killed at any instant leaves every status file whole. Real files, real
processes, a fake clock only for the spares' quiet time."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import wait_for

from controller.model.records import JobState
from controller.paths import Home
from controller.record.recorder import Recorder
from controller.util.fsutil import fsync_dir
from controller.util.spares import PREFIX, QUIET, Spares

T0 = 1_800_000_000.0


def _names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def _pass(spares: Spares, folder, writes: dict) -> None:
    for path, text in writes.items():
        spares.replace(path, text.encode(), durable=True)
    fsync_dir(folder)
    spares.synced()


def test_replaces_reuse_spares_once_they_were_out_of_sight_for_the_quiet_time(tmp_path):
    now = [0.0]
    spares = Spares(tmp_path, clock=lambda: now[0])
    files = [tmp_path / f"job-{k}.yaml" for k in range(5)]
    _pass(spares, tmp_path, {f: "first\n" for f in files})
    assert spares.created == 5 and len(spares) == 0  # new files: nothing replaced yet
    _pass(spares, tmp_path, {f: "second, longer\n" for f in files})
    assert spares.created == 10 and len(spares) == 5  # the first versions, hidden
    hidden = {os.stat(tmp_path / n).st_ino for n in _names(tmp_path) if n.startswith(PREFIX)}
    now[0] += QUIET - 0.1
    _pass(spares, tmp_path, {files[0]: "third\n"})
    assert spares.created == 11  # still too recent: a reader may be reading one of them
    now[0] += 0.2
    _pass(spares, tmp_path, {f: "fourth\n" for f in files})
    assert spares.created == 11 and spares.reused == 5
    assert sum(os.stat(f).st_ino in hidden for f in files) == 5  # each now holds a recycled inode
    for f in files:
        assert f.read_text() == "fourth\n"  # a longer text before: cut to the new length
        assert os.stat(f).st_nlink == 1 and oct(os.stat(f).st_mode & 0o777) == "0o644"
    assert not [n for n in _names(tmp_path) if n.startswith(PREFIX) and n.endswith(".yaml")]


def test_a_new_file_keeps_nothing_and_a_file_left_unknown_is_still_replaced(tmp_path):
    spares = Spares(tmp_path, clock=lambda: 0.0)
    spares.replace(tmp_path / "a.yaml", b"a\n", durable=True, new=True)
    (tmp_path / "b.yaml").write_text("left by someone\n")
    spares.replace(tmp_path / "b.yaml", b"b\n", durable=True, new=True)  # the caller did not know it
    assert _names(tmp_path) == ["a.yaml", "b.yaml"] and len(spares) == 0
    assert (tmp_path / "b.yaml").read_text() == "b\n"


def test_a_spare_counts_only_after_the_folder_fsync_that_hid_it(tmp_path):
    now = [0.0]
    spares = Spares(tmp_path, clock=lambda: now[0])
    path = tmp_path / "a.yaml"
    _pass(spares, tmp_path, {path: "one\n"})
    spares.replace(path, b"two\n", durable=True)  # no folder fsync yet: the rename may not be durable
    now[0] += 60
    spares.replace(tmp_path / "b.yaml", b"b\n", durable=True)
    assert spares.reused == 0  # so the hidden "one" was not rewritten
    spares.synced()
    now[0] += QUIET
    spares.replace(tmp_path / "c.yaml", b"c\n", durable=True)
    assert spares.reused == 1


def test_a_reader_holding_the_old_file_keeps_reading_it_whole(tmp_path):
    now = [0.0]
    spares = Spares(tmp_path, clock=lambda: now[0])
    path = tmp_path / "a.yaml"
    _pass(spares, tmp_path, {path: "old " * 1000})
    with open(path) as reader:
        head = reader.read(10)
        _pass(spares, tmp_path, {path: "new\n"})
        _pass(spares, tmp_path, {tmp_path / "b.yaml": "b\n"})  # within the quiet time: a new inode
        assert head + reader.read() == "old " * 1000
    assert path.read_text() == "new\n"


def test_a_spare_still_linked_to_a_status_name_is_never_written_through(tmp_path):
    """gflowd killed between linking the old file to its spare name and the rename: both names on
    one inode. The next start drops the spare name; the status file keeps its text."""
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home)
    recorder.load()
    done = JobState(name="a", phase="Succeeded", reason="Completed", created=T0, attempt=1, exit_code=0)
    recorder.write_states({"a": done}, [])
    status = home.status_file("a")
    text = status.read_text()
    os.link(status, home.status_dir / f"{PREFIX}dead.1")
    crashed_spare = home.status_dir / f"{PREFIX}dead.2"
    crashed_spare.write_text("half a stat")  # a spare being rewritten when gflowd was killed
    now = [0.0]
    restarted = Recorder(home)
    restarted.spares.clock = lambda: now[0]
    assert restarted.load()[0]["a"] == done
    assert os.stat(status).st_nlink == 1 and not (home.status_dir / f"{PREFIX}dead.1").exists()
    assert len(restarted.spares) == 1  # the unlinked one is adopted
    now[0] += QUIET
    other = JobState(name="b", phase="Pending", reason="Waiting", created=T0, attempt=1)
    restarted.write_states({"a": done, "b": other}, [])
    assert restarted.spares.reused == 1 and not crashed_spare.exists()
    assert status.read_text() == text and "name: b" in home.status_file("b").read_text()


def test_a_removed_status_file_becomes_a_spare(tmp_path):
    home = Home.resolve(tmp_path / "home")
    home.ensure()
    recorder = Recorder(home)
    recorder.load()
    state = JobState(name="a", phase="Pending", reason="Waiting", created=T0, attempt=1)
    recorder.write_states({"a": state}, [])
    inode = os.stat(home.status_file("a")).st_ino
    recorder.write_states({}, ["a"])
    assert not home.status_file("a").exists()
    assert [os.stat(home.status_dir / n).st_ino for n in _names(home.status_dir)] == [inode]
    assert Recorder(home).load()[0] == {}  # a spare is not a status


WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from controller.util.spares import PREFIX, Spares
    from controller.util.fsutil import fsync_dir
    folder = Path(sys.argv[1])
    clock = [0.0]
    spares = Spares(folder, clock=lambda: clock[0])
    spares.adopt(n for n in os.listdir(folder) if n.startswith(PREFIX))
    k = int(sys.argv[2])
    print("ready", flush=True)
    while True:
        k += 1
        for name in ("a", "b", "c"):
            body = f"{name} {k}\\n" + "x" * (k * 37 % 3000) + "\\nend\\n"
            spares.replace(folder / f"{name}.yaml", body.encode(), durable=False)
        fsync_dir(folder)
        spares.synced()
        clock[0] += 10.0  # every spare is ready again at once: reuse as often as possible
""")


def _whole(text: str, name: str) -> bool:
    lines = text.split("\n")
    return (
        len(lines) == 4
        and lines[0].startswith(f"{name} ")
        and lines[2] == "end"
        and lines[3] == ""
        and len(lines[1]) == int(lines[0].split()[1]) * 37 % 3000
    )


@pytest.mark.e2e
def test_a_writer_killed_at_any_instant_leaves_every_status_file_whole(tmp_path):
    rng = random.Random(7)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    folder = tmp_path / "status"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for round_ in range(12):
        writer = subprocess.Popen(
            [sys.executable, str(script), str(folder), str(round_ * 100_000)], stdout=subprocess.PIPE, env=env
        )
        assert writer.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.01, 0.15))  # a random instant: not a wait for a condition
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        writer.stdout.close()
        for name in ("a", "b", "c"):
            path = folder / f"{name}.yaml"
            if path.exists():
                assert _whole(path.read_text(), name), (round_, name)
                assert os.stat(path).st_nlink == 1 or any(
                    n.startswith(PREFIX) for n in os.listdir(folder)
                )  # killed between link and rename
    assert all(n.endswith(".yaml") or n.startswith(PREFIX) or n.endswith(".tmp") for n in os.listdir(folder))
    Spares(folder).adopt(n for n in os.listdir(folder) if n.startswith(PREFIX))  # what the next start does
    assert all(os.stat(folder / f"{name}.yaml").st_nlink == 1 for name in ("a", "b", "c"))


def test_create_gives_a_ready_spare_the_new_name_and_refuses_a_name_that_exists(tmp_path):
    """Attempt records (run/attempts): ``create`` is O_EXCL's contract on a recycled inode."""
    now = [0.0]
    spares = Spares(tmp_path, clock=lambda: now[0])
    spares.create(tmp_path / "a.1", b"x" * 100, 0o600)
    assert spares.created == 1 and (tmp_path / "a.1").read_bytes() == b"x" * 100
    inode = os.stat(tmp_path / "a.1").st_ino
    spares.retire(tmp_path / "a.1")
    fsync_dir(tmp_path)
    spares.synced()
    spares.create(tmp_path / "b.1", b"y" * 10, 0o600)  # the spare is not ready yet: a new file
    assert spares.created == 2 and os.stat(tmp_path / "b.1").st_ino != inode
    now[0] += QUIET
    try:
        spares.create(tmp_path / "b.1", b"z", 0o600, pad=True)
    except FileExistsError:
        pass
    else:
        raise AssertionError("create over an existing name must fail")
    assert (tmp_path / "b.1").read_bytes() == b"y" * 10 and len(spares) == 1  # the spare went back
    spares.create(tmp_path / "c.1", b"c" * 10, 0o640, pad=True)
    assert spares.created == 2 and spares.reused >= 1 and os.stat(tmp_path / "c.1").st_ino == inode
    # padded, not cut: the old length stays, the old bytes do not
    assert (tmp_path / "c.1").read_bytes() == b"c" * 10 + bytes(90)
    assert os.stat(tmp_path / "c.1").st_nlink == 1 and oct(os.stat(tmp_path / "c.1").st_mode & 0o777) == "0o640"
    assert [n for n in _names(tmp_path) if n.startswith(PREFIX)] == []


def test_with_no_quiet_time_a_spare_is_reused_right_after_the_fsync_that_hid_it(tmp_path):
    """Attempt records have no readers but gflowd and their supervisor (``quiet=0``): a record
    purged in one pass is the next pass's new record, never before its folder fsync."""
    now = [0.0]
    spares = Spares(tmp_path, clock=lambda: now[0], quiet=0.0)
    spares.create(tmp_path / "a.1", b"a" * 10, 0o600)
    inode = os.stat(tmp_path / "a.1").st_ino
    spares.retire(tmp_path / "a.1")
    spares.create(tmp_path / "b.1", b"b", 0o600)  # hidden, but its rename is not durable yet: a new file
    assert spares.created == 2 and spares.reused == 0
    fsync_dir(tmp_path)
    spares.synced()
    spares.create(tmp_path / "c.1", b"c", 0o600, pad=True)  # the same clock reading: no wait
    assert spares.reused == 1 and os.stat(tmp_path / "c.1").st_ino == inode
    assert (tmp_path / "c.1").read_bytes() == b"c" + bytes(9)


def test_a_spare_that_fails_the_usable_test_is_freed_never_rewritten(tmp_path):
    import fcntl

    now = [0.0]
    spares = Spares(tmp_path, clock=lambda: now[0], usable=lambda fd: os.fstat(fd).st_size != 3)
    for name, text in (("held", b"abc"), ("free", b"abcd")):
        spares.create(tmp_path / name, text)
        spares.retire(tmp_path / name)
    spares.synced()
    now[0] += QUIET
    spares.create(tmp_path / "next", b"n")
    assert (tmp_path / "next").read_bytes() == b"n" and spares.reused == 1
    assert [n for n in _names(tmp_path) if n.startswith(PREFIX)] == []  # "held" freed, "free" reused

    from controller.act.runtime import record  # the attempt records' test: a supervisor holds the lock

    path = tmp_path / "locked"
    path.write_bytes(b"r")
    holder = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        probe = os.open(path, os.O_RDONLY)
        assert not record.unlocked(probe)
        fcntl.flock(holder, fcntl.LOCK_UN)
        assert record.unlocked(probe)
        os.close(probe)
    finally:
        os.close(holder)


def test_a_batch_puts_files_in_place_in_order_after_fsyncing_the_durable_ones_together(tmp_path, monkeypatch):
    spares = Spares(tmp_path, clock=lambda: 0.0)
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    done: list[str] = []
    with spares.batch() as batch:
        for k in range(5):
            batch.add(
                tmp_path / f"f{k}.yaml",
                f"text {k}\n".encode(),
                durable=k != 2,
                new=True,
                then=lambda k=k: done.append(f"f{k}") or None,
            )
            assert not (tmp_path / f"f{k}.yaml").exists()  # staged only
        # the durable files' fsyncs are under way before the batch commits: the disk works while
        # the pass writes the rest
        wait_for(lambda: len(synced) == 4, timeout=10, message="the fsyncs to start before the commit")
        assert done == []
    assert done == [f"f{k}" for k in range(5)] and len(synced) == 4
    assert [(tmp_path / f"f{k}.yaml").read_text() for k in range(5)] == [f"text {k}\n" for k in range(5)]
    assert [n for n in _names(tmp_path) if n.endswith(".tmp")] == []

    # an fsync the disk refuses: the error names that file, and none of the batch is put in place
    def failing_fsync(fd):
        if "g1.yaml" in os.readlink(f"/proc/self/fd/{fd}"):  # g1's staged temp file
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError) as raised, spares.batch() as batch:
        for k in range(3):
            batch.add(tmp_path / f"g{k}.yaml", b"new\n", durable=True, new=True)
    assert raised.value.filename == str(tmp_path / "g1.yaml") and raised.value.errno == errno.EIO
    assert not any((tmp_path / f"g{k}.yaml").exists() for k in range(3))
    monkeypatch.setattr(os, "fsync", real_fsync)

    # an error inside the block: what was staged is dropped, nothing is put in place
    try:
        with spares.batch() as batch:
            batch.add(tmp_path / "f0.yaml", b"never\n", durable=True)
            raise RuntimeError("the caller failed")
    except RuntimeError:
        pass
    assert (tmp_path / "f0.yaml").read_text() == "text 0\n"
    assert [n for n in _names(tmp_path) if n.endswith(".tmp")] == []
