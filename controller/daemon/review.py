"""gflowd's half of the admission review: its verdict on manifests before gflowctl writes them.

Two channels, one verdict (``client/review.py``'s ``check_documents``, the check gflowctl runs when
gflowd does not answer, plus what only gflowd knows: whose manifests it may run and conda on its
PATH, ``decide/admission.check_environment``; and whether a job can ever fit its GPUs):

- the socket, ``run/review.sock`` (mode 0666), for every user. gflowd learns the caller's uid from
  the kernel (``SO_PEERCRED``), never from the request, and judges the manifests as that user's
  (``owner_uid``): what a root-owned manifest may do, a caller's never may. One request per
  connection: JSON ``{"inputs": [...]}`` then the caller's half-close; the answer is JSON, then
  close. A slow or stuck caller holds only its own thread (bounded, with a deadline).
- the file protocol, ``run/review/`` (:func:`answer_request`, from the watcher thread), for whoever
  may write that folder: the owner of the request file is whose manifests they are.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.act.runtime.control_socket import unix_address
from controller.client.review import ANSWER_SUFFIX, MAX_REQUEST_BYTES, REQUEST_SUFFIX, check_documents
from controller.decide.admission import check_environment
from controller.observe.manifests import verdict_of
from controller.observe.review_verdicts import ReviewVerdicts
from controller.util.fsutil import atomic_write
from controller.util.yamlio import iter_documents_text

log = logging.getLogger("gflow.review")

DEADLINE = 5.0  # seconds a caller may take to send its request
MAX_CALLERS = 16  # connections answered at once; more wait in the listen backlog


Judge = Callable[[int, dict[str, Any]], dict[str, Any]]
# (uid, request, answer) -> what to do once the answer is sent (see expect_landing), or None
Afterwards = Callable[[int, dict[str, Any], dict[str, Any]], Callable[[], None] | None]


def serve(path: Path, judge: Judge, afterwards: Afterwards | None = None) -> socket.socket | None:
    """Listen on ``path`` (replacing a stale socket) and answer in a daemon thread; None if it cannot."""
    try:
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        with unix_address(str(path)) as address:
            listener.bind(address)
        os.chmod(path, 0o666)  # every user may ask; who asks is the kernel's word (SO_PEERCRED)
        listener.listen(64)
    except OSError as exc:
        log.warning("admission review socket disabled: cannot listen on %s: %s", path, exc)
        return None
    slots = threading.BoundedSemaphore(MAX_CALLERS)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: gflowd stops
            slots.acquire()
            threading.Thread(target=_answer, args=(conn, judge, slots, afterwards), daemon=True, name="review").start()

    threading.Thread(target=accept, daemon=True, name="review-accept").start()
    return listener


def _answer(
    conn: socket.socket, judge: Judge, slots: threading.BoundedSemaphore, afterwards: Afterwards | None = None
) -> None:
    then = None
    try:
        with conn:
            conn.settimeout(DEADLINE)
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
            chunks, size = [], 0
            while chunk := conn.recv(1 << 16):
                size += len(chunk)
                if size > MAX_REQUEST_BYTES:
                    conn.sendall(json.dumps({"error": f"review request over {MAX_REQUEST_BYTES} bytes"}).encode())
                    return
                chunks.append(chunk)
            try:
                request = json.loads(b"".join(chunks))
                answer = judge(uid, request)
            except (ValueError, KeyError, TypeError) as exc:
                answer = {"error": f"unreadable review request: {exc}"}
            else:
                then = _prepared(afterwards, uid, request, answer)
            conn.sendall(json.dumps(answer).encode())
    except OSError:
        pass  # the caller left or was too slow: it checks locally
    finally:
        try:
            if then is not None:
                then()  # after the answer: the caller writes its file meanwhile
        finally:
            slots.release()


def _prepared(
    afterwards: Afterwards | None, uid: int, request: dict[str, Any], answer: dict[str, Any]
) -> Callable[[], None] | None:
    if afterwards is None:
        return None
    try:
        return afterwards(uid, request, answer)
    except Exception:  # never the answer's problem: the store parses the files as always
        log.exception("review: no verdicts kept")
        return None


def expect_landing(
    verdicts: ReviewVerdicts,
    spec_dir: str,
    uid: int,
    request: dict[str, Any],
    answer: dict[str, Any],
    on_paths: Callable[[list[str]], None] | None = None,
) -> Callable[[], None] | None:
    """For each Job the answer lets the caller store as ``SPEC_DIR/NAME.yaml`` (what apply and run
    write for a new job): its verdict announced to the store now, before the answer is sent, and
    worked out by the returned function once it is (``review_verdicts``). ``on_paths`` hears
    those paths first (the loop's ``Landings``: they are likely to land together)."""
    landing = []
    for item, judged in zip(request["inputs"], answer.get("inputs") or []):
        parts: list[str] | None = None
        for doc in judged["docs"]:
            if doc["kind"] != "job" or doc.get("skip") or doc.get("readBack"):
                continue
            text = doc.get("text")
            if text is None:
                parts = parts if parts is not None else list(iter_documents_text(str(item["text"])))
                text = parts[doc["index"]]
            body = text if text.endswith("\n") else text + "\n"  # as store_document writes it
            path = f"{spec_dir}/{doc['name']}.yaml"
            landing.append((verdicts.expect((path, uid, body.encode())), body, path))
    if not landing:
        return None
    if on_paths is not None:
        on_paths([path for _, _, path in landing])

    def work_out() -> None:
        for give, body, path in landing:
            try:
                give(verdict_of(body, path))
            except Exception:  # never the review's problem: the store parses the file as always
                log.exception("review: no verdict kept for %s", path)
                give(None)

    return work_out


def judge_as(
    uid: int,
    request: dict[str, Any],
    *,
    controller_uid: int,
    conda_available: bool,
    never_fits: Callable[..., str | None] | None,
) -> dict[str, Any]:
    """``check_documents`` for each input, as manifests owned by the caller ``uid``."""
    return {
        "inputs": [
            check_documents(
                str(item["origin"]),
                str(item["text"]),
                owner_uid=uid,
                environment=lambda job: check_environment(job, controller_uid, conda_available),
                never_fits=never_fits,
                folder=None if item.get("folder") is None else str(item["folder"]),
            )
            for item in request["inputs"]
        ]
    }


# -- the file protocol ----------------------------------------------------------------------------------


def answer_request(
    path: Path,
    *,
    controller_uid: int,
    conda_available: bool,
    never_fits: Callable[..., str | None] | None = None,
) -> None:
    """Answer one request file (gflowd, from its watcher thread), then remove the request."""
    if not path.name.endswith(REQUEST_SUFFIX) or path.name.startswith("."):
        return
    answer = path.with_name(path.name[: -len(REQUEST_SUFFIX)] + ANSWER_SUFFIX)
    try:
        st = path.stat()
        if st.st_size > MAX_REQUEST_BYTES:
            result: dict[str, Any] = {"error": f"review request over {MAX_REQUEST_BYTES} bytes"}
        else:
            request = json.loads(path.read_bytes())
            result = {
                "inputs": [
                    check_documents(
                        str(item["origin"]),
                        str(item["text"]),
                        owner_uid=st.st_uid,
                        environment=lambda job: check_environment(job, controller_uid, conda_available),
                        never_fits=never_fits,
                        folder=None if item.get("folder") is None else str(item["folder"]),
                    )
                    for item in request["inputs"]
                ]
            }
    except FileNotFoundError:
        return  # the CLI gave up and took it back
    except (OSError, ValueError, KeyError, TypeError) as exc:
        result = {"error": f"unreadable review request: {exc}"}
    try:
        atomic_write(answer, json.dumps(result), durable=False)
        path.unlink()
    except OSError:
        pass


def clear(directory: Path) -> None:
    """At start-up: requests and answers of earlier runs are stale."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name.endswith((REQUEST_SUFFIX, ANSWER_SUFFIX)):
            try:
                os.unlink(entry.path)
            except OSError:
                pass
