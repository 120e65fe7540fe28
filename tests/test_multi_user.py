"""The shared instance's access rule (docs/multi-user.md): in a group-writable, sticky spec dir a
user cannot change or delete another user's manifest, and gflowctl says so in one line."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import run_as

from controller.cli.main import main

OWNER, OTHER = 65533, 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two other users")


def as_user(uid: int, argv: list[str]) -> tuple[int, str]:
    """Run gflowctl in a forked child that dropped to ``uid``: (exit code, stderr)."""
    return run_as(uid, lambda: main(argv))


@pytest.fixture
def shared_home():
    root = Path(tempfile.mkdtemp(prefix="gflow-shared-"))
    os.chmod(root, 0o755)
    (root / "jobs").mkdir(mode=0o1777)
    os.chmod(root / "jobs", 0o1777)  # sticky; world- instead of group-writable keeps the test group-free
    yield root
    shutil.rmtree(root)


def warm_up(tmp_path: Path, verbs: list[list[str]]) -> None:
    """Run the verbs once as root, so every module they import lazily is loaded before the fork:
    a child that dropped to another uid may not be able to read this interpreter's files."""
    import contextlib
    import io

    (tmp_path / "jobs").mkdir()
    for verb in verbs:
        (tmp_path / "jobs" / "a1.yaml").write_text("metadata: {name: a1}\nspec:\n  command: [sleep, '60']\n")
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["--home", str(tmp_path), *verb]) == 0
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["--home", str(tmp_path), "delete", "-f", "/nonexistent/x.yaml"]) == 1


def test_only_the_owner_may_edit_or_delete_a_manifest(shared_home, tmp_path):
    manifest = shared_home / "jobs" / "a1.yaml"
    manifest.write_text("metadata: {name: a1}\nspec:\n  command: [sleep, '60']\n")
    os.chown(manifest, OWNER, OWNER)
    home = ["--home", str(shared_home)]
    verbs = [["cancel", "a1"], ["set", "priority", "a1", "5"], ["delete", "job", "a1"]]
    warm_up(tmp_path, verbs)
    for verb in verbs:
        code, err = as_user(OTHER, home + verb)
        assert code == 1, (verb, err)
        assert err.strip().splitlines() == [
            f"error: {manifest}: permission denied (only its owner or root may change it)"
        ], err
    assert "cancelled" not in manifest.read_text() and manifest.stat().st_uid == OWNER
    code, err = as_user(OWNER, home + ["cancel", "a1"])
    assert code == 0, err
    assert "cancelled: true" in manifest.read_text()
    assert manifest.stat().st_uid == OWNER  # still the owner's: the job still runs as the owner
