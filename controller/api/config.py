"""Controller configuration: ``config.yaml`` in the home, every key also a ``gflowd`` flag.

Flags override the file. Unknown keys are errors, reported in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic.fields import FieldInfo

from controller.api.fields import Duration, Quantity, _Model
from controller.api.labels import parse_selector
from controller.api.settings import every_error, flag_name, flag_overrides  # noqa: F401  (also this module's names)
from controller.util.yamlio import YAMLSyntaxError, load_one


class Webhook(_Model):
    """One notification target (docs/operations.md): POSTed JSON when a job changes phase."""

    url: StrictStr = Field(description="http:// or https:// URL to POST to")
    events: list[StrictStr] = Field(
        default_factory=lambda: ["Succeeded", "Failed"],
        description="Job phases or reasons that trigger a notification (e.g. Succeeded, Failed, Cancelled, OOMKilled)",
    )
    selector: StrictStr | None = Field(default=None, description="Only jobs whose labels match, e.g. team=vision")
    timeout: Duration = Field(default=5.0, gt=0, description="Seconds to wait for each request")
    retries: int = Field(
        default=3, ge=0, le=20, description="Retries after a failed request, with exponential back-off"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return url

    @field_validator("events")
    @classmethod
    def _words(cls, events: list[str]) -> list[str]:
        if not events:
            raise ValueError("list at least one phase or reason, e.g. [Succeeded, Failed]")
        for event in events:
            if not event.isalnum() or not event[0].isupper():
                raise ValueError(f"{event!r} is not a phase or reason (CamelCase word like Failed)")
        return events

    @field_validator("selector")
    @classmethod
    def _selector(cls, selector: str | None) -> str | None:
        if selector is not None:
            parse_selector(selector)
        return selector


def _parse_gpu_types(value: object) -> object:
    """``H100=h100,A100=a100`` (the flag's form) or a mapping (config.yaml) -> {gpuType: GRES type}."""
    if not isinstance(value, str):
        return value
    types: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        gpu_type, sep, gres = (p.strip() for p in item.partition("="))
        if not sep or not gpu_type or not gres:
            raise ValueError(f"expected GPUTYPE=GRESTYPE[,GPUTYPE=GRESTYPE...], got {item!r}")
        types[gpu_type] = gres
    return types


def _check_gpu_types(types: dict[str, str]) -> dict[str, str]:
    for gpu_type, gres in types.items():
        if not gres or any(c in gres for c in ":,= \t"):
            raise ValueError(f"{gpu_type}: {gres!r} is not a GRES type (one word as gres.conf names it, e.g. h100)")
    return types


GpuTypes = Annotated[
    dict[StrictStr, StrictStr],
    BeforeValidator(_parse_gpu_types),
    AfterValidator(_check_gpu_types),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": "string"}}),
]


class SlurmConfig(_Model):
    """Where and how the Slurm backend submits (``backend: slurm``); flags ``--slurm-partition`` etc.
    ``gflowctl export slurm`` takes its defaults from here too."""

    partition: StrictStr | None = Field(default=None, description="Slurm partition (sbatch --partition)")
    account: StrictStr | None = Field(default=None, description="Slurm account (sbatch --account)")
    extra_args: list[StrictStr] = Field(
        default_factory=list,
        description="More sbatch options for every job; flag: --slurm-extra-args=--qos=high,--exclusive",
    )
    gpu_types: GpuTypes = Field(
        default_factory=dict,
        description="The cluster's GRES type for each gpuType jobs use (--gres=gpu:TYPE:N), e.g. H100=h100,A100=a100; "
        "a job whose gpuType is not here fails with a message naming this setting",
    )


class K8sConfig(_Model):
    """Defaults of ``gflowctl export k8s`` (config.yaml only: gflowd does not use them)."""

    image: StrictStr | None = Field(
        default=None, min_length=1, description="Container image of exported Jobs (--image)"
    )
    namespace: StrictStr | None = Field(default=None, description="metadata.namespace of exported Jobs (--namespace)")
    queue: StrictStr | None = Field(default=None, description="Kueue LocalQueue of exported Jobs (--queue)")


def _parse_quotas(value: object) -> object:
    """``alice:4,bob:2`` (the flag's form) or a mapping (config.yaml) -> {name: max GPUs}."""
    if not isinstance(value, str):
        return value
    quotas: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, limit = item.rpartition(":")
        if not sep or not name:
            raise ValueError(f"expected NAME:GPUS[,NAME:GPUS...], got {item!r}")
        quotas[name] = int(limit) if limit.strip().isdigit() else limit
    return quotas


Quotas = Annotated[
    dict[StrictStr, Annotated[int, Field(ge=0)]],
    BeforeValidator(_parse_quotas),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}),
]


UserRef = Annotated[
    StrictStr | Annotated[int, Field(ge=0)],
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}),
]


def _every_user() -> list[str | int]:
    return ["*"]


def _check_range(value: list[int]) -> list[int]:
    if len(value) != 2 or value[0] > value[1]:
        raise ValueError(f"expected [LOW, HIGH] with LOW <= HIGH, got {value!r}")
    return value


class UserClassConfig(_Model):
    """One class of users (docs/scheduling.md, "Across users"): its rank orders the queue across
    users, its priorityRange is how much of a member's priority counts across users."""

    users: list[UserRef] = Field(default_factory=list, description="Members: user names or uids")
    rank: int = Field(
        default=0, description="Higher ranks' jobs are offered first, before fair share (default class: 0)"
    )
    priority_range: Annotated[list[int], AfterValidator(_check_range)] = Field(
        default_factory=lambda: [0, 0],
        description="[LOW, HIGH]: a member's priority, clamped to this range, also orders the queue across users; "
        "[0, 0] (default): priority orders only the user's own jobs",
    )
    max_pending_jobs_per_user: int | None = Field(
        default=None, ge=0, description="Replaces maxPendingJobsPerUser for members"
    )
    max_running_jobs_per_user: int | None = Field(
        default=None, ge=0, description="Replaces maxRunningJobsPerUser for members"
    )


class ReservationPolicy(_Model):
    """What a non-admin's Reservation may ask (docs/reservations.md); admins are exempt. The
    defaults are deliberately tight: a user reserves one GPU for a day at most, a week ahead."""

    users: list[UserRef] = Field(
        default_factory=_every_user, description='Who may reserve besides admins ("*": every user; []: admins only)'
    )
    max_gpus: int = Field(default=1, ge=0, description="Most GPUs one Reservation of a non-admin may hold")
    max_duration: Duration = Field(default=86400.0, gt=0, description="Longest window of a non-admin's Reservation")
    max_start_ahead: Duration = Field(
        default=7 * 86400.0, ge=0, description="How far ahead of now a non-admin's window may start"
    )
    horizon: Duration = Field(
        default=86400.0,
        ge=0,
        description="A window that opens further ahead than this fences no job yet (jobs without a timeLimit "
        "may still start on its GPUs); applies to every Reservation",
    )


class ControllerConfig(_Model):
    spec_dir: StrictStr | None = Field(default=None, description="Spec directory (default: $GFLOW_HOME/jobs)")
    fake_gpus: StrictStr | None = Field(default=None, description="YAML fake-GPU file instead of NVML")
    gpus: list[int] | None = Field(default=None, description="Only these GPU indices are used (others: Restricted)")
    allocation_strategy: Literal["sequential", "random", "packed", "spread"] = Field(
        default="sequential",
        description="How GPUs are picked among free ones: sequential (lowest index first), random, "
        "packed (fill partly used shared GPUs first), spread (emptiest GPUs first)",
    )
    resync: Duration = Field(default=10.0, gt=0, description="Full resync period")  # 0: a pass after pass, a core busy
    debounce: Duration = Field(default=0.01, description="Quiet time after a file event before a pass")
    termination_grace_period: Duration = Field(default=10.0, description="Default seconds between TERM and KILL")
    unmanaged_memory_threshold: Quantity = Field(
        default=2**30, description="Foreign GPU processes using less than this in total are tolerated"
    )
    ttl_seconds_after_finished: Duration | None = Field(
        default=None, description="Default TTL of finished jobs (their manifests are deleted); unset: kept"
    )
    finished_jobs_history: int | None = Field(
        default=None,
        ge=0,
        description="Keep at most this many finished jobs; the oldest beyond it have their manifests deleted",
    )
    # -- scheduling policy (docs/scheduling.md; defaults chosen by `gflowctl simulate`, docs/simulator.md)
    scheduling_policy: Literal["backfill", "priority", "firstfit", "fifo"] = Field(
        default="backfill",
        description="backfill: priority order, the first blocked job gets a reservation and later jobs "
        "start only where their timeLimit proves they do not delay it; priority: the first blocked job "
        "blocks everyone behind it; firstfit: any job that fits starts (starves big jobs); fifo: "
        "strict arrival order",
    )
    aging_interval: Duration | None = Field(
        default=3600.0, description="A pending job gains one priority point per this much waiting; 0: no aging"
    )
    aging_max: int = Field(default=100, ge=0, description="At most this many priority points from aging")
    fair_share_half_life: Duration | None = Field(
        default=7 * 86400.0,
        description="Within one priority, users with fewer recent GPU-hours go first; usage halves "
        "after this long. 0: no fair share",
    )
    user_quotas: Quotas = Field(
        default_factory=dict,
        description="Most GPUs a user's (manifest owner's) running jobs may hold at once, e.g. alice:4,bob:2",
    )
    label_quotas: Quotas = Field(
        default_factory=dict,
        description="Most GPUs the running jobs with a label may hold at once, e.g. team=vision:8",
    )
    preemption_threshold: int | None = Field(
        default=None,
        ge=1,
        description="A pending job whose priority is at least this much above a running job's may "
        "preempt it (the victim returns to Pending); unset: no preemption",
    )
    # -- what one user may take (docs/scheduling.md, "Limits"; docs/multi-user.md, "Policy") --
    admins: list[UserRef] = Field(
        default_factory=list,
        description="Users (names or uids) exempt from the per-user limits and the reservation policy; root always is",
        json_schema_extra={"flag": False},
    )
    classes: dict[StrictStr, UserClassConfig] = Field(
        default_factory=dict,
        description="Classes of users: rank, priorityRange, limits (config.yaml only)",
        json_schema_extra={"flag": False},
    )

    @field_validator("classes")
    @classmethod
    def _one_class_each(cls, classes: dict[str, UserClassConfig]) -> dict[str, UserClassConfig]:
        seen: dict[str, str] = {}
        twice = []
        for name, members in classes.items():
            for user in map(str, members.users):
                if user in seen:
                    twice.append(f"{user} is in {seen[user]} and {name}")
                seen.setdefault(user, name)
        if twice:
            raise ValueError(f"a user belongs to one class: {'; '.join(twice)}")
        return classes

    max_pending_jobs_per_user: int | None = Field(
        default=1000,
        ge=0,
        description="Most jobs (Sweep children included) one user may have waiting to start; a newer one is "
        "Rejected/QueueLimit until its manifest changes. 0: no limit",
    )
    max_running_jobs_per_user: int | None = Field(
        default=0, ge=0, description="Most jobs one user may have running; more wait (JobLimit). 0: no limit"
    )
    max_running_cpu_jobs: int | None = Field(
        default=64,
        ge=0,
        description="Most CPU-only jobs (gpus: 0) running at once on the machine (each has a supervisor); more "
        "wait (JobLimit). 0: no limit",
    )
    reservations: ReservationPolicy = Field(
        default_factory=ReservationPolicy, description="What non-admins' Reservations may ask"
    )
    ignore_processes: list[StrictStr] = Field(
        default_factory=list, description="Foreign GPU processes (by name or pid) that never make a GPU Unmanaged"
    )
    # -- limits the kernel enforces (docs/cgroups.md) --
    cgroups: Literal["auto", "required", "off"] = Field(
        default="auto",
        description="Each attempt in its own cgroup (memory, cpuset, pids, GPU device nodes): auto uses "
        "cgroups where it can and else polls memory, saying so once; required refuses to start without "
        "them; off polls",
    )
    device_dir: StrictStr = Field(
        default="/dev", description="Folder of the GPU device nodes (nvidiaN, nvidiactl, ...) the devices cgroup allows"
    )
    proc_dir: StrictStr = Field(
        default="/proc",
        description="The kernel's /proc: NVIDIA's MIG capabilities and nvidia-caps major the devices cgroup reads",
    )
    sys_dir: StrictStr = Field(
        default="/sys", description="The kernel's /sys: which /dev/dri/cardN belongs to which AMD GPU (class/drm)"
    )
    # -- GPU usage (docs/gpu-usage.md) --
    gpu_sample_interval: Duration = Field(
        default=5.0, gt=0, description="Seconds between GPU usage samples of running jobs (one NVML sweep each)"
    )
    unused_gpu_window: Duration = Field(
        default=600.0,
        gt=0,
        description="A bound GPU with no process of its job and no utilization this long: condition GPUsUnused",
    )
    idle_gpu_window: Duration = Field(
        default=1800.0, gt=0, description="No activity on any of a job's GPUs this long: condition GPUIdle"
    )
    idle_timeout: Duration | None = Field(
        default=None,
        gt=0,
        description="Default spec.idleTimeout of tty jobs that set none: stop them after this long idle; unset: off",
    )
    # -- operations (docs/operations.md) --
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="Serve Prometheus metrics on this port (0: any free port); unset: off"
    )
    metrics_address: StrictStr = Field(
        default="127.0.0.1", description="Address the metrics server listens on (0.0.0.0: every interface)"
    )
    webhooks: list[Webhook] = Field(
        default_factory=list,
        description="Webhooks notified when jobs change phase (config.yaml only)",
        json_schema_extra={"flag": False},
    )
    web_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve the read-only web dashboard on this TCP port (0: any free port, written to run/web.json); unset: off",
    )
    web_address: StrictStr = Field(
        default="127.0.0.1", description="Address the web dashboard listens on (loopback unless set)"
    )
    backend: Literal["local", "slurm"] = Field(
        default="local",
        description="Where jobs run: local (a supervisor per job on this machine) or slurm (sbatch to a Slurm cluster)",
    )
    slurm: SlurmConfig = Field(default_factory=SlurmConfig, description="Settings of the slurm backend")
    k8s: K8sConfig = Field(
        default_factory=K8sConfig,
        alias="k8s",
        description="Defaults of gflowctl export k8s",
        json_schema_extra={"flag": False},
    )


def flag_fields() -> list[tuple[tuple[str, ...], FieldInfo]]:
    """Every setting that is also a ``gflowd`` flag, as (path, field info): nested models
    (``slurm``) give one flag per key, ``--slurm-partition`` for ``slurm.partition``. gflowd reads
    them from ``config_flags.FLAGS``, generated from this by hack/gen_config_flags.py."""
    out: list[tuple[tuple[str, ...], FieldInfo]] = []
    for name, info in ControllerConfig.model_fields.items():
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("flag") is False:
            continue  # config.yaml only (e.g. webhooks: a list of mappings)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.extend(((name, sub), subinfo) for sub, subinfo in annotation.model_fields.items())
        else:
            out.append(((name,), info))
    return out


class ConfigError(Exception):
    pass


def _by_alias(model: type[BaseModel], mapping: dict) -> dict:
    """Keys spelt as config.yaml documents them (camelCase), whichever spelling was used, so a flag
    (``metrics_port``) and the file's key (``metricsPort``) for one setting merge, the flag winning,
    instead of reaching the model as two keys."""
    fields = {**model.model_fields, **{f.alias: f for f in model.model_fields.values() if f.alias}}
    out = {}
    for key, value in mapping.items():
        info = fields.get(key)
        if info is None:
            out[key] = value  # unknown: the model names it in its error
            continue
        if isinstance(value, dict) and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            value = _by_alias(info.annotation, value)
        out[info.alias or key] = value
    return out


def load_config(path: Path, overrides: dict) -> ControllerConfig:
    """Merge ``config.yaml`` (if present) with flag overrides; ConfigError has a one-line message.

    A config that may exist but cannot be read (say a home under another user's 0700 folder) is
    an error, not an absent file: running on defaults would silently drop its settings."""

    data: dict = {}
    try:
        text: str | None = path.read_text()
    except FileNotFoundError:
        text = None
    except OSError as exc:
        hint = "; choose a home this user can read (--home or $GFLOW_HOME)" if isinstance(exc, PermissionError) else ""
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}{hint}") from None
    if text is not None:
        try:
            loaded = load_one(text)
        except YAMLSyntaxError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of settings")
        data = _by_alias(ControllerConfig, dict(loaded or {}))
    flags = _by_alias(ControllerConfig, {k: v for k, v in overrides.items() if v is not None})
    for key, value in flags.items():  # a nested section merges key by key: flags win
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    try:
        return ControllerConfig.model_validate(data)
    except ValidationError as exc:
        parts = [_said(err, flags, path) for err in exc.errors()]
        raise ConfigError(every_error(parts)) from None


def _said(err: Any, flags: dict, path: Path) -> str:
    """One of the model's errors, named as the user gave the value: ``--flag`` or ``config.yaml: key``."""
    loc = ".".join(str(p) for p in err["loc"])
    msg = err.get("ctx", {}).get("error") or err["msg"]
    key = str(err["loc"][0]) if err["loc"] else ""
    name = next((n for n, f in ControllerConfig.model_fields.items() if key in (n, f.alias)), key)
    if key in flags and not isinstance(flags[key], dict):
        return f"{flag_name((name,))}: {msg}"
    if key in flags and len(err["loc"]) > 1 and str(err["loc"][1]) in flags[key]:  # a section's flag
        section = ControllerConfig.model_fields[name].annotation
        inner = str(err["loc"][1])
        field = next((n for n, f in getattr(section, "model_fields", {}).items() if inner in (n, f.alias)), inner)
        return f"{flag_name((name, field))}: {msg}"
    return f"{path.name}: {loc}: {msg}"
