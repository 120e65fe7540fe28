"""A gflow Job or Sweep as a Slurm batch script (``gflowctl export slurm``), and the sbatch options
the Slurm backend submits with (``controller.act.runtime.backends.slurm``): one translation, two users.

What maps: ``resources.gpus`` -> ``--gres=gpu[:TYPE]:N``, where TYPE is ``gpuType`` in the
cluster's words (``gpu_types``: config ``slurm.gpuTypes``, e.g. ``{H100: h100}``). gpuType is a
substring of a GPU's model name and a GRES type is whatever the cluster's gres.conf calls it: one
cannot be derived from the other, so a gpuType without a name there is an error
(``UnmappedGpuType``), never a job Slurm refuses nor a constraint silently dropped.
``resources.cpus`` -> ``--cpus-per-task`` (Slurm's task/cgroup pins them; ``OMP_NUM_THREADS`` is set as
gflowd sets it); ``timeLimit`` -> ``--time`` (Slurm counts whole minutes and rounds up); ``resources.memory`` ->
``--mem`` (MiB, Slurm's units are powers of 1024); ``workingDir`` -> ``--chdir``; ``priority`` ->
``--nice`` (negated: higher priority is a lower nice), as far as the submitter may: only Slurm
operators may lower a nice, and sbatch refuses the whole job otherwise ("Invalid --nice value"),
so a positive priority is nice 0 unless ``operator`` (``nice_options``; the script says so);
``suspend`` -> ``--hold``; ``startAfter`` -> ``--begin``; ``checkpoint`` -> ``--signal=[B:]SIG@SECONDS``
(``B:`` for scope Main: the batch shell only, as sbatch means it; SECONDS is ``before``, whole
seconds rounded up, at most sbatch's 65535) and ``--requeue`` with ``requeue: true``, the job being
told ``GFLOW_CHECKPOINT_SIGNAL`` and ``GFLOW_RESTART_COUNT`` (``SLURM_RESTART_COUNT``) as gflowd
tells it (docs/checkpoint.md); ``env`` -> ``export`` lines in the
script (values may hold commas, which ``--export=K=V`` cannot carry); a Sweep -> ``--array`` with a
``case`` on ``SLURM_ARRAY_TASK_ID`` that sets each child's variables and command.

The script gives the job the variables gflowd gives it (``slurm_env``): ``GFLOW_ATTEMPT`` counts
Slurm's requeues (``SLURM_RESTART_COUNT`` + 1), ``MASTER_PORT`` is a port free on the node when the
job starts, ``CUDA_VISIBLE_DEVICES`` the GPUs Slurm gave (empty for a CPU job, whatever the
submitting shell had).

What does not map (returned as notes): ``dependsOn`` (Slurm needs the parents' job ids:
``--dependency=afterok:ID``), ``backoffLimit`` (Slurm has no retry count), ``sharing: Shared`` and
``gpuMemory`` (a GRES GPU is whole), ``terminationGracePeriod`` (Slurm's ``KillWait`` is
cluster-wide), ``resources.pids`` (no sbatch option: the cluster's cgroup.conf decides),
``checkpoint.grace`` (Slurm waits for no confirmation, and signals nothing before a preemption or
an ``scancel``).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from controller.api.jobenv import job_env
from controller.api.units import parse_duration
from controller.export import Exported, Shell, split_common, workdir
from controller.model.mig import mig_profile_ok

MIB = 2**20
GIB = 2**30

# values only the node knows when the job starts, as the script computes them
ATTEMPT = Shell('"$(( ${SLURM_RESTART_COUNT:-0} + 1 ))"')
RESTARTS = Shell('"${SLURM_RESTART_COUNT:-0}"')  # GFLOW_RESTART_COUNT: the attempts before this one
GIVEN_GPUS = Shell('"${CUDA_VISIBLE_DEVICES-}"')  # Slurm sets it from the GRES it allocated
# a port free on the node (bound as port 0, then released for the job); without python3, one
# derived from the job id
FREE_PORT = Shell(
    '"$(python3 -c \'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])\' 2>/dev/null'
    ' || echo $(( 20000 + ${SLURM_JOB_ID:-$$} % 20000 )))"'
)


class UnmappedGpuType(ValueError):
    """A ``gpuType`` for which ``slurm.gpuTypes`` names no GRES type of the cluster."""

    def __init__(self, gpu_type: str):
        self.gpu_type = gpu_type
        super().__init__(
            f"gpuType {gpu_type} has no Slurm GRES type in slurm.gpuTypes: map it in config.yaml "
            f"(slurm: {{gpuTypes: {{{gpu_type}: TYPE}}}}, TYPE as the cluster's gres.conf names it)"
        )


def slurm_time(seconds: float) -> str:
    """``--time`` as ``[D-]HH:MM:SS``; Slurm itself rounds up to whole minutes."""
    total = max(1, math.ceil(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def slurm_mem(n_bytes: int) -> str:
    """``--mem``: whole GiB when exact, else MiB rounded up (Slurm's G and M are powers of 1024)."""
    if n_bytes % GIB == 0 and n_bytes:
        return f"{n_bytes // GIB}G"
    return f"{max(1, math.ceil(n_bytes / MIB))}M"


def gres_type(gpu_type: str, gpu_types: Mapping[str, str]) -> str:
    """The cluster's GRES type for a ``gpuType``; keys match case-insensitively, as gpuType does."""
    for key, value in gpu_types.items():
        if key.lower() == gpu_type.lower():
            return value
    if mig_profile_ok(gpu_type):  # AutoDetect=nvml's MIG GRES types carry the profile; map others in gpuTypes
        return gpu_type.lower()
    raise UnmappedGpuType(gpu_type)


def gres(gpus: int, gpu_type: str | None, gpu_types: Mapping[str, str] | None = None) -> str | None:
    if gpus <= 0:
        return None
    return f"gpu:{gres_type(gpu_type, gpu_types or {})}:{gpus}" if gpu_type else f"gpu:{gpus}"


NICE_LIMIT = 2147483645  # sbatch: "--nice ... adjustment range is +/- 2147483645"


def nice(priority: int) -> int:
    """gflow: higher priority runs first. Slurm: higher nice runs later."""
    return max(-NICE_LIMIT, min(NICE_LIMIT, -priority))


def nice_options(priority: int, operator: bool) -> tuple[list[str], list[str]]:
    """``priority`` as the ``--nice`` option a submitter may use, and the comment lines that say
    what was mapped. An ordinary user may only raise a nice (run later): a positive priority,
    which needs a lower one, is submitted at nice 0 (``--priority`` needs operator rights too)."""
    wanted = nice(priority)
    if wanted == 0:
        return [], []
    if wanted > 0:
        return [f"--nice={wanted}"], [f"# priority {priority} -> --nice={wanted} (a higher nice runs later)"]
    if operator:
        return [f"--nice={wanted}"], [
            f"# priority {priority} -> --nice={wanted} (a lower nice runs sooner; needs Slurm operator rights)"
        ]
    return [], [
        f"# priority {priority} -> nice 0: --nice={wanted} would run it sooner, but only Slurm operators may",
        f"# lower a nice (sbatch refuses the job otherwise); an operator can: scontrol update JobId=ID Nice={wanted}",
    ]


def begin(start_after: str | None) -> str | None:
    """``--begin``: an RFC 3339 time as Slurm's local ``YYYY-MM-DDTHH:MM:SS``, ``+2h`` as ``now+7200``."""
    if not start_after:
        return None
    if start_after.startswith("+"):
        return f"now+{math.ceil(parse_duration(start_after[1:]))}"

    moment = datetime.fromisoformat(start_after.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone().replace(tzinfo=None)  # Slurm reads times in its local zone
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


SIG_TIME_MAX = 65535  # sbatch --signal: "sig_time must be an integer value between 0 and 65535 seconds"


def signal_option(checkpoint: Any, time_limit: float | None = None, own_deadline: bool = False) -> str | None:
    """spec.checkpoint -> ``--signal=[B:]SIG@SECONDS``: ``B:`` signals only the batch shell (scope
    Main), without it every process of the job's steps (scope All); SECONDS is ``before``,
    rounded up to whole seconds (sooner rather than later) and capped at what sbatch takes.

    ``own_deadline`` (the backend): gflowd stops the job at ``timeLimit`` to the second, while
    Slurm counts from its limit rounded up to whole minutes: the difference is added, so the
    signal still comes ``before`` the stop that ends the job."""
    if checkpoint is None:
        return None
    early = math.ceil(time_limit / 60) * 60 - time_limit if own_deadline and time_limit else 0.0
    seconds = min(SIG_TIME_MAX, math.ceil(checkpoint.before + early))
    return f"--signal={'B:' if checkpoint.scope == 'Main' else ''}{checkpoint.signal}@{seconds}"


def sbatch_options(
    spec: Any,
    name: str,
    *,
    chdir: str,
    output: str,
    partition: str | None = None,
    account: str | None = None,
    operator: bool = False,
    gates: bool = True,
    gpu_types: Mapping[str, str] | None = None,
    own_deadline: bool = False,
) -> list[str]:
    """The ``--flag=value`` options for one job spec (a ``JobSpec``), in a stable order. Raises
    ``UnmappedGpuType`` for a ``gpuType`` that ``gpu_types`` has no GRES type for.

    ``operator``: the submitter may lower a nice (root, a Slurm operator): a positive priority
    becomes a negative ``--nice``; else nice 0 (``nice_options``).

    ``gates=False`` (the Slurm backend) leaves out ``--begin`` and ``--hold``: gflowd itself holds
    a suspended job and waits for ``startAfter`` before it submits, so Slurm must not wait again.
    ``own_deadline`` (the backend too): gflowd ends the job at its time limit (``signal_option``)."""
    opts = [f"--job-name={name}", f"--chdir={chdir}", f"--output={output}", "--export=ALL"]
    if partition:
        opts.append(f"--partition={partition}")
    if account:
        opts.append(f"--account={account}")
    res = spec.resources
    if (g := gres(res.gpus, res.gpu_type, gpu_types)) is not None:
        opts.append(f"--gres={g}")
    if res.cpus:
        opts.append(f"--cpus-per-task={res.cpus}")
    if spec.time_limit is not None:
        opts.append(f"--time={slurm_time(spec.time_limit)}")
    if res.memory is not None:
        opts.append(f"--mem={slurm_mem(res.memory)}")
    opts += nice_options(spec.priority, operator)[0]
    if gates and (b := begin(spec.start_after)) is not None:
        opts.append(f"--begin={b}")
    if gates and spec.suspend:
        opts.append("--hold")
    if (sig := signal_option(spec.checkpoint, spec.time_limit, own_deadline)) is not None:
        opts.append(sig)
        if spec.checkpoint.requeue:
            opts.append("--requeue")
    return opts


def unmapped(spec: Any, name: str, operator: bool = False) -> list[str]:
    """One sentence per field of ``spec`` that a Slurm job cannot express."""
    notes = []
    for dep in spec.depends_on:
        kind = {"Succeeded": "afterok", "Failed": "afternotok", "Finished": "afterany"}[dep.condition]
        notes.append(
            f"{name}: dependsOn {dep.job} ({dep.condition}) needs the parent's Slurm job id: "
            f"submit with --dependency={kind}:ID"
        )
    if spec.backoff_limit:
        notes.append(
            f"{name}: backoffLimit {spec.backoff_limit}: Slurm does not retry failed jobs by count; not exported"
        )
    if spec.sharing == "Shared" or spec.resources.gpu_memory is not None:
        notes.append(f"{name}: sharing/gpuMemory: a Slurm GRES GPU is whole; the job gets whole GPUs")
    if spec.termination_grace_period is not None:
        notes.append(f"{name}: terminationGracePeriod: Slurm's KillWait (cluster-wide) decides the grace")
    if spec.resources.pids is not None:
        notes.append(
            f"{name}: resources.pids {spec.resources.pids}: sbatch has no process limit (the cluster's cgroup.conf decides); not exported"
        )
    if spec.time_limit is not None and spec.time_limit % 60:
        notes.append(f"{name}: timeLimit {spec.time_limit:g}s: Slurm counts whole minutes and rounds it up")
    if spec.priority > 0 and not operator:
        notes.append(
            f"{name}: priority {spec.priority} is submitted at nice 0, not --nice={nice(spec.priority)}: "
            "a negative nice needs Slurm operator rights (the script says how an operator sets it)"
        )
    if spec.checkpoint is not None:
        notes.append(
            f"{name}: checkpoint.grace: Slurm waits for no confirmation (gflowctl checkpoint done has no supervisor "
            "to reach there) and signals nothing before a preemption or scancel: only before the time limit"
        )
        if spec.checkpoint.before > SIG_TIME_MAX:
            notes.append(f"{name}: checkpoint.before {spec.checkpoint.before:g}s: sbatch takes at most {SIG_TIME_MAX}s")
        if spec.checkpoint.requeue:
            notes.append(
                f"{name}: checkpoint.requeue -> --requeue: Slurm requeues on preemption or node failure, not at the "
                "time limit: to resume after it, the job's trap runs scontrol requeue $SLURM_JOB_ID once it saved"
            )
    if spec.cancelled:
        notes.append(f"{name}: spec.cancelled is true: this job would not run under gflowd")
    if spec.ttl_seconds_after_finished is not None:
        notes.append(f"{name}: ttlSecondsAfterFinished: Slurm keeps its own job records (MinJobAge)")
    return notes


def command_argv(spec: Any) -> list[str]:
    """What the job execs, as the local runtime would (``script`` runs under ``bash -e``)."""
    argv = ["bash", "-e", "-c", spec.script] if spec.script is not None else list(spec.command or [])
    if spec.conda_env:
        argv = ["conda", "run", "--no-capture-output", "-n", spec.conda_env, *argv]
    return argv


def slurm_env(name: str, spec: Any, attempt: str = ATTEMPT, generation: str = "1") -> dict[str, str]:
    """The job's variables in a Slurm script: what gflowd gives it, with the values Slurm knows.
    The backend passes its own attempt and generation; an export has neither (generation 1:
    Slurm only ever sees this spec)."""
    devices = GIVEN_GPUS if spec.resources.gpus > 0 else ""
    env = job_env(name, spec, devices=devices, attempt=attempt, generation=generation, master_port=FREE_PORT)
    for key in SLURM_OWN:  # what ``run`` gives an #SBATCH script locally (api/submit.py): Slurm's own values win
        env.pop(key, None)
    if spec.checkpoint is not None:  # as the local runtime tells a checkpointing job (docs/checkpoint.md)
        # an export counts Slurm's requeues; the backend submits each attempt anew and knows its number
        restarts = RESTARTS if attempt is ATTEMPT else str(max(int(attempt) - 1, 0))
        env.update(GFLOW_CHECKPOINT_SIGNAL=spec.checkpoint.signal, GFLOW_RESTART_COUNT=restarts)
    return env


SLURM_OWN = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_SUBMIT_DIR", "SLURM_ARRAY_JOB_ID", "SLURM_CPUS_PER_TASK")


def _exports(env: dict[str, str]) -> list[str]:
    return [f"export {key}={value if isinstance(value, Shell) else shlex.quote(value)}" for key, value in env.items()]


def job_body(spec: Any, env: dict[str, str]) -> list[str]:
    """The script lines after the ``#SBATCH`` header: variables, then the work."""
    lines = _exports(env)
    if spec.script is not None and not spec.conda_env:
        lines += ["set -e", spec.script.rstrip("\n")]
    else:
        lines.append("exec " + shlex.join(command_argv(spec)))
    return lines


def export_job(
    job: Any,
    name: str,
    manifest_dir: str,
    *,
    output: str = "%x-%j.log",
    partition: str | None = None,
    account: str | None = None,
    gpu_types: Mapping[str, str] | None = None,
    operator: bool = False,
) -> Exported:
    """Raises ``UnmappedGpuType`` (see ``sbatch_options``). ``operator``: the script is for a
    submitter who may lower a nice (see ``nice_options``); by default, for an ordinary user."""
    spec = job.spec
    opts = sbatch_options(
        spec,
        name,
        chdir=workdir(spec.working_dir, manifest_dir),
        output=output,
        partition=partition,
        account=account,
        gpu_types=gpu_types,
        operator=operator,
    )
    header = [*(f"#SBATCH {o}" for o in opts), *nice_options(spec.priority, operator)[1]]
    lines = ["#!/bin/bash", *header, ""] + job_body(spec, slurm_env(name, spec))
    return Exported("\n".join(lines) + "\n", unmapped(spec, name, operator))


def export_sweep(
    sweep: Any,
    name: str,
    children: list[Any],
    manifest_dir: str,
    *,
    output: str = "%x-%A_%a.log",
    partition: str | None = None,
    account: str | None = None,
    gpu_types: Mapping[str, str] | None = None,
    operator: bool = False,
) -> Exported:
    """A Sweep as one array job: task i is child i (``children``: the expanded child Jobs, in order).
    Variables all children share are set once, before the ``case``."""
    template = sweep.spec.template
    opts = sbatch_options(
        template,
        name,
        chdir=workdir(template.working_dir, manifest_dir),
        output=output,
        partition=partition,
        account=account,
        gpu_types=gpu_types,
        operator=operator,
    )
    last = len(children) - 1
    array = f"0-{last}" if last > 0 else "0"
    if sweep.spec.parallelism is not None:
        array += f"%{sweep.spec.parallelism}"
    opts.insert(1, f"--array={array}")
    common, own = split_common([slurm_env(child.name, child.spec) for child in children])
    header = [*(f"#SBATCH {o}" for o in opts), *nice_options(template.priority, operator)[1]]
    lines = ["#!/bin/bash", *header, "", *_exports(common), 'case "$SLURM_ARRAY_TASK_ID" in']
    for task, (child, env) in enumerate(zip(children, own)):
        lines.append(f"  {task})  # {child.name}")
        lines += [f"    {line}" for line in _exports(env)]
        lines.append("    exec " + shlex.join(command_argv(child.spec)) + " ;;")
    lines += ['  *) echo "no sweep child for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;', "esac"]
    notes = unmapped(template, name, operator)
    notes.append(f"{name}: children run as array tasks {name}_0..{last}, not as jobs named {children[0].name}...")
    return Exported("\n".join(lines) + "\n", notes)
