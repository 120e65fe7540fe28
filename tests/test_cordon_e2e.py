"""``gflowctl cordon|drain|uncordon gpu N`` against a real root gflowd on fake GPUs: a cordoned GPU
takes no new job, a drained one returns its jobs to Pending, uncordon lets them run again; an
ordinary user (nobody, 65534) may do none of it, not even by writing cordon.yaml."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import job_status, run_as, wait_for, wait_phase, write_manifest

from controller.cli.main import main

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run gflowd as root and gflowctl as nobody")


@pytest.fixture
def shared():
    root = Path(tempfile.mkdtemp(prefix="gflow-cordon-e2e-"))
    os.chmod(root, 0o755)
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "jobs", 0o1777)
    yield home
    shutil.rmtree(root, ignore_errors=True)


def ctl(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


def ctl_as_nobody(home: Path, *argv: str) -> tuple[int, str]:
    def work() -> int:
        os.chdir(home)
        return main(["--home", str(home), *argv])

    return run_as(NOBODY, work)


def job(name: str, go: Path) -> str:
    return f"metadata: {{name: {name}}}\nspec:\n  resources: {{gpus: 1}}\n  command: [sh, -c, 'while [ ! -e {go} ]; do sleep 0.05; done']\n"


def test_cordon_drain_and_uncordon_as_an_admin_and_never_as_a_user(shared, gflowd, tmp_path):
    home = shared
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: H100, memory: 80Gi}\n  - {name: H100, memory: 80Gi}\n")
    daemon = gflowd("--fake-gpus", fake, home=home)
    go = tmp_path / "go"
    write_manifest(home / "jobs", "a.yaml", job("a", go))
    assert wait_phase(home, "a", "Running", daemon=daemon)["devices"] == [0]
    ctl(home, "get", "gpus")  # warm: what it imports lazily is loaded before the fork

    # a user may not cordon, and a cordon.yaml a user could write is not trusted
    code, err = ctl_as_nobody(home, "cordon", "gpu", "0")
    assert code != 0 and "only root, who owns" in err and "may cordon GPUs" in err, err
    assert not home.joinpath("cordon.yaml").exists()
    forged = home / "cordon.yaml"
    forged.write_text("gpus: {0: {by: mallory, drain: true}}\n")
    os.chown(forged, NOBODY, NOBODY)
    wait_for(lambda: "ignoring" in daemon.stderr() and "cordon.yaml" in daemon.stderr(), message=daemon.stderr)
    assert job_status(home, "a")["phase"] == "Running"
    forged.unlink()

    code, out, err = ctl(home, "cordon", "gpu", "1", "--reason", "fan failing")
    assert (code, out) == (0, "gpu/1 cordoned\n"), err
    write_manifest(home / "jobs", "b.yaml", job("b", go))
    status = wait_phase(home, "b", "Pending", daemon=daemon)
    assert "GPU 1 cordoned by root: fan failing" in status["message"], status
    gpus = wait_for(lambda: (out := ctl(home, "get", "gpus")[1]) and "Cordoned" in out and out, message="get gpus")
    assert [line.split()[5] for line in gpus.splitlines()[1:]] == ["Allocated", "Cordoned"], gpus

    code, out, err = ctl(home, "drain", "gpu/0", "--reason", "Xid 79")
    assert code == 0, err
    status = wait_for(
        lambda: (s := job_status(home, "a")) and s["phase"] == "Pending" and s,
        message=lambda: f"a drained job to return to Pending: {job_status(home, 'a')}\n{daemon.stderr()}",
    )
    (preempted,) = [c for c in status["conditions"] if c["type"] == "Preempted"]
    assert preempted["message"].startswith("GPU 0 drained by root: Xid 79; returns to Pending"), status
    # an admin's cordon is for a while: the jobs wait it out, they are not Unschedulable
    assert status["reason"] == "Preempted" and "0 free (GPU 0 drained by root: Xid 79" in status["message"], status

    assert ctl(home, "uncordon", "gpu", "1")[0] == 0
    running = wait_for(
        lambda: [n for n in ("a", "b") if (job_status(home, n) or {}).get("phase") == "Running"] or None,
        message=lambda: f"a job to run on GPU 1: {job_status(home, 'a')} {job_status(home, 'b')}",
    )
    assert len(running) == 1 and job_status(home, running[0])["devices"] == [1]
    assert ctl(home, "uncordon", "gpu", "0")[0] == 0
    go.touch()
    for name in ("a", "b"):
        wait_phase(home, name, "Succeeded", daemon=daemon)


def test_bad_gpu_words_are_named_at_once(shared):
    code, out, err = ctl(shared, "cordon", "gpu", "x", "2,y")
    assert code != 0 and out == "" and "not a GPU index: 'x', 'y'" in err, err


def test_a_bad_cordon_file_names_every_error_at_once():
    from controller.api.cordon import parse_cordons

    with pytest.raises(ValueError) as caught:
        parse_cordons("gpus: {x: {}, 1: {drain: maybe, colour: red}}\n")
    assert str(caught.value) == (
        "gpus.x: expected a GPU index mapped to {by, reason, drain}; gpus.1: unknown field colour; "
        "gpus.1.drain: must be true or false"
    )
