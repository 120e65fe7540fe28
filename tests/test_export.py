"""``gflowctl export slurm|k8s``: the pure translations, table-driven, and the verb end to end.

The Kubernetes output is checked against the real batch/v1 schema (``kubernetes-validate``,
offline, strict: an unknown field fails). The scripts the exports generate are run with bash, so a
quoting mistake in a sweep's lookup fails here, not on a cluster.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from controller.api.job import Job
from controller.api.sweep import Sweep
from controller.api.sweep_children import expand
from controller.export import k8s, slurm
from controller.util.yamlio import load_one

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import run

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
        (
            {},
            ["--job-name=train", "--chdir=/lab", "--output=out.log", "--export=ALL"],
            ["--gres", "--time", "--mem", "--nice"],
        ),
        ({"resources": {"gpus": 2}}, ["--gres=gpu:2"], []),
        ({"resources": {"gpus": 0, "gpuType": "a100"}}, [], ["--gres"]),
        ({"timeLimit": "4h30m"}, ["--time=04:30:00"], []),
        ({"timeLimit": "90s"}, ["--time=00:01:30"], []),
        ({"timeLimit": "2d1s"}, ["--time=2-00:00:01"], []),
        ({"resources": {"memory": "16Gi"}}, ["--mem=16G"], []),
        ({"resources": {"cpus": 8}}, ["--cpus-per-task=8"], []),
        ({}, [], ["--cpus-per-task"]),
        ({"resources": {"memory": "1G"}}, ["--mem=954M"], []),
        ({"priority": 10}, [], ["--nice"]),  # an ordinary user may not lower a nice: nice 0
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


@pytest.mark.parametrize(
    "checkpoint, expected",
    [
        ({}, ["--signal=B:USR1@600"]),  # scope Main: the batch shell, as sbatch's B: means
        ({"signal": "SIGUSR2", "before": "90.5s", "scope": "All"}, ["--signal=USR2@91"]),  # rounded up: sooner
        ({"before": "30h"}, ["--signal=B:USR1@65535"]),  # sbatch takes at most 65535 s
        ({"requeue": True}, ["--signal=B:USR1@600", "--requeue"]),
    ],
)
def test_a_checkpoint_goes_out_as_sbatchs_signal_and_requeue(checkpoint, expected):
    j = job(timeLimit="1d", checkpoint=checkpoint)
    for gates in (True, False):  # gflowctl export and the Slurm backend alike
        opts = slurm.sbatch_options(j.spec, "t", chdir="/", output="o", gates=gates)
        assert [o for o in opts if o.startswith(("--signal", "--requeue"))] == expected, opts
    assert not any(
        o.startswith(("--signal", "--requeue")) for o in slurm.sbatch_options(job().spec, "t", chdir="/", output="o")
    )
    # the backend: gflowd stops it at 61 s, Slurm at 2 min: 59 s more, so the signal still comes 50 s before the stop
    spec = job(timeLimit="61s", checkpoint={"before": "50s"}).spec
    assert "--signal=B:USR1@109" in slurm.sbatch_options(spec, "t", chdir="/", output="o", own_deadline=True)
    assert "--signal=B:USR1@50" in slurm.sbatch_options(spec, "t", chdir="/", output="o")  # an export: Slurm's limit


@pytest.mark.e2e
def test_the_exported_checkpoint_says_what_slurm_does_not_do_and_tells_the_job_its_signal(tmp_path: Path):
    exported = slurm.export_job(
        job(command=["env"], checkpoint={"signal": "USR2", "requeue": True}), "t", str(tmp_path)
    )
    assert any("checkpoint.grace: Slurm waits for no confirmation" in n for n in exported.notes), exported.notes
    assert any("scontrol requeue $SLURM_JOB_ID" in n for n in exported.notes), exported.notes
    seen = _run_env(exported.text, {"SLURM_RESTART_COUNT": "2"})
    assert (seen["GFLOW_CHECKPOINT_SIGNAL"], seen["GFLOW_RESTART_COUNT"], seen["GFLOW_ATTEMPT"]) == ("USR2", "2", "3")
    assert slurm.slurm_env("t", job(checkpoint={}).spec, attempt="4")["GFLOW_RESTART_COUNT"] == "3"  # the backend's


def test_sbatch_options_for_the_backend_leave_the_gates_to_gflowd():
    # gflowd already waited for startAfter and holds suspended jobs: Slurm must not wait again
    j = job(startAfter="+2h", suspend=True)
    assert {"--begin=now+7200", "--hold"} <= set(slurm.sbatch_options(j.spec, "t", chdir="/", output="o"))
    opts = slurm.sbatch_options(j.spec, "t", chdir="/", output="o", gates=False)
    assert not any(o.startswith(("--begin", "--hold")) for o in opts)


def test_sbatch_options_partition_account_and_unprivileged_nice():
    j = job(priority=5)
    opts = slurm.sbatch_options(j.spec, "t", chdir="/", output="o", partition="gpu", account="lab")
    assert "--partition=gpu" in opts and "--account=lab" in opts
    assert not any(o.startswith("--nice") for o in opts)  # clamped to 0: omitted
    assert "--nice=-5" in slurm.sbatch_options(j.spec, "t", chdir="/", output="o", operator=True)


@pytest.mark.parametrize(
    "priority, operator, option, comment",
    [
        (10, False, None, "# priority 10 -> nice 0: --nice=-10 would run it sooner, but only Slurm operators"),
        (10, True, "--nice=-10", "# priority 10 -> --nice=-10 (a lower nice runs sooner; needs Slurm operator"),
        (-3, False, "--nice=3", "# priority -3 -> --nice=3 (a higher nice runs later)"),
        (-(2**31), False, "--nice=2147483645", "# priority -2147483648 -> --nice=2147483645"),
        (0, False, None, None),
    ],
)
def test_the_script_says_what_its_priority_became(priority, operator, option, comment):
    text = slurm.export_job(job(priority=priority), "train", "/lab", operator=operator).text
    header = text.split("\n\n")[0].splitlines()
    assert [line for line in header if line.startswith("#SBATCH --nice")] == ([f"#SBATCH {option}"] if option else [])
    said = [line for line in header if line.startswith("# priority")]
    assert said[0].startswith(comment) if comment else not said, header


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
        ({"resources": {"pids": 100}}, "no process limit"),
    ],
)
def test_slurm_notes_say_what_does_not_map(spec, note):
    exported = slurm.export_job(job(**spec), "train", "/lab")
    assert any(note in n for n in exported.notes), exported.notes


@pytest.mark.e2e
def test_slurm_script_runs_the_command_with_its_env(tmp_path: Path):
    j = job(command=["sh", "-c", 'echo "$GREETING|$GFLOW_JOB_NAME|$(pwd)"'], env={"GREETING": "hi, there 'you'"})
    script = slurm.export_job(j, "train", str(tmp_path)).text
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=train\n")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert out == f"hi, there 'you'|train|{tmp_path}\n"


@pytest.mark.e2e
def test_slurm_script_inlines_a_script_under_set_e(tmp_path: Path):
    j = job(command=None, script="echo one\nfalse\necho never\n")
    text = slurm.export_job(j, "train", str(tmp_path)).text
    result = subprocess.run(["bash", "-c", text], capture_output=True, text=True)
    assert result.stdout == "one\n" and result.returncode == 1


@pytest.mark.e2e
def test_slurm_sweep_is_an_array_whose_tasks_are_the_children(tmp_path: Path):
    sw, children = sweep(
        matrix={"lr": ["0.1", "1e-3"], "bs": [32, 64]},
        parallelism=2,
        template={"command": ["sh", "-c", 'echo "$1 $LR $BS $GFLOW_JOB_NAME $GFLOW_SWEEP_INDEX"', "x", "{lr}"]},
    )
    text = slurm.export_sweep(sw, "sw", children, str(tmp_path)).text
    assert "#SBATCH --array=0-3%2" in text
    for task, expected in enumerate(
        ["0.1 0.1 32 sw-0 0", "0.1 0.1 64 sw-1 1", "1e-3 1e-3 32 sw-2 2", "1e-3 1e-3 64 sw-3 3"]
    ):
        out = subprocess.run(
            ["bash", "-c", text], capture_output=True, text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": str(task)}
        )
        assert out.stdout == expected + "\n", out.stderr
    missing = subprocess.run(
        ["bash", "-c", text], capture_output=True, text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": "9"}
    )
    assert missing.returncode == 2 and "no sweep child" in missing.stderr


@pytest.mark.e2e
def test_slurm_sweep_of_indices_keeps_its_own_numbers(tmp_path: Path):
    sw, children = sweep(indices="5,7", template={"command": ["sh", "-c", "echo $GFLOW_SWEEP_INDEX"]})
    text = slurm.export_sweep(sw, "sw", children, str(tmp_path)).text
    assert "#SBATCH --array=0-1\n" in text
    out = subprocess.run(
        ["bash", "-c", text], capture_output=True, text=True, env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"}
    )
    assert out.stdout == "7\n"


def test_a_gpu_type_goes_out_as_the_clusters_gres_type():
    j = job(resources={"gpus": 2, "gpuType": "H100"})
    # gpuType matches GPU names case-insensitively: so does the mapping's key
    opts = slurm.sbatch_options(j.spec, "t", chdir="/", output="o", gpu_types={"h100": "nvidia_h100_80gb_hbm3"})
    assert "--gres=gpu:nvidia_h100_80gb_hbm3:2" in opts


@pytest.mark.parametrize("gpu_types", [{}, {"A100": "a100"}])
def test_a_gpu_type_the_cluster_has_no_name_for_is_an_error_naming_the_setting(gpu_types):
    j = job(resources={"gpus": 1, "gpuType": "H100"})
    with pytest.raises(slurm.UnmappedGpuType) as err:
        slurm.sbatch_options(j.spec, "t", chdir="/", output="o", gpu_types=gpu_types)
    message = str(err.value)
    assert "gpuType H100" in message and "slurm.gpuTypes" in message and "\n" not in message


def _run_env(script: str, env: dict[str, str], path: str | None = None) -> dict[str, str]:
    """Run an exported script with bash (no Slurm) and return the environment its job saw."""
    base = {"PATH": path or os.environ["PATH"], **env}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=base, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.mark.e2e
def test_the_slurm_script_gives_the_job_every_variable_gflowd_gives_it(tmp_path: Path):
    from controller.api.jobenv import GFLOW_VARIABLES

    cpu = slurm.export_job(job(command=["env"]), "train", str(tmp_path)).text
    seen = _run_env(cpu, {"CUDA_VISIBLE_DEVICES": "5"})  # the submitter's own value must not leak in
    assert set(GFLOW_VARIABLES) <= set(seen), set(GFLOW_VARIABLES) - set(seen)
    assert (seen["GFLOW_JOB_NAME"], seen["GFLOW_ATTEMPT"], seen["CUDA_VISIBLE_DEVICES"]) == ("train", "1", "")
    assert (seen["MASTER_ADDR"], seen["CUDA_DEVICE_ORDER"]) == ("127.0.0.1", "PCI_BUS_ID")
    port = int(seen["MASTER_PORT"])
    assert 0 < port < 65536
    with socket.socket() as probe:  # computed on the node when the job starts: free there
        probe.bind(("", port))
    # a requeued job (Slurm counts restarts) is the next attempt; a GPU job keeps the GPUs Slurm gave
    gpu = slurm.export_job(job(command=["env"], resources={"gpus": 2}), "train", str(tmp_path)).text
    seen = _run_env(gpu, {"SLURM_RESTART_COUNT": "2", "CUDA_VISIBLE_DEVICES": "1,3"})
    assert (seen["GFLOW_ATTEMPT"], seen["CUDA_VISIBLE_DEVICES"]) == ("3", "1,3")


@pytest.mark.e2e
def test_the_slurm_scripts_port_without_python_comes_from_the_job_id(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    script = slurm.export_job(job(command=["env"]), "train", str(tmp_path)).text
    seen = _run_env(script, {"SLURM_JOB_ID": "4242"}, path=str(bin_dir))
    assert seen["MASTER_PORT"] == str(20000 + 4242)


def test_the_local_runtime_and_the_exports_share_one_list_of_variables(tmp_path: Path):
    from controller.act.runtime.command import GFLOW_VARIABLES, build_process, job_env
    from controller.api.validation import validate_any
    from controller.model.plan import Launch

    data = {"metadata": {"name": "train"}, "spec": {"command": ["true"], "resources": {"gpus": 1}}}
    admitted = validate_any(
        data, source="t.yaml", path=str(tmp_path / "t.yaml"), stem="t", single=True, doc_index=0, text=""
    )[0]
    local = build_process(
        Launch("train", 2, 1, admitted, [3], ["GPU-x"]), {"PATH": os.environ["PATH"]}, tmp_path / "s", 29501
    ).env
    assert {k: local[k] for k in ("CUDA_VISIBLE_DEVICES", "GFLOW_ATTEMPT", "MASTER_PORT")} == {
        "CUDA_VISIBLE_DEVICES": "3",
        "GFLOW_ATTEMPT": "2",
        "MASTER_PORT": "29501",
    }
    container = k8s.export_job(admitted.job, "train", str(tmp_path), image="img").data["spec"]["template"]["spec"][
        "containers"
    ][0]
    in_k8s = {e["name"] for e in container["env"]}
    assert set(GFLOW_VARIABLES) <= set(local) and set(GFLOW_VARIABLES) <= in_k8s
    given = job_env("train", admitted.job.spec, devices="", attempt="1", generation="1", master_port="1")
    assert tuple(given) == GFLOW_VARIABLES  # the list the tests check is the one the function sets


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
        (
            {"command": None, "script": "echo hi\n"},
            "spec.template.spec.containers.0.command",
            ["bash", "-e", "-c", "echo hi\n"],
        ),
        ({"condaEnv": "torch"}, "spec.template.spec.containers.0.command.0", "conda"),
        ({}, "spec.template.spec.restartPolicy", "Never"),
        ({"resources": {"cpus": 4}}, "spec.template.spec.containers.0.resources.limits.cpu", "4"),
        ({"resources": {"cpus": 4}}, "spec.template.spec.containers.0.resources.requests.cpu", "4"),
        ({"resources": {"cpus": 4}}, "spec.template.spec.containers.0.env.OMP_NUM_THREADS", "4"),
        (
            {"resources": {"cpus": 4}, "env": {"OMP_NUM_THREADS": "1"}},
            "spec.template.spec.containers.0.env.OMP_NUM_THREADS",
            "1",
        ),
    ],
)
def test_k8s_job_fields(spec, path, value):
    exported = k8s.export_job(job(**spec), "train", "/lab", image="img:1")
    validate(exported.data)
    node = exported.data
    for part in _split(path):
        if part == "OMP_NUM_THREADS":  # the container's env is a list of {name, value}
            node = {e["name"]: e["value"] for e in node}
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert node == value
    assert load_one(exported.text) == exported.data  # the printed YAML is that object


def _split(path: str) -> list[str]:
    # "nvidia.com/gpu" is one key
    parts = path.replace("nvidia.com/gpu", "\0").split(".")
    return [p.replace("\0", "nvidia.com/gpu") for p in parts]


@pytest.mark.parametrize("gpus, visible", [(0, ""), (1, "0"), (4, "0,1,2,3")])
def test_k8s_container_sees_the_gpus_the_device_plugin_gave_as_cuda_devices_from_0(gpus, visible):
    # the NVIDIA device plugin exposes the allocated GPUs (NVIDIA_VISIBLE_DEVICES); CUDA numbers
    # them from 0 and nothing sets CUDA_VISIBLE_DEVICES, which jobs read to count their GPUs
    container = k8s.export_job(job(resources={"gpus": gpus}), "train", "/lab", image="i").data["spec"]["template"][
        "spec"
    ]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == visible
    assert (env["MASTER_ADDR"], env["GFLOW_ATTEMPT"], env["GFLOW_JOB_NAME"]) == ("127.0.0.1", "1", "train")
    assert env["MASTER_PORT"].isdigit()


def test_k8s_labels_queue_namespace_and_priority():
    j = Job.model_validate(
        {"metadata": {"name": "train", "labels": {"team": "vision"}}, "spec": {"command": ["x"], "priority": 7}}
    )
    data = k8s.export_job(j, "train", "/lab", image="img", queue="team-a", namespace="ml").data
    validate(data)
    assert data["metadata"]["labels"] == {"team": "vision", "kueue.x-k8s.io/queue-name": "team-a"}
    assert data["metadata"]["namespace"] == "ml"
    assert data["metadata"]["annotations"] == {"gflow.dev/priority": "7"}
    assert data["spec"]["template"]["metadata"]["labels"] == {"team": "vision"}
    assert "kueue.x-k8s.io/queue-name" not in k8s.export_job(j, "train", "/lab", image="img").data["metadata"]["labels"]


@pytest.mark.parametrize(
    "spec, note",
    [
        ({"dependsOn": ["prep"]}, "no dependencies"),
        ({"startAfter": "+1h"}, "no start time"),
        ({"priority": 3}, "PriorityClass"),
        ({"resources": {"gpus": 1, "gpuType": "H100"}}, "nodeSelector"),
        ({"timeLimit": "1h", "backoffLimit": 1}, "all attempts together"),
        ({"resources": {"pids": 64}}, "podPidsLimit"),
    ],
)
def test_k8s_notes_say_what_does_not_map(spec, note):
    exported = k8s.export_job(job(**spec), "train", "/lab", image="img")
    assert any(note in n for n in exported.notes), exported.notes


def test_k8s_invalid_object_is_caught_by_the_schema():
    # the validator is not a rubber stamp: the same object with a wrong type fails
    data = k8s.export_job(job(resources={"gpus": 1}), "train", "/lab", image="i").data
    data["spec"]["backoffLimit"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(data)


@pytest.mark.e2e
def test_k8s_sweep_is_an_indexed_job_whose_indices_are_the_children():
    sw, children = sweep(
        matrix={"lr": ["0.1", "a b"]},
        parallelism=1,
        template={
            "command": ["sh", "-c", 'echo "$1|$LR|$GFLOW_JOB_NAME"', "x", "{lr}"],
            "backoffLimit": 2,
            "resources": {"gpus": 1},
        },
    )
    exported = k8s.export_sweep(sw, "sw", children, "/lab", image="img")
    data = exported.data
    validate(data)
    spec = data["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == (
        "Indexed",
        2,
        1,
        2,
    )
    assert "backoffLimit" not in spec
    container = spec["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for index, expected in enumerate(["0.1|0.1|sw-0", "a b|a b|sw-1"]):
        out = subprocess.run(
            container["command"], capture_output=True, text=True, env={**os.environ, "JOB_COMPLETION_INDEX": str(index)}
        )
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


GPU_TYPED = "spec:\n  command: [python, t.py]\n  resources: {gpus: 1, gpuType: H100}\n"


def test_export_slurm_of_an_unmapped_gpu_type_is_one_line_naming_the_setting_and_flag(files):
    (files / "typed.yaml").write_text(GPU_TYPED)
    code, out, err = run("export", "slurm", "-f", str(files / "typed.yaml"))
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert "typed: gpuType H100" in err and "slurm.gpuTypes" in err and "--gpu-types H100=TYPE" in err
    code, out, err = run("export", "slurm", "-f", str(files / "typed.yaml"), "--gpu-types", "H100=h100,A100=a100")
    assert code == 0 and "#SBATCH --gres=gpu:h100:1" in out, err


def test_export_reads_the_cluster_settings_from_the_homes_config(files):
    (files / "typed.yaml").write_text(GPU_TYPED)
    (files / "home" / "config.yaml").write_text(
        "slurm: {partition: gpu, gpuTypes: {H100: h100}}\nk8s: {image: 'reg.lab/train:1', namespace: ml}\n"
    )
    code, out, err = run("export", "slurm", "-f", str(files / "typed.yaml"))
    assert code == 0, err
    assert "#SBATCH --gres=gpu:h100:1" in out and "#SBATCH --partition=gpu" in out
    code, out, err = run("export", "k8s", "-f", str(files / "typed.yaml"))
    assert code == 0, err
    data = load_one(out)
    validate(data)
    assert data["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.lab/train:1"
    assert data["metadata"]["namespace"] == "ml"
    code, out, _ = run("export", "k8s", "-f", str(files / "typed.yaml"), "--image", "other:2")  # a flag wins
    assert load_one(out)["spec"]["template"]["spec"]["containers"][0]["image"] == "other:2"


def test_export_k8s_without_an_image_is_one_line_saying_where_to_give_one(files):
    code, out, err = run("export", "k8s", "train")
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert "--image" in err and "k8s.image" in err


def test_export_takes_folders_recursion_and_stdin_like_apply(files):
    folder = files / "many"
    (folder / "sub").mkdir(parents=True)
    (folder / "one.yaml").write_text("spec: {command: [x]}\n")
    (folder / "sub" / "two.yaml").write_text("spec: {command: [y]}\n")
    code, out, err = run("export", "k8s", "-f", str(folder), "--image", "i")
    assert code == 0, err
    assert [load_one(d)["metadata"]["name"] for d in out.split("---\n")] == ["one"]
    code, out, err = run("export", "k8s", "-f", str(folder), "-R", "--image", "i")
    assert code == 0, err
    assert [load_one(d)["metadata"]["name"] for d in out.split("---\n")] == ["one", "two"]
    code, out, err = run("export", "slurm", "two", "-f", str(folder), "-R")
    assert code == 0 and "#SBATCH --job-name=two" in out, err
    code, out, err = run(
        "export", "k8s", "-f", "-", "--image", "i", stdin="metadata: {name: piped}\nspec: {command: [z]}\n"
    )
    assert code == 0 and load_one(out)["metadata"]["name"] == "piped", err
    # every bad file is named at once, one line each
    (folder / "bad1.yaml").write_text("spec: {command: [x], resources: {gpus: -1}}\n")
    (folder / "bad2.yaml").write_text("spec: {comand: [x]}\n")
    code, out, err = run("export", "k8s", "-f", str(folder), "--image", "i")
    assert code == 1 and out == ""
    assert err.count("\n") == 2 and "bad1.yaml" in err and "bad2.yaml" in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["export", "slurm"], "name a job or a file"),
        (["export", "slurm", "nope"], "job/nope not found"),
        (["export", "slurm", "-f", "/nonexistent.yaml"], "no such file"),
        (["export", "slurm", "train", "--gpu-types", "H100"], "--gpu-types: expected GPUTYPE=GRESTYPE"),
        (["export", "slurm", "train", "--gpu-types", "H100=h100:2"], "--gpu-types: H100: 'h100:2' is not a GRES type"),
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
    assert "needs a container image" in err and err.count("\n") == 2  # every error at once


def test_export_slurm_operator_flag_lowers_the_nice_and_without_it_a_user_may_submit(tmp_path):
    from test_cli import run

    path = tmp_path / "train.yaml"
    path.write_text("metadata: {name: train}\nspec:\n  command: [python, train.py]\n  priority: 10\n")
    code, out, err = run("--home", str(tmp_path / "home"), "export", "slurm", "-f", str(path), "--operator")
    assert code == 0 and "#SBATCH --nice=-10" in out, err
    code, out, err = run("--home", str(tmp_path / "home"), "export", "slurm", "-f", str(path))
    assert code == 0 and "--nice" not in out.split("# priority")[0], out
