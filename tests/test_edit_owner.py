"""A rewrite of a user's manifest never changes whose job it is (issue 14, finding 1).

gflowd running as root cuts an expired document out of a user's multi-document file, and an admin
edits a user's job with gflowctl: both rewrite the file through a temp file and a rename, and the
file must come out with the user's uid, gid and mode, or the user's next job would run as root.
A non-root editor who cannot give the new file the old owner is refused instead.
Real root gflowd, real gflowctl processes, files owned by uid 65534.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from helpers import ctl, read_log, wait_for, wait_phase
from test_multi_user import as_user, warm_up  # gflowctl in a forked child that dropped to another uid

USER = 65534  # nobody
OTHER = 65533
MODE = 0o640  # not the 0644 a fresh file gets: a rewrite must keep this one

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: gflowd runs jobs as the manifest's owner")


@pytest.fixture
def shared_home():
    """A home anyone can traverse, with a sticky, world-writable spec dir (docs/multi-user.md)."""
    root = Path(tempfile.mkdtemp(prefix="gflow-sec-edits-owner-"))
    os.chmod(root, 0o755)
    (root / "jobs").mkdir()
    os.chmod(root / "jobs", 0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def users_file(path: Path, text: str, uid: int = USER, mode: int = MODE) -> Path:
    path.write_text(text)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def assert_still_theirs(path: Path, uid: int = USER, mode: int = MODE) -> None:
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, uid, mode), (
        f"{path} is now uid {st.st_uid} gid {st.st_gid} mode {oct(stat.S_IMODE(st.st_mode))}"
    )


def test_ttl_pruning_keeps_the_owner_and_the_users_next_job_runs_as_the_user(shared_home, gflowd):
    mine = users_file(
        shared_home / "jobs" / "mine.yaml",
        """\
metadata: {name: ttl-a}
spec:
  command: ['true']
  ttlSecondsAfterFinished: 1
---
metadata: {name: later-b}
spec:
  command: [id, -u]
  startAfter: +10s
""",
    )
    daemon = gflowd(home=shared_home)
    wait_for(
        lambda: "ttl-a" not in mine.read_text(),
        timeout=10,
        message=lambda: f"gflowd to cut the expired ttl-a out of mine.yaml\n{daemon.stderr()[-2000:]}",
    )
    assert_still_theirs(mine)
    later = wait_phase(shared_home, "later-b", ("Pending", "Succeeded"), daemon=daemon)
    assert later["phase"] == "Pending", "later-b started before the pruning: the test proves nothing; raise startAfter"
    wait_phase(shared_home, "later-b", "Succeeded", timeout=30, daemon=daemon)
    assert read_log(shared_home, "later-b").strip() == str(USER)
    assert_still_theirs(mine)


def test_an_admins_set_priority_leaves_the_job_the_users(shared_home, gflowd):
    pend = users_file(
        shared_home / "jobs" / "pend.yaml", "metadata: {name: pend}\nspec:\n  command: [id, -u]\n  startAfter: +6s\n"
    )
    daemon = gflowd(home=shared_home)
    wait_phase(shared_home, "pend", "Pending", daemon=daemon)
    edited = ctl(shared_home, "set", "priority", "pend", "50")
    assert edited.returncode == 0, edited.stderr
    assert "priority: 50" in pend.read_text()
    assert_still_theirs(pend)
    wait_phase(shared_home, "pend", "Succeeded", timeout=30, daemon=daemon)
    assert read_log(shared_home, "pend").strip() == str(USER)


def test_every_edit_verb_and_deleting_one_document_keep_owner_and_mode(shared_home):
    two = users_file(
        shared_home / "jobs" / "a.yaml",
        """\
# a comment the edits keep
metadata: {name: a}
spec:
  command: [sleep, '60']
---
metadata: {name: b}
spec:
  command: [sleep, '60']
""",
    )
    single = users_file(shared_home / "jobs" / "c.yaml", "metadata: {name: c}\nspec:\n  command: [sleep, '60']\n")
    source = shared_home / "c-new.yaml"
    source.write_text("metadata: {name: c}\nspec:\n  command: [sleep, '61']\n")
    for verb in (
        ["cancel", "a"],
        ["suspend", "a"],
        ["resume", "a"],
        ["rerun", "a"],
        ["set", "priority", "a", "7"],
        ["patch", "job", "a", "-p", '{"metadata": {"labels": {"team": "x"}}}'],
    ):
        done = ctl(shared_home, *verb)
        assert done.returncode == 0, (verb, done.stderr)
        assert_still_theirs(two)
    assert "# a comment the edits keep" in two.read_text() and "priority: 7" in two.read_text()
    applied = ctl(shared_home, "apply", "-f", str(source))
    assert (applied.returncode, applied.stdout) == (0, "job/c configured\n"), applied.stderr
    assert "'61'" in single.read_text()
    assert_still_theirs(single)
    deleted = ctl(shared_home, "delete", "job", "a")
    assert deleted.returncode == 0, deleted.stderr
    assert "name: a}" not in two.read_text() and "name: b}" in two.read_text()
    assert_still_theirs(two)


def test_an_editor_who_cannot_keep_the_owner_is_refused(shared_home, tmp_path):
    """A folder both users may write and no sticky bit: the other user may replace the file, but
    the new file would be theirs and the job would run as them. Refused, nothing changed."""
    warm_up(tmp_path, [["set", "priority", "a1", "5"]])
    folder = shared_home / "jobs" / "team"
    folder.mkdir()
    os.chmod(folder, 0o777)
    manifest = users_file(folder / "t.yaml", "metadata: {name: t}\nspec:\n  command: [sleep, '60']\n", mode=0o666)
    before = manifest.read_text()
    code, err = as_user(OTHER, ["--home", str(shared_home), "--spec-dir", str(folder), "set", "priority", "t", "5"])
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: {manifest}: permission denied (only its owner or root may change it)"
    ], err
    assert manifest.read_text() == before
    assert_still_theirs(manifest, mode=0o666)
