"""Issue 33 item 2: every user gets gflowd's admission review, not only root. ``gflowctl run`` by a
``useradd`` user from their own venv, against a root gflowd with 4 fake GPUs: the never-fits warning
comes from gflowd (the CLI alone does not know the GPUs), and gflowd judges the manifest as the
caller's, whose uid it takes from the kernel, not from the request."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import wait_for
from shared_box import make_box, remove_box

FOUR_GPUS = "gpus:\n" + "".join("  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" for _ in range(4))


@pytest.fixture
def box():
    made = make_box()
    yield made
    remove_box(made)


def test_an_ordinary_user_gets_the_never_fits_warning(box, gflowd, tmp_path):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(FOUR_GPUS)
    gflowd("--fake-gpus", gpus, home=box.home)
    wait_for(lambda: (box.home / "node.yaml").exists(), timeout=30, message="node.yaml")
    result = box.gflowctl("run", "--gpus", "9", "--", "true")
    assert result.returncode == 0, result.stderr
    assert "can never start" in result.stderr and "9 GPUs" in result.stderr, result.stderr


def test_the_caller_is_who_the_kernel_says(box):
    """The attack: a request that claims root, sent by an ordinary user; gflowd judges it as theirs."""
    from controller.daemon.review import serve

    seen = []
    path = box.root / "review.sock"  # a folder every user may enter
    listener = serve(path, lambda uid, request: seen.append(uid) or {"inputs": [{"docs": [], "errors": []}]})
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o666"
        probe = (
            "import json, socket, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "s.sendall(json.dumps({'uid': 0, 'owner_uid': 0, 'inputs': [{'origin': 'x.yaml', 'text': ''}]}).encode())\n"
            "s.shutdown(socket.SHUT_WR); print(s.recv(1 << 20).decode())\n"
        )
        result = subprocess.run(
            [str(box.venv / "bin" / "python"), "-c", probe, str(path)],
            user=box.user.pw_uid,
            group=box.user.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=30,
            env=box.env(),
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"inputs": [{"docs": [], "errors": []}]}
        assert seen == [box.user.pw_uid], "gflowd did not judge the request as its sender's"
    finally:
        listener.close()
