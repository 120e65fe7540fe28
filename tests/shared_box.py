"""The documented shared set-up (docs/multi-user.md) for end-to-end tests of what ordinary users do:
a root gflowd on a home whose spec dir is sticky and writable by all, and a ``useradd`` user with
their own venv made from the system Python (``/usr/bin/python3``, not the test's own interpreter,
which may live in root's private home) running ``gflowctl`` as themselves.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass
class Box:
    root: Path
    home: Path  # GFLOW_HOME, root's
    user: pwd.struct_passwd
    venv: Path  # the user's own venv
    project: Path  # the user's project folder (their cwd when submitting)
    pythonpath: str  # where the user's venv finds gflow (the checkout and the test venv's packages)

    def env(self, activated: bool = True, **extra: str) -> dict[str, str]:
        """A login shell's environment of the user, with their venv activated (as `source activate`)."""
        path = "/usr/local/bin:/usr/bin:/bin"
        env = {
            "HOME": self.user.pw_dir,
            "USER": self.user.pw_name,
            "LOGNAME": self.user.pw_name,
            "SHELL": "/bin/sh",
            "PATH": path,
            "LANG": "C.UTF-8",
            "PYTHONPATH": self.pythonpath,
            "GFLOW_HOME": str(self.home),
        }
        if activated:
            env.update(PATH=f"{self.venv}/bin:{path}", VIRTUAL_ENV=str(self.venv))
        env.update(extra)
        return env

    def gflowctl(
        self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """``gflowctl ARGS`` run by the user, from their venv's python."""
        return subprocess.run(
            [str(self.venv / "bin" / "python"), "-m", "controller.cli.main", *args],
            env=env or self.env(),
            cwd=str(cwd or self.project),
            capture_output=True,
            text=True,
            timeout=timeout,
            user=self.user.pw_uid,
            group=self.user.pw_gid,
            extra_groups=[],
        )

    def as_user(self, *argv: str, cwd: Path | None = None) -> None:
        subprocess.run(
            list(argv),
            cwd=str(cwd or self.project),
            check=True,
            capture_output=True,
            timeout=60,
            user=self.user.pw_uid,
            group=self.user.pw_gid,
            extra_groups=[],
            env=self.env(activated=False),
        )


def make_box() -> Box:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to run gflowd as root for an ordinary user")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON} to make the user's venv from")
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"{SYSTEM_PYTHON} is not this Python's version: its venv cannot use the test venv's packages")
    root = Path(tempfile.mkdtemp(prefix="gflow-box-"))
    os.chmod(root, 0o755)
    name = f"gfbox{os.urandom(3).hex()}"
    user_home = root / "users" / name
    user_home.parent.mkdir()
    subprocess.run(["useradd", "-m", "-d", str(user_home), "-s", "/bin/sh", name], check=True, capture_output=True)
    user = pwd.getpwnam(name)
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "jobs", 0o1777)  # multi-user.md: 1775 with a group; every user here
    paths = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    box = Box(root, home, user, user_home / "venv", user_home / "proj", paths)
    box.as_user(SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(box.venv), cwd=user_home)
    box.as_user("mkdir", "-p", str(box.project), cwd=user_home)
    return box


def remove_box(box: Box) -> None:
    subprocess.run(["pkill", "-KILL", "-u", box.user.pw_name], capture_output=True)
    subprocess.run(["userdel", "-r", box.user.pw_name], capture_output=True)
    shutil.rmtree(box.root, ignore_errors=True)
