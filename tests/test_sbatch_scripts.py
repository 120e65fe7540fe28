"""Issue 33 item 8: a script written for Slurm gets the variables such scripts read and writes its
``#SBATCH --output/--error`` files (``%x %j %A %a``), made by the job's user in its working
directory. ``gflowctl run SCRIPT`` by a ``useradd`` user, against a root gflowd."""

from __future__ import annotations

import os

import pytest
from helpers import read_log, wait_phase
from shared_box import make_box, remove_box

from controller.api.submit import read_directives, slurm_job


@pytest.fixture
def box():
    made = make_box()
    yield made
    remove_box(made)


def script(box, name: str, text: str):
    path = box.project / name
    path.write_text(text)
    os.chown(path, box.user.pw_uid, box.user.pw_gid)
    return path


def owned_text(box, path):
    info = path.stat()
    assert info.st_uid == box.user.pw_uid, f"{path} is not the user's"
    return path.read_text()


def test_an_sbatch_script_gets_slurm_variables_and_its_output_files(box, gflowd):
    daemon = gflowd(home=box.home)
    script(
        box,
        "exp.sh",
        "#!/bin/bash\n#SBATCH --job-name=exp\n#SBATCH --output=out/%x-%j.out\n"
        "#SBATCH --error=out/%x-%j.err\n#SBATCH --cpus-per-task=1\n"
        "echo id=$SLURM_JOB_ID name=$SLURM_JOB_NAME cpus=$SLURM_CPUS_PER_TASK dir=$SLURM_SUBMIT_DIR\n"
        "echo oops >&2\n",
    )
    result = box.gflowctl("run", "-q", "exp.sh")
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip()
    wait_phase(box.home, name, "Succeeded", daemon=daemon, timeout=60)
    out, err = box.project / "out" / f"exp-{name}.out", box.project / "out" / f"exp-{name}.err"
    assert owned_text(box, out) == f"id={name} name=exp cpus=1 dir={box.project}\n"
    assert owned_text(box, err) == "oops\n"
    assert "oops" in read_log(box.home, name), "gflowctl logs no longer shows the job's output"


def test_an_array_script_names_its_tasks_files(box, gflowd):
    daemon = gflowd(home=box.home)
    script(
        box,
        "arr.sh",
        "#!/bin/bash\n#SBATCH --array=0-1\n#SBATCH -o logs/%A_%a.log\n"
        "echo task=$SLURM_ARRAY_TASK_ID of=$SLURM_ARRAY_JOB_ID id=$SLURM_JOB_ID\n",
    )
    result = box.gflowctl("run", "-q", "arr.sh")
    assert result.returncode == 0, result.stderr
    sweep = result.stdout.strip()
    for index in (0, 1):
        wait_phase(box.home, f"{sweep}-{index}", "Succeeded", daemon=daemon, timeout=60)
        path = box.project / "logs" / f"{sweep}_{index}.log"
        assert owned_text(box, path) == f"task={index} of={sweep} id={sweep}-{index}\n"


def test_a_plain_script_gets_no_slurm_variables():
    options = read_directives("#!/bin/bash\n# GFLOW --gpus 0\necho\n", "x.sh").options
    assert "sbatch_script" not in options


def test_percent_fields_follow_sbatch():
    job = slurm_job(
        {"name": "exp", "slurm_output": "o/%x.%j.%%.out", "slurm_error": "e/%A-%3a.err"},
        "exp-ab12c",
        "/p/s.sh",
        "/p",
        array=False,
    )
    assert (job.output, job.error) == ("o/exp.exp-ab12c.%.out", "e/exp-ab12c-000.err")
    array = slurm_job({"slurm_output": "%A_%a.out"}, "s-x", "/p/train.sh", "/p", array=True)
    assert array.output == "{sweep}_{index}.out" and array.env["SLURM_JOB_NAME"] == "train.sh"


def test_only_the_leading_blocks_sbatch_lines_make_a_slurm_script():
    assert "sbatch_script" not in read_directives("#!/bin/bash\necho\n#SBATCH -J late\n", "x.sh").options
    assert read_directives("#!/bin/bash\n#SBATCH -J early\necho\n", "x.sh").options["sbatch_script"] is True
