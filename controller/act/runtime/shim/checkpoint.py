"""The checkpoint handshake of one attempt (docs/checkpoint.md), kept by its supervisor: the job's
signal goes out ``before`` its time limit, or at once when gflowd asks for a stop that a checkpoint
should precede; the job confirms (``gflowctl checkpoint done`` through the control socket, or by
writing the file named by ``GFLOW_CHECKPOINT_FILE``); the stop then goes on, or after ``grace``
without a confirmation. Standard library only, like the rest of the shim.

The supervisor owns the timing (it outlives gflowd), and what happened goes into the exit record
(``record()``), so a gflowd restarted mid-handshake neither loses a confirmation nor kills early.

While the job runs, each confirmation is also published for gflowd: ``<record>.ckpt`` (the
attempt's record's path, ``run/attempts/<name>.<N>.ckpt``), written whole and renamed into place,
then a ``checkpoint`` datagram wakes gflowd, which reads it in its next pass (and on adoption after
a restart), so ``describe`` shows the checkpoint before the attempt ends. Not fsync'd: it is a view
for humans; the exit record, fsync'd, stays the one gflowd decides the attempt's end by.

The confirmation file is made here before the job starts: ``run/control/<uid>/<name>.checkpoint``,
in the control socket's folder (gflowd's user's, 0711: the job's user cannot replace the file), the
job user's and 0600, so only the job's user (and root) can confirm. A write of any bytes confirms;
its first line, if any, is the checkpoint's path. We empty it again after each confirmation.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

# the stops gflowd causes that a checkpoint precedes; a user's cancel or delete does not (as scancel)
CHECKPOINT_STOPS = frozenset({"Preempted", "Suspended", "IdleTimeout"})
FILE_POLL = 0.25  # seconds between looks at the confirmation file while a confirmation is awaited
PATH_CHARS = 1024  # a confirmation's path is cut to this, so the exit record keeps its room


def attempt_number(record_path: str) -> int | None:
    """``run/attempts/train.3`` -> 3 (a record's name is ``<name>.<N>``)."""
    number = record_path.rpartition(".")[2]
    return int(number) if number.isdigit() else None


class Handshake:
    """One attempt's checkpoint: when its signal is due, whether it was confirmed, the record."""

    def __init__(self, spec: dict, uid: int | None, gid: int | None, record_path: str = "", notify=None):
        self.signum = int(getattr(signal, "SIG" + str(spec.get("signal", "USR1"))))
        self.signal_name = str(spec.get("signal", "USR1"))
        self.before = float(spec.get("before", 600.0))
        self.grace = float(spec.get("grace", 300.0))
        self.file = spec.get("file") or None
        self.to_all = spec.get("scope") == "All"  # else the job's main process only (sbatch --signal=B:)
        self.uid, self.gid = uid, gid
        self.fd: int | None = None
        self.signalled_at: float | None = None  # monotonic: when the latest signal went out
        self.why = ""  # what the latest signal was for: DeadlineExceeded or a StopReason
        self.confirmed_at: float | None = None  # monotonic: the latest confirmation
        self.last: dict | None = None  # the latest confirmation: {confirmedAt (wall), path}
        self.timed_out = False
        self.signalled_wall: float | None = None
        self.published = f"{record_path}.ckpt" if record_path else ""  # the latest confirmation, for gflowd
        self.notify = notify  # ``notify("checkpoint")`` wakes gflowd (the supervisor's notice datagram)
        self.attempt = attempt_number(record_path)

    # -- the confirmation file ------------------------------------------------------------------

    def prepare(self, make_folder) -> None:
        """Before the job starts: the empty confirmation file, the job user's, 0600 (module notes).
        ``make_folder(path)`` opens the control folder (made ours and 0711) as a descriptor."""
        if not self.file:
            return
        try:
            folder = make_folder(os.path.dirname(self.file))
        except OSError as exc:
            sys.stderr.write(f"checkpoint file {self.file}: {exc.strerror or exc}; confirm with gflowctl\n")
            return
        name = os.path.basename(self.file)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)  # a dead attempt's
            old = os.umask(0o177)
            try:
                self.fd = os.open(
                    name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder
                )
            finally:
                os.umask(old)
            if self.uid is not None and os.geteuid() == 0 and self.uid != 0:
                os.fchown(self.fd, self.uid, self.gid if self.gid is not None else -1)
        except OSError as exc:
            sys.stderr.write(f"checkpoint file {self.file}: {exc.strerror or exc}; confirm with gflowctl\n")
        finally:
            os.close(folder)

    def poll_file(self) -> None:
        """A write to the confirmation file confirms (its first line: the path); then it is emptied."""
        if self.fd is None:
            return
        try:
            if os.fstat(self.fd).st_size == 0:
                return
            data = os.pread(self.fd, PATH_CHARS, 0)
            os.ftruncate(self.fd, 0)
        except OSError:
            return
        text = data.decode(errors="replace").strip().splitlines()
        self.confirm(text[0] if text else None)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            if self.file:
                with contextlib.suppress(OSError):
                    os.unlink(self.file)

    # -- the handshake --------------------------------------------------------------------------

    def confirm(self, path: str | None) -> None:
        """The job says its checkpoint is written (through the control socket or the file)."""
        self.confirmed_at = time.monotonic()
        self.last = {"confirmedAt": time.time(), "path": (path or "")[:PATH_CHARS] or None}
        self.publish()

    def publish(self) -> None:
        """The latest confirmation to ``<record>.ckpt`` (module notes), then gflowd woken. A disk
        that refuses it loses nothing: the exit record carries the confirmation too."""
        if not self.published or self.last is None:
            return
        temporary = self.published + ".new"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, json.dumps({"attempt": self.attempt, **self.last}).encode())
            finally:
                os.close(fd)
            os.rename(temporary, self.published)
        except OSError:
            return
        if self.notify is not None:
            self.notify("checkpoint")

    def send(self, why: str, signal_tree, signal_main) -> None:
        """The signal to the job's main process (or all of its processes), now; ``why``:
        DeadlineExceeded or a StopReason."""
        self.signalled_at, self.signalled_wall, self.why = time.monotonic(), time.time(), why
        (signal_tree if self.to_all else signal_main)(self.signum)

    def confirmed_since_signal(self) -> bool:
        return (
            self.signalled_at is not None and self.confirmed_at is not None and self.confirmed_at >= self.signalled_at
        )

    def deadline_signal_due(self, now: float, deadline: float | None) -> bool:
        """The time limit is ``before`` away (or nearer) and no signal went out for it yet."""
        return deadline is not None and self.why != "DeadlineExceeded" and now >= deadline - self.before

    def wait_over(self, now: float) -> bool:
        """A stop waiting for the confirmation may go on: confirmed, or the grace is up."""
        if self.confirmed_since_signal():
            return True
        if self.signalled_at is not None and now >= self.signalled_at + self.grace:
            self.timed_out = True
            return True
        return False

    def record(self) -> dict | None:
        """For the exit record: the latest signal and whether (and when) the job confirmed it."""
        if self.signalled_at is None and self.last is None:
            return None
        return {
            "signal": self.signal_name,
            "signalledAt": self.signalled_wall,
            "why": self.why or None,
            "confirmed": self.confirmed_since_signal() if self.signalled_at is not None else None,
            "timedOut": self.timed_out or (self.signalled_at is not None and not self.confirmed_since_signal()),
            **(self.last or {}),
        }
