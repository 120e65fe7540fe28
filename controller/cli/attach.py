"""``gflowctl attach NAME`` and ``gflowctl exec NAME -- CMD``: a terminal on a running job.

Both talk to the job's supervisor over its control socket (``run/control/<uid>/<name>.sock``, in
a folder of gflowd's user; ``controller.client.terminal`` speaks the protocol), not to gflowd: they
work while gflowd is down or restarting. What gflowctl checks first (the job exists, runs, and is
the caller's) is for a clear message; the supervisor checks the caller's uid itself (SO_PEERCRED).
The other way round is a lock: nothing is sent before ``controller.client.control_peer`` made sure
the socket is the job's supervisor's, so no other user can listen in on what the caller types.
``session`` is also what ``run -it`` attaches with.
"""

from __future__ import annotations

import os
import pwd
import sys
import time

from controller.cli.common import CliError, printable
from controller.client.read.state import find_manifest, read_status
from controller.client.terminal import DETACH_NAME, Detached, NoSession, Refused, attach, run_command
from controller.paths import Home

SOCKET_WAIT = 5.0  # a job shown Running may take a moment to open its socket (its supervisor starting)


def job_owner(home: Home, name: str) -> int | None:
    """The uid a job runs as: its manifest file's owner (docs/multi-user.md)."""
    manifest = find_manifest(home, name)
    if manifest is None:
        return None
    try:
        return manifest.stat().st_uid
    except OSError:
        return None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def control_owner(home: Home, name: str, verb: str) -> int:
    """The uid running job ``name`` runs as, after the checks that give a clear message."""
    status = (read_status(home, name) or {}).get("status") or {}
    uid = job_owner(home, name)
    if not status and uid is None:
        raise CliError(f"job/{name} not found on {home.root}")
    phase = status.get("phase") or "not started"
    if phase != "Running":
        reason = f" ({status['reason']})" if status.get("reason") else ""
        raise CliError(f"job/{name} is {phase}{reason}; {verb} needs a running job")
    if uid is None:
        raise CliError(f"job/{name}: its manifest is gone; cannot tell whose it is")
    if os.geteuid() not in (0, uid):
        raise CliError(f"job/{name} runs as {user_name(uid)}: only its owner or root may {verb} it")
    return uid


def open_session(home: Home, name: str, verb: str):
    """A connection to the job's supervisor, waiting SOCKET_WAIT for a job that is just starting."""
    from controller.client.control_peer import NotSupervisor, open_control  # lazy: attach and exec only

    uid = control_owner(home, name, verb)
    path = home.control_socket(uid, name)
    deadline = time.monotonic() + SOCKET_WAIT
    while True:
        try:
            return open_control(home, uid, name)
        except NotSupervisor as exc:
            raise CliError(printable(str(exc))) from None
        except NoSession as exc:
            if exc.denied:
                raise CliError(f"job/{name}: {path} is not yours: only the job's owner or root may {verb} it") from None
            if time.monotonic() >= deadline:
                raise CliError(
                    f"job/{name} has no control socket at {path} ({exc}); is it still running? "
                    "(jobs started before gflow had attach and exec have none)"
                ) from None
        time.sleep(0.1)


def session(sock, name: str, read_only: bool = False) -> tuple[bool, int | None]:
    """Attach this terminal until the job ends or the user detaches (a line says so): (ended, the
    job's exit code when it ended and the supervisor knew it)."""
    try:
        with sock:
            code = attach(sock, read_only=read_only)
    except Detached:
        sys.stderr.write(f"\r\ndetached from job/{name}; it runs on (gflowctl attach {name} to return)\n")
        return False, None
    except Refused as exc:
        raise CliError(printable(str(exc))) from None
    return True, code


def attach_verb(home: Home, name: str, read_only: bool) -> int:
    sock = open_session(home, name, "attach")
    if sys.stdin.isatty():
        sys.stderr.write(f"attached to job/{name}{' (read-only)' if read_only else ''}; {DETACH_NAME} detaches\r\n")
    _, code = session(sock, name, read_only)
    return 0 if code is None else code


def exec_verb(home: Home, name: str, argv: list[str]) -> int:
    if not argv:
        raise CliError(f"exec needs a command: gflowctl exec {name} -- CMD [ARGS...]")
    sock = open_session(home, name, "exec")
    try:
        with sock:
            return run_command(sock, argv)
    except Refused as exc:
        raise CliError(printable(str(exc))) from None
