"""Reservations end to end: a root gflowd on fake GPUs runs each manifest as its file's owner. Inside a
reservation's window for root, nobody's job waits with reason ``Reserved`` while root's job runs on
the reserved GPU; deleting the reservation lets nobody's job run. ``gflowctl get reservations``,
``get gpus`` and ``describe`` show it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import job_status, read_status, wait_for, wait_phase

from controller.cli.main import main
from controller.util.yamlio import load_one

NOBODY = 65534

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run gflowd as root and jobs as nobody")


@pytest.fixture
def shared():
    root = Path(tempfile.mkdtemp(prefix="gflow-reservations-e2e-"))
    os.chmod(root, 0o755)  # nobody's job must reach its folder
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    for folder in (home, home / "jobs"):
        os.chmod(folder, 0o755)
    yield home
    shutil.rmtree(root, ignore_errors=True)


def put(spec_dir: Path, filename: str, text: str, uid: int = 0) -> None:
    """Write a manifest owned by ``uid`` from its first byte visible: chown before the rename."""
    tmp = spec_dir / f".{filename}.tmp"
    tmp.write_text(text)
    os.chown(tmp, uid, uid)
    os.rename(tmp, spec_dir / filename)


def gflowctl(home: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue()


@as_root
def test_another_users_job_waits_reserved_while_the_listed_users_job_runs(shared, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(
        "gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n"
    )
    daemon = gflowd("--fake-gpus", fake, home=shared)
    spec = shared / "jobs"
    put(
        spec,
        "hold.yaml",
        "kind: Reservation\nmetadata: {name: hold}\nspec:\n  users: [root]\n  devices: [1]\n"
        "  start: '+0s'\n  duration: 1h\n",
    )
    wait_for(
        lambda: (read_status(shared, "hold") or {}).get("status", {}).get("phase") == "Active",
        message=lambda: f"the reservation to be Active: {read_status(shared, 'hold')}\n{daemon.stderr()[-2000:]}",
    )
    # nobody's long job goes on GPU 0 (kept off the reserved GPU 1), so nobody's next job could only go on GPU 1
    put(
        spec,
        "busy.yaml",
        "metadata: {name: busy}\nspec:\n  command: [sleep, '300']\n  resources: {gpus: 1}\n",
        uid=NOBODY,
    )
    assert wait_phase(shared, "busy", "Running", daemon=daemon)["devices"] == [0]
    put(
        spec,
        "theirs.yaml",
        "metadata: {name: theirs}\nspec:\n  command: ['true']\n  resources: {gpus: 1}\n",
        uid=NOBODY,
    )
    status = wait_phase(shared, "theirs", "Pending", reason="Reserved", daemon=daemon)
    assert re.search(r"^needs 1 GPU, none free for it: GPU 1 reserved for root \S+-\S+", status["message"]), status[
        "message"
    ]
    code, described = gflowctl(shared, "describe", "job", "theirs")
    assert "Reserved By:" in described and "hold: GPU 1 reserved for root" in described
    code, described = gflowctl(shared, "describe", "reservation/hold")
    assert code == 0 and re.search(r"Phase:\s+Active", described) and re.search(r"GPUs:\s+1", described)
    code, table = gflowctl(shared, "get", "reservations")
    assert code == 0
    header, row = table.splitlines()
    assert header.split() == ["NAME", "USERS", "GPUS", "START", "END", "PHASE", "AGE"]
    assert row.split()[:3] == ["hold", "root", "1"] and "Active" in row.split()
    code, gpus = gflowctl(shared, "get", "gpus")
    lines = gpus.splitlines()
    assert lines[0].split()[-1] == "RESERVED" and lines[2].endswith("(hold)") and "root" in lines[2]
    assert lines[1].split()[-1] == "-"

    # the listed user's job takes the reserved GPU; once it is gone the GPU is free, but still root's
    put(spec, "mine.yaml", "metadata: {name: mine}\nspec:\n  command: [sleep, '300']\n  resources: {gpus: 1}\n")
    mine = wait_phase(shared, "mine", "Running", daemon=daemon)
    assert mine["devices"] == [1]
    assert gflowctl(shared, "delete", "job", "mine")[0] == 0
    wait_for(lambda: job_status(shared, "mine") is None, message="mine to be deleted")
    status = wait_phase(shared, "theirs", "Pending", reason="Reserved", daemon=daemon)
    assert "GPU 1 reserved for root" in status["message"]

    code, out = gflowctl(shared, "delete", "reservation", "hold")
    assert (code, out.strip()) == (0, "reservation/hold deleted")
    assert wait_phase(shared, "theirs", "Succeeded", daemon=daemon)["devices"] == [1]
    wait_for(lambda: read_status(shared, "hold") is None, message="the reservation's status to go")


def test_apply_asks_gflowd_and_a_restart_keeps_the_window_of_a_relative_start(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n")
    daemon = gflowd("--fake-gpus", fake)
    good, bad = tmp_path / "soon.yaml", tmp_path / "bad.yaml"
    good.write_text(
        "kind: Reservation\nmetadata: {name: soon}\nspec:\n  users: [root]\n  gpus: 1\n  start: '+2h'\n  duration: 1h\n"
    )
    bad.write_text(
        "kind: Reservation\nmetadata: {name: bad}\nspec:\n  users: [root]\n  gpus: 1\n  start: '+2h'\n  duration: 0s\n  gpu: 1\n"
    )
    assert gflowctl(home, "apply", "-f", str(good)) == (0, "reservation/soon created\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert gflowctl(home, "apply", "-f", str(bad))[0] == 1
    assert (
        "spec.duration: must be > 0.0" in err.getvalue()
        and "spec.gpu: unknown field; did you mean gpus?" in err.getvalue()
    )
    assert not (home / "jobs" / "bad.yaml").exists()

    def recorded():
        status = (read_status(home, "soon") or {}).get("status") or {}
        return status if status.get("phase") == "Pending" else None

    first = wait_for(
        recorded, message=lambda: f"soon to be recorded: {read_status(home, 'soon')}\n{daemon.stderr()[-2000:]}"
    )
    assert first["devices"] == [0] and first["reason"] == "Upcoming"
    assert daemon.terminate() == 0
    again = gflowd("--fake-gpus", fake)
    again.wait_pass()
    after = recorded()
    assert (after["start"], after["end"], after["devices"]) == (first["start"], first["end"], first["devices"])
    assert gflowctl(home, "get", "reservations", "-o", "name") == (0, "reservation/soon\n")
    code, text = gflowctl(home, "get", "reservation/soon", "-o", "json")
    document = json.loads(text)
    assert (code, document["kind"], document["status"]["users"]) == (0, "Reservation", ["root"])
    assert document["spec"] == load_one(good.read_text())["spec"]  # the manifest's, to apply again
    (tmp_path / "saved.json").write_text(text)
    assert gflowctl(home, "apply", "-f", str(tmp_path / "saved.json")) == (0, "reservation/soon unchanged\n")
    code, text = gflowctl(home, "get", "events", "--for", "reservation/soon", "-o", "json")
    assert [(e["reason"], e["object"]) for e in json.loads(text)["items"]] == [("Upcoming", "reservation/soon")]
