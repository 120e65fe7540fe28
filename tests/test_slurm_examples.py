"""Every shipped example on a real Slurm (``hack/slurm-dev.sh``: slurmctld + slurmd on localhost,
2 GPUs of GRES type h100 and 2 of type a100, like ``manifests/examples/fake-gpus.yaml``).

Two ways in, both as a user would take them:
- ``gflowctl export slurm`` of each example, submitted with ``sbatch`` unchanged (dependencies
  given as ``--dependency=afterok:ID``, as the export's warning says), run to its expected end:
  success for all, exit code 3 for ``fail-demo``, which fails on purpose;
- ``gflowd --backend slurm`` with the examples copied into its spec dir.

Skipped, with the reason, where Slurm cannot run (see ``test_slurm_e2e.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from helpers import job_status, read_log, wait_for, wait_phase
from test_cli import run
from test_slurm_e2e import cluster_daemon, pytestmark, slurm, squeue  # noqa: F401  (fixtures, skip mark)

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "manifests" / "examples"
GPU_TYPES = "H100=h100,A100=a100"  # the dev cluster's gres.conf types for what the examples ask for
FINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "BOOT_FAIL",
    "PREEMPTED",
    "DEADLINE",
}


def export_slurm(path: Path, logs: Path, name: str | None = None) -> str:
    args = [
        "export",
        "slurm",
        *([name] if name else []),
        "-f",
        str(path),
        "--gpu-types",
        GPU_TYPES,
        "--output",
        str(logs / "%x-%A_%a.log" if "sweep" in path.stem else logs / "%x.log"),
    ]
    code, out, err = run(*args)
    assert code == 0, err
    return out


def sbatch(env: dict[str, str], script: str, where: Path, *options: str) -> str:
    path = where / f"submit-{len(list(where.glob('submit-*')))}.sh"
    path.write_text(script)
    result = subprocess.run(["sbatch", "--parsable", *options, str(path)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"sbatch refused the export: {result.stderr}\n{script}"
    return result.stdout.strip().split(";")[0]


def ended(env: dict[str, str], ids: dict[str, str], tasks: dict[str, int]) -> dict[str, list[dict]] | None:
    """name -> its Slurm jobs (an array's tasks), once every one of them has ended."""
    jobs = squeue(env)
    out = {}
    for name, job_id in ids.items():
        mine = [j for j in jobs if str(j["job_id"]) == job_id or str(j.get("array_job_id")) == job_id]
        mine = [
            j for j in mine if not (tasks.get(name) and j.get("array_task_id") in (None, ""))
        ]  # the array's own record
        if len(mine) < tasks.get(name, 1) or any(j["job_state"] not in FINAL for j in mine):
            return None
        out[name] = mine
    return out


def test_every_examples_slurm_export_runs_unchanged_on_slurm(slurm, tmp_path: Path):
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy)  # the pipeline writes .work next to its manifests
    logs = tmp_path / "logs"
    logs.mkdir()
    ids: dict[str, str] = {}

    def submit(name: str, *options: str) -> None:
        path = copy / f"{name}.yaml"
        ids[name] = sbatch(slurm, export_slurm(path, logs), tmp_path, *options)

    for name in ("hello-cpu", "fail-demo", "train-1gpu", "ddp-2gpu", "infer-shared", "pipeline/preprocess"):
        submit(name)
    submit("eval-after-train", f"--dependency=afterok:{ids['train-1gpu']}")
    submit("pipeline/train-sweep", f"--dependency=afterok:{ids['pipeline/preprocess']}")
    submit("pipeline/evaluate", f"--dependency=afterok:{ids['pipeline/train-sweep']}")  # every task of the array

    def states() -> str:
        return "; ".join(
            f"{j['job_id']} {j.get('name')} {j['job_state']} {j.get('state_reason')}"
            for j in squeue(slurm)
            if str(j["job_id"]) in ids.values() or str(j.get("array_job_id")) in ids.values()
        )

    done = wait_for(
        lambda: ended(slurm, ids, {"pipeline/train-sweep": 4}),
        timeout=180,
        interval=0.5,
        message=lambda: f"every example to end in Slurm: {states()}",
    )

    def log(name: str) -> str:
        return (logs / f"{name}.log").read_text()

    outcome = {name: sorted(j["job_state"] for j in jobs) for name, jobs in done.items()}
    expected = {name: ["COMPLETED"] for name in ids} | {
        "fail-demo": ["FAILED"],
        "pipeline/train-sweep": ["COMPLETED"] * 4,
    }
    assert outcome == expected, {
        n: log(n.split("/")[-1]) for n in outcome if outcome[n] != expected[n] and "sweep" not in n
    }
    assert done["fail-demo"][0]["exit_code"] == 3 << 8 and log("fail-demo") == "hi\n"
    hello = log("hello-cpu")
    assert "hello from job hello-cpu (attempt 1)" in hello and "CUDA_VISIBLE_DEVICES='' (empty: a CPU job)" in hello
    train = log("train-1gpu")
    assert re.search(r"job train-1gpu attempt 1: CUDA_VISIBLE_DEVICES=[01]\n", train), train  # an h100 (GPUs 0-1)
    assert "epoch 3/3" in train
    ddp = log("ddp-2gpu")
    assert re.search(r"--nproc-per-node 2 --master-addr 127\.0\.0\.1 --master-port \d+ ", ddp), ddp
    assert "rank 0: done" in ddp and "rank 1: done" in ddp, ddp
    assert "request 3: ok" in log("infer-shared")
    assert "accuracy" in log("eval-after-train")
    sweep_logs = sorted(logs.glob("train-sweep-*.log"))
    assert len(sweep_logs) == 4 and all("trained on 1000 examples" in p.read_text() for p in sweep_logs)
    assert "evaluated 4 results" in log("evaluate")


def test_the_examples_run_under_gflowd_with_the_slurm_backend(slurm, cluster_daemon, home: Path):
    for path in EXAMPLES.glob("*.yaml"):
        if path.name != "fake-gpus.yaml":
            shutil.copy(path, home / "jobs" / path.name)
    shutil.copytree(EXAMPLES / "pipeline", home / "jobs" / "pipeline")
    daemon = cluster_daemon("--slurm-gpu-types", GPU_TYPES)

    def done(name: str, phase: str = "Succeeded") -> dict:
        return wait_phase(home, name, phase, timeout=120, daemon=daemon)

    done("hello-cpu")
    assert "hello from job hello-cpu (attempt 1)" in read_log(home, "hello-cpu")
    failed = done("fail-demo", "Failed")
    assert (failed["reason"], failed["exitCode"]) == ("Error", 3) and read_log(home, "fail-demo") == "hi\n"
    train = done("train-1gpu")
    assert train["devices"] in ([0], [1]), train  # Slurm gave an h100
    assert "epoch 3/3" in read_log(home, "train-1gpu")
    done("ddp-2gpu")
    ddp = read_log(home, "ddp-2gpu")
    assert re.search(r"--nproc-per-node 2 --master-addr 127\.0\.0\.1 --master-port \d+ ", ddp), ddp
    assert "rank 0: done" in ddp and "rank 1: done" in ddp, ddp
    done("infer-shared")
    assert "request 3: ok" in read_log(home, "infer-shared")
    evaluated = done("eval-after-train")
    assert evaluated["startTime"] >= job_status(home, "train-1gpu")["completionTime"], evaluated
    done("evaluate")
    assert "evaluated 4 results" in read_log(home, "evaluate")
    assert all(job_status(home, f"train-sweep-{i}")["phase"] == "Succeeded" for i in range(4))


def test_a_gpu_type_without_a_slurm_name_fails_in_one_line_naming_the_setting(slurm, cluster_daemon, home: Path):
    daemon = cluster_daemon()
    shutil.copy(EXAMPLES / "train-1gpu.yaml", home / "jobs" / "train-1gpu.yaml")
    status = wait_phase(home, "train-1gpu", "Failed", timeout=30, daemon=daemon)
    assert "gpuType H100" in status["message"] and "slurm.gpuTypes" in status["message"], status
    assert "\n" not in status["message"] and "backendJobId" not in status  # never handed to Slurm


def test_a_job_given_gpus_of_two_types_shows_every_one(slurm, cluster_daemon, home: Path):
    """Issue 37 item 2: Slurm 22.05 names a node's GPUs of two types in one ``gres_detail`` string,
    ``gpu:h100:1(IDX:1),gpu:a100:1(IDX:2)``; the status showed the first entry's only. With one
    h100 and one a100 taken, the shipped ddp-2gpu example (2 GPUs, no gpuType) gets one of each."""
    holder = subprocess.run(
        ["sbatch", "--parsable", "--gres=gpu:h100:1,gpu:a100:1", "--job-name=h31-holder", "--output=/dev/null"]
        + ["--wrap", "sleep 600"],
        env=slurm,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        wait_for(
            lambda: any(str(j["job_id"]) == holder and j["job_state"] == "RUNNING" for j in squeue(slurm)),
            timeout=60,
            message="the job holding one GPU of each type to run",
        )
        text = (EXAMPLES / "ddp-2gpu.yaml").read_text()
        # about 9 s: long enough for gflowd to see it running, as a real training run would be
        (home / "jobs" / "ddp-2gpu.yaml").write_text(
            text.replace("\nspec:\n", '\nspec:\n  env: {DEMO_PACE: "10"}\n', 1)
        )
        daemon = cluster_daemon()
        wait_phase(home, "ddp-2gpu", ("Running", "Succeeded"), timeout=120, daemon=daemon)
        status = wait_phase(home, "ddp-2gpu", "Succeeded", timeout=120, daemon=daemon)
    finally:
        subprocess.run(["scancel", holder], env=slurm, capture_output=True)
    given = re.search(r"^GPUs (\S+) ->", read_log(home, "ddp-2gpu"), re.M)
    assert given, read_log(home, "ddp-2gpu")
    devices = [int(d) for d in given.group(1).split(",")]  # what Slurm exported to the job
    assert len(devices) == 2 and {d // 2 for d in devices} == {0, 1}, devices  # an h100 (0-1) and an a100 (2-3)
    assert status["devices"] == devices, status


def test_an_ordinary_user_submits_the_train_export_with_sbatch(slurm, tmp_path: Path):
    """Issue 37 item 3: ``priority: 10`` was exported as ``#SBATCH --nice=-10``, which sbatch refuses
    for anyone but a Slurm operator ("Invalid --nice value"). A ``useradd`` user exports the
    shipped train-1gpu example with their own gflowctl and submits it with their own sbatch."""
    from shared_box import make_box, remove_box

    box = make_box()
    try:
        manifest = box.project / "train-1gpu.yaml"
        shutil.copy(EXAMPLES / "train-1gpu.yaml", manifest)
        os.chown(manifest, box.user.pw_uid, box.user.pw_gid)
        env = box.env(SLURM_CONF=slurm["SLURM_CONF"])
        exported = box.gflowctl(
            "export", "slurm", "-f", str(manifest), "--gpu-types", GPU_TYPES, "--output", "%x.log", env=env
        )
        assert exported.returncode == 0, exported.stderr
        script = box.project / "train.sbatch"
        script.write_text(exported.stdout)
        os.chown(script, box.user.pw_uid, box.user.pw_gid)
        submitted = subprocess.run(
            ["sbatch", "--parsable", str(script)],
            env=env,
            cwd=box.project,
            capture_output=True,
            text=True,
            user=box.user.pw_uid,
            group=box.user.pw_gid,
            extra_groups=[],
        )
        assert submitted.returncode == 0, f"sbatch refused the export: {submitted.stderr}\n{exported.stdout}"
        job_id = submitted.stdout.strip().split(";")[0]
        header = exported.stdout.split("\n\n")[0]
        assert "# priority 10 -> nice 0" in header and "#SBATCH --nice" not in header, header
        [job] = wait_for(
            lambda: [j for j in squeue(slurm) if str(j["job_id"]) == job_id and j["job_state"] in FINAL] or None,
            timeout=120,
            message=lambda: f"the user's job {job_id} to end in Slurm",
        )
        log = (box.project / "train-1gpu.log").read_text()
        assert job["job_state"] == "COMPLETED" and job["user_id"] == box.user.pw_uid, (job, log)
        assert "epoch 3/3" in log, log
    finally:
        remove_box(box)
