"""Admission review: gflowctl apply asks the running gflowd to judge manifests (controller/review.py).

The controller's verdict includes what only it knows — here, that conda is not on gflowd's PATH —
so a condaEnv manifest is refused at apply time, and nothing is written. Without a gflowd, or
with one that does not answer, the CLI checks the file itself.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_for
from test_cli_e2e import ctl

from controller.paths import Home

CONDA_JOB = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata: {name: needs-conda}
spec:
  command: [python, train.py]
  condaEnv: torch
"""

PLAIN_JOB = """\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata: {name: plain}
spec:
  command: ["true"]
"""

pytestmark = pytest.mark.skipif(shutil.which("conda") is not None, reason="conda is installed here")


def review_dir(home: Path) -> Path:
    return Home.resolve(str(home), None).review_dir


def test_gflowd_judges_apply_with_what_only_it_knows_and_nothing_is_written(home, gflowd, tmp_path):
    gflowd()
    src = tmp_path / "needs-conda.yaml"
    src.write_text(CONDA_JOB)
    applied = ctl(home, "apply", "-f", str(src))
    assert applied.returncode == 1
    assert applied.stderr.startswith("error: spec.condaEnv: conda is not installed here (not on gflowd's PATH)")
    assert not (home / "jobs" / "needs-conda.yaml").exists()
    assert os.listdir(review_dir(home)) == []  # request and answer both cleaned up


@pytest.mark.e2e
def test_without_gflowd_apply_checks_the_file_itself(home, tmp_path):
    src = tmp_path / "needs-conda.yaml"
    src.write_text(CONDA_JOB)
    applied = ctl(home, "apply", "-f", str(src))
    # the CLI cannot know gflowd's PATH: the schema is fine, so the manifest is stored
    assert (applied.returncode, applied.stdout) == (0, "job/needs-conda created\n"), applied.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(PLAIN_JOB.replace('["true"]', '["true"]\n  priority: high'))
    refused = ctl(home, "apply", "-f", str(bad))
    assert refused.returncode == 1 and "spec.priority" in refused.stderr


@pytest.mark.e2e
def test_a_gflowd_that_does_not_answer_falls_back_to_a_local_check(home, tmp_path):
    # the instance lock is held (a gflowd seems to run) but nobody answers: after the review
    # timeout the CLI checks the file itself and leaves no request behind
    h = Home.resolve(str(home), None)
    h.ensure()
    h.review_dir.mkdir()
    with open(h.lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        src = tmp_path / "plain.yaml"
        src.write_text(PLAIN_JOB)
        applied = ctl(home, "apply", "-f", str(src))
    assert (applied.returncode, applied.stdout) == (0, "job/plain created\n"), applied.stderr
    assert os.listdir(h.review_dir) == []


def test_apply_answered_by_gflowd_does_not_import_pydantic(home, gflowd, tmp_path):
    # apply's cost is the CLI's start-up: the models stay in gflowd (docs/performance.md)
    gflowd()
    src = tmp_path / "plain.yaml"
    src.write_text(PLAIN_JOB)
    probe = (
        "import sys; from controller.cli.main import main; rc = main(['apply', '-f', sys.argv[1]]); "
        "print('pydantic' in sys.modules, rc)"
    )
    for _ in range(2):  # created, then unchanged: both paths
        out = subprocess.run(
            [sys.executable, "-c", probe, str(src)],
            capture_output=True,
            text=True,
            env={**os.environ, "GFLOW_HOME": str(home)},
            timeout=60,
        )
        assert out.stdout.splitlines()[-1] == "False 0", out.stdout + out.stderr
    wait_for(lambda: (home / "status" / "plain.yaml").exists(), timeout=30, message="the job's status")


def test_an_answer_that_did_not_place_the_working_dir_is_placed_by_gflowctl(home, tmp_path):
    """A gflowd of an earlier version answers without ``placed``: the CLI adds the line itself."""
    from controller.client.write.manifests import Doc, run_where_applied

    proj = tmp_path / "proj"
    proj.mkdir()
    text = 'apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: old\nspec:\n  command: ["true"]\n'
    placed = run_where_applied(Home(home, home / "jobs"), Doc("old", text, None, str(proj / "old.yaml")))
    assert placed.placed and placed.data["spec"]["workingDir"] == str(proj)
    assert placed.text.startswith(text[: text.index("spec:")])
    inside = run_where_applied(Home(home, home / "jobs"), Doc("old", text, None, str(home / "jobs" / "old.yaml")))
    assert inside.text == text and not inside.placed
