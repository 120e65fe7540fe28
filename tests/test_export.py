"""``gflowctl export slurm|k8s``: the pure translations, table-driven, and the verb end to end.

The Kubernetes output is checked against the real batch/v1 schema (``kubernetes-validate``,
offline, strict: an unknown field fails). The scripts the exports generate are run with bash, so a
quoting mistake in a sweep's lookup fails here, not on a cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from controller.api.job import Job
from controller.api.sweep import Sweep
from controller.decide.sweeps import expand
from controller.export import k8s, slurm
from controller.util.yamlio import load_one

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import run  # noqa: E402

K8S_VERSION = "1.30"


def job(**spec) -> Job:
    spec.setdefault("command", ["python", "train.py"])
    return Job.model_validate({"metadata": {"name": "train"}, "spec": spec})


def sweep(**spec) -> tuple[Sweep, list]:
    spec.setdefault("template", {"command": ["python", "train.py", "--lr", "{lr}"]})
    sw = Sweep.model_validate({"kind": "Sweep", "metadata": {"name": "sw"}, "spec": spec})
    _, children = expand(sw, "sw", source="sw.yaml", path="/x/sw.yaml", doc_index=0, owner_uid=-1, mtime_ns=0)
    return sw, children


def validate(data: dict) -> None:
    kubernetes_validate.validate(data, K8S_VERSION, strict=True)


# -- Slurm -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "spec, expected, absent",
    [
        ({}, ["--job-name=train", "--chdir=/lab", "--output=out.log", "--export=ALL"], ["--gres", "--time", "--mem", "--nice"]),
        ({"resources": {"gpus": 2}}, ["--gres=gpu:2"], []),
        ({"resources": {"gpus": 1, "gpuType": "a100"}}, ["--gres=gpu:a100:1"], []),
        ({"resources": {"gpus": 0, "gpuType": "a100"}}, [], ["--gres"]),
        ({"timeLimit": "4h30m"}, ["--time=04:30:00"], []),
        ({"timeLimit": "90s"}, ["--time=00:01:30"], []),
        ({"timeLimit": "2d1s"}, ["--time=2-00:00:01"], []),
        ({"resources": {"memory": "16Gi"}}, ["--mem=16G"], []),
        ({"resources": {"memory": "1G"}}, ["--mem=954M"], []),
        ({"priority": 10}, ["--nice=-10"], []),
        ({"priority": -3}, ["--nice=3"], []),
        ({"suspend": True}, ["--hold"], []),
        ({"startAfter": "+2h"}, ["--begin=now+7200"], []),
        ({"workingDir": "sub"}, ["--chdir=/lab/sub"], []),
        ({"workingDir": "/data/run"}, ["--chdir=/data/run"], []),
    ],
)
def test_sbatch_options(spec, expected, absent):
    j = job(**spec)
    from controller.export import workdir

    opts = slurm.sbatch_options(j.spec, "train", chdir=workdir(j.spec.working_dir, "/lab"), output="out.log")
    for option in expected:
        assert option in opts
    for prefix in absent:
        assert not any(o == prefix or o.startswith(prefix + "=") for o in opts), opts


def test_sbatch_options_for_the_backend_leave_the_gates_to_gflowd():
    # gflowd already waited for startAfter and holds suspended jobs: Slurm must not wait again
    j = job(startAfter="+2h", suspend=True)
    assert {"--begin=now+7200", "--hold"} <= set(slurm.sbatch_options(j.spec, "t", chdir="/", output="o"))
    opts = slurm.sbatch_options(j.spec, "t", chdir="/", output="o", gates=False)
    assert not any(o.startswith(("--begin", "--hold")) for o in opts)


def test_sbatch_options_partition_account_and_unprivileged_nice():
    j = job(priority=5)
    opts = slurm.sbatch_options(j.spec, "t", chdir="/", output="o", partition="gpu", account="lab", allow_negative_nice=False)
    assert "--partition=gpu" in opts and "--account=lab" in opts
    assert not any(o.startswith("--nice") for o in opts)  # clamped to 0: omitted


@pytest.mark.parametrize(
    "spec, note",
    [
        ({"dependsOn": ["prep"]}, "--dependency=afterok:ID"),
        ({"dependsOn": [{"job": "prep", "condition": "Failed"}]}, "--dependency=afternotok:ID"),
        ({"dependsOn": [{"job": "prep", "condition": "Finished"}]}, "--dependency=afterany:ID"),
        ({"backoffLimit": 2}, "does not retry"),
        ({"resources": {"gpus": 1, "gpuMemory": "4Gi"}, "sharing": "Shared"}, "whole"),
        ({"timeLimit": "90s"}, "rounds it up"),
        ({"priority": 4}, "operator rights"),
    ],
)
def test_slurm_notes_say_what_does_not_map(spec, note):
    exported = slurm.export_job(job(**spec), "train", "/lab")
    assert any(note in n for n in exported.notes), exported.notes


def test_slurm_script_runs_the_command_with_its_env(tmp_path: Path):
    j = job(command=["sh", "-c", 'echo "$GREETING|$GFLOW_JOB_NAME|$(pwd)"'], env={"GREETING": "hi, there 'you'"})
    script = slurm.export_job(j, "train", str(tmp_path)).text
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=train\n")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert out == f"hi, there 'you'|train|{tmp_path}\n"


def test_slurm_script_inlines_a_script_under_set_e(tmp_path: Path):
    j = job(command=None, script="echo one\nfalse\necho never\n")
    text = slurm.export_job(j, "train", str(tmp_path)).text
    result = subprocess.run(["bash", "-c", text], capture_output=True, text=True)
    assert result.stdout == "one\n" and result.returncode == 1


def test_slurm_sweep_is_an_array_whose_tasks_are_the_children(tmp_path: Path):
    sw, children = sweep(matrix={"lr": ["0.1", "1e-3"], "bs": [32, 64]}, parallelism=2,
                         template={"command": ["sh", "-c", 'echo "$1 $LR $BS $GFLOW_JOB_NAME $GFLOW_SWEEP_INDEX"', "x", "{lr}"]})
    text = slurm.export_sweep(sw, "sw", children, str(tmp_path)).text
    assert "#SBATCH --array=0-3%2" in text
    for task, expected in enumerate(["0.1 0.1 32 sw-0 0", "0.1 0.1 64 sw-1 1", "1e-3 1e-3 32 sw-2 2", "1e-3 1e-3 64 sw-3 3"]):
        out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": str(task)})
        assert out.stdout == expected + "\n", out.stderr
    missing = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": "9"})
    assert missing.returncode == 2 and "no sweep child" in missing.stderr


def test_slurm_sweep_of_indices_keeps_its_own_numbers(tmp_path: Path):
    sw, children = sweep(indices="5,7", template={"command": ["sh", "-c", "echo $GFLOW_SWEEP_INDEX"]})
    text = slurm.export_sweep(sw, "sw", children, str(tmp_path)).text
    assert "#SBATCH --array=0-1\n" in text
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"})
    assert out.stdout == "7\n"


# -- Kubernetes ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "spec, path, value",
    [
        ({"resources": {"gpus": 2}}, "spec.template.spec.containers.0.resources.limits.nvidia.com/gpu", "2"),
        ({"resources": {"memory": "16Gi"}}, "spec.template.spec.containers.0.resources.limits.memory", "16Gi"),
        ({"resources": {"memory": "1G"}}, "spec.template.spec.containers.0.resources.requests.memory", "954Mi"),
        ({"timeLimit": "4h30m"}, "spec.activeDeadlineSeconds", 16200),
        ({"timeLimit": "1.5s"}, "spec.activeDeadlineSeconds", 2),
        ({"backoffLimit": 3}, "spec.backoffLimit", 3),
        ({}, "spec.backoffLimit", 0),
        ({"suspend": True}, "spec.suspend", True),
        ({"cancelled": True}, "spec.suspend", True),
        ({"ttlSecondsAfterFinished": "1h"}, "spec.ttlSecondsAfterFinished", 3600),
        ({"terminationGracePeriod": "30s"}, "spec.template.spec.terminationGracePeriodSeconds", 30),
        ({"workingDir": "sub"}, "spec.template.spec.containers.0.workingDir", "/lab/sub"),
        ({"env": {"A": "1"}}, "spec.template.spec.containers.0.env.0", {"name": "A", "value": "1"}),
        ({"command": None, "script": "echo hi\n"}, "spec.template.spec.containers.0.command", ["bash", "-e", "-c", "echo hi\n"]),
        ({"condaEnv": "torch"}, "spec.template.spec.containers.0.command.0", "conda"),
        ({}, "spec.template.spec.restartPolicy", "Never"),
    ],
)
def test_k8s_job_fields(spec, path, value):
    exported = k8s.export_job(job(**spec), "train", "/lab", image="img:1")
    validate(exported.data)
    node = exported.data
    for part in _split(path):
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert node == value
    assert load_one(exported.text) == exported.data  # the printed YAML is that object


def _split(path: str) -> list[str]:
    # "nvidia.com/gpu" is one key
    parts = path.replace("nvidia.com/gpu", "\0").split(".")
    return [p.replace("\0", "nvidia.com/gpu") for p in parts]


def test_k8s_labels_queue_namespace_and_priority():
    j = Job.model_validate({"metadata": {"name": "train", "labels": {"team": "vision"}}, "spec": {"command": ["x"], "priority": 7}})
    data = k8s.export_job(j, "train", "/lab", image="img", queue="team-a", namespace="ml").data
    validate(data)
    assert data["metadata"]["labels"] == {"team": "vision", "kueue.x-k8s.io/queue-name": "team-a"}
    assert data["metadata"]["namespace"] == "ml"
    assert data["metadata"]["annotations"] == {"gflow.dev/priority": "7"}
    assert data["spec"]["template"]["metadata"]["labels"] == {"team": "vision"}
    assert "kueue.x-k8s.io/queue-name" not in k8s.export_job(j, "train", "/lab").data["metadata"]["labels"]


@pytest.mark.parametrize(
    "spec, note",
    [
        ({}, "--image"),
        ({"dependsOn": ["prep"]}, "no dependencies"),
        ({"startAfter": "+1h"}, "no start time"),
        ({"priority": 3}, "PriorityClass"),
        ({"resources": {"gpus": 1, "gpuType": "H100"}}, "nodeSelector"),
        ({"timeLimit": "1h", "backoffLimit": 1}, "all attempts together"),
    ],
)
def test_k8s_notes_say_what_does_not_map(spec, note):
    exported = k8s.export_job(job(**spec), "train", "/lab")
    assert any(note in n for n in exported.notes), exported.notes


def test_k8s_invalid_object_is_caught_by_the_schema():
    # the validator is not a rubber stamp: the same object with a wrong type fails
    data = k8s.export_job(job(resources={"gpus": 1}), "train", "/lab", image="i").data
    data["spec"]["backoffLimit"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(data)


def test_k8s_sweep_is_an_indexed_job_whose_indices_are_the_children():
    sw, children = sweep(matrix={"lr": ["0.1", "a b"]}, parallelism=1,
                         template={"command": ["sh", "-c", 'echo "$1|$LR|$GFLOW_JOB_NAME"', "x", "{lr}"], "backoffLimit": 2,
                                   "resources": {"gpus": 1}})
    exported = k8s.export_sweep(sw, "sw", children, "/lab", image="img")
    data = exported.data
    validate(data)
    spec = data["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == ("Indexed", 2, 1, 2)
    assert "backoffLimit" not in spec
    container = spec["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for index, expected in enumerate(["0.1|0.1|sw-0", "a b|a b|sw-1"]):
        out = subprocess.run(container["command"], capture_output=True, text=True,
                             env={**os.environ, "JOB_COMPLETION_INDEX": str(index)})
        assert out.stdout == expected + "\n", out.stderr


# -- the verb --------------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "jobs").mkdir(parents=True)
    (tmp_path / "home" / "jobs" / "train.yaml").write_text(
        "spec:\n  command: [python, t.py]\n  resources: {gpus: 1}\n  timeLimit: 10m\n"
    )
    (tmp_path / "two.yaml").write_text(
        "metadata: {name: a}\nspec: {command: [x]}\n---\nmetadata: {name: b}\nspec: {command: [y], dependsOn: [a]}\n"
    )
    (tmp_path / "sw.yaml").write_text(
        "kind: Sweep\nmetadata: {name: sw}\nspec:\n  indices: 0-2\n  template: {command: [echo, '{index}']}\n"
    )
    return tmp_path


def test_export_by_name_from_the_spec_dir(files):
    code, out, err = run("export", "slurm", "train")
    assert code == 0, err
    assert "#SBATCH --gres=gpu:1" in out and "#SBATCH --time=00:10:00" in out
    assert f"#SBATCH --chdir={files / 'home' / 'jobs'}" in out
    code, out, err = run("export", "k8s", "train", "--queue", "q", "--image", "img")
    assert code == 0, err
    validate(load_one(out))


def test_export_k8s_of_a_multi_document_file_prints_each_job(files):
    code, out, err = run("export", "k8s", "-f", str(files / "two.yaml"), "--image", "img")
    assert code == 0, err
    docs = out.split("---\n")
    assert [load_one(d)["metadata"]["name"] for d in docs] == ["a", "b"]
    for doc in docs:
        validate(load_one(doc))
    assert "warning: b: dependsOn a (Succeeded)" in err


def test_export_slurm_of_a_multi_document_file_needs_a_name(files):
    code, _, err = run("export", "slurm", "-f", str(files / "two.yaml"))
    assert code == 1 and "defines 2 jobs (a, b)" in err
    code, out, err = run("export", "slurm", "b", "-f", str(files / "two.yaml"))
    assert code == 0 and "#SBATCH --job-name=b" in out and "--dependency=afterok:ID" in err


def test_export_a_sweep_and_one_of_its_children(files):
    code, out, _ = run("export", "slurm", "-f", str(files / "sw.yaml"))
    assert code == 0 and "#SBATCH --array=0-2\n" in out
    code, out, _ = run("export", "slurm", "sw-1", "-f", str(files / "sw.yaml"))
    assert code == 0 and "--array" not in out and "exec echo 1" in out and "export GFLOW_SWEEP_INDEX=1" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["export", "slurm"], "name a job or a file"),
        (["export", "slurm", "nope"], "job/nope not found"),
        (["export", "slurm", "-f", "/nonexistent.yaml"], "no such file"),
        (["export", "yaml", "train"], "invalid choice"),
    ],
)
def test_export_user_errors_are_one_line(files, argv, message):
    code, out, err = run(*argv)
    assert code == 1 and out == ""
    assert message in err and err.count("\n") == 1, err


def test_export_of_an_invalid_manifest_names_the_field(files):
    bad = files / "bad.yaml"
    bad.write_text("spec:\n  command: [x]\n  resources: {gpus: -1}\n")
    code, _, err = run("export", "k8s", "-f", str(bad))
    assert code == 1 and "spec.resources.gpus" in err
