"""Tools that make jobs: ``preview_submit`` (writes nothing) and ``submit``, both for one or several
jobs per call, each a command or a script, optionally a sweep. A request is ``gflowctl run``'s flags
as fields; jobs in one call are submitted in order, so ``after: ["@"]`` names the one before."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controller.client.api import Client
from controller.client.errors import GflowError
from controller.client.explain import fits_now
from controller.client.read.state import job_rows

MAX_JOBS = 100  # per call: more is a sweep (params/indices)


class JobRequest(BaseModel):
    """One job (or, with params or indices, one sweep of jobs)."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] | None = Field(None, description="program and arguments, run without a shell")
    script: str | None = Field(None, description="a bash script's text (its #GFLOW/#SBATCH lines are read)")
    workdir: str = Field(description="absolute path of the working directory")
    name: str | None = None
    gpus: int = 0
    gpu_type: str | None = Field(None, description="only GPUs whose name contains this, e.g. H100")
    shared: bool = Field(False, description="share GPUs with other shared jobs; needs gpu_memory")
    gpu_memory: str | None = Field(None, description="GPU memory per GPU, e.g. 20Gi")
    memory: str | None = Field(None, description="host RAM limit, e.g. 16Gi")
    time: str | None = Field(None, description="time limit, e.g. 2h or 4h30m")
    priority: int | None = None
    after: list[str] | None = Field(
        None, description="dependencies: JOB or JOB:Succeeded|Failed|Finished; @ is the job submitted before"
    )
    start_after: str | None = Field(None, description="not before: 2026-12-01T22:00:00 or +2h")
    retries: int | None = Field(None, description="retries after a failed attempt")
    conda_env: str | None = Field(None, description="run inside this conda environment")
    venv: str | None = Field(None, description="run with this Python venv's bin first on PATH")
    env: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    params: dict[str, list[str | int | float]] | None = Field(
        None, description="a sweep over the cartesian product; each child gets one env var per key"
    )
    indices: str | None = Field(None, description="a sweep over indices like 0-9; GFLOW_SWEEP_INDEX per child")
    parallelism: int | None = Field(None, description="a sweep: at most this many children at once")


def tools(client: Client) -> list[Callable[..., dict[str, Any]]]:
    def preview_submit(jobs: list[JobRequest]) -> dict[str, Any]:
        """What submit would do for each job: the manifest it would write (for a command job), the
        admission verdict (errors, or a warning that it can never start here) and whether it would
        start now. Writes nothing."""
        _check_count(jobs)
        results: list[dict[str, Any]] = []
        for job in jobs:
            job = _after_previous(job, results[-1]["name"] if results else None)
            # a dependency on a job given before in this call does not exist yet: checked without it
            earlier = {r["name"] for r in results}
            within = [a for a in job.after or [] if a.partition(":")[0] in earlier]
            if within:
                job = job.model_copy(update={"after": [a for a in job.after or [] if a not in within] or None})
            results.append({**_preview(client, job), **({"dependsOnThisCall": within} if within else {})})
        return {"results": results}

    def submit(jobs: list[JobRequest]) -> dict[str, Any]:
        """Submit one or more jobs, in order (preview_submit first). Each runs as the user who runs
        this server, in its workdir. One result per job: its name and kind, or its error; a job that
        fails does not stop the others."""
        _check_count(jobs)
        results: list[dict[str, Any]] = []
        for job in jobs:
            try:
                job = _after_previous(job, results[-1]["name"] if results else None)
                results.append({"ok": True, **_submit(client, job, dry_run=False)})
            except GflowError as exc:
                results.append({"ok": False, "name": job.name, "error": str(exc)})
        if not any(r["ok"] for r in results):
            raise GflowError("; ".join(r["error"] for r in results))
        return {"results": results, "submitted": sum(r["ok"] for r in results)}

    return [preview_submit, submit]


def _check_count(jobs: list[JobRequest]) -> None:
    if not jobs:
        raise GflowError("give at least one job in jobs")
    if len(jobs) > MAX_JOBS:
        raise GflowError(f"at most {MAX_JOBS} jobs per call ({len(jobs)} given): use params or indices for a sweep")


def _after_previous(job: JobRequest, previous: str | None) -> JobRequest:
    """``@`` in ``after`` is the job given before this one in the call (the first's: the user's last
    job, as ``gflowctl run --after @``)."""
    if previous is None or not job.after:
        return job
    after = [previous + text[1:] if text == "@" or text.startswith("@:") else text for text in job.after]
    return job.model_copy(update={"after": after})


def _options(job: JobRequest) -> dict[str, Any]:
    """The request as ``Client.submit``'s keyword options (a venv becomes its environment)."""
    if not os.path.isabs(job.workdir):
        raise GflowError(f"workdir: {job.workdir!r} is not an absolute path")
    env = dict(job.env or {})
    if job.venv is not None:
        if not os.path.isfile(os.path.join(job.venv, "bin", "python")):
            raise GflowError(f"venv: {job.venv!r} has no bin/python; give the venv's folder")
        venv = os.path.abspath(job.venv)
        env = {"VIRTUAL_ENV": venv, "PATH": f"{venv}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}", **env}
    options = job.model_dump(exclude={"command", "script", "venv", "env", "params", "indices", "parallelism"})
    return {**{k: v for k, v in options.items() if v is not None}, "env": env or None}


@contextmanager
def _script_file(text: str | None) -> Iterator[str | None]:
    """A script's text as the file ``Client.submit(script=)`` reads (its text is stored inline)."""
    if text is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="gflow-mcp-") as folder:
        path = os.path.join(folder, "job.sh")
        with open(path, "w") as out:
            out.write(text)
        yield path


def _submit(client: Client, job: JobRequest, dry_run: bool) -> dict[str, Any]:
    if (job.command is None) == (job.script is None):
        raise GflowError("give command or script, one of them")
    options = _options(job)
    with _script_file(job.script) as script:
        if job.params is not None or job.indices is not None:
            done = client.sweep(
                job.command,
                script=script,
                params=job.params,
                indices=job.indices,
                parallelism=job.parallelism,
                dry_run=dry_run,
                **options,
            )
        else:
            done = client.submit(job.command, script=script, dry_run=dry_run, **options)
    return {"kind": done.kind, "name": done.name, "verb": done.verb, "warning": done.warning}


def _preview(client: Client, job: JobRequest) -> dict[str, Any]:
    simple = job.script is None and job.params is None and job.indices is None and job.venv is None
    if simple and job.command is not None:
        try:
            return client.preview(job.command, **_options(job))
        except GflowError as exc:
            return {"name": job.name, "valid": False, "errors": [str(exc)], "manifest": None}
    # a script or a sweep: run's own dry run checks it (its manifest is what submit writes)
    try:
        done = _submit(client, job, dry_run=True)
    except GflowError as exc:
        return {"name": job.name, "valid": False, "errors": [str(exc)], "manifest": None}
    out = {"name": done["name"], "kind": done["kind"], "valid": True, "errors": [], "warning": done["warning"]}
    out.update(fits_now(job.gpus, job.gpu_type, client.gpus(), job_rows(client.home)))
    return out
