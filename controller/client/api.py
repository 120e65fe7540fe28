"""``Client``: what gflowctl does, from Python. Files are the API here too: the client writes
manifests into the spec dir and reads status files, through the very functions gflowctl's verbs
use (``manifests``, ``submit``, ``edit``, ``logs``, ``state``), so a job submitted from a
notebook is an ordinary job that ``gflowctl get``, ``describe``, ``cancel`` and git see, and it acts
with the permissions of the user who runs it, never more.

User errors raise :class:`GflowError` with the line gflowctl prints. Importing this module is
cheap (no pydantic, no YAML library); each method loads what it needs when called.
"""

from __future__ import annotations

import builtins
import os
import time as _time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.client.errors import GflowError, NotFound
from controller.client.read.objects import Gpu, Job, Submitted, Sweep
from controller.client.read.state import (
    await_index,
    is_running,
    job_rows,
    reached,
    read_node,
    read_status,
    select_rows,
)
from controller.paths import Home

if TYPE_CHECKING:
    from controller.client.functions import Future


class Client:
    """A gflow instance: ``Client()`` is the one gflowctl would use (``$GFLOW_HOME`` or
    ``~/.local/share/gflow``, and the spec dir its gflowd watches); ``Client(home=...)`` another."""

    def __init__(self, home: str | os.PathLike[str] | None = None, spec_dir: str | os.PathLike[str] | None = None):
        self.home = Home.locate(home, spec_dir)

    def __repr__(self) -> str:
        return f"Client(home={str(self.home.root)!r})"

    # -- writing ------------------------------------------------------------------------------

    def apply(self, manifest: str | os.PathLike[str] | Mapping[str, Any], *, dry_run: bool = False) -> list[Submitted]:
        """``gflowctl apply``: a manifest's YAML text, a dict, or a file or folder path (a ``Path``,
        or a one-line string naming one). Every error at once, in one GflowError."""
        from controller.client.write.manifests import apply_inputs, read_inputs  # lazy: the writer loads YAML

        if isinstance(manifest, Mapping):
            from controller.util.yamlio import dump  # lazy: only a dict needs writing out

            inputs = [("<dict>", dump(dict(manifest)))]
        elif isinstance(manifest, os.PathLike) or ("\n" not in manifest and os.path.exists(manifest)):
            inputs = read_inputs([os.fspath(manifest)], recursive=True)
        else:
            inputs = [("<text>", manifest)]
        outcomes = list(apply_inputs(self.home, inputs, dry_run))
        errors = [o for o in outcomes if isinstance(o, str)]
        if errors:
            raise GflowError("; ".join(errors))
        done = [Submitted(o.kind, o.name, o.verb, o.warning) for o in outcomes if not isinstance(o, str)]
        for item in done:
            if item.warning:
                warnings.warn(item.warning, stacklevel=2)
        return done

    def submit(
        self,
        command: str | Sequence[str] | None = None,
        *,
        script: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        name: str | None = None,
        gpus: int | None = None,
        gpu_type: str | None = None,
        shared: bool = False,
        gpu_memory: str | None = None,
        memory: str | None = None,
        time: str | float | None = None,
        signal: str | None = None,
        priority: int | None = None,
        after: str | Sequence[str] | None = None,
        start_after: str | None = None,
        env: Mapping[str, Any] | None = None,
        conda_env: str | None = None,
        retries: int | None = None,
        labels: Mapping[str, str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        export: str | None = None,
        check: bool = True,
        dry_run: bool = False,
    ) -> Submitted:
        """``gflowctl run``: a command (a list, or a string split like a shell line, run without a
        shell) or a ``script`` file (its ``# GFLOW``/``#SBATCH`` lines read; ``args`` passed to it).
        The options are run's flags; the job runs in the current directory unless ``workdir``, with
        this process's environment unless ``export`` says otherwise (``--export``). ``check=False``:
        no submit-time check of the program (``--no-check``)."""
        options = _options(locals())
        return self._run(options, command, script, args, dry_run)

    def sweep(
        self,
        command: str | Sequence[str] | None = None,
        *,
        params: Mapping[str, Sequence[Any]] | None = None,
        indices: str | range | None = None,
        parallelism: int | None = None,
        script: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        dry_run: bool = False,
        **options: Any,
    ) -> Submitted:
        """``gflowctl run --param``/``--array``: a Sweep over the cartesian product of ``params``
        (each child gets one env var per key) or over ``indices`` (``"0-9"`` or a ``range``; each
        child gets ``GFLOW_SWEEP_INDEX``); at most ``parallelism`` children at once. Other keyword
        options are ``submit``'s."""
        if (params is None) == (indices is None):
            raise GflowError("sweep: give params= or indices=, one of them")
        flags = _options(options)
        if params is not None:
            flags["param"] = [f"{k}={','.join(str(v) for v in values)}" for k, values in params.items()]
        else:
            flags["array"] = _indices(indices)
        if parallelism is not None:
            flags["parallelism"] = str(parallelism)
        return self._run(flags, command, script, args, dry_run)

    def _run(self, options: dict[str, Any], command, script, args, dry_run: bool) -> Submitted:
        # lazy: the manifest builder and the admission check load YAML and (without gflowd) pydantic
        from controller.api.submit import render
        from controller.client.write.submit import (
            build_submission,
            check_names,
            check_program,
            check_submission,
            read_script,
            remember,
            store_submission,
        )

        if (command is None) == (script is None):
            raise GflowError("nothing to run: give a command or script=, one of them")
        if isinstance(command, str):
            import shlex  # lazy: only a command given as one string is split

            command = shlex.split(command)
        read = read_script(Path(script)) if script is not None else None
        submission = build_submission(
            self.home,
            options,
            command=list(command) if command is not None else None,
            script=read,
            script_args=[str(a) for a in args],
            cwd=os.getcwd(),
        )
        for warning in read.warnings if read is not None else []:
            warnings.warn(warning, stacklevel=3)
        check_names(self.home, submission)
        if not options.get("no_check"):
            check_program(submission, read, [str(a) for a in args])
        text = render(submission.manifest)
        doc, errors = check_submission(self.home, text)
        if doc is None:
            raise GflowError("; ".join(errors))
        verb = store_submission(self.home, doc, dry_run, environment=submission.environment)
        if doc.warning:
            warnings.warn(doc.warning, stacklevel=3)
        if not dry_run:
            remember(self.home, submission.name)
        return Submitted(submission.kind, submission.name, verb, doc.warning)

    def cancel(self, *names: str) -> list[str]:
        """Stop jobs (or sweeps) for good: ``spec.cancelled: true``. The lines gflowctl prints."""
        return self._control("cancel", names)

    def suspend(self, *names: str) -> list[str]:
        """Hold jobs, stopping them if running: ``spec.suspend: true``."""
        return self._control("suspend", names)

    def resume(self, *names: str) -> list[str]:
        """Release suspended jobs: ``spec.suspend: false``."""
        return self._control("resume", names)

    def rerun(self, *names: str) -> list[str]:
        """Run finished jobs again."""
        return self._control("rerun", names)

    def _control(self, verb: str, names: Iterable[str]) -> list[str]:
        from controller.client.write.edit import control  # lazy: editing loads ruamel and pydantic

        rows = job_rows(self.home)
        return [control(self.home, verb, _ref(name), rows) for name in names]

    def set_priority(self, name: str, priority: int) -> str:
        """``spec.priority``; takes effect on a waiting and a running job."""
        from controller.client.write.edit import set_priority  # lazy: editing loads ruamel and pydantic

        return set_priority(self.home, _ref(name), priority)

    # -- reading --------------------------------------------------------------------------------

    def get(self, name: str) -> Job | Sweep:
        """One job (or sweep) as its status file says now, conditions included."""
        kind, bare = _ref(name)
        document = read_status(self.home, bare)
        if document is None or not isinstance(document.get("metadata"), dict):
            raise NotFound(f"{kind}/{bare} not found")
        if document.get("kind") == "SweepStatus":
            return Sweep.from_status(document)
        return Job.from_status(document)

    def list(
        self, phase: str | Sequence[str] | None = None, labels: str | Mapping[str, str] | None = None
    ) -> list[Job]:
        """Every job, by name; only those in ``phase`` (one or several) and matching ``labels``
        (``{"team": "vision"}`` or a selector like ``"team=vision,tier!=low"``)."""
        phases = [phase] if isinstance(phase, str) else list(phase or [])
        rows = job_rows(self.home)
        return [Job.from_row(name, row) for name, row in select_rows(rows, [], _selector(labels), phases)]

    def gpus(self) -> builtins.list[Gpu]:  # builtins: the method `list` shadows the type here
        """The GPUs gflowd last saw (``node.yaml``); empty before it wrote one."""
        return [Gpu.from_node(g) for g in (read_node(self.home) or {}).get("gpus") or []]

    def logs(
        self, name: str, *, follow: bool = False, tail: int | None = None, attempt: int | None = None
    ) -> str | Iterator[str]:
        """The job's output (``tail``: its last lines; ``attempt``: an earlier attempt's). With
        ``follow``, an iterator of text as it comes, across attempts, until the job ends."""
        from controller.client.read.logs import log_chunks  # lazy: only logs reads a log

        chunks = log_chunks(self.home, _ref(name)[1], follow, tail, attempt)
        if follow:
            return _decoded(chunks)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def wait(
        self,
        name: str,
        phase: str | None = "Succeeded",
        *,
        condition: str | None = None,
        timeout: float = 60.0,
        interval: float = 0.1,
    ) -> Job:
        """Until the job reaches ``phase`` (or the True ``condition``); the job then. GflowError on
        timeout, or when it can no longer get there (waiting for Succeeded on a Failed job)."""
        what, value = ("condition", condition) if condition is not None else ("phase", phase or "Succeeded")
        kind, bare = _ref(name)
        deadline = _time.monotonic() + timeout
        while True:
            document = read_status(self.home, bare) or {}
            status = document.get("status") or {}
            met, never = reached(status, what, value)
            if met is not None or never:
                await_index(self.home, kind, bare, status)  # what list() and get jobs read shows it too
            if met is not None:
                return self.get(name)  # type: ignore[return-value]
            if never:
                raise GflowError(
                    f"{kind}/{bare} is {status['phase']} ({status.get('reason')}); it will not become {value}"
                )
            if _time.monotonic() >= deadline:
                state = f"{status['phase']} ({status.get('reason')})" if status.get("phase") else "not found"
                raise GflowError(
                    f"timed out after {timeout:g}s waiting for {kind}/{bare} {what}={value}; it is {state}"
                )
            _time.sleep(interval)

    def is_running(self) -> bool:
        """Whether a gflowd serves this home (without one, nothing starts)."""
        return is_running(self.home)

    def reservations(self) -> builtins.list[dict[str, Any]]:
        """``gflowctl get reservations``: each reservation's name, users, GPUs, window (``start``,
        ``end`` in seconds since the epoch) and phase, by name."""
        from controller.client.read.state import read_index  # lazy: only reservations are read here

        rows = (read_index(self.home) or {}).get("reservations") or {}
        keep = ("users", "devices", "gpus", "start", "end", "phase", "reason", "message")
        return [{"name": name, **{k: row.get(k) for k in keep if k in row}} for name, row in sorted(rows.items())]

    def update(self, name: str, patch: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Change a job's manifest with a JSON merge patch (``{"spec": {"priority": 5}}``), checked
        by admission first; with ``dry_run`` nothing is written. The job, what its manifest becomes
        (that document's text) and the verdict (``valid``, ``errors``)."""
        from controller.client.read.state import document_position, find_manifest, owner_of  # lazy: edits only
        from controller.client.write.edit import _check_still_valid, edit_manifest
        from controller.util.manifest_edit import EditError, merge_patch
        from controller.util.yamlio import iter_documents_text

        kind, bare = _ref(name)
        if kind != "job":
            raise GflowError(f"update: {name!r}: only a job can be updated (a sweep's template: edit its manifest)")
        if not patch or set(patch) - {"spec", "metadata"}:
            raise GflowError("update: give a non-empty patch of spec and metadata fields")
        if not dry_run:
            edit_manifest(self.home, (kind, bare), (), dict(patch))
        if owner_of(self.home, bare) is not None:
            raise NotFound(
                f"job/{bare} belongs to sweep/{owner_of(self.home, bare)}; edit the sweep's template instead"
            )
        manifest = find_manifest(self.home, bare)
        if manifest is None:
            raise NotFound(f"{kind}/{bare} not found")
        text = manifest.read_text()
        position = document_position(builtins.list(iter_documents_text(text)), bare, manifest)
        if position is None:
            raise NotFound(f"{kind}/{bare} not found in {manifest}")
        errors: builtins.list[str] = []
        if dry_run:
            try:
                text = merge_patch(text, position, dict(patch))
                _check_still_valid(text, position, f"{kind}/{bare}", manifest)
            except EditError as exc:
                errors.append(f"{kind}/{bare}: cannot edit {manifest}: {exc}")
            except GflowError as exc:
                errors.append(str(exc))
        document = builtins.list(iter_documents_text(text))[position]
        return {"name": bare, "manifest": document, "valid": not errors, "errors": errors, "written": not dry_run}

    # -- for agents: why it waits, whether it would fit ------------------------------------------

    def explain_pending(self, name: str) -> dict[str, Any]:
        """Why a job waits and what would let it start: its status reason and message, its place
        in the queue, the GPUs free and who holds the others."""
        from controller.client.explain import explain_pending  # lazy: only agents ask

        job = self.get(name)
        if isinstance(job, Sweep):
            raise GflowError(f"sweep/{job.name} is a sweep: explain one of its jobs ({', '.join(job.children[:3])}...)")
        return explain_pending(job, job_rows(self.home), self.gpus())

    def preview(self, command: str | Sequence[str] | None = None, **options: Any) -> dict[str, Any]:
        """What ``submit(command, **options)`` would write, the admission verdict (gflowd's when it
        runs: errors, or a warning that it can never start here) and whether it would start now.
        Writes nothing."""
        # lazy: the manifest builder and the admission check load YAML and (without gflowd) pydantic
        from controller.api.export import without_environment
        from controller.api.submit import render
        from controller.client.explain import fits_now
        from controller.client.write.submit import build_submission, check_names, check_submission

        if isinstance(command, str):
            import shlex  # lazy: only a command given as one string is split

            command = shlex.split(command)
        try:
            submission = build_submission(
                self.home, _options(options), command=list(command or []) or None, cwd=os.getcwd()
            )
        except GflowError as exc:  # the flags themselves: no manifest to show
            return {
                "name": options.get("name"),
                "kind": None,
                "manifest": None,
                "valid": False,
                "errors": [str(exc)],
                "warning": None,
                "gflowdRunning": self.is_running(),
                "fitsNow": False,
                "why": "invalid",
            }
        text = render(without_environment(submission.manifest))
        try:
            check_names(self.home, submission)
            doc, errors = check_submission(self.home, text)
        except GflowError as exc:
            doc, errors = None, [str(exc)]
        spec = submission.manifest["spec"].get("template", submission.manifest["spec"])
        resources = spec.get("resources") or {}
        out: dict[str, Any] = {
            "name": submission.name,
            "kind": submission.kind,
            "manifest": text,
            "valid": doc is not None,
            "errors": errors,
            "warning": doc.warning if doc is not None else None,
            "gflowdRunning": self.is_running(),
        }
        out.update(fits_now(int(resources.get("gpus", 0)), resources.get("gpuType"), self.gpus(), job_rows(self.home)))
        return out

    # -- Python functions as jobs ----------------------------------------------------------------

    def submit_function(
        self,
        fn: Callable[..., Any],
        *args: Any,
        gpus: int = 1,
        job_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Future:
        """Run ``fn(*args, **kwargs)`` as a job, in this Python (``sys.executable``), environment and
        working directory; a Future of its result. ``job_options``: ``submit``'s keywords (``name``,
        ``time``, ``memory``, ``priority``...). Needs cloudpickle (``pip install
        'gflow-controller[client]'``)."""
        from controller.client.functions import submit_function  # lazy: cloudpickle only here

        return submit_function(self, fn, args, kwargs, gpus=gpus, job_options=dict(job_options or {}))

    def map(
        self, fn: Callable[[Any], Any], items: Iterable[Any], *, gpus: int = 1, parallelism: int = 4, **job_options: Any
    ) -> builtins.list[Future]:
        """``fn(item)`` for every item, as one Sweep (at most ``parallelism`` at once); the futures
        in the order of ``items``."""
        from controller.client.functions import map_function  # lazy: cloudpickle only here

        return map_function(self, fn, list(items), gpus=gpus, parallelism=parallelism, job_options=job_options)


_FLAG_OF = {"labels": "label", "env": "env", "after": "after"}


def _options(given: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword options -> ``gflowctl run``'s parsed flags (``controller.api.submit.FLAGS`` dests)."""
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key == "check":
            if not value:
                out["no_check"] = True
            continue
        if key in ("self", "command", "script", "args", "dry_run") or value is None or value is False:
            continue
        if key in ("env", "labels"):
            if not isinstance(value, Mapping):
                raise GflowError(f"{key}= takes a dict of names to values, not {type(value).__name__}")
            out[_FLAG_OF[key]] = [f"{k}={v}" for k, v in value.items()]
        elif key == "after":
            out["after"] = [value] if isinstance(value, str) else [str(v) for v in value]
        elif key == "time" and isinstance(value, (int, float)):
            out["time"] = f"{value:g}s"
        elif key == "shared":
            out["shared"] = True
        elif key == "workdir":
            out["workdir"] = os.fspath(value)
        elif key in _ALLOWED:
            out[key] = str(value)
        else:
            raise GflowError(f"unknown option {key}=; see help(Client.submit)")
    return out


_ALLOWED = {
    "name",
    "signal",
    "gpus",
    "gpu_type",
    "gpu_memory",
    "memory",
    "time",
    "priority",
    "start_after",
    "conda_env",
    "retries",
    "export",
}


def _indices(indices: str | range | None) -> str:
    if isinstance(indices, range):
        if indices.step != 1 or not indices:
            raise GflowError(f"indices={indices!r}: give a range with step 1 and at least one index")
        return f"{indices.start}-{indices.stop - 1}"
    return str(indices)


def _selector(labels: str | Mapping[str, str] | None) -> list[tuple[str, str, bool]]:
    from controller.api.labels import parse_selector  # lazy: only a filtered list selects

    if not labels:
        return []
    text = labels if isinstance(labels, str) else ",".join(f"{k}={v}" for k, v in labels.items())
    try:
        return parse_selector(text)
    except ValueError as exc:
        raise GflowError(str(exc)) from None


def _ref(name: str) -> tuple[str, str]:
    """``NAME``, ``job/NAME`` or ``sweep/NAME`` -> (kind, name)."""
    head, slash, rest = name.partition("/")
    if not slash:
        return "job", name
    if head in ("job", "jobs") and rest:
        return "job", rest
    if head in ("sweep", "sweeps") and rest:
        return "sweep", rest
    raise GflowError(f"{name!r}: use NAME, job/NAME or sweep/NAME")


def _decoded(chunks: Iterator[bytes]) -> Iterator[str]:
    import codecs  # lazy: only a followed log decodes as it goes

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        text = decoder.decode(chunk)
        if text:
            yield text
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
