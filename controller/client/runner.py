"""Runs one pickled Python call as a gflow job: the far side of ``Client.submit_function`` and
``Client.map``. gflowd starts it as ``<the submitter's python> runner.py FOLDER [--sweep]``, a file
run by path, so it needs nothing of gflow on the job's ``sys.path``: standard library only until
the submitter's environment and ``sys.path`` are restored, then cloudpickle.

``FOLDER`` (``<home>/functions/<job>/``, the submitter's, mode 0700) holds ``context.json`` (the
submitter's environment and ``sys.path``; gflow's own variables of this attempt are kept),
``fn.pkl`` and ``args.pkl`` (``args-<i>.pkl`` for the children of a ``map`` Sweep, ``i`` from
``GFLOW_SWEEP_INDEX``). It writes ``result[-i].pkl`` (the value, or the exception), then
``outcome[-i].json`` (ok, the exception's type, message and traceback as text), each atomically;
the JSON, written last, says the call finished. Exit 0 when the call returned, 1 when it raised.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _write(path: str, data: bytes) -> None:
    """Atomically: a temporary file in the same folder, fsync'd, renamed over ``path``."""
    temp = f"{path}.{os.getpid()}.tmp"
    with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _restore(folder: str) -> dict[str, str]:
    """The submitter's environment and ``sys.path``; returns where its code came from (``sources``)."""
    with open(os.path.join(folder, "context.json"), encoding="utf-8") as handle:
        context = json.load(handle)
    ours = {k: v for k, v in os.environ.items() if k in context["keep"] or k.startswith("GFLOW_")}
    os.environ.clear()
    os.environ.update(context["env"])
    os.environ.update(ours)
    sys.path[:] = context["path"]
    return context.get("sources") or {}


def format_traceback(exc: BaseException, sources: dict[str, str]) -> str:
    """``traceback.format_exc()`` for ``exc``, with the submitter's files put back in the frames of
    code cloudpickle sent by value (it names them ``<dynamic-code>``), so each shows its source line.
    ``sources``: ``"name:first line"`` -> file, from ``functions.source_files``."""
    report = traceback.TracebackException(type(exc), exc, exc.__traceback__, lookup_lines=False)
    chain: list[tuple[traceback.TracebackException, BaseException]] = []
    seen: set[int] = set()
    pending: list[tuple[traceback.TracebackException | None, BaseException | None]] = [(report, exc)]
    while pending:
        part, raised = pending.pop()
        if part is None or raised is None or id(raised) in seen:
            continue
        seen.add(id(raised))
        chain.append((part, raised))
        pending += [(part.__cause__, raised.__cause__), (part.__context__, raised.__context__)]
    for part, raised in chain:  # a frame summary looks its line up when formatted, by its file
        for summary, (frame, _) in zip(part.stack, traceback.walk_tb(raised.__traceback__)):
            code = frame.f_code
            if summary.filename != code.co_filename or not summary.filename.startswith("<"):
                continue
            summary.filename = sources.get(f"{code.co_name}:{code.co_firstlineno}", summary.filename)
    return "".join(report.format())


def _on_checkpoint_signal(folder: str, suffix: str, fn, args: tuple, kwargs: dict, cloudpickle) -> None:
    """submitit's pattern (``functions.Checkpointable``): on the checkpoint signal, ``fn.checkpoint``
    returns the resubmission (a ``DelayedSubmission``); it replaces the pickled call, so the next
    attempt runs it, and the checkpoint is confirmed to the supervisor (docs/checkpoint.md)."""
    import signal  # lazy: only a Checkpointable function job traps its signal

    def handler(signum, frame) -> None:
        again = fn.checkpoint(*args, **kwargs)
        if again is None:
            return  # nothing to resume from: the stop goes on after the grace, without a confirmation
        _write(os.path.join(folder, "fn.pkl"), cloudpickle.dumps(again.function))
        _write(os.path.join(folder, f"args{suffix}.pkl"), cloudpickle.dumps((again.args, again.kwargs)))
        with open(os.environ["GFLOW_CHECKPOINT_FILE"], "w", encoding="utf-8") as confirm:
            confirm.write(folder + "\n")

    signal.signal(getattr(signal, "SIG" + os.environ.get("GFLOW_CHECKPOINT_SIGNAL", "USR1")), handler)


def main(argv: list[str]) -> int:
    folder = argv[1]
    suffix = f"-{os.environ['GFLOW_SWEEP_INDEX']}" if argv[2:3] == ["--sweep"] else ""
    sources = _restore(folder)
    import cloudpickle  # lazy: the submitter's, importable once its sys.path is back

    outcome: dict = {"ok": True}
    try:
        with open(os.path.join(folder, "fn.pkl"), "rb") as handle:
            fn = cloudpickle.load(handle)
        with open(os.path.join(folder, f"args{suffix}.pkl"), "rb") as handle:
            args, kwargs = cloudpickle.load(handle)
        if callable(getattr(fn, "checkpoint", None)) and os.environ.get("GFLOW_CHECKPOINT_FILE"):
            _on_checkpoint_signal(folder, suffix, fn, args, kwargs, cloudpickle)
        value = fn(*args, **kwargs)
    except BaseException as exc:
        try:
            text = format_traceback(exc, sources)
        except Exception:
            text = "".join(traceback.format_exception(exc))
        sys.stderr.write(text)
        outcome = {
            "ok": False,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc),
            "traceback": text,
        }
        try:
            payload = cloudpickle.dumps(exc)
        except Exception:
            payload = cloudpickle.dumps(None)
    else:
        try:
            payload = cloudpickle.dumps(value)
        except Exception as exc:
            text = traceback.format_exc()
            sys.stderr.write(text)
            outcome = {
                "ok": False,
                "type": "UnpicklableResult",
                "message": f"the result ({type(value).__qualname__}) cannot be pickled: {type(exc).__name__}: {exc}",
                "traceback": text,
            }
            payload = cloudpickle.dumps(None)
    _write(os.path.join(folder, f"result{suffix}.pkl"), payload)
    _write(os.path.join(folder, f"outcome{suffix}.json"), json.dumps(outcome).encode())
    return 0 if outcome["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
