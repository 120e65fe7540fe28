"""Issue 33 item 11: ``Client.submit_function`` for an ordinary user on the documented shared set-up
(docs/multi-user.md: a root gflowd, a sticky spec dir every user may write to). A ``useradd`` user,
from their own venv made from the system Python, submits a function; gflowd runs it as them and the
future's result comes back. Where ``functions/`` is missing or not theirs to write, one line names
the fix, never a traceback from deep inside the client."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers import wait_for
from shared_box import make_box, remove_box

FOUR_GPUS = "gpus:\n" + "".join("  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" for _ in range(4))

# what a researcher writes: submit, wait, print the answer; a GflowError is shown as its one line
SCRIPT = """
import os, sys
from controller.client import Client, GflowError

def train(lr, epochs):
    return {"uid": os.getuid(), "loss": lr * epochs}

try:
    future = Client().submit_function(train, 0.5, epochs=4)
except GflowError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
print(future.result(timeout=120))
"""


@pytest.fixture
def box():
    pytest.importorskip("cloudpickle")
    made = make_box()
    yield made
    remove_box(made)


def submit(box) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(box.venv / "bin" / "python"), "-c", SCRIPT],
        env=box.env(),
        cwd=str(box.project),
        capture_output=True,
        text=True,
        timeout=180,
        user=box.user.pw_uid,
        group=box.user.pw_gid,
        extra_groups=[],
    )


def start(box, gflowd, tmp_path):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(FOUR_GPUS)
    daemon = gflowd("--fake-gpus", gpus, home=box.home)
    wait_for(lambda: (box.home / "node.yaml").exists(), timeout=30, message="node.yaml")
    return daemon


def test_an_ordinary_user_gets_the_result_of_a_function(box, gflowd, tmp_path):
    start(box, gflowd, tmp_path)
    result = submit(box)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str({"uid": box.user.pw_uid, "loss": 2.0}), result.stdout
    mine = box.home / "functions" / str(box.user.pw_uid)
    assert (mine.stat().st_uid, mine.stat().st_mode & 0o777) == (box.user.pw_uid, 0o700)


@pytest.mark.parametrize("damage", ["missing", "not-writable"])
def test_a_functions_folder_the_user_cannot_use_is_one_line_naming_the_fix(box, gflowd, tmp_path, damage):
    start(box, gflowd, tmp_path)
    functions = box.home / "functions"
    shutil.rmtree(functions)
    if damage == "not-writable":
        os.mkdir(functions, 0o755)  # an admin made it by hand without the spec dir's mode
    result = submit(box)
    assert result.returncode == 2, (result.stdout, result.stderr)
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, result.stderr
    assert str(functions) in line and "install -d -m 1775 -g gflow" in line, line
