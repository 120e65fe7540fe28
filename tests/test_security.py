"""Who may do what (SPEC.md section 8), against real gflowd processes.

Dropping to the manifest owner when gflowd runs as root is tested in test_runtime.py
(``test_root_controller_runs_the_job_as_the_manifest_owner``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from helpers import Daemon, job_status, kill_jobs_of_home, read_log, wait_for, wait_phase, write_manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api.job import is_valid_name
from controller.paths import Home, UnsafeName

ROOT = Path(__file__).resolve().parent.parent


# -- the spec directory's own permissions -----------------------------------------------------------


@pytest.mark.e2e
def test_world_writable_spec_dir_without_sticky_bit_is_refused_with_one_line(home, tmp_path):
    os.chmod(home / "jobs", 0o777)
    result = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "is world-writable without the sticky bit" in result.stderr
    assert f"chmod o-w {home / 'jobs'}" in result.stderr


def test_world_writable_spec_dir_with_sticky_bit_is_served(home, gflowd):
    os.chmod(home / "jobs", 0o1777)  # like /tmp: users share it, but only owners replace their files
    write_manifest(home / "jobs", "ok.yaml", "metadata: {name: ok}\nspec:\n  command: ['true']\n")
    daemon = gflowd()
    wait_phase(home, "ok", "Succeeded", daemon=daemon)


# -- no shell anywhere -------------------------------------------------------------------------------


def test_no_manifest_field_is_interpolated_by_a_shell(home, gflowd, tmp_path):
    bait = tmp_path / "bait"
    bait.mkdir()
    payloads = [
        f"$(touch {bait}/a)",
        f"; touch {bait}/b",
        f"`touch {bait}/c`",
        f"| touch {bait}/d",
        f"&& touch {bait}/e",
    ]
    quoted = ", ".join(f"'{p}'" for p in payloads)
    write_manifest(
        home / "jobs",
        "argv.yaml",
        f"""\
metadata: {{name: argv}}
spec:
  command: [printf, '%s\\n', {quoted}]
  env: {{EVIL: '$(touch {bait}/f)'}}
""",
    )
    write_manifest(
        home / "jobs",
        "script.yaml",
        f"""\
metadata: {{name: script}}
spec:
  env: {{EVIL: '$(touch {bait}/g); touch {bait}/h'}}
  script: |
    printf '%s\\n' "$EVIL"
    echo $EVIL
""",
    )
    daemon = gflowd()
    wait_phase(home, "argv", "Succeeded", daemon=daemon)
    wait_phase(home, "script", "Succeeded", daemon=daemon)
    assert read_log(home, "argv").splitlines() == payloads  # each argument arrives as written
    assert read_log(home, "script").splitlines() == [f"$(touch {bait}/g); touch {bait}/h"] * 2
    assert sorted(os.listdir(bait)) == []  # nothing ran


# -- modes ---------------------------------------------------------------------------------------------


def test_state_files_and_logs_are_never_world_writable_even_under_umask_0(home, gflowd):
    write_manifest(home / "jobs", "ok.yaml", "metadata: {name: ok}\nspec:\n  command: [echo, hi]\n")
    write_manifest(home / "jobs", "runner.yaml", "metadata: {name: runner}\nspec:\n  command: [sleep, '600']\n")
    old = os.umask(0)  # the worst a careless init script could hand gflowd
    try:
        daemon = gflowd()
    finally:
        os.umask(old)
    wait_phase(home, "ok", "Succeeded", daemon=daemon)
    wait_for(lambda: (job_status(home, "runner") or {}).get("pid"))
    checked = []
    for path in [home, *home.rglob("*")]:
        if path.is_symlink() or path == home / "jobs" or (home / "jobs") in path.parents:
            continue  # the spec dir and manifests are the users'
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # an ended attempt's records, purged by gflowd while we walk
        if stat.S_ISSOCK(mode):
            continue  # run/notify.sock: 0600 by chmod; sockets are not files anyone writes into
        checked.append(path.relative_to(home))
        assert not mode & stat.S_IWOTH, f"{path} is world-writable ({stat.filemode(mode)})"
        assert not mode & stat.S_IWGRP, f"{path} is group-writable ({stat.filemode(mode)})"
    log = home / "logs" / "ok.log"
    assert log.stat().st_mode & stat.S_IRUSR and log.stat().st_uid == os.getuid()
    assert {Path("status/ok.yaml"), Path("logs/ok.log"), Path("events.jsonl"), Path("run/index.json")} <= set(checked)


# -- paths ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", ".hidden", "x\0y", "/etc/passwd"])
def test_status_and_log_paths_refuse_names_that_would_leave_their_folder(name):
    home = Home.resolve("/srv/gflow")
    with pytest.raises(UnsafeName):
        home.status_file(name)
    with pytest.raises(UnsafeName):
        home.log_file(name, 2)


@settings(max_examples=300, deadline=None)
@given(name=st.text(min_size=0, max_size=80))
def test_every_accepted_name_stays_inside_the_state_dir(name):
    home = Home.resolve("/srv/gflow")
    for make, folder in ((home.status_file, home.status_dir), (lambda n: home.log_file(n, 3), home.logs_dir)):
        try:
            path = make(name)
        except UnsafeName:
            assert not is_valid_name(name)  # only what admission would refuse anyway
            continue
        assert os.path.dirname(os.path.normpath(path)) == str(folder)


@pytest.mark.e2e
def test_gflowctl_refuses_a_name_that_would_leave_the_state_dir(home):
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "--home", str(home), "logs", "../../etc/passwd"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip()
        == "error: '../../etc/passwd' is not a job name (a job name is one word of a-z, 0-9 and '-')"
    )


# -- gflowd as an ordinary user ------------------------------------------------------------------------


def python_for(user: pwd.struct_passwd) -> tuple[str, dict[str, str]] | None:
    """An interpreter (and PYTHONPATH) with which ``user`` can run gflowd, or None. The test venv's
    own python may live under a private home (pyenv in /root); the system one of the same version
    with the venv's site-packages on the path does as well."""
    paths = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")):
        if not candidate:
            continue
        try:
            probe = subprocess.run(
                [candidate, "-c", "import controller.daemon, pydantic, ruamel.yaml"],
                user=user.pw_uid,
                group=user.pw_gid,
                extra_groups=[],
                capture_output=True,
                cwd="/",
                env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": paths},
                timeout=60,
            )
        except (PermissionError, OSError):
            continue
        if probe.returncode == 0:
            return candidate, {"PYTHONPATH": paths}
    return None


@pytest.fixture
def as_nobody():
    if os.geteuid() != 0:
        pytest.skip("needs root to start gflowd as another user")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")
    found = python_for(nobody)
    if found is None:
        pytest.skip("no Python that user 'nobody' can run gflowd with")
    root = Path(tempfile.mkdtemp(prefix="gflow-nobody-"))
    os.chmod(root, 0o755)
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    for path in (home, home / "jobs"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    started: list[Daemon] = []

    def start() -> Daemon:
        python, env = found
        daemon = Daemon.__new__(Daemon)
        daemon.home = home
        daemon.argv = [python, "-m", "controller.daemon", "--home", str(home), "--resync", "1s"]
        daemon.stderr_path = root / "gflowd.stderr"
        full_env = {**os.environ, "GFLOW_HOME": str(home), "PYTHONUNBUFFERED": "1", "HOME": str(root), **env}
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        with open(daemon.stderr_path, "wb") as err:
            daemon.proc = subprocess.Popen(
                daemon.argv,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=full_env,
                cwd=str(root),
                user=nobody.pw_uid,
                group=nobody.pw_gid,
                extra_groups=[],
            )
        started.append(daemon)
        return daemon.wait_ready()

    yield home, nobody, start
    for daemon in started:
        daemon.terminate()
    kill_jobs_of_home(home)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.e2e
def test_ordinary_user_gflowd_forbids_foreign_manifests_and_rejects_unreadable_ones(as_nobody):
    home, nobody, start = as_nobody
    mine = write_manifest(home / "jobs", "mine.yaml", "metadata: {name: mine}\nspec:\n  command: [id, -u]\n")
    os.chown(mine, nobody.pw_uid, nobody.pw_gid)
    write_manifest(home / "jobs", "roots.yaml", "metadata: {name: roots}\nspec:\n  command: ['true']\n")  # root's, 0644
    secret = write_manifest(home / "jobs", "secret.yaml", "metadata: {name: secret}\nspec:\n  command: ['true']\n")
    os.chmod(secret, 0o600)  # root's, unreadable to nobody
    daemon = start()
    wait_phase(home, "mine", "Succeeded", daemon=daemon)
    assert read_log(home, "mine").strip() == str(nobody.pw_uid)
    forbidden = wait_phase(home, "roots", "Rejected", reason="Forbidden", daemon=daemon)
    assert f"owned by uid 0, but gflowd runs as uid {nobody.pw_uid}" in forbidden["message"]
    unreadable = wait_phase(home, "secret", "Rejected", daemon=daemon)
    assert unreadable["message"] == "cannot read the file: Permission denied (jobs/secret.yaml)"
    assert daemon.proc.poll() is None
