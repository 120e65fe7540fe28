"""What to exec for a job: argv, environment, working directory. Pure, apart from reading the
process environment it is handed.

No manifest field ever passes through a shell: ``command`` is exec'd as is, ``script`` is written
to a file and run by ``bash -e FILE``.

The variables gflow gives a job come from ``controller.api.jobenv.job_env``, which the Slurm
backend and the exports call too.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from controller.api.jobenv import GFLOW_VARIABLES, SHARED_DEFAULTS, cuda_devices, job_env  # noqa: F401  (the runtime's names)
from controller.model.plan import Launch


class LaunchError(Exception):
    """The job cannot be started as specified (e.g. its workingDir does not exist)."""


# where conda lives when it is not on the login PATH (installers put it in the home, or /opt)
CONDA_FOLDERS = ("~/miniforge3/bin", "~/mambaforge/bin", "~/miniconda3/bin", "~/anaconda3/bin", "/opt/conda/bin")


@dataclass(frozen=True)
class ProcessSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    script: str | None = None  # text to write to the script file named in argv


def build_process(
    launch: Launch,
    base_env: dict[str, str],
    script_path: Path,
    master_port: int,
    home: str | None = None,
    check: bool = True,
    check_command: bool | None = None,
) -> ProcessSpec:
    """What to exec. ``base_env``: the job's login environment (``login.py``); ``home``: its
    owner's home, what ``~`` means in workingDir and the command (default ``base_env['HOME']``).
    ``check``: look for the working directory and the command now; off for a job of another user,
    whose supervisor looks as that user (gflowd, as root, would tell them about root-only paths).
    ``check_command`` (default ``check``): look for the command on the PATH now; off when the
    submitter's environment, which the supervisor adds, may hold another PATH."""
    spec = launch.job.spec
    home = home if home is not None else base_env.get("HOME")
    manifest_dir = launch.job.folder or "."  # where the manifest file really lives, never a symlink's folder
    if spec.working_dir:
        cwd = expand_home(spec.working_dir, home)
        if not os.path.isabs(cwd):
            cwd = os.path.join(manifest_dir, cwd)
    else:
        cwd = manifest_dir
    cwd = os.path.normpath(cwd)
    if check and not os.path.isdir(cwd):
        raise LaunchError(f"workingDir {cwd} does not exist or is not a folder")

    if spec.script is not None:
        argv = ["bash", "-e", str(script_path)]
    else:
        argv = list(spec.command or [])
        if argv and argv[0].startswith("~"):
            argv[0] = expand_home(argv[0], home)
    if spec.conda_env:
        folders = [expand_home(folder, home) for folder in CONDA_FOLDERS]
        conda = shutil.which("conda", path=os.pathsep.join([base_env.get("PATH") or "", *folders]))
        if conda is None:
            raise LaunchError(
                f"condaEnv {spec.conda_env!r} is set but conda is not on the job's PATH nor in "
                f"{', '.join(CONDA_FOLDERS)}"
            )
        argv = [conda, "run", "--no-capture-output", "-n", spec.conda_env, *argv]

    env = job_env(
        launch.name,
        spec,
        devices=cuda_devices(launch.devices, launch.device_uuids),
        amd_devices=",".join(str(d) for d in launch.local_devices) if launch.vendor == "amd" else None,
        attempt=str(launch.attempt),
        generation=str(launch.generation),
        master_port=str(master_port),
        inherited=base_env,
    )
    if check_command is None:
        check_command = check
    if (
        check_command
        and spec.command is not None
        and argv
        and os.sep not in argv[0]
        and not _on_path(argv[0], env.get("PATH"))
    ):
        raise LaunchError(f"command not found: {argv[0]!r} is not on the job's PATH")
    return ProcessSpec(argv, env, cwd, spec.script)


def expand_home(path: str, home: str | None) -> str:
    """``~`` and ``~/...`` as ``home`` (the job owner's, never gflowd's); ``~name/...`` as that
    user's home; unchanged when unknown."""
    if not path.startswith("~"):
        return path
    head, sep, rest = path[1:].partition("/")
    if head:
        try:
            import pwd  # lazy: only a ~name path needs it

            base = pwd.getpwnam(head).pw_dir
        except KeyError:
            return path
    elif home:
        base = home
    else:
        return path
    return os.path.join(base, rest) if sep and rest else base


_FOUND: set[tuple[str, str | None]] = set()  # (command, PATH) found before
_FOUND_MAX = 4096


def _on_path(command: str, path: str | None) -> bool:
    """Whether ``command`` is on ``path``; a command found once is not searched for again (a
    search costs ~0.1 ms a folder, for every start of a burst of thousands). Should it vanish
    later, the exec fails instead, with the same exit code (127) and a message saying so."""
    if (command, path) in _FOUND:
        return True
    if shutil.which(command, path=path) is None:
        return False  # not remembered: it may be installed before the next try
    if len(_FOUND) >= _FOUND_MAX:
        _FOUND.clear()
    _FOUND.add((command, path))
    return True
