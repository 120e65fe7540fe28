"""``gflowctl run`` end to end: real gflowctl processes, a real gflowd on fake GPUs, real jobs.

Each test submits the way a researcher would (from a project folder, a command in one line, an
unchanged sbatch script) and checks what actually ran: where, with what, and what the CLI said.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import job_status, read_log, wait_phase

from controller.util.yamlio import load_one


def ctl(
    home: Path, *argv: str, cwd: Path | None = None, timeout: float = 60, state: Path | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "GFLOW_HOME": str(home), "XDG_STATE_HOME": str(state or Path(home).parent / "state")}
    return subprocess.run(
        [sys.executable, "-m", "controller.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "train.py").write_text(
        "import os, sys\nprint('ran in', os.getcwd(), 'gpus', os.environ.get('CUDA_VISIBLE_DEVICES'), *sys.argv[1:])\n"
    )
    return folder


pytestmark = pytest.mark.fake_gpus(4)  # what the fake_gpus fixture writes


def created_name(result: subprocess.CompletedProcess, kind: str = "job") -> str:
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith(f"{kind}/") and line.endswith(" created"), result.stdout
    return line[len(kind) + 1 : -len(" created")]


def test_a_command_in_one_line_runs_where_it_was_submitted(home, gflowd, proj, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus)
    submitted = ctl(home, "run", "--gpus", "1", "--", sys.executable, "train.py", "--lr", "0.1", cwd=proj)
    name = created_name(submitted)
    assert name.startswith("train-") and len(name) == len("train-") + 5
    status = wait_phase(home, name, "Succeeded", daemon=daemon)
    assert status["gpus"] == 1 and len(status["devices"]) == 1
    assert read_log(home, name) == f"ran in {proj} gpus {status['devices'][0]} --lr 0.1\n"
    # a real manifest, like one applied: get, describe and edit see an ordinary job
    stored = load_one((home / "jobs" / f"{name}.yaml").read_text())
    assert stored["spec"]["workingDir"] == str(proj) and stored["spec"]["resources"] == {"gpus": 1}
    listed = ctl(home, "get", "jobs", name)
    assert listed.returncode == 0 and "Succeeded" in listed.stdout


def test_quiet_wait_and_follow_exit_with_the_jobs_code(home, gflowd, proj):
    daemon = gflowd()
    quiet = ctl(home, "run", "-q", "--", "true", cwd=proj)
    assert quiet.returncode == 0 and quiet.stdout.strip().startswith("true-") and "\n" not in quiet.stdout.strip()
    wait_phase(home, quiet.stdout.strip(), "Succeeded", daemon=daemon)

    waited = ctl(home, "run", "--wait", "--name", "exit-three", "--", "sh", "-c", "echo out; exit 3", cwd=proj)
    assert waited.returncode == 3, waited.stderr + daemon.stderr()
    assert waited.stdout == "job/exit-three created\n" and "job/exit-three Failed" in waited.stderr

    followed = ctl(home, "run", "--follow", "--name", "talk", "--", "sh", "-c", "echo one; echo two; exit 0", cwd=proj)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "job/talk created\none\ntwo\n"


def test_dry_run_prints_the_manifest_and_writes_nothing(home, proj):
    shown = ctl(
        home,
        "run",
        "--dry-run",
        "-o",
        "yaml",
        "--gpus",
        "2",
        "--time",
        "1:30:00",
        "--name",
        "look",
        "--",
        "python3",
        "train.py",
        cwd=proj,
    )
    assert shown.returncode == 0, shown.stderr
    assert load_one(shown.stdout) == {
        "apiVersion": "gflow.dev/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "look"},  # no environment file: a dry run writes none (applied, login basics)
        "spec": {
            "command": ["python3", "train.py"],
            "workingDir": str(proj),
            "resources": {"gpus": 2},
            "timeLimit": "1h30m",
        },
    }
    assert list((home / "jobs").iterdir()) == []
    assert "gflowd is not running" not in shown.stderr


def test_what_a_dry_run_prints_applies_and_runs(home, gflowd, proj, tmp_path):
    """docs/first-ten-minutes.md: `run --dry-run -o yaml` shows the manifest and `apply -f` submits it.
    The printed manifest named an environment file the dry run never wrote: the job failed (126)."""
    daemon = gflowd()
    shown = ctl(home, "run", "--dry-run", "-o", "yaml", "--name", "printed", "--", "sh", "-c", "echo applied", cwd=proj)
    assert shown.returncode == 0, shown.stderr
    (proj / "job.yaml").write_text(shown.stdout)
    applied = ctl(home, "apply", "-f", "job.yaml", cwd=proj)
    assert applied.returncode == 0 and applied.stdout == "job/printed created\n", applied.stderr
    wait_phase(home, "printed", ("Succeeded", "Failed"), daemon=daemon)
    assert job_status(home, "printed")["phase"] == "Succeeded", job_status(home, "printed")
    assert read_log(home, "printed") == "applied\n"


def test_an_unchanged_sbatch_script_is_honoured_and_pinned(home, gflowd, proj, fake_gpus):
    script = proj / "train.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --job-name=ResNet_Train\n"
        "#SBATCH --gres=gpu:2\n"
        "#SBATCH --time=0-01:30\n"
        "#SBATCH --mem=2G\n"
        "#SBATCH --partition=gpu\n"
        "#SBATCH --output=%x-%j.log\n"
        'echo "version 1 in $PWD with $CUDA_VISIBLE_DEVICES args $*"\n'
        "false\n"
        "echo 'no -e, as in sbatch'\n"
    )
    # no gflowd yet: the job waits in the spec dir, and the script is edited meanwhile
    submitted = ctl(home, "run", "train.sbatch", "a b", "c", cwd=proj)
    name = created_name(submitted)
    assert name.startswith("resnet-train-")
    assert "train.sbatch line 6: #SBATCH --partition is ignored on one machine" in submitted.stderr
    assert "#SBATCH --output" not in submitted.stderr  # honoured (below)
    assert "the job starts when it runs" in submitted.stderr
    script.write_text(script.read_text().replace("version 1", "version 2"))
    stored = load_one((home / "jobs" / f"{name}.yaml").read_text())["spec"]
    assert stored["resources"] == {"gpus": 2, "memory": "2Gi"} and stored["timeLimit"] == "1h30m"

    daemon = gflowd("--fake-gpus", fake_gpus)
    status = wait_phase(home, name, "Succeeded", daemon=daemon)
    assert len(status["devices"]) == 2
    devices = ",".join(map(str, status["devices"]))
    assert read_log(home, name) == f"version 1 in {proj} with {devices} args a b c\nno -e, as in sbatch\n"
    assert (proj / f"ResNet_Train-{name}.log").read_text() == read_log(home, name)  # --output=%x-%j.log


def test_flags_override_directives_and_a_typo_in_gflow_directives_stops(home, proj):
    script = proj / "job.sh"
    script.write_text("#!/bin/sh\n# GFLOW --gpus 1 --priority 4\n#SBATCH --gpus=3\necho hi\n")
    shown = ctl(home, "run", "--dry-run", "-o", "yaml", "--priority", "9", "job.sh", cwd=proj)
    spec = load_one(shown.stdout)["spec"]
    assert spec["resources"] == {"gpus": 1} and spec["priority"] == 9

    script.write_text("#!/bin/sh\n# GFLOW --gpu 1\necho hi\n")
    typo = ctl(home, "run", "job.sh", cwd=proj)
    assert (typo.returncode, typo.stdout) == (1, "")
    assert typo.stderr == "error: job.sh line 2: unknown flag --gpu; did you mean --gpus? (gflowctl run --help)\n"


def test_a_param_sweep_substitutes_each_value(home, gflowd, proj):
    daemon = gflowd()
    submitted = ctl(
        home,
        "run",
        "--param",
        "lr=0.1,0.01",
        "--param",
        "bs=32,64",
        "--",
        "sh",
        "-c",
        "echo lr={lr} bs={bs} env=$LR",
        cwd=proj,
    )
    name = created_name(submitted, "sweep")
    children = [f"{name}-{i}" for i in range(4)]
    for child in children:
        wait_phase(home, child, "Succeeded", daemon=daemon)
    assert [read_log(home, c) for c in children] == [
        "lr=0.1 bs=32 env=0.1\n",
        "lr=0.1 bs=64 env=0.1\n",
        "lr=0.01 bs=32 env=0.01\n",
        "lr=0.01 bs=64 env=0.01\n",
    ]


def test_an_array_with_a_parallelism_limit(home, gflowd, proj):
    daemon = gflowd()
    marker = proj / "go"
    submitted = ctl(
        home,
        "run",
        "--array",
        "0-3%2",
        "--",
        "sh",
        "-c",
        f"while [ ! -e {marker} ]; do sleep 0.05; done; echo $SLURM_ARRAY_TASK_ID $GFLOW_ARRAY_TASK_ID",
        cwd=proj,
    )
    name = created_name(submitted, "sweep")
    wait_phase(home, f"{name}-0", "Running", daemon=daemon)
    wait_phase(home, f"{name}-1", "Running", daemon=daemon)
    assert job_status(home, f"{name}-2")["phase"] == "Pending"
    marker.write_text("")
    for i in range(4):
        wait_phase(home, f"{name}-{i}", "Succeeded", daemon=daemon)
        assert read_log(home, f"{name}-{i}") == f"{i} {i}\n"


def test_after_the_last_job_and_bad_input(home, gflowd, proj):
    daemon = gflowd()
    first = created_name(ctl(home, "run", "--", "sh", "-c", "echo first", cwd=proj))
    second = ctl(home, "run", "--after", "@", "--", "echo", "second", cwd=proj)
    name = created_name(second)
    assert load_one((home / "jobs" / f"{name}.yaml").read_text())["spec"]["dependsOn"] == [{"job": first}]
    wait_phase(home, name, "Succeeded", daemon=daemon)

    for argv, message in [
        (["--gpu", "1", "--", "x"], "error: unknown flag --gpu; did you mean --gpus? (gflowctl run --help)"),
        (["--param", "lr=", "--", "x"], "error: --param lr: give at least one value, e.g. --param lr=0.1,0.01"),
        (
            ["--time", "soon", "--", "x"],
            "error: --time 'soon' does not parse; use e.g. 4h, 90m, 1h30m, or Slurm's 30, 1:30:00, 2-12",
        ),
        (["--after", "ghost", "--", "x"], f"error: --after ghost: no job or sweep of that name on {home}"),
        (
            ["missing.sh"],
            "error: missing.sh: no such script; to run a command put it after --: gflowctl run -- CMD [ARGS...]",
        ),
        (
            ["--name", first, "--", "x"],
            f"error: {first} already exists; choose another --name (gflowctl apply changes an existing job)",
        ),
    ]:
        result = ctl(home, "run", *argv, cwd=proj)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", message + "\n")
    unreadable = proj / "secret.sh"
    unreadable.write_text("echo x\n")
    unreadable.chmod(0)
    if os.geteuid() != 0:  # root reads anything
        result = ctl(home, "run", "secret.sh", cwd=proj)
        assert result.stderr == "error: secret.sh: not readable\n"
    assert sorted(p.name for p in (home / "jobs").glob("*.yaml")) == sorted([f"{first}.yaml", f"{name}.yaml"])
    assert sorted(p.name for p in (home / "jobs").glob(".*")) == sorted([f".{first}.env", f".{name}.env"])


def test_a_taken_name_is_known_from_the_jobs_table_without_the_index(home, gflowd, proj):
    """``run --name``/``--after`` learn whether a name is defined from run/jobs.table (a few MB at
    50k jobs) rather than the whole index: a job and a Sweep defined in one file of another name are
    found there; the index (here emptied, to show which file answers) is not read."""
    daemon = gflowd()
    (home / "jobs" / "several.yaml").write_text(
        "metadata: {name: alpha}\nspec: {command: ['true']}\n---\n"
        "kind: Sweep\nmetadata: {name: grid}\nspec:\n  template: {command: ['true']}\n  matrix: {x: [1]}\n"
    )
    wait_phase(home, "alpha", "Succeeded", daemon=daemon)
    wait_phase(home, "grid-0", "Succeeded", daemon=daemon)
    daemon.terminate()
    index, table = home / "run" / "index.json", home / "run" / "jobs.table"
    assert table.exists()
    index.write_text(json.dumps({"jobs": {}, "sweeps": {}}))
    os.utime(index, (table.stat().st_atime, table.stat().st_mtime))  # as current as the table
    for taken in ("alpha", "grid"):
        done = ctl(home, "run", "--name", taken, "--", "true", cwd=proj)
        assert (done.returncode, done.stderr) == (
            1,
            f"error: {taken} already exists; choose another --name (gflowctl apply changes an existing job)\n",
        )
    done = ctl(home, "run", "--name", "after-grid", "--after", "grid", "--", "true", cwd=proj)
    assert done.returncode == 0, done.stderr
    assert load_one((home / "jobs" / "after-grid.yaml").read_text())["spec"]["dependsOn"] == [{"job": "grid"}]


def test_run_name_is_refused_for_a_job_whose_status_is_written_but_not_yet_in_the_table(home, gflowd, proj):
    """gflowd writes the jobs table up to a second after a status. ``run --name x`` in that gap found
    no x (it lives in another file) and wrote ``jobs/x.yaml``: two files defining x. The gap is made
    by writing the table a real gflowd left without x's row."""
    from controller.util import jobs_table

    daemon = gflowd()
    (home / "jobs" / "pair.yaml").write_text(
        "metadata: {name: x}\nspec: {command: ['true']}\n---\nmetadata: {name: y}\nspec: {command: ['true']}\n"
    )
    wait_phase(home, "x", "Succeeded", daemon=daemon)
    wait_phase(home, "y", "Succeeded", daemon=daemon)
    daemon.terminate()
    table = home / "run" / "jobs.table"
    rows = [row for name, row in jobs_table.read(str(table)).rows.items() if name != "x"]
    table.write_bytes(jobs_table.rewritten(rows))
    assert set(jobs_table.read(str(table)).rows) == {"y"}

    done = ctl(home, "run", "--name", "x", "--", "true", cwd=proj)
    assert (done.returncode, done.stderr) == (
        1,
        "error: x already exists; choose another --name (gflowctl apply changes an existing job)\n",
    )
    assert not (home / "jobs" / "x.yaml").exists()
