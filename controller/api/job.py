"""The Job manifest model (``kind: Job``): what users write, validated strictly.

Unknown fields are rejected, types are strict (a quoted ``"2"`` is not a GPU count), and every
rule that can be checked from one manifest alone lives here. Rules that need other jobs
(duplicate names, dependency cycles) belong to admission.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from controller import API_VERSION
from controller.api.fields import Duration, Quantity, _Model
from controller.api.names import is_valid_name
from controller.api.signals import CHECKPOINT_SIGNALS
from controller.api.units import parse_duration
from controller.model.resources import COUNTED, EMPTY, KINDS, ResourceVector

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _check_name(name: str) -> str:
    if not is_valid_name(name):
        raise ValueError(
            f"{name!r} is not a valid name: use at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return name


def _check_env_names(env: dict[str, str]) -> dict[str, str]:
    for key in env:
        if not _ENV_NAME_RE.match(key):
            raise ValueError(f"{key!r} is not a valid environment variable name")
    return env


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not _LABEL_KEY_RE.match(key) or len(key) > 253:
            raise ValueError(f"label key {key!r} is not valid: use letters, digits, '-', '_', '.'")
        if len(value) > 63:
            raise ValueError(f"label {key!r}: value is longer than 63 characters")
    return labels


def _time_text(value: Any) -> Any:
    """YAML reads an unquoted ``2026-12-01T22:00:00`` as a timestamp: take it as the text it was."""
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _check_start_after(value: str) -> str:
    """RFC 3339 time, or ``+2h``: relative to when the controller first saw the manifest."""
    if value.startswith("+"):
        parse_duration(value[1:])
        return value
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time; use RFC 3339 like 2026-12-01T22:00:00 or a delay like +2h"
        ) from None
    return value


def _scalar_text(value: Any) -> Any:
    """``[sleep, 30]`` and ``[true]`` mean what they say: integers and booleans become their text.
    Floats are refused: YAML would change their spelling (``1.10`` -> ``1.1``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        raise ValueError(f'{value!r} is a number: quote it ("{value!r}") so its spelling is kept')
    return value


# An argument or environment value: text, with integers and booleans accepted as their text.
Text = Annotated[
    StrictStr,
    BeforeValidator(_scalar_text, json_schema_input_type=str | int | bool),
]


def _env_text(value: Any) -> Any:
    """As :func:`_scalar_text`, but a refusal never quotes the value: env values are often secrets,
    and the message lands in a status everyone can read."""
    if isinstance(value, float):
        raise ValueError("is a number: quote it so its spelling is kept")
    return _scalar_text(value)


# An environment value: as Text.
EnvText = Annotated[
    StrictStr,
    BeforeValidator(_env_text, json_schema_input_type=str | int | bool),
]
Name = Annotated[StrictStr, AfterValidator(_check_name)]


class ObjectMeta(_Model):
    name: Name | None = Field(
        default=None,
        description="DNS-1123 label, unique on the machine. May be omitted when the file holds one document: "
        "the file stem is used.",
    )
    labels: Annotated[dict[StrictStr, StrictStr], AfterValidator(_check_labels)] = Field(
        default_factory=dict, description="Free key/values, selectable with `gflowctl get jobs -l key=value`."
    )
    annotations: dict[StrictStr, StrictStr] = Field(
        default_factory=dict,
        description="Free key/values for tools. `gflow.dev/rerun` is bumped by `gflowctl rerun`.",
    )


class Resources(_Model):
    gpus: StrictInt = Field(default=0, ge=0, description="Whole GPUs. 0 (the default) is a CPU job.")
    gpu_type: StrictStr | None = Field(
        default=None,
        min_length=1,
        description="Only GPUs whose NVML name contains this text (case-insensitive), e.g. H100.",
    )
    gpu_memory: Quantity | None = Field(
        default=None, description="GPU memory needed per GPU. Required when sharing is Shared."
    )
    memory: Quantity | None = Field(
        default=None, description="Host RAM limit of the job's whole process tree; enforced."
    )
    cpus: StrictInt | None = Field(
        default=None,
        ge=1,
        description="Whole CPU cores, scheduled like GPUs and pinned with a cpuset near the GPUs' NUMA node; "
        "OMP_NUM_THREADS defaults to it. Absent: no cores are booked or pinned.",
    )
    pids: StrictInt | None = Field(
        default=None, ge=1, description="At most this many processes and threads in the job (a fork bomb is contained)."
    )
    shm: Quantity | None = Field(
        default=None,
        description="Shared memory (/dev/shm) the job uses, booked against the size of the machine's /dev/shm so "
        "that running jobs together do not fill it; the job waits until enough is free. Not yet a per-job limit.",
    )

    def requests(self) -> ResourceVector:
        """Everything it asks for, one vector keyed by kind (controller.model.resources.KINDS)."""
        return ResourceVector({kind: getattr(self, kind) or 0 for kind in KINDS})

    def counted(self) -> ResourceVector:
        """The counted kinds it asks for (controller.model.resources.COUNTED), as one vector."""
        amounts = {kind: value for kind in COUNTED if (value := getattr(self, kind))}
        return ResourceVector(amounts) if amounts else EMPTY  # most jobs ask none: no new object per pass


def _check_signal(value: str) -> str:
    """``USR1``, ``SIGUSR1`` or ``usr1`` -> ``USR1``."""
    name = value.upper().removeprefix("SIG")
    if name not in CHECKPOINT_SIGNALS:
        raise ValueError(f"{value!r} is not a signal a job can trap; use one of {', '.join(CHECKPOINT_SIGNALS)}")
    return name


class Checkpoint(_Model):
    signal: Annotated[StrictStr, AfterValidator(_check_signal)] = Field(
        default="USR1", description="The signal sent to the job's processes (USR1, SIGUSR2, ...)."
    )
    before: Duration = Field(
        default=600.0, description="Sent this long before the time limit (as sbatch --signal=SIG@SECONDS)."
    )
    grace: Duration = Field(
        default=300.0,
        description="A stop gflowd causes (preemption, suspend, a GPU drain, an idle stop) waits this long for "
        "the job's confirmation (`gflowctl checkpoint done` or the file $GFLOW_CHECKPOINT_FILE), then goes on "
        "as without (TERM, terminationGracePeriod, KILL).",
    )
    scope: Literal["Main", "All"] = Field(
        default="Main",
        description="Main (default): the signal goes to the job's main process only (a script's shell must trap "
        "and pass it on, as sbatch --signal=B:); All: to every process of the job (sbatch --signal without B:).",
    )
    requeue: StrictBool = Field(
        default=False,
        description="true: an attempt stopped at its time limit after a confirmed checkpoint returns to Pending "
        "and resumes (GFLOW_RESUME=1) instead of failing.",
    )


class Dependency(_Model):
    job: Name = Field(description="Name of the job this one waits for.")
    condition: Literal["Succeeded", "Failed", "Finished"] = Field(
        default="Succeeded",
        description="Succeeded (default), Failed, or Finished (either).",
    )


def _dependency_shorthand(value: Any) -> Any:
    """A bare string in ``dependsOn`` means ``{job: NAME, condition: Succeeded}``."""
    return {"job": value} if isinstance(value, str) else value


class JobSpec(_Model):
    command: list[Text] | None = Field(
        default=None,
        min_length=1,
        description="Program and arguments, exec'd directly (no shell). Exactly one of command and script.",
    )
    script: StrictStr | None = Field(
        default=None,
        min_length=1,
        description="A bash script, run as a file with `bash -e`. Exactly one of command and script.",
    )
    working_dir: StrictStr | None = Field(
        default=None,
        description="Working directory; `~` expands, relative paths resolve against the manifest's folder. "
        "`gflowctl apply` and `run` write the folder you submitted from (absent or relative only).",
    )
    env: Annotated[dict[StrictStr, EnvText], AfterValidator(_check_env_names)] = Field(
        default_factory=dict,
        description="Extra environment variables. Integers and booleans become text; quote floats.",
    )
    conda_env: StrictStr | None = Field(default=None, min_length=1, description="Run inside this conda environment.")
    resources: Resources = Field(
        default_factory=Resources, description="What the job needs: GPUs, GPU memory, host RAM."
    )
    sharing: Literal["Exclusive", "Shared"] = Field(
        default="Exclusive",
        description="Exclusive (default): GPUs are the job's alone. Shared: co-locate with other Shared jobs "
        "within resources.gpuMemory per GPU.",
    )
    priority: StrictInt = Field(
        default=0,
        ge=-(2**31),
        le=2**31 - 1,
        description="Higher runs first among the same user's jobs (a 32-bit integer); across users the admin's "
        "classes and fair share decide (docs/scheduling.md). Editable at any time.",
    )
    time_limit: Duration | None = Field(
        default=None, description="Wall-clock limit per attempt; enforced (TERM, grace, KILL)."
    )
    termination_grace_period: Duration | None = Field(
        default=None, description="Seconds between TERM and KILL when the job is stopped (default 10s)."
    )
    backoff_limit: StrictInt = Field(default=0, ge=0, le=2**31 - 1, description="Retries after a failed attempt.")
    depends_on: list[
        Annotated[Dependency, BeforeValidator(_dependency_shorthand, json_schema_input_type=Name | Dependency)]
    ] = Field(
        default_factory=list,
        description="Jobs that must end (Succeeded by default) before this one may start. "
        "A bare name means condition Succeeded.",
    )
    start_after: (
        Annotated[
            StrictStr,
            BeforeValidator(_time_text, json_schema_input_type=str),
            AfterValidator(_check_start_after),
        ]
        | None
    ) = Field(
        default=None,
        description="Not before this time: RFC 3339 (2026-12-01T22:00:00) or +DURATION from when the "
        "controller first saw the manifest.",
    )
    ttl_seconds_after_finished: Duration | None = Field(
        default=None,
        description="Remove the job this long after it finished: gflowd deletes its manifest (and so its "
        "status). Logs stay. Default: the controller's ttlSecondsAfterFinished, else kept.",
    )
    suspend: StrictBool = Field(
        default=False, description="true: hold the job; a running job is stopped and returns to Pending."
    )
    cancelled: StrictBool = Field(default=False, description="true: stop the job for good (phase Cancelled).")
    tty: StrictBool = Field(
        default=False,
        description="true: the job runs on a pseudo-terminal; `gflowctl attach NAME` connects to it "
        "(`gflowctl run -it` sets it).",
    )
    checkpoint: Checkpoint | None = Field(
        default=None,
        description="A checkpoint handshake before every stop gflowd causes (docs/checkpoint.md): the signal, "
        "`before` the time limit or at once for a preemption, suspend, GPU drain or idle stop; the stop waits "
        "up to `grace` for the job's confirmation; a requeued attempt resumes with GFLOW_RESUME=1.",
    )
    idle_timeout: Duration | None = Field(
        default=None,
        description="Stop the job (reason IdleTimeout) after this long with no GPU activity on its GPUs and, "
        "for a tty job, no terminal input either; warned first. Default: the controller's idleTimeout "
        "for tty jobs, else off.",
    )

    @model_validator(mode="after")
    def _check_rules(self) -> JobSpec:
        if (self.command is None) == (self.script is None):
            raise ValueError("exactly one of command and script is required")
        if self.sharing == "Shared":
            if self.resources.gpus == 0:
                raise ValueError("sharing Shared needs resources.gpus >= 1")
            if self.resources.gpu_memory is None:
                raise ValueError("sharing Shared needs resources.gpuMemory (the GPU memory it may use per GPU)")
        return self


class Job(_Model):
    """A unit of work: one process tree, optionally on GPUs."""

    api_version: Literal["gflow.dev/v1alpha1"] = Field(default=API_VERSION, description="gflow.dev/v1alpha1")
    kind: Literal["Job"] = Field(default="Job", description="Job")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Name, labels and annotations.")
    spec: JobSpec = Field(description="What to run, with which resources, and when.")
