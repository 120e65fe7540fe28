"""``fsutil.rewrite_locked``: the one way a user's file is rewritten (issue 14, findings 1 and 5).

Real files and real processes. A writer that does not take the lock is played by the ``change``
callback itself writing the file, which puts its write exactly between our read and our rename;
the lock is held by a real other process.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from helpers import wait_for

from controller.util.fsutil import LockBusy, RewriteError, create_new, rewrite_locked


def test_a_change_made_between_our_read_and_our_rename_is_kept_and_the_edit_redone(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    seen = []

    def change(text: str) -> str:
        seen.append(text)
        if len(seen) == 1:
            with open(path, "a") as other:  # someone's editor, in place, without the lock
                other.write("b: 2\n")
        return text + "c: 3\n"

    assert rewrite_locked(path, change) is True
    assert seen == ["a: 1\n", "a: 1\nb: 2\n"]
    assert path.read_text() == "a: 1\nb: 2\nc: 3\n"


def test_a_file_replaced_by_rename_meanwhile_is_detected_too(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    calls = []

    def change(text: str) -> str:
        calls.append(text)
        if len(calls) == 1:
            (tmp_path / ".swap").write_text("a: 1\n")  # same bytes, a new file: still another writer's
            os.rename(tmp_path / ".swap", path)
        return "a: 2\n"

    assert rewrite_locked(path, change) is True
    assert len(calls) == 2 and path.read_text() == "a: 2\n"


def test_a_writer_that_never_stops_makes_the_edit_fail_and_its_writes_survive(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    count = [0]

    def change(text: str) -> str:
        count[0] += 1
        with open(path, "a") as other:
            other.write(f"# other {count[0]}\n")
        return "a: 2\n"

    with pytest.raises(
        RewriteError,
        match=r"changed while it was being edited, 3 times in a row \(another program keeps writing it\); try again",
    ):
        rewrite_locked(path, change, attempts=3)
    assert path.read_text() == "a: 1\n# other 1\n# other 2\n# other 3\n"


def test_the_same_text_writes_nothing_and_none_removes_the_file(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    before = path.stat()
    assert rewrite_locked(path, lambda text: text) is False
    assert path.stat().st_ino == before.st_ino and path.stat().st_mtime_ns == before.st_mtime_ns
    assert rewrite_locked(path, lambda text: None) is True
    assert not path.exists()


def hold_lock(path: Path, release: Path) -> subprocess.Popen:
    """Another process holding the file's flock until ``release`` exists."""
    script = textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(path)!r}, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        while not os.path.exists({str(release)!r}):
            time.sleep(0.01)
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "locked\n"
    return proc


@pytest.mark.e2e
def test_a_held_lock_is_waited_for_and_an_endless_one_ends_in_an_error(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    release = tmp_path / "release"
    holder = hold_lock(path, release)
    try:
        with pytest.raises(LockBusy, match=r"is locked by another program \(waited 0.2s\); try again"):
            rewrite_locked(path, lambda text: "a: 2\n", wait=0.2)
        assert path.read_text() == "a: 1\n"
        done = []
        waiter = threading.Thread(
            target=lambda: done.append(rewrite_locked(path, lambda text: text + "b: 2\n", wait=30))
        )
        waiter.start()
        release.touch()
        waiter.join(timeout=30)
        assert done == [True] and path.read_text() == "a: 1\nb: 2\n"
    finally:
        release.touch()
        holder.wait(timeout=30)


def test_a_waiter_whose_file_was_replaced_meanwhile_edits_the_new_one(tmp_path):
    """Two editors: the first holds the lock and replaces the file; the second, queued on the old
    file's lock, must notice and lock the new one, so it edits what the first wrote."""
    path = tmp_path / "m.yaml"
    path.write_text("n: 0\n")
    first_has_it, go_on = threading.Event(), threading.Event()

    def slow(text: str) -> str:
        first_has_it.set()
        go_on.wait(30)
        return text + "first: 1\n"

    first = threading.Thread(target=rewrite_locked, args=(path, slow))
    first.start()
    assert first_has_it.wait(30)
    second = threading.Thread(target=rewrite_locked, args=(path, lambda text: text + "second: 2\n"))
    second.start()
    wait_for(lambda: open_descriptors_of(path) == 2, message="the second editor to open the file and wait for its lock")
    go_on.set()
    first.join(30)
    second.join(30)
    assert path.read_text() == "n: 0\nfirst: 1\nsecond: 2\n"


def open_descriptors_of(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            pass
    return count


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_root_keeps_owner_group_and_mode(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("a: 1\n")
    os.chown(path, 65534, 65533)
    os.chmod(path, 0o604)
    assert rewrite_locked(path, lambda text: "a: 2\n") is True
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), path.read_text()) == (65534, 65533, 0o604, "a: 2\n")
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]  # no temp file left behind


def test_symlinks_edit_their_target_inside_and_are_refused_outside(tmp_path):
    spec, outside = tmp_path / "jobs", tmp_path / "elsewhere"
    spec.mkdir()
    outside.mkdir()
    (spec / "real.yaml").write_text("a: 1\n")
    (spec / "link.yaml").symlink_to("real.yaml")
    (outside / "o.yaml").write_text("o: 1\n")
    (spec / "out.yaml").symlink_to(outside / "o.yaml")
    assert rewrite_locked(spec / "link.yaml", lambda text: "a: 2\n", within=spec) is True
    assert (spec / "link.yaml").is_symlink() and (spec / "real.yaml").read_text() == "a: 2\n"
    with pytest.raises(RewriteError, match=r"is a symlink to .*elsewhere/o.yaml, outside .*; edit that file instead"):
        rewrite_locked(spec / "out.yaml", lambda text: "o: 2\n", within=spec)
    assert (outside / "o.yaml").read_text() == "o: 1\n"
    assert rewrite_locked(spec / "link.yaml", lambda text: None, within=spec) is True
    assert not (spec / "link.yaml").exists() and (spec / "real.yaml").exists()  # the link went, not its target


def test_a_fifo_in_a_manifests_place_is_refused_without_hanging(tmp_path):
    path = tmp_path / "m.yaml"
    os.mkfifo(path)
    with pytest.raises(RewriteError, match="is not a regular file"):
        rewrite_locked(path, lambda text: "a: 2\n")


def test_create_new_never_replaces(tmp_path):
    path = tmp_path / "n.yaml"
    create_new(path, "a: 1\n")
    with pytest.raises(FileExistsError):
        create_new(path, "a: 2\n")
    assert path.read_text() == "a: 1\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["n.yaml"]


def test_the_no_replace_rename_is_the_kernels(tmp_path):
    """renameat2(RENAME_NOREPLACE), called through _ctypes (not the hard-link fallback): an int
    result, errno EEXIST when the target exists, and the rename done when it does not."""
    from controller.util.fsutil import _renameat2

    assert _renameat2() is not None
    renameat2, get_errno = _renameat2()
    a, b, c = (tmp_path / n for n in "abc")
    a.write_text("a")
    b.write_text("b")
    assert renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 1) == -1 and get_errno() == errno.EEXIST
    assert renameat2(-100, os.fsencode(a), -100, os.fsencode(c), 1) == 0
    assert (c.read_text(), b.read_text(), a.exists()) == ("a", "b", False)


@pytest.mark.e2e
def test_the_cli_says_in_one_line_when_a_writer_never_lets_an_edit_through(home):
    manifest = home / "jobs" / "busy.yaml"
    manifest.write_text("metadata: {name: busy}\nspec:\n  command: [sleep, '60']\n")
    stop = home / "stop"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import os, time
        while not os.path.exists({str(stop)!r}):
            with open({str(manifest)!r}, "a") as f:
                f.write("# busy\\n")
            time.sleep(0.001)
        """),
        ]
    )
    try:
        wait_for(lambda: "# busy" in manifest.read_text(), message="the writer to start")
        env = {**os.environ, "GFLOW_HOME": str(home)}
        edit = subprocess.run(
            [sys.executable, "-m", "controller.cli.main", "set", "priority", "busy", "5"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        stop.touch()
        writer.wait(timeout=30)
    assert edit.returncode == 1
    assert edit.stderr == (
        f"error: job/busy: not changed: {manifest} changed while it was being edited, 5 times in a row "
        "(another program keeps writing it); try again\n"
    )
    assert "priority" not in manifest.read_text()
