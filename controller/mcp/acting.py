"""Tools that change existing jobs by editing their manifests, as gflowctl's verbs do: cancel,
suspend, resume, set_priority, rerun, and update_job (with preview_update, which writes nothing).

What an update may change follows the job's phase (SPEC section 3): a Pending job any field; a
Running job only what takes effect on a running attempt (priority, time); a finished job's changed
spec runs it again as a new generation, which the preview says."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.client.api import Client
from controller.client.errors import GflowError

LIVE_FIELDS = {"priority", "time"}  # SPEC 3: these take effect on a running job


def tools(client: Client) -> tuple[list[Callable[..., dict[str, Any]]], list[Callable[..., dict[str, Any]]]]:
    """(reading tools, writing tools)."""

    def cancel(name: str) -> dict[str, Any]:
        """Stop a job (or sweep) for good."""
        return {"result": client.cancel(name)[0]}

    def suspend(name: str) -> dict[str, Any]:
        """Hold a job: a running one is stopped and returns to Pending until resumed."""
        return {"result": client.suspend(name)[0]}

    def resume(name: str) -> dict[str, Any]:
        """Release a suspended job."""
        return {"result": client.resume(name)[0]}

    def set_priority(name: str, priority: int) -> dict[str, Any]:
        """Set a job's priority (higher runs first); it takes effect while it waits or runs."""
        return {"result": client.set_priority(name, priority)}

    def rerun(name: str) -> dict[str, Any]:
        """Run a finished job (Succeeded, Failed or Cancelled) again, unchanged, as a new generation."""
        job = client.get(name)
        if job.phase not in ("Succeeded", "Failed", "Cancelled"):
            raise GflowError(f"job/{job.name} is {job.phase}: only a finished job can be rerun")
        return {"result": client.rerun(name)[0]}

    def preview_update(
        name: str,
        gpus: int | None = None,
        gpu_type: str | None = None,
        gpu_memory: str | None = None,
        memory: str | None = None,
        time: str | None = None,
        priority: int | None = None,
        after: list[str] | None = None,
        start_after: str | None = None,
        retries: int | None = None,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> dict[str, Any]:
        """What update_job would make of a job's manifest, whether admission accepts it, and what the
        change does in the job's phase. Writes nothing."""
        return _update(client, name, locals(), dry_run=True)

    def update_job(
        name: str,
        gpus: int | None = None,
        gpu_type: str | None = None,
        gpu_memory: str | None = None,
        memory: str | None = None,
        time: str | None = None,
        priority: int | None = None,
        after: list[str] | None = None,
        start_after: str | None = None,
        retries: int | None = None,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ) -> dict[str, Any]:
        """Change a queued job's request (preview_update first): GPUs, memory, time limit, priority,
        dependencies (`after`: JOB or JOB:Failed...), start time, retries, env, command. A running
        job takes only priority and time; a finished one runs again with the change."""
        return _update(client, name, locals(), dry_run=False)

    return [preview_update], [cancel, suspend, resume, set_priority, rerun, update_job]


def _patch(fields: dict[str, Any]) -> dict[str, Any]:
    """Update fields -> a JSON merge patch of the manifest."""
    resources = {
        key: fields[field]
        for field, key in (("gpus", "gpus"), ("gpu_type", "gpuType"), ("gpu_memory", "gpuMemory"), ("memory", "memory"))
        if fields.get(field) is not None
    }
    spec: dict[str, Any] = {"resources": resources} if resources else {}
    for field, key in (
        ("time", "timeLimit"),
        ("priority", "priority"),
        ("start_after", "startAfter"),
        ("retries", "backoffLimit"),
        ("env", "env"),
        ("command", "command"),
    ):
        if fields.get(field) is not None:
            spec[key] = fields[field]
    if fields.get("after") is not None:
        spec["dependsOn"] = [_dependency(text) for text in fields["after"]]
    return spec


def _dependency(text: str) -> dict[str, str]:
    job, _, condition = text.partition(":")
    if condition and condition not in ("Succeeded", "Failed", "Finished"):
        raise GflowError(f"after: {text!r}: the condition is Succeeded, Failed or Finished")
    return {"job": job, "condition": condition or "Succeeded"}


def _update(client: Client, name: str, fields: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    given = {k for k, v in fields.items() if k not in ("name", "client", "dry_run") and v is not None}
    if not given:
        raise GflowError("update: give at least one field to change")
    job = client.get(name)
    if job.phase == "Running" and given - LIVE_FIELDS:
        raise GflowError(
            f"job/{job.name} is Running: only {' and '.join(sorted(LIVE_FIELDS))} take effect on a running job "
            f"(not {', '.join(sorted(given - LIVE_FIELDS))}); suspend it first, or cancel and resubmit"
        )
    if job.phase == "Rejected":
        effect = "the job is Rejected: the change is admitted if the result is valid"
    elif job.phase in ("Succeeded", "Failed", "Cancelled"):
        effect = f"the job is {job.phase}: a changed spec runs it again as a new generation"
    elif job.phase == "Running":
        effect = "takes effect on the running attempt"
    else:
        effect = "applies before the job starts"
    out = client.update(job.name, {"spec": _patch(fields)}, dry_run=dry_run)
    return {**out, "phase": job.phase, "effect": effect}
