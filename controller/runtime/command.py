"""What to exec for a job: argv, environment, working directory. Pure, apart from reading the
process environment it is handed.

No manifest field ever passes through a shell: ``command`` is exec'd as is, ``script`` is written
to a file and run by ``bash -e FILE``.

``job_env`` is the one definition of the variables gflow gives a job; the Slurm backend and the
exports (``controller.export``) call it too, each with the values its engine knows, so a job sees
the same names wherever it runs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.reconcile import Launch

# every job gets these, on every engine (SPEC section 5; docs/cluster.md for their values elsewhere)
GFLOW_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GFLOW_JOB_NAME", "GFLOW_ATTEMPT", "GFLOW_GENERATION",
    "MASTER_ADDR", "MASTER_PORT",
)
# a Shared job's frameworks must not grab the whole GPU; the job's own settings win
SHARED_DEFAULTS = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


class LaunchError(Exception):
    """The job cannot be started as specified (e.g. its workingDir does not exist)."""


@dataclass(frozen=True)
class ProcessSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    script: str | None = None  # text to write to the script file named in argv


def build_process(launch: Launch, base_env: dict[str, str], script_path: Path, master_port: int) -> ProcessSpec:
    spec = launch.job.spec
    manifest_dir = launch.job.folder or "."  # where the manifest file really lives, never a symlink's folder
    if spec.working_dir:
        cwd = os.path.expanduser(spec.working_dir)
        if not os.path.isabs(cwd):
            cwd = os.path.join(manifest_dir, cwd)
    else:
        cwd = manifest_dir
    cwd = os.path.normpath(cwd)
    if not os.path.isdir(cwd):
        raise LaunchError(f"workingDir {cwd} does not exist or is not a folder")

    if spec.script is not None:
        argv = ["bash", "-e", str(script_path)]
    else:
        argv = list(spec.command or [])
    if spec.conda_env:
        conda = shutil.which("conda", path=base_env.get("PATH"))
        if conda is None:
            raise LaunchError(f"condaEnv {spec.conda_env!r} is set but conda is not on the PATH")
        argv = [conda, "run", "--no-capture-output", "-n", spec.conda_env, *argv]

    env = job_env(
        launch.name, spec, devices=",".join(str(d) for d in launch.devices), attempt=str(launch.attempt),
        generation=str(launch.generation), master_port=str(master_port), inherited=base_env,
    )
    if spec.command is not None and argv and os.sep not in argv[0]:
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            raise LaunchError(f"command not found: {argv[0]!r} is not on the job's PATH")
    return ProcessSpec(argv, env, cwd, spec.script)


def job_env(
    name: str, spec: Any, *, devices: str, attempt: str, generation: str, master_port: str,
    master_addr: str = "127.0.0.1", inherited: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A job's whole environment: ``inherited`` (gflowd's own, locally), then the manifest's
    ``env``, then gflow's variables (``GFLOW_VARIABLES``, which win). The caller gives the values
    its engine knows; an export may give shell text its script expands when the job starts
    (``controller.export.Shell``). A Shared job also gets ``GFLOW_GPU_MEMORY`` (its budget in
    bytes) and ``SHARED_DEFAULTS`` unless it sets them itself."""
    env = dict(inherited or {})
    env.update(spec.env)
    env.update({
        "CUDA_VISIBLE_DEVICES": devices,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # so the indices mean what nvidia-smi shows
        "GFLOW_JOB_NAME": name,
        "GFLOW_ATTEMPT": attempt,
        "GFLOW_GENERATION": generation,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
    })
    if spec.sharing == "Shared":
        for key, value in SHARED_DEFAULTS.items():
            env.setdefault(key, value)
        env["GFLOW_GPU_MEMORY"] = str(spec.resources.gpu_memory or 0)
    return env
