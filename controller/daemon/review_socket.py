"""gflowd's admission review for every user: a Unix socket, ``run/review.sock`` (mode 0666).

The file protocol (``client/review.py``) needs a folder the caller may write, which on the shared
instance only root has; every other user got the CLI's own check, without gflowd's verdicts (a job
that can never fit these GPUs, a conda env gflowd cannot find). Over the socket gflowd learns the
caller's uid from the kernel (``SO_PEERCRED``), never from the request, and judges the manifests
as that user's (``owner_uid``): what a root-owned manifest may do, a caller's never may. The answer
is ``check_documents``' own, the one the file protocol gives.

One request per connection: JSON ``{"inputs": [...]}`` then the caller's half-close; the answer is
JSON, then close. A slow or stuck caller holds only its own thread (bounded, with a deadline).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Any, Callable

from controller.act.runtime.control_socket import unix_address
from controller.client.review import MAX_REQUEST_BYTES, check_documents

log = logging.getLogger("gflow.review")

DEADLINE = 5.0  # seconds a caller may take to send its request
MAX_CALLERS = 16  # connections answered at once; more wait in the listen backlog


def serve(path: Path, judge: Callable[[int, dict[str, Any]], dict[str, Any]]) -> socket.socket | None:
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
            threading.Thread(target=_answer, args=(conn, judge, slots), daemon=True, name="review").start()

    threading.Thread(target=accept, daemon=True, name="review-accept").start()
    return listener


def _answer(conn: socket.socket, judge: Callable[[int, dict[str, Any]], dict[str, Any]],
            slots: threading.BoundedSemaphore) -> None:
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
                answer = judge(uid, json.loads(b"".join(chunks)))
            except (ValueError, KeyError, TypeError) as exc:
                answer = {"error": f"unreadable review request: {exc}"}
            conn.sendall(json.dumps(answer).encode())
    except OSError:
        pass  # the caller left or was too slow: it checks locally
    finally:
        slots.release()


def judge_as(uid: int, request: dict[str, Any], *, controller_uid: int, conda_available: bool,
             never_fits: Callable[..., str | None] | None) -> dict[str, Any]:
    """``check_documents`` for each input, as manifests owned by the caller ``uid``."""
    return {"inputs": [
        check_documents(str(item["origin"]), str(item["text"]), owner_uid=uid, controller_uid=controller_uid,
                        conda_available=conda_available, never_fits=never_fits,
                        folder=None if item.get("folder") is None else str(item["folder"]))
        for item in request["inputs"]
    ]}
