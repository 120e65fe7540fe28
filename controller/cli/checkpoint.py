"""``gflowctl checkpoint done [--path P]``: run inside a job, it tells the job's supervisor that
the checkpoint the job was signalled for is written (spec.checkpoint, docs/checkpoint.md), so a
stop waiting for it goes on at once. The job is found from its environment (``GFLOW_JOB_NAME``,
``GFLOW_HOME``); the supervisor's control socket admits only the job's user and root."""

from __future__ import annotations

import os
import socket

from controller.cli.common import CliError
from controller.paths import Home
from controller.util.frames import frame, split_frames

REPLY_TIMEOUT = 30.0  # seconds for the supervisor's answer: it answers within one turn of its loop


def checkpoint_done(home: Home, path: str | None, name: str | None = None) -> int:
    name = name or os.environ.get("GFLOW_JOB_NAME")
    if not name:
        raise CliError("checkpoint done runs inside a job (GFLOW_JOB_NAME is not set), or names it: --job NAME")
    from controller.client.control_peer import NotSupervisor, open_control  # lazy: this verb only
    from controller.client.terminal import NoSession

    if path:
        path = os.path.abspath(path)
    try:
        sock = open_control(home, os.geteuid(), name)
    except NoSession:
        raise CliError(f"job/{name} is not running here (no supervisor to confirm a checkpoint to)") from None
    except NotSupervisor as exc:
        raise CliError(str(exc)) from None
    except PermissionError:
        raise CliError(f"job/{name}: only its user (or root) may confirm its checkpoint") from None
    with sock:
        sock.settimeout(REPLY_TIMEOUT)
        try:
            sock.sendall(frame(b"H", {"mode": "checkpoint", "path": path}))
            answer = _answer(sock)
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise CliError(f"job/{name}: its supervisor did not take the confirmation ({why})") from None
    kind, payload = answer
    if kind == b"E":
        raise CliError(f"job/{name}: {payload.decode(errors='replace')}")
    if kind != b"X":
        raise CliError(f"job/{name}: its supervisor did not answer")
    print(f"job/{name}: checkpoint confirmed" + (f" ({path})" if path else ""))
    return 0


def _answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """The supervisor's first frame back (X: taken; E: refused), or (b"", b"") at EOF."""
    inbox = bytearray()
    while True:
        data = sock.recv(65536)
        if not data:
            return b"", b""
        inbox += data
        frames = split_frames(inbox)
        if frames:
            return frames[0]
