"""A job's environment and start errors, against a real root gflowd and an ordinary user made with
``useradd`` (docs/multi-user.md, "A job's environment"; issue 32, hole 9 and part of hole 10).

The user writes their own manifests into their own folder of the spec dir; gflowd runs as root with
a secret variable in its environment (as a unit's ``Environment=`` would hold). A job that sees
that variable, or root's HOME or PATH, or whose ``workingDir: "~"`` is root's home, fails the
test, and so does a start error that answers differently for a root-only folder that exists and
one that does not.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import read_log, wait_phase

from controller.act.runtime.login import USER_PATH, Account, SystemFiles, login_env

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd to run gflowd as root for an ordinary user",
)

SECRET = "GFLOW_TEST_ROOT_SECRET"


@dataclass
class Lab:
    root: Path
    home: Path  # GFLOW_HOME
    mine: Path  # the user's folder of the spec dir
    vault: Path  # a root-only folder (0700), holding secret-dir
    user: pwd.struct_passwd


@pytest.fixture
def lab():
    root = Path(tempfile.mkdtemp(prefix="gflow-env-"))
    os.chmod(root, 0o755)
    name = f"gfenv{os.urandom(3).hex()}"
    user_home = root / "users" / name
    user_home.parent.mkdir()
    subprocess.run(["useradd", "-m", "-d", str(user_home), "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        user = pwd.getpwnam(name)
        home = root / "home"
        mine = home / "jobs" / name
        mine.mkdir(parents=True)
        for folder in (home, home / "jobs"):
            os.chmod(folder, 0o755)
        os.chown(mine, user.pw_uid, user.pw_gid)
        vault = root / "vault"
        (vault / "secret-dir").mkdir(parents=True)
        os.chmod(vault, 0o700)
        yield Lab(root, home, mine, vault, user)
    finally:
        subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def as_user(user: pwd.struct_passwd, path: Path, text: str) -> None:
    """``text`` written to ``path`` by a child that dropped to ``user``: the manifest is theirs."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            tmp = path.with_name(f".{path.name}.new")
            tmp.write_text(text)
            os.rename(tmp, path)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def manifest(name: str, spec: str) -> str:
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n{spec}"


def test_a_users_job_sees_its_owners_login_environment_never_gflowds(lab, gflowd):
    daemon = gflowd(
        home=lab.home, env={SECRET: "root-only-token", "HOME": "/root", "PATH": f"/root/bin:{os.environ['PATH']}"}
    )
    as_user(lab.user, lab.mine / "env.yaml", manifest("env", "  command: [env]\n  env: {FROM_MANIFEST: yes}\n"))
    wait_phase(lab.home, "env", "Succeeded", daemon=daemon, timeout=30)
    seen = dict(line.split("=", 1) for line in read_log(lab.home, "env").splitlines() if "=" in line)
    assert SECRET not in seen, "gflowd's own environment leaked into the job"
    assert not [key for key in seen if key.startswith("PYENV")], seen
    assert (seen["HOME"], seen["USER"], seen["LOGNAME"], seen["SHELL"]) == (
        lab.user.pw_dir,
        lab.user.pw_name,
        lab.user.pw_name,
        "/bin/sh",
    )
    assert "/root" not in seen["PATH"] and seen["PATH"].startswith("/usr/local/bin:"), seen["PATH"]
    assert seen["FROM_MANIFEST"] == "yes" and seen["GFLOW_JOB_NAME"] == "env"


def test_workingdir_tilde_is_the_owners_home(lab, gflowd):
    daemon = gflowd(home=lab.home)
    as_user(lab.user, lab.mine / "where.yaml", manifest("where", "  command: [pwd]\n  workingDir: '~'\n"))
    wait_phase(lab.home, "where", "Succeeded", daemon=daemon, timeout=30)
    assert read_log(lab.home, "where").strip() == lab.user.pw_dir


def test_a_start_error_does_not_tell_whether_a_root_only_folder_exists(lab, gflowd):
    daemon = gflowd(home=lab.home)
    there, missing = lab.vault / "secret-dir", lab.vault / "no-such-dir"
    as_user(lab.user, lab.mine / "probe-a.yaml", manifest("probe-a", f"  command: [true]\n  workingDir: {there}\n"))
    as_user(lab.user, lab.mine / "probe-b.yaml", manifest("probe-b", f"  command: [true]\n  workingDir: {missing}\n"))
    a = wait_phase(lab.home, "probe-a", "Failed", daemon=daemon, timeout=30)
    b = wait_phase(lab.home, "probe-b", "Failed", daemon=daemon, timeout=30)
    answer_a = (a.get("exitCode"), a.get("reason"), a["message"].replace(str(there), "PATH"))
    answer_b = (b.get("exitCode"), b.get("reason"), b["message"].replace(str(missing), "PATH"))
    assert answer_a == answer_b, "the start error tells an existing root-only folder from a missing one"
    assert f"not found or not accessible to {lab.user.pw_name}" in a["message"], a["message"]


def test_login_env_reads_login_defs_and_the_locale_and_nothing_else():
    files = SystemFiles(
        login_defs="# comment\nENV_SUPATH\tPATH=/sbin:/bin\nENV_PATH PATH=/opt/bin:/bin\n",
        locale='LANG="de_DE.UTF-8"\nLC_TIME=en_GB.UTF-8\nBOGUS=1\n',
        tz="Europe/Berlin",
    )
    user = Account(1000, "alice", "/home/alice", "/bin/zsh")
    assert login_env(user, files, tty=True) == {
        "HOME": "/home/alice",
        "USER": "alice",
        "LOGNAME": "alice",
        "SHELL": "/bin/zsh",
        "PATH": "/opt/bin:/bin",
        "LANG": "de_DE.UTF-8",
        "LC_TIME": "en_GB.UTF-8",
        "TERM": "xterm-256color",
        "TZ": "Europe/Berlin",
    }
    assert login_env(Account(0, "root", "/root", ""), files)["PATH"] == "/sbin:/bin"
    assert login_env(user, SystemFiles())["PATH"] == USER_PATH
