"""Every shipped example exported for Kubernetes, as a cluster would take it.

Each export is a Job the API server accepts (the strict batch/v1 schema: an unknown or missing
field fails) whose container carries every gflow variable the example reads, and each really runs
with nothing but that environment: the container's ``command`` is run here under ``env -i`` with
the Job's ``env`` (plus ``JOB_COMPLETION_INDEX`` for a sweep's index, as the Job controller sets
it), in a copy of the examples, as a kubelet would run it in an image with bash and python3. The
same examples on a real Slurm are ``test_slurm_examples.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from controller.util.yamlio import iter_documents_text, load_one

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import run

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "manifests" / "examples"
MANIFESTS = sorted(p for p in EXAMPLES.rglob("*.yaml") if p.name != "fake-gpus.yaml")
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"  # what a python image's PATH holds

# what each example reads from gflow (a floor: the scan below must find at least these)
READS = {
    "hello-cpu": {"GFLOW_JOB_NAME", "GFLOW_ATTEMPT", "CUDA_VISIBLE_DEVICES"},
    "train-1gpu": {"GFLOW_JOB_NAME", "GFLOW_ATTEMPT", "CUDA_VISIBLE_DEVICES"},
    "ddp-2gpu": {"CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT"},
    "train-sweep": {"GFLOW_SWEEP_INDEX", "GFLOW_SWEEP_NAME", "CUDA_VISIBLE_DEVICES", "LR", "BATCH"},
    "evaluate": {"CUDA_VISIBLE_DEVICES"},
}


def referenced(text: str) -> set[str]:
    """Upper-case variables a script or command reads: ``$X``, ``${X...}``, ``os.environ["X"]``."""
    shell = re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", text)
    python = re.findall(r"os\.environ(?:\.get\(|\[)\s*['\"]([A-Z_][A-Z0-9_]*)['\"]", text)
    return set(shell) | set(python)


def run_text(manifest: dict) -> str:
    """What the job runs (its comments aside): the command's words or the script."""
    spec = manifest["spec"].get("template") or manifest["spec"]
    return spec.get("script") or " ".join(str(word) for word in spec.get("command") or [])


def exported(path: Path) -> list[dict]:
    code, out, err = run("export", "k8s", "-f", str(path), "--image", "python:3.12-slim")
    assert code == 0, err
    return [load_one(doc) for doc in iter_documents_text(out)]


def pod_env(job: dict, index: int | None = None) -> dict[str, str]:
    """What the container's process starts with: the Job's env (and, for an index, the variables
    the sweep's lookup exports for it)."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    if index is not None:
        lookup = container["command"][2]
        branch = re.search(rf"^\s*{index}\) (export .*?); exec ", lookup, re.M)
        assert branch, lookup
        env |= dict(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", branch.group(1)))
    return env


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_the_k8s_export_is_valid_and_carries_every_gflow_variable_the_example_reads(path: Path):
    from controller.api.jobenv import GFLOW_VARIABLES

    manifest = load_one(path.read_text())
    reads = referenced(run_text(manifest))
    assert READS.get(path.stem, set()) <= reads, "the scan no longer finds what the example reads"
    own = set((manifest["spec"].get("template") or manifest["spec"]).get("env") or {})
    matrix = {k.upper() for k in manifest["spec"].get("matrix") or {}}
    gflows = (reads - own) & (set(GFLOW_VARIABLES) | {"GFLOW_SWEEP_NAME", "GFLOW_SWEEP_INDEX"} | matrix)
    for job in exported(path):
        kubernetes_validate.validate(job, "1.30", strict=True)
        assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "python:3.12-slim"
        indices = range(job["spec"]["completions"]) if job["spec"].get("completionMode") == "Indexed" else [None]
        for index in indices:
            env = pod_env(job, index)
            assert gflows <= set(env), f"{path.stem}: the pod lacks {sorted(gflows - set(env))}"
            assert reads & own <= set(env)  # the manifest's own env goes too


def run_container(job: dict, cwd: Path, index: int | None = None) -> subprocess.CompletedProcess:
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {"PATH": IMAGE_PATH, "HOME": str(cwd)}
    env |= {e["name"]: e["value"] for e in container.get("env", [])}
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return subprocess.run(container["command"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("python3", path=IMAGE_PATH) is None, reason="no python3 on the image's PATH here")
def test_every_example_runs_with_only_the_environment_its_k8s_job_gives(tmp_path: Path):
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy)
    outcomes = {}
    order = [
        "hello-cpu",
        "fail-demo",
        "train-1gpu",
        "ddp-2gpu",
        "infer-shared",
        "eval-after-train",
        "pipeline/preprocess",
        "pipeline/train-sweep",
        "pipeline/evaluate",
    ]
    assert {str(p.relative_to(EXAMPLES).with_suffix("")) for p in MANIFESTS} == set(order), "a new example: add it here"
    for name in order:
        path = copy / f"{name}.yaml"
        [job] = exported(path)
        if job["spec"].get("completionMode") == "Indexed":
            results = [run_container(job, path.parent, i) for i in range(job["spec"]["completions"])]
        else:
            results = [run_container(job, path.parent)]
        outcomes[name] = results
        for result in results:
            expected = 3 if name == "fail-demo" else 0
            assert result.returncode == expected, f"{name}: exit {result.returncode}\n{result.stdout}{result.stderr}"
    hello = outcomes["hello-cpu"][0].stdout
    assert "hello from job hello-cpu (attempt 1)" in hello and "CUDA_VISIBLE_DEVICES='' (empty: a CPU job)" in hello
    assert outcomes["fail-demo"][0].stdout == "hi\n"
    assert "job train-1gpu attempt 1: CUDA_VISIBLE_DEVICES=0\n" in outcomes["train-1gpu"][0].stdout
    ddp = outcomes["ddp-2gpu"][0].stdout
    assert re.search(r"GPUs 0,1 -> .*--nproc-per-node 2 --master-addr 127\.0\.0\.1 --master-port \d+ ", ddp), ddp
    assert "rank 0: done" in ddp and "rank 1: done" in ddp, ddp
    assert "child 3 of train-sweep: lr=0.01 batch=64 on GPU 0" in outcomes["pipeline/train-sweep"][3].stdout
    assert "evaluated 4 results on GPU 0" in outcomes["pipeline/evaluate"][0].stdout


def test_the_examples_folder_exports_whole_and_its_fake_gpu_file_is_skipped_and_said(home):
    """Issue 37 item 5: a non-Job file in the folder made the export fail with exit 1."""
    code, out, err = run("export", "k8s", "-f", str(EXAMPLES), "-R", "--image", "python:3.12-slim")
    assert code == 0, err
    assert f"skipped {EXAMPLES / 'fake-gpus.yaml'}: not a gflow manifest (no apiVersion, kind, metadata or spec)" in err
    names = {load_one(doc)["metadata"]["name"] for doc in iter_documents_text(out)}
    assert names >= {"hello-cpu", "train-1gpu", "ddp-2gpu", "train-sweep", "evaluate"}, names


def test_a_kubernetes_object_beside_a_job_is_skipped_but_a_broken_job_is_an_error(home, tmp_path):
    (tmp_path / "job.yaml").write_text("kind: Job\nmetadata: {name: ok}\nspec: {command: [true]}\n")
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n")
    code, out, err = run("export", "k8s", "-f", str(tmp_path), "--image", "x")
    assert code == 0 and "name: ok" in out, err
    assert f"skipped {tmp_path / 'cm.yaml'}: not a gflow manifest (apiVersion v1 is not gflow's)" in err
    (tmp_path / "bad.yaml").write_text("kind: Job\nmetadata: {name: bad}\nspec: {comand: [true]}\n")
    code, out, err = run("export", "k8s", "-f", str(tmp_path), "--image", "x")
    assert code == 1 and "bad.yaml" in err and out == "", err
