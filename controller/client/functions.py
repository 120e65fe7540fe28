"""Python functions as gflow jobs, in the submitit pattern: ``Client.submit_function`` pickles the
function and its arguments (cloudpickle) into ``<home>/functions/<uid>/<job>/`` (inside the
submitter's own folder, mode 0700), with the submitter's environment and ``sys.path``, and submits an ordinary Job
that runs ``controller/client/runner.py`` there with the submitter's Python, in its working
directory. ``Client.map`` does the same for many items as one Sweep over indices. A
:class:`Future` waits for the job through its status file and reads the result the runner left.

Errors say which job and why: a function or argument that cannot be pickled (GflowError, before
anything is written), a result that could not be pickled there or unpickled here, and a job that
ended without a result (OOMKilled, DeadlineExceeded, cancelled...) raise :class:`JobError`; an
exception the function raised is raised again here, its remote traceback attached as a note.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.api.jobenv import GFLOW_VARIABLES, SHARED_DEFAULTS
from controller.client.errors import GflowError, JobError
from controller.client.read.state import read_status

if TYPE_CHECKING:
    from controller.client.api import Client
    from controller.client.read.objects import Job

RUNNER = str(Path(__file__).with_name("runner.py"))
# kept from the attempt's own environment when the runner restores the submitter's
KEEP = sorted({*GFLOW_VARIABLES, *SHARED_DEFAULTS, "GFLOW_GPU_MEMORY", "SLURM_ARRAY_TASK_ID"})
_INSTALL = "pip install 'gflow-controller[client]'"


def _shared_fix(functions: Path) -> str:
    """How an admin makes ``functions/`` on a shared home: like the spec dir (docs/multi-user.md)."""
    return (
        f"as root: install -d -m 1775 -g gflow {functions} (like the spec dir; -m 1777 without a group), "
        "or restart gflowd as root, which creates it when missing"
    )


class DelayedSubmission:
    """A call to run (again): what ``Checkpointable.checkpoint`` returns, as submitit's
    ``DelayedSubmission(function, *args, **kwargs)``."""

    def __init__(self, function: Callable[..., Any], *args: Any, **kwargs: Any):
        self.function, self.args, self.kwargs = function, args, kwargs


class Checkpointable:
    """submitit's ``helpers.Checkpointable``: a callable object whose ``checkpoint`` gflow calls in
    the job when the checkpoint signal comes (before its time limit, a preemption, a suspend, a GPU
    drain or an idle stop). It returns the resubmission (by default the same call, with the object
    as it is now: its attributes are the state to save), or None for none; the next attempt runs it.
    ``submit_function`` gives such a job ``spec.checkpoint`` (``signal="B:USR1@60"`` unless
    ``job_options`` names another ``signal``) and confirms each checkpoint for it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("a Checkpointable defines __call__: the work to do")

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission | None:
        return DelayedSubmission(self, *args, **kwargs)


class RemoteError(Exception):
    """An exception the function raised that could not be rebuilt here (its class is not
    importable, or it would not pickle): its type and message as text."""


class Future:
    """The result of one function job. ``job`` names it (``gflowctl get jobs`` shows it)."""

    def __init__(self, client: Client, job: str, folder: Path, suffix: str = "", sweep: str | None = None):
        self.client = client
        self.job = job
        self.folder = folder
        self.sweep = sweep
        self._suffix = suffix

    def __repr__(self) -> str:
        return f"<Future job/{self.job}>"

    def status(self) -> Job:
        return self.client.get(self.job)  # type: ignore[return-value]

    def done(self) -> bool:
        """Whether the job has finished (Succeeded, Failed, Cancelled)."""
        return _phase(self.client, self.job) in _OVER

    def cancel(self) -> bool:
        """Cancel the job (a ``map`` future: the whole Sweep cannot be cancelled from one of its
        jobs; cancel ``future.sweep`` with ``Client.cancel``). False when it had already finished."""
        if self.done():
            return False
        self.client.cancel(self.job)
        return True

    def result(self, timeout: float | None = None, interval: float = 0.1) -> Any:
        """The function's return value, once the job has finished. Raises what the function raised
        (its remote traceback in a note), JobError when the job ended without a result, and
        TimeoutError when ``timeout`` seconds pass first."""
        status = self._wait(timeout, interval)
        outcome = self._outcome()
        if outcome is None:
            raise JobError(_no_result(self.job, status), self.job, status.get("reason"))
        if outcome.get("ok"):
            try:
                return self._load_result()
            except Exception as exc:
                raise JobError(
                    f"job/{self.job}: its result cannot be unpickled here: {type(exc).__name__}: {exc}",
                    self.job,
                    "UnpicklableResult",
                ) from exc
        raise self._remote_exception(outcome)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """What ``result`` would raise, or None when it would return."""
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except BaseException as exc:
            return exc
        return None

    # -- reading what the runner left -------------------------------------------------------------

    def _wait(self, timeout: float | None, interval: float) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = (read_status(self.client.home, self.job) or {}).get("status") or {}
            if status.get("phase") in _OVER or status.get("phase") == "Rejected":
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job/{self.job} has not finished after {timeout:g}s; it is "
                    f"{status.get('phase', 'not yet seen by gflowd')} ({status.get('reason')})"
                )
            time.sleep(interval)

    def _outcome(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / f"outcome{self._suffix}.json").read_text())
        except (OSError, ValueError):
            return None

    def _load_result(self) -> Any:
        cloudpickle = _cloudpickle()
        with open(self.folder / f"result{self._suffix}.pkl", "rb") as handle:
            return cloudpickle.load(handle)

    def _remote_exception(self, outcome: dict[str, Any]) -> BaseException:
        note = f"remote traceback (job/{self.job}):\n{outcome.get('traceback', '')}".rstrip()
        if outcome.get("type") == "UnpicklableResult":
            return JobError(f"job/{self.job}: {outcome.get('message')}", self.job, "UnpicklableResult")
        try:
            exc = self._load_result()
        except Exception:
            exc = None
        if not isinstance(exc, BaseException):
            exc = RemoteError(f"job/{self.job} raised {outcome.get('type')}: {outcome.get('message')}")
        exc.add_note(note)
        exc.remote_traceback = outcome.get("traceback")
        return exc


_OVER = ("Succeeded", "Failed", "Cancelled")


def _phase(client: Client, job: str) -> str | None:
    return ((read_status(client.home, job) or {}).get("status") or {}).get("phase")


def _no_result(job: str, status: dict[str, Any]) -> str:
    phase, reason, message = status.get("phase"), status.get("reason"), status.get("message")
    detail = f"{phase}: {reason}" + (f": {message}" if message else "")
    if phase == "Cancelled":
        return f"job/{job} was cancelled before it returned a result ({detail})"
    return f"job/{job} ended without a result ({detail})"


def _cloudpickle():
    try:
        import cloudpickle  # lazy: an optional dependency, only for functions as jobs
    except ImportError:
        raise GflowError(f"functions as jobs need cloudpickle: {_INSTALL}") from None
    return cloudpickle


def _dumps(cloudpickle, value: Any, what: str) -> bytes:
    try:
        return cloudpickle.dumps(value)
    except Exception as exc:
        raise GflowError(f"cannot pickle {what} for a job: {type(exc).__name__}: {exc}") from None


def _function_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _prepare(client: Client, fn: Callable[..., Any], job_options: dict[str, Any]) -> tuple[str, Path, bytes]:
    """A free job name (the function's, plus a suffix), its folder, the pickled function."""
    from controller.api.submit import sanitize
    from controller.client.write.submit import exists, free_suffix  # lazy: loads the manifest builder

    cloudpickle = _cloudpickle()
    if not callable(fn):
        raise GflowError(f"submit_function takes a function, not {type(fn).__name__}")
    payload = _dumps(cloudpickle, fn, f"the function {_function_name(fn)}")
    name = job_options.pop("name", None)
    if name is None:
        short = getattr(fn, "__name__", None) or type(fn).__name__
        name = f"{sanitize(short.replace('<lambda>', 'lambda'))[:40].strip('-') or 'fn'}-{free_suffix(client.home)}"
    elif exists(client.home, name):
        raise GflowError(f"{name} already exists; choose another name")
    return name, client.home.functions_dir / str(os.geteuid()) / name, payload


def source_files(fn: Callable[..., Any]) -> dict[str, str]:
    """Where the code the job runs was defined: ``"name:first line"`` -> file, for ``fn``, the
    functions and lambdas defined in it, and the functions it reaches through its closure and
    globals. cloudpickle (3.1.3 on) names ``<dynamic-code>`` as the file of a function it sends by
    value, so the remote traceback would show no source lines; the runner puts the files back.
    A key two files share is left out: a wrong line is worse than none."""
    found: dict[str, str | None] = {}
    seen: set[int] = set()
    pending: list[Any] = [fn]
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        obj = getattr(obj, "__func__", obj)  # a bound method
        if isinstance(obj, functools.partial):
            pending.append(obj.func)
            continue
        code = getattr(obj, "__code__", None)
        if not isinstance(code, types.CodeType):
            continue
        names: set[str] = set()
        codes = [code]
        while codes:
            one = codes.pop()
            key = f"{one.co_name}:{one.co_firstlineno}"
            found[key] = one.co_filename if found.get(key, one.co_filename) == one.co_filename else None
            names.update(one.co_names)
            codes.extend(const for const in one.co_consts if isinstance(const, types.CodeType))
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                pending.append(cell.cell_contents)
            except ValueError:  # a cell not filled yet
                pass
        scope = getattr(obj, "__globals__", None) or {}
        pending.extend(value for name in names if isinstance(value := scope.get(name), types.FunctionType))
    return {key: where for key, where in found.items() if where and not where.startswith("<")}


def _write_folder(folder: Path, files: dict[str, bytes], fn: Callable[..., Any]) -> None:
    from controller.util.fsutil import atomic_write  # lazy: only a submission writes

    _own_folder(folder.parent)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        raise GflowError(
            f"{folder} already exists: a function job of that name ran before; choose another name"
        ) from None
    except OSError as exc:
        raise GflowError(f"{folder}: cannot create the function's folder: {exc.strerror}") from None
    try:
        try:
            sources = source_files(fn)
        except Exception:
            sources = {}
        context = {"env": dict(os.environ), "path": list(sys.path), "keep": KEEP, "sources": sources}
        atomic_write(folder / "context.json", json.dumps(context), mode=0o600, sync_dir=False)
        for filename, data in files.items():
            atomic_write(folder / filename, data, mode=0o600, sync_dir=False)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise GflowError(f"{exc.filename or folder}: cannot write the function's files: {exc.strerror}") from None


def _own_folder(folder: Path) -> None:
    """``functions/<uid>/``: this user's, 0700, so no other user can list, watch (inotify needs
    read access) or fill it. It must already be this user's alone: a folder another user made
    under that name is refused in one line, never written into."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GflowError(
            f"{folder.parent}: cannot create the functions folder: {exc.strerror}; {_shared_fix(folder.parent)}"
        ) from None
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        hint = f"; {_shared_fix(folder.parent)}" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
        raise GflowError(f"{folder}: cannot create your functions folder: {exc.strerror}{hint}") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise GflowError(
            f"{folder}: cannot use your functions folder: {exc.strerror}; an admin removes it and you try again"
        ) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise GflowError(
                f"{folder}: your functions folder belongs to uid {st.st_uid}, not you; "
                "an admin removes it and you try again"
            )
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)  # ours, made with a loose umask or by an older version: close it
    finally:
        os.close(fd)


def submit_function(
    client: Client,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    *,
    gpus: int,
    job_options: dict[str, Any] | None = None,
) -> Future:
    options = dict(job_options or {})
    if callable(getattr(fn, "checkpoint", None)):  # submitit's pattern: the runner traps USR1 and confirms
        options.setdefault("signal", "B:USR1@60")
    name, folder, payload = _prepare(client, fn, options)
    arguments = _dumps(_cloudpickle(), (args, kwargs), f"the arguments of {_function_name(fn)}")
    _write_folder(folder, {"fn.pkl": payload, "args.pkl": arguments}, fn)
    try:
        client.submit([sys.executable, RUNNER, str(folder)], name=name, gpus=gpus, **options)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Future(client, name, folder)


def map_function(
    client: Client,
    fn: Callable[[Any], Any],
    items: list[Any],
    *,
    gpus: int,
    parallelism: int,
    job_options: dict[str, Any],
) -> list[Future]:
    if not items:
        return []
    options = dict(job_options)
    name, folder, payload = _prepare(client, fn, options)
    cloudpickle = _cloudpickle()
    files = {"fn.pkl": payload}
    for index, item in enumerate(items):
        files[f"args-{index}.pkl"] = _dumps(cloudpickle, ((item,), {}), f"item {index} ({type(item).__name__})")
    _write_folder(folder, files, fn)
    try:
        client.sweep(
            [sys.executable, RUNNER, str(folder), "--sweep"],
            indices=range(len(items)),
            parallelism=parallelism,
            name=name,
            gpus=gpus,
            **options,
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return [Future(client, f"{name}-{index}", folder, f"-{index}", sweep=name) for index in range(len(items))]
