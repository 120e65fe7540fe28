"""A gflow Job or Sweep as a Kubernetes ``batch/v1`` Job (``gflowctl export k8s``).

What maps: ``command``/``script`` -> the container's ``command`` (a script runs under
``bash -e -c``); ``env``, ``workingDir``, ``labels``; ``resources.gpus`` -> the limit
``nvidia.com/gpu`` (a string, as the API serves quantities); ``resources.memory`` -> memory request
and limit; ``resources.cpus`` -> cpu request and limit (equal, whole cores: pinned by the static CPU
manager); ``timeLimit`` -> ``activeDeadlineSeconds``; ``backoffLimit``, ``suspend``,
``ttlSecondsAfterFinished``, ``terminationGracePeriod``; ``--queue`` -> the Kueue label
``kueue.x-k8s.io/queue-name``. A Sweep -> an Indexed Job (``completionMode: Indexed``, one index
per child, ``parallelism``, ``backoffLimitPerIndex``): the container runs a small ``bash`` lookup
on ``JOB_COMPLETION_INDEX`` that sets the child's variables and runs its command, so no ConfigMap
is needed.

What does not map (returned as notes): ``dependsOn`` and ``startAfter`` (a Job has neither; use a
workflow engine or create the Job later), ``priority`` (Kubernetes orders by PriorityClass or
Kueue's WorkloadPriorityClass, named, not numbered), ``gpuType`` (GPU nodes are chosen by node
labels such as ``nvidia.com/gpu.product``, whose values are cluster-specific), ``sharing: Shared``
and ``gpuMemory`` (time-slicing or MIG are cluster settings), ``condaEnv`` only if the image has
conda. The container image is required (``--image`` or config ``k8s.image``): a gflow manifest
never names one, and an API server refuses a Job without it.

The container gets the variables gflowd gives a job (``k8s_env``): ``CUDA_VISIBLE_DEVICES`` is
``0..N-1`` for N GPUs, because the NVIDIA device plugin exposes the allocated GPUs to the container
(through ``NVIDIA_VISIBLE_DEVICES``), where CUDA numbers them from 0, and nothing sets
``CUDA_VISIBLE_DEVICES``, which jobs read to count their GPUs; it is empty for a CPU job, as
locally. ``MASTER_ADDR=127.0.0.1`` and a fixed ``MASTER_PORT`` (the pod has its own network
namespace, so the port is free); ``GFLOW_ATTEMPT`` is 1 (a pod is not told which retry it is).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from controller.api.jobenv import job_env
from controller.export import Exported, split_common, workdir
from controller.export.slurm import command_argv
from controller.model.mig import mig_profile_ok
from controller.util.yamlio import dump

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
MIB = 2**20
GIB = 2**30
MASTER_PORT = "29500"  # torch's default: free in the pod's own network namespace


def k8s_quantity(n_bytes: int) -> str:
    """Memory as a Kubernetes quantity: whole Gi when exact, else Mi rounded up."""
    if n_bytes and n_bytes % GIB == 0:
        return f"{n_bytes // GIB}Gi"
    return f"{max(1, math.ceil(n_bytes / MIB))}Mi"


def gpu_resource(gpu_type: str | None) -> str:
    """``nvidia.com/gpu``, or for a MIG profile the device plugin's mixed-strategy resource
    ``nvidia.com/mig-1g.10gb`` (under the single strategy a cluster offers MIG as nvidia.com/gpu)."""
    return f"nvidia.com/mig-{gpu_type.strip().lower()}" if gpu_type and mig_profile_ok(gpu_type) else GPU_RESOURCE


def k8s_env(name: str, spec: Any) -> dict[str, str]:
    """The job's variables in the container: what gflowd gives it, with the values a pod has."""
    devices = ",".join(str(i) for i in range(spec.resources.gpus))
    return job_env(name, spec, devices=devices, attempt="1", generation="1", master_port=MASTER_PORT)


def _container(spec: Any, command: list[str], env: dict[str, str], image: str, manifest_dir: str) -> dict[str, Any]:
    if not image:
        raise ValueError("a Kubernetes Job needs a container image")
    container: dict[str, Any] = {"name": "main", "image": image, "command": command}
    if spec.working_dir:
        container["workingDir"] = workdir(spec.working_dir, manifest_dir)  # as on the box: absolute
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if spec.resources.gpus:
        limits[gpu_resource(spec.resources.gpu_type)] = str(spec.resources.gpus)
    if spec.resources.memory is not None:
        limits["memory"] = requests["memory"] = k8s_quantity(spec.resources.memory)
    if spec.resources.cpus:  # whole cores, requests = limits: the static CPU manager pins them
        limits["cpu"] = requests["cpu"] = str(spec.resources.cpus)
    if limits:
        container["resources"] = {"limits": limits, **({"requests": requests} if requests else {})}
    return container


def _unmapped(spec: Any, name: str) -> list[str]:
    notes = []
    for dep in spec.depends_on:
        notes.append(
            f"{name}: dependsOn {dep.job} ({dep.condition}): a Kubernetes Job has no dependencies; not exported"
        )
    if spec.start_after:
        notes.append(f"{name}: startAfter {spec.start_after}: a Kubernetes Job has no start time; create it then")
    if spec.priority:
        notes.append(
            f"{name}: priority {spec.priority}: Kubernetes orders by a named PriorityClass "
            "(or Kueue WorkloadPriorityClass); kept as the annotation gflow.dev/priority"
        )
    if spec.resources.gpu_type and not mig_profile_ok(spec.resources.gpu_type):
        notes.append(
            f"{name}: gpuType {spec.resources.gpu_type}: choose GPU nodes with a nodeSelector on your cluster's "
            "labels (e.g. nvidia.com/gpu.product); not exported"
        )
    if spec.sharing == "Shared" or spec.resources.gpu_memory is not None:
        notes.append(
            f"{name}: sharing/gpuMemory: GPU sharing (time-slicing, MIG) is a cluster setting; whole GPUs requested"
        )
    if spec.resources.pids is not None:
        notes.append(
            f"{name}: resources.pids {spec.resources.pids}: Kubernetes limits processes per pod only "
            "node-wide (the kubelet's podPidsLimit); not exported"
        )
    if spec.conda_env:
        notes.append(
            f"{name}: condaEnv {spec.conda_env}: runs 'conda run' inside the container; the image needs that env"
        )
    if spec.working_dir:
        notes.append(f"{name}: workingDir {spec.working_dir} must exist inside the container (mount it there)")
    if spec.time_limit is not None and spec.backoff_limit:
        notes.append(f"{name}: activeDeadlineSeconds bounds all attempts together; gflow's timeLimit is per attempt")
    if spec.backoff_limit:
        notes.append(f"{name}: GFLOW_ATTEMPT is 1 in every pod: Kubernetes does not tell a pod which retry it is")
    if spec.cancelled:
        notes.append(f"{name}: spec.cancelled is true: exported suspended")
    return notes


def _job_object(
    name: str, spec: Any, labels: dict[str, str], container: dict[str, Any], queue: str | None, namespace: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    all_labels = dict(labels)
    if queue:
        all_labels[QUEUE_LABEL] = queue
    if all_labels:
        meta["labels"] = all_labels
    if spec.priority:
        meta["annotations"] = {"gflow.dev/priority": str(spec.priority)}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if spec.termination_grace_period is not None:
        pod["terminationGracePeriodSeconds"] = math.ceil(spec.termination_grace_period)
    job_spec: dict[str, Any] = {"backoffLimit": spec.backoff_limit}
    if spec.time_limit is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.time_limit))
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = math.ceil(spec.ttl_seconds_after_finished)
    if spec.suspend or spec.cancelled:
        job_spec["suspend"] = True
    template: dict[str, Any] = {"spec": pod}
    if labels:
        template = {"metadata": {"labels": dict(labels)}, "spec": pod}
    job_spec["template"] = template
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def export_job(
    job: Any,
    name: str,
    manifest_dir: str = ".",
    *,
    image: str,
    queue: str | None = None,
    namespace: str | None = None,
) -> Exported:
    spec = job.spec
    container = _container(spec, command_argv(spec), k8s_env(name, spec), image, manifest_dir)
    data = _job_object(name, spec, dict(job.metadata.labels), container, queue, namespace)
    return Exported(dump(data), _unmapped(spec, name), data)


def sweep_lookup(children: list[Any], envs: list[dict[str, str]]) -> str:
    """The bash run by every pod of the Indexed Job: index -> that child's own variables (``envs``,
    in order; the shared ones are the container's env) and command."""
    lines = ['case "$JOB_COMPLETION_INDEX" in']
    for index, (child, env) in enumerate(zip(children, envs)):
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        lines.append(
            f"  {index}) {f'export {exports}; ' if exports else ''}exec {shlex.join(command_argv(child.spec))} ;;"
        )
    lines.append('  *) echo "no sweep child for index $JOB_COMPLETION_INDEX" >&2; exit 2 ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"


def export_sweep(
    sweep: Any,
    name: str,
    children: list[Any],
    manifest_dir: str = ".",
    *,
    image: str,
    queue: str | None = None,
    namespace: str | None = None,
) -> Exported:
    """A Sweep as an Indexed Job: index i is child i (``children``: the expanded child Jobs, in order)."""
    template = sweep.spec.template
    common, own = split_common([k8s_env(child.name, child.spec) for child in children])
    container = _container(
        template, ["bash", "-c", sweep_lookup(children, own), "gflow-sweep"], common, image, manifest_dir
    )
    data = _job_object(name, template, dict(sweep.metadata.labels), container, queue, namespace)
    spec = data["spec"]
    spec["completionMode"] = "Indexed"
    spec["completions"] = len(children)
    spec["parallelism"] = sweep.spec.parallelism or len(children)
    # gflow retries each child on its own: the per-index limit says the same
    spec["backoffLimitPerIndex"] = spec.pop("backoffLimit")
    data["spec"] = {k: spec[k] for k in ("completionMode", "completions", "parallelism", "backoffLimitPerIndex")} | {
        k: v
        for k, v in spec.items()
        if k not in ("completionMode", "completions", "parallelism", "backoffLimitPerIndex")
    }
    notes = _unmapped(template, name)
    notes.append(
        f"{name}: children run as indices 0..{len(children) - 1} of one Job, not as Jobs named {children[0].name}..."
    )
    return Exported(dump(data), notes, data)
