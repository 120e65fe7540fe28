"""Issue 33 item 3: mistakes in what a job runs are refused at submit, with the fix, not found once a
GPU frees. ``gflowctl run`` by a ``useradd`` user from their own venv, against a root gflowd; the
checks look as that user, on the PATH the job will have (theirs, carried by --export)."""

from __future__ import annotations

import os

import pytest
from helpers import wait_phase
from shared_box import make_box, remove_box


@pytest.fixture
def box():
    made = make_box()
    yield made
    remove_box(made)


def write(box, name: str, text: str, mode: int = 0o644):
    path = box.project / name
    path.write_text(text)
    os.chown(path, box.user.pw_uid, box.user.pw_gid)
    os.chmod(path, mode)
    return path


def test_mistakes_are_refused_with_the_fix_and_no_check_submits_anyway(box, gflowd):
    daemon = gflowd(home=box.home)
    write(box, "train.py", "import sys\nprint('trained')\n")
    write(box, "notexecutable.sh", "echo hi\n")
    write(box, "tool", "#!/bin/sh\necho tool\n", 0o755)
    expected = {
        (
            "--",
            "trian.py",
        ): "trian.py: not found on the job's PATH (yours, as --export carries it); did you mean: -- python3 train.py",
        (
            "--",
            "./notexecutable.sh",
        ): "./notexecutable.sh is not executable: chmod +x ./notexecutable.sh, or did you mean: -- bash ./notexecutable.sh",
        (
            "train.py",
        ): "train.py has no #! line and looks like Python (bash would run it): did you mean: gflowctl run -- python3 train.py",
        ("--", "./missing.sh"): f"./missing.sh: no such file in {box.project}",
        (
            "--",
            "python3",
            "trian.py",
            "--lr",
            "1",
        ): f"trian.py: no such file in {box.project}; did you mean: -- python3 train.py --lr 1",
        ("--export=NONE", "--", "./train.py"): "./train.py is not executable",
    }
    for argv, message in expected.items():
        result = box.gflowctl("run", *argv)
        assert result.returncode == 1 and result.stdout == "", (argv, result.stdout, result.stderr)
        assert result.stderr.startswith(f"error: {message}") and result.stderr.count("\n") == 1, (argv, result.stderr)
        assert "(--no-check submits it anyway)" in result.stderr
    assert not list((box.home / "jobs").glob("*.yaml")), "a refused submission wrote a manifest"
    # on the user's own PATH (~/bin, the venv): found, as the job will find it
    env = box.env()
    env["PATH"] = f"{box.project}:{env['PATH']}"
    ok = box.gflowctl("run", "-q", "--", "tool", env=env)
    assert ok.returncode == 0, ok.stderr
    wait_phase(box.home, ok.stdout.strip(), "Succeeded", daemon=daemon, timeout=60)
    forced = box.gflowctl("run", "-q", "--no-check", "--", "./notexecutable.sh")
    assert forced.returncode == 0, forced.stderr
    status = wait_phase(box.home, forced.stdout.strip(), "Failed", daemon=daemon, timeout=60)
    assert status["exitCode"] == 126
