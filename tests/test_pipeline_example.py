"""The pipeline example (manifests/examples/pipeline: preprocess -> train-sweep -> evaluate) really
runs, in dependency order, on fake GPUs; and docs/pipelines.md shows those very files."""

from __future__ import annotations

import itertools
import shutil
from datetime import datetime
from pathlib import Path

from helpers import job_status, read_log, read_status, wait_for, wait_phase

REPO = Path(__file__).resolve().parent.parent
PIPELINE = REPO / "manifests" / "examples" / "pipeline"
FAKE_GPUS = REPO / "manifests" / "examples" / "fake-gpus.yaml"
DOC = REPO / "docs" / "pipelines.md"
FILES = ("preprocess.yaml", "train-sweep.yaml", "evaluate.yaml")
CHILDREN = [f"train-sweep-{i}" for i in range(4)]
COMBOS = list(itertools.product(["0.1", "0.01"], ["32", "64"]))  # matrix order, last key fastest


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_the_example_is_the_one_the_docs_show():
    doc = DOC.read_text()
    assert sorted(p.name for p in PIPELINE.iterdir()) == sorted(FILES)
    for name in FILES:
        text = (PIPELINE / name).read_text()
        assert f"```yaml\n{text}```" in doc, f"docs/pipelines.md must show {name} in full, as it is"


def test_pipeline_example_runs_in_dependency_order_on_fake_gpus(home, gflowd):
    shutil.copytree(PIPELINE, home / "jobs" / "pipeline")
    daemon = gflowd("--fake-gpus", FAKE_GPUS)

    evaluate = wait_phase(home, "evaluate", ("Succeeded", "Failed", "Cancelled"), timeout=60, daemon=daemon)
    assert evaluate["phase"] == "Succeeded", (evaluate, read_log(home, "evaluate"))

    preprocess = job_status(home, "preprocess")
    assert preprocess["phase"] == "Succeeded", preprocess
    assert "preprocessed 1000 examples" in read_log(home, "preprocess")
    children = {name: job_status(home, name) for name in CHILDREN}
    assert {n: s["phase"] for n, s in children.items()} == {n: "Succeeded" for n in CHILDREN}, children
    assert read_status(home, "train-sweep-4") is None, "a 2x2 matrix makes 4 children"

    # dependency order, from the controller's own record of each attempt
    for name, status in children.items():
        assert when(status["startTime"]) >= when(preprocess["completionTime"]), (
            f"{name} started before preprocess ended"
        )
        assert when(evaluate["startTime"]) >= when(status["completionTime"]), f"evaluate started before {name} ended"
        assert len(status["devices"]) == 1, status
    # parallelism: 2 -> never more than two children at once
    spans = sorted((when(s["startTime"]), when(s["completionTime"])) for s in children.values())
    for i, (start, _) in enumerate(spans):
        running = sum(1 for s, e in spans[:i] if e > start)
        assert running < 2, f"more than 2 children ran at once: {spans}"

    for i, (lr, batch) in enumerate(COMBOS):
        log = read_log(home, f"train-sweep-{i}")
        assert f"child {i} of train-sweep: lr={lr} batch={batch} on GPU " in log, log
        assert "trained on 1000 examples" in log, log
        owner = read_status(home, f"train-sweep-{i}")["metadata"]["ownerReferences"]
        assert owner == [{"apiVersion": "gflow.dev/v1alpha1", "kind": "Sweep", "name": "train-sweep"}]

    log = read_log(home, "evaluate")
    assert "evaluated 4 results" in log, log
    assert "best: lr=0.01 batch=32" in log, log

    sweep = wait_for(
        lambda: (s := job_status(home, "train-sweep")) and s.get("phase") == "Succeeded" and s,
        message=lambda: f"the SweepStatus to say Succeeded: {read_status(home, 'train-sweep')}",
    )
    assert read_status(home, "train-sweep")["kind"] == "SweepStatus"
    assert sweep["children"] == 4 and sweep["counts"].get("Succeeded") == 4, sweep
