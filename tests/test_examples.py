"""The shipped examples stay valid as the schema grows, and really run (on fake GPUs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import job_status, read_log, wait_phase

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "manifests" / "examples"
FAKE_GPUS = EXAMPLES / "fake-gpus.yaml"
JOB_EXAMPLES = sorted(p for p in EXAMPLES.glob("*.yaml") if p != FAKE_GPUS)


def test_the_expected_examples_exist():
    names = {p.stem for p in JOB_EXAMPLES}
    assert names >= {"hello-cpu", "fail-demo", "train-1gpu", "ddp-2gpu", "infer-shared", "eval-after-train"}


@pytest.mark.parametrize("path", JOB_EXAMPLES, ids=lambda p: p.name)
def test_example_manifest_is_admitted(path: Path):
    from controller.model.documents import AdmittedJob
    from controller.observe.manifests import ManifestStore
    from controller.paths import Home

    home = Home.resolve(REPO, EXAMPLES)
    store = ManifestStore(EXAMPLES, home.display)
    store.refresh([str(path)])
    docs = store.documents()
    assert len(docs) == 1
    doc = docs[0]
    assert isinstance(doc, AdmittedJob), f"{path.name}: {doc.reason}: {doc.message}"
    assert doc.name == path.stem, "examples are named after their file"


def test_fake_gpu_example_describes_four_gpus():
    from controller.observe.gpus.inventory import parse_fake_gpus

    gpus = parse_fake_gpus(FAKE_GPUS.read_text())
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert sum("H100" in g.name for g in gpus) == 2
    assert sum("A100" in g.name for g in gpus) == 2
    assert all(g.healthy for g in gpus)


def test_example_controller_config_loads():
    from controller.api.config import load_config

    config = load_config(REPO / "manifests" / "deploy" / "config.yaml", {})
    assert config.resync == 10.0
    assert config.termination_grace_period == 10.0


def test_systemd_unit_runs_gflowd_without_killing_jobs_on_stop():
    unit = (REPO / "manifests" / "deploy" / "gflowd.service").read_text()
    assert "ExecStart=" in unit and "gflowd" in unit
    assert "KillMode=control-group" in unit  # jobs live in a scope of their own, not in gflowd's cgroup


def test_examples_run_to_their_expected_end_on_fake_gpus(home, gflowd):
    for path in JOB_EXAMPLES:
        shutil.copy(path, home / "jobs" / path.name)
    daemon = gflowd("--fake-gpus", FAKE_GPUS)

    def done(name, phase="Succeeded"):
        return wait_phase(home, name, phase, timeout=30, daemon=daemon)

    assert done("hello-cpu")["exitCode"] == 0
    assert "hello from job hello-cpu" in read_log(home, "hello-cpu")

    failed = done("fail-demo", "Failed")
    assert failed["reason"] == "Error" and failed["exitCode"] == 3
    assert read_log(home, "fail-demo") == "hi\n"

    done("train-1gpu")
    train_log = read_log(home, "train-1gpu")
    assert "CUDA_VISIBLE_DEVICES=0" in train_log or "CUDA_VISIBLE_DEVICES=1" in train_log, train_log  # an H100
    assert "epoch 3/3" in train_log

    done("ddp-2gpu")
    ddp_log = read_log(home, "ddp-2gpu")
    assert "--nproc-per-node 2 --master-addr 127.0.0.1 --master-port " in ddp_log, ddp_log
    assert "rank 0: done" in ddp_log and "rank 1: done" in ddp_log, ddp_log

    done("infer-shared")
    assert "request 3: ok" in read_log(home, "infer-shared")

    evaluated = done("eval-after-train")
    assert "accuracy" in read_log(home, "eval-after-train")
    assert evaluated["startTime"] >= job_status(home, "train-1gpu")["completionTime"]
