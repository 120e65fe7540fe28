"""The environment gflow gives a job (SPEC section 5), defined once for every engine: the local
runtime, the Slurm backend and the exports call ``job_env`` with the values each engine knows, so
a job sees the same names wherever it runs (docs/cluster.md has their values per engine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# every job gets these, on every engine (SPEC section 5; docs/cluster.md for their values elsewhere)
GFLOW_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "GFLOW_JOB_NAME",
    "GFLOW_ATTEMPT",
    "GFLOW_GENERATION",
    "MASTER_ADDR",
    "MASTER_PORT",
)
# a Shared job's frameworks must not grab the whole GPU; the job's own settings win
SHARED_DEFAULTS = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


def cuda_devices(indices: Sequence[int], uuids: Sequence[str]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the units a job holds: NVML indices for whole GPUs; for MIG
    instances their ``MIG-<uuid>`` (CUDA names a MIG instance only by its UUID)."""
    if uuids and len(uuids) == len(indices) and all(u.startswith("MIG-") for u in uuids):
        return ",".join(uuids)
    return ",".join(str(i) for i in indices)


def job_env(
    name: str,
    spec: Any,
    *,
    devices: str,
    attempt: str,
    generation: str,
    master_port: str,
    master_addr: str = "127.0.0.1",
    inherited: Mapping[str, str] | None = None,
    amd_devices: str | None = None,
) -> dict[str, str]:
    """A job's whole environment: ``inherited`` (gflowd's own, locally), then the manifest's
    ``env``, then gflow's variables (``GFLOW_VARIABLES``, which win). The caller gives the values
    its engine knows; an export may give shell text its script expands when the job starts
    (``controller.export.Shell``). A Shared job also gets ``GFLOW_GPU_MEMORY`` (its budget in
    bytes) and ``SHARED_DEFAULTS`` unless it sets them itself. An AMD job (``amd_devices``: its
    GPUs' ROCR indices) gets ``AMD_VARIABLES`` (:func:`amd_env`)."""
    env = dict(inherited or {})
    env.update(spec.env)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": devices,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # so the indices mean what nvidia-smi shows
            "GFLOW_JOB_NAME": name,
            "GFLOW_ATTEMPT": attempt,
            "GFLOW_GENERATION": generation,
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": master_port,
        }
    )
    if amd_devices is not None:  # an AMD job: ROCm's indices; CUDA sees no GPU
        env.update(amd_env(amd_devices))
    cpus = getattr(spec.resources, "cpus", None)
    if cpus and "OMP_NUM_THREADS" not in spec.env:  # one thread per booked core, unless the job says otherwise
        env["OMP_NUM_THREADS"] = str(cpus)
    if spec.sharing == "Shared":
        for key, value in SHARED_DEFAULTS.items():
            env.setdefault(key, value)
        env["GFLOW_GPU_MEMORY"] = str(spec.resources.gpu_memory or 0)
    return env


# an AMD job's GPUs, as ROCm's runtime (ROCR) and HIP number them; HIP reads its own variable too
AMD_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def amd_env(local_indices: str) -> dict[str, str]:
    """An AMD job's GPU variables: its ROCR indices (``0,1``) in both, ``CUDA_VISIBLE_DEVICES``
    empty (a CUDA build on the box then sees no GPU rather than another job's)."""
    return {**dict.fromkeys(AMD_VARIABLES, local_indices), "CUDA_VISIBLE_DEVICES": ""}
