"""Admission review, gflowctl's half: ``gflowctl apply`` asks the running gflowd to check manifests
before writing.

The controller that will run the jobs is the right judge of them: it has the models loaded
(a CLI that validated on its own would spend ~100 ms importing pydantic for every apply) and it
knows what only it can know (whether conda exists on its PATH, whose manifests it may run). Like
a Kubernetes server-side dry run: over gflowd's socket (:func:`ask_socket`, any user), else through
files (:func:`ask`): the CLI renames ``run/review/<id>.request.json`` into place, gflowd answers with
``<id>.answer.json`` and removes the request; the CLI reads and removes the answer. With no gflowd
running, a folder the user may not write, or no answer within a second, the CLI checks locally
with :func:`check_documents`, the very function gflowd runs (gflowd adds its own environment
check). gflowd's half, answering both channels, is ``daemon/review.py``.

This module owns the check and the asking; it decides nothing about jobs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one

TYPE_CHECKING = False  # not typing's: the CLI's side (ask) imports neither typing nor the models
if TYPE_CHECKING:
    from pathlib import Path  # not at run time: run and apply import no pathlib (util/lean_path.py)
    from typing import Any

    from controller.model.documents import AdmittedJob

REQUEST_SUFFIX = ".request.json"
ANSWER_SUFFIX = ".answer.json"
MAX_REQUEST_BYTES = 32 * 1024 * 1024
ANSWER_TIMEOUT = 1.0  # seconds; then the CLI checks locally


def check_documents(
    origin: str,
    text: str,
    *,
    owner_uid: int | None = None,
    environment: Callable[[AdmittedJob], Any] | None = None,
    never_fits: Callable[[AdmittedJob], str | None] | None = None,
    folder: str | None = None,
) -> dict[str, Any]:
    """Check every document of one input. ``{"docs": [{"name", "kind", "index"[, "warning"]}],
    "errors": [...]}``; ``index`` is the document's position among ``iter_documents_text(text)``.
    With ``environment`` (gflowd's own checks of a job, given by gflowd: whose manifests it may
    run, conda on its PATH), a job it returns as a Rejection is an error too; with ``never_fits`` (gflowd's GPUs), a job that can never start
    there gets a ``warning`` (it is still valid: a GitOps repo may target a bigger machine).
    With ``folder`` (the input was applied from there, outside the spec dir), each document also
    gets ``"placed": true`` and, when its ``workingDir`` needs the folder, the ``"text"`` to store
    (``manifest_edit.place_working_dir``): gflowd has the YAML library loaded, gflowctl need not."""
    from controller.api.validation import (  # lazy: pydantic (~100 ms) only when gflowd does not answer
        read_only_fields,
        validate_any,
    )
    from controller.model.documents import AdmittedJob, Rejection  # lazy: with the models above

    docs: list[dict[str, Any]] = []
    errors: list[str] = []
    parts = list(iter_documents_text(text))
    stem = None if origin.startswith("<") else os.path.basename(origin).rsplit(".", 1)[0]
    for index, part, data, own_text in _units(origin, parts, errors):
        owner = _sweep_owner(data) if own_text else None
        if owner:  # a Sweep's child read back: the Sweep defines it
            docs.append(
                {"name": data["metadata"].get("name"), "kind": "job", "index": index, "text": part, "skip": owner}
            )
            continue
        result = validate_any(
            data,
            source=origin,
            path=origin,
            stem=stem,
            single=len(parts) == 1 and not own_text,
            doc_index=0,
            text=part,
            owner_uid=-1 if owner_uid is None else owner_uid,
        )[0]
        read_back = read_only_fields(data)
        if isinstance(result, AdmittedJob) and environment is not None:
            result = environment(result)
        if isinstance(result, AdmittedJob):
            doc: dict[str, Any] = {"name": result.name, "kind": "job", "index": index}
            why = never_fits(result) if never_fits is not None else None
            if why:
                doc["warning"] = f"job/{result.name} can never start: {why}"
        elif not isinstance(result, Rejection):  # a Sweep or a Reservation
            kind = "reservation" if hasattr(result, "reservation") else "sweep"
            doc = {"name": result.name, "kind": kind, "index": index}
        else:
            errors.append(result.message)
            continue
        doc = _read_back(doc, part, read_back) if read_back else _placed(doc, data, part, folder)
        if own_text:
            doc.setdefault("text", part)  # an item of a List: its own text, not the List's
        docs.append(doc)
    return {"docs": docs, "errors": errors}


def _sweep_owner(data: Any) -> str | None:
    """``owned by sweep/NAME; apply the Sweep`` for a Job object a Sweep owns (``get jobs -o yaml``
    lists the children too, as kubectl lists a Job's pods)."""
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return None
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("kind") == "Sweep" and isinstance(meta.get("name"), str):
            return f"owned by sweep/{ref.get('name')}; apply the Sweep to change it"
    return None


def _units(origin: str, parts: list[str], errors: list[str]):
    """(index, text, data, own_text) for each document of ``parts``, and for each item of a
    ``kind: List`` (what ``gflowctl get -o yaml|json`` prints for several objects, as kubectl's
    does): its text is then its own, written out (``own_text``). Syntax errors go to ``errors``."""
    for index, part in enumerate(parts):
        try:
            data = load_one(part)
        except YAMLSyntaxError as exc:
            where = f"line {exc.line} of document {index + 1}" if exc.line else f"document {index + 1}"
            errors.append(f"{origin}: YAML syntax error: {exc} ({where})")
            continue
        if data is None:
            continue
        if not (isinstance(data, dict) and data.get("kind") == "List" and "spec" not in data):
            yield index, part, data, False
            continue
        items = data.get("items")
        if not isinstance(items, list):
            errors.append(f"{origin}: kind: List needs a list of objects in items (document {index + 1})")
            continue
        from controller.client.read.specs import plain_data  # lazy: only a List; timestamps as text, as get prints them
        from controller.util.yamlio import dump  # lazy: with the line above

        for item in items:
            if item is not None:
                yield index, dump(plain_data(item), blocks=True) if isinstance(item, dict) else "", item, True


def _read_back(doc: dict[str, Any], text: str, fields: list[tuple[str, ...]]) -> dict[str, Any]:
    """An object ``gflowctl get -o yaml|json`` printed, applied again: stored without gflowd's
    read-only fields (the rest of its text kept), and not placed: its ``workingDir`` means what it
    meant where it was stored, whatever folder it is applied from. ``readBack`` tells apply to keep
    the stored text (its comments) when the object asks for nothing new."""
    from controller.util.manifest_edit import set_field  # lazy: ruamel's round trip

    for path in fields:
        text = set_field(text, 0, path, None)
    return {**doc, "text": text, "placed": True, "readBack": True}


def _placed(doc: dict[str, Any], data: Any, text: str, folder: str | None) -> dict[str, Any]:
    if folder is None:
        return doc
    from controller.util.manifest_edit import EditError, place_working_dir  # lazy: ruamel's round trip

    try:
        placed = place_working_dir(doc["kind"], data, text, folder)
    except EditError:
        return doc  # not placed: gflowctl places it itself and says what is wrong
    doc["placed"] = True
    if placed is not None:
        doc["text"] = placed
    return doc


# -- the CLI's side -------------------------------------------------------------------------------------


def ask(
    directory: Path,
    inputs: list[tuple[str, str]],
    timeout: float = ANSWER_TIMEOUT,
    folders: list[str | None] | None = None,
) -> list[dict[str, Any]] | None:
    """The running gflowd's verdict on each input, or None (no answer: check locally). ``folders``:
    where each input was applied from, to place its ``workingDir`` (see :func:`check_documents`)."""
    token = os.urandom(16).hex()  # not uuid: importing it costs ~1.5 ms (platform)
    request = directory / f"{token}{REQUEST_SUFFIX}"
    answer = directory / f"{token}{ANSWER_SUFFIX}"
    staging = directory / f".{token}.tmp"
    try:
        items = [{"origin": o, "text": t} for o, t in inputs]
        for item, folder in zip(items, folders or []):
            if folder is not None:
                item["folder"] = folder
        staging.write_text(json.dumps({"inputs": items}))
        os.rename(staging, request)
    except OSError:
        try:
            staging.unlink()
        except OSError:
            pass
        return None
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            data = answer.read_bytes()
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                for leftover in (request, answer):
                    try:
                        leftover.unlink()
                    except OSError:
                        pass
                return None
            time.sleep(delay)
            delay = min(delay * 1.5, 0.01)
            continue
        except OSError:
            return None
        try:
            answer.unlink()
        except OSError:
            pass
        try:
            result = json.loads(data)
            inputs_answered = result["inputs"]
        except (ValueError, KeyError, TypeError):
            return None
        return inputs_answered if len(inputs_answered) == len(inputs) else None


def ask_socket(
    path: Path,
    inputs: list[tuple[str, str]],
    timeout: float = ANSWER_TIMEOUT,
    folders: list[str | None] | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> list[dict[str, Any]] | None:
    """The running gflowd's verdict over its review socket (any user: ``daemon/review.py``),
    or None (no socket, no answer in ``timeout``: the file protocol or a local check follows).
    ``meanwhile()`` runs once the request is sent, before the answer is read: the caller's own
    work overlaps gflowd's (gflowctl writes and fsyncs the manifest's hidden temp then)."""
    import _socket  # lazy: only when a gflowd runs; not socket.py, whose enums and selectors cost ~2 ms

    items = [{"origin": o, "text": t} for o, t in inputs]
    for item, folder in zip(items, folders or []):
        if folder is not None:
            item["folder"] = folder
    folder_fd = None
    try:
        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            conn.settimeout(timeout)
            address = str(path)
            if len(os.fsencode(address)) >= 100:  # past sun_path's 108 bytes: through the folder_fd's descriptor
                folder_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                address = f"/proc/self/fd/{folder_fd}/{path.name}"
            conn.connect(address)
            conn.sendall(json.dumps({"inputs": items}).encode())
            conn.shutdown(_socket.SHUT_WR)
            if meanwhile is not None:
                meanwhile()
            chunks = []
            while chunk := conn.recv(1 << 16):
                chunks.append(chunk)
        finally:
            conn.close()
        answered = json.loads(b"".join(chunks))["inputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        if folder_fd is not None:
            os.close(folder_fd)
    return answered if isinstance(answered, list) and len(answered) == len(inputs) else None
