"""Issue 33 item 1: a job submitted with ``gflowctl run`` or ``Client.submit`` carries its submitter's
environment (an activated venv, ``~/bin`` on PATH, their variables), as sbatch's ``--export=ALL``;
``--export`` chooses, and the environment is kept where only its owner (and root) can read it.
Against a real root gflowd, ``gflowctl`` run by a ``useradd`` user from their own venv."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest
from helpers import read_log, wait_phase
from shared_box import make_box, remove_box

from controller.api.export import exported_env

PROBE = "import os, sys; print('prefix=' + sys.prefix); print('token=' + os.environ.get('MY_TOKEN', '-')); print('mine=' + os.environ.get('FROM_SPEC', '-'))"


@pytest.fixture
def box():
    made = make_box()
    yield made
    remove_box(made)


def values(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def submit(box, *args: str, env=None) -> str:
    result = box.gflowctl("run", "-q", *args, env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout.strip()


def test_run_carries_the_activated_venv_and_the_users_variables(box, gflowd):
    daemon = gflowd(home=box.home, env={"MY_TOKEN": "gflowds-own"})
    env = box.env(MY_TOKEN="the-users", TERM="xterm", SLURM_JOB_ID="77")
    name = submit(box, "-e", "FROM_SPEC=spec", "--", "python3", "-c", PROBE, env=env)
    wait_phase(box.home, name, "Succeeded", daemon=daemon, timeout=60)
    seen = values(read_log(box.home, name))
    assert seen["prefix"] == str(box.venv), "the job did not run in the submitter's activated venv"
    assert (seen["token"], seen["mine"]) == ("the-users", "spec")
    kept = box.home / "jobs" / f".{name}.env"
    info = kept.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (box.user.pw_uid, 0o600), (
        "the environment is readable by others"
    )
    assert b"SLURM_JOB_ID" not in kept.read_bytes() and b"TERM=" not in kept.read_bytes()
    result = box.gflowctl("delete", "job", name)
    assert result.returncode == 0, result.stderr
    assert not kept.exists(), "delete left the job's environment behind"


def test_export_none_gives_the_login_basics_only(box, gflowd):
    daemon = gflowd(home=box.home)
    name = submit(box, "--export=NONE", "--", "python3", "-c", PROBE, env=box.env(MY_TOKEN="the-users"))
    wait_phase(box.home, name, "Succeeded", daemon=daemon, timeout=60)
    seen = values(read_log(box.home, name))
    assert seen["prefix"] != str(box.venv) and seen["token"] == "-"
    assert not (box.home / "jobs" / f".{name}.env").exists()


def test_sbatch_export_line_and_a_variable_list(box, gflowd):
    daemon = gflowd(home=box.home)
    script = box.project / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --export=MY_TOKEN,EXTRA=set-here\necho token=${MY_TOKEN:-} extra=$EXTRA other=${OTHER:--}\n"
    )
    os.chown(script, box.user.pw_uid, box.user.pw_gid)
    name = submit(box, str(script), env=box.env(MY_TOKEN="t1", OTHER="o"))
    wait_phase(box.home, name, "Succeeded", daemon=daemon, timeout=60)
    assert "token=t1 extra=set-here other=-" in read_log(box.home, name)


def test_a_file_not_the_job_owners_is_never_read(box, gflowd):
    """The attack: a manifest whose annotation names root's (or another user's) file beside it."""
    daemon = gflowd(home=box.home)
    jobs = box.home / "jobs"
    secret = jobs / ".roots.env"
    secret.write_bytes(b"ROOT_SECRET=hunter2\0")
    os.chmod(secret, 0o600)
    manifest = jobs / "steal.yaml"
    manifest.write_text(
        "apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata:\n  name: steal\n"
        "  annotations: {gflow.dev/environment: .roots.env}\nspec:\n  command: [env]\n"
    )
    os.chown(manifest, box.user.pw_uid, box.user.pw_gid)
    status = wait_phase(box.home, "steal", "Failed", daemon=daemon, timeout=60)
    assert "hunter2" not in read_log(box.home, "steal")
    assert "environment" in status["message"], status


@pytest.mark.parametrize(
    "export, want",
    [
        (None, {"A": "1", "PATH": "/v/bin"}),
        ("ALL", {"A": "1", "PATH": "/v/bin"}),
        ("NONE", None),
        ("A", {"A": "1"}),
        ("A,B=2", {"A": "1", "B": "2"}),
        ("ALL,B=2", {"A": "1", "PATH": "/v/bin", "B": "2"}),
    ],
)
def test_exported_env_follows_sbatch(export, want):
    environ = {"A": "1", "PATH": "/v/bin", "PWD": "/x", "SLURM_JOB_ID": "3", "GFLOW_HOME": "/h", "TERM": "xterm"}
    assert exported_env(export, environ) == want


@pytest.mark.parametrize("export", ["", "A,,B", "1BAD", "ALL,NONE"])
def test_a_bad_export_names_the_fix(export):
    with pytest.raises(ValueError, match="use ALL, NONE"):
        exported_env(export, {})


def test_the_python_clients_submit_carries_it_too(box, gflowd):
    daemon = gflowd(home=box.home)
    code = (
        "from controller.client import Client; import sys; "
        f"print(Client(home={str(box.home)!r}).submit(['python3', '-c', sys.argv[1]]).name)"
    )
    result = subprocess.run(
        [str(box.venv / "bin" / "python"), "-c", code, PROBE],
        env=box.env(MY_TOKEN="from-client"),
        cwd=str(box.project),
        capture_output=True,
        text=True,
        timeout=60,
        user=box.user.pw_uid,
        group=box.user.pw_gid,
        extra_groups=[],
    )
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip()
    wait_phase(box.home, name, "Succeeded", daemon=daemon, timeout=60)
    seen = values(read_log(box.home, name))
    assert (seen["prefix"], seen["token"]) == (str(box.venv), "from-client")


def test_exec_in_the_job_has_its_environment_too(box, gflowd):
    daemon = gflowd(home=box.home)
    name = submit(box, "--", "sleep", "600", env=box.env(MY_TOKEN="the-users"))
    wait_phase(box.home, name, "Running", daemon=daemon, timeout=60)
    result = box.gflowctl("exec", name, "--", "python3", "-c", PROBE)
    assert result.returncode == 0, result.stderr
    seen = values(result.stdout)
    assert (seen["prefix"], seen["token"]) == (str(box.venv), "the-users")
    assert box.gflowctl("cancel", name).returncode == 0
    wait_phase(box.home, name, "Cancelled", daemon=daemon, timeout=60)
