"""gflowd's end of the launcher (``shim/launcher.py``): the zygote is started once, recorded
launches are written to its stdin a pass at a time, and purged records are reported so the
supervisors that were done with them may take new attempts."""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
from pathlib import Path

from controller.act.runtime.cgroups.systemd_scope import Scope
from controller.act.runtime.shim import MAIN_FILE

log = logging.getLogger("gflowd.runtime")
LAUNCH_PIPE_BYTES = 1 << 20  # the launcher's stdin: room for ~15,000 record paths
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


class LauncherPipe:
    def __init__(self, python: str, wake_fd: int, scope: Scope | None) -> None:
        self.python = python
        self.wake_fd = wake_fd  # the launcher writes to it when a supervisor it reuses ended an attempt
        self.scope = scope
        self.process: subprocess.Popen | None = None
        self.handing: list[Path] = []  # records to hand to the launcher (``hand_over``)
        self.purged: list[Path] = []  # records purged: their supervisors may take new attempts (``tell_purged``)

    def hand_over(self) -> None:
        """The recorded launches, to the launcher: all of a pass in one write, so a burst wakes it
        once, not once per job (each wake-up preempted gflowd)."""
        if not self.handing:
            return
        data = "".join(f"{path}\n" for path in self.handing).encode()
        self.handing = []
        launcher = self.ensure()
        try:
            assert launcher.stdin is not None
            launcher.stdin.write(data)
            launcher.stdin.flush()
        except (OSError, ValueError):  # a line it read before dying is refused by its lock or its records
            log.warning("supervisor launcher died; starting a new one")
            self.process = None
            launcher = self.ensure()
            assert launcher.stdin is not None
            launcher.stdin.write(data)
            launcher.stdin.flush()

    def tell_purged(self) -> None:
        """The launcher learns which records are purged: a supervisor done with one may now take a
        next attempt, as no signal of ours can be meant for it any more (shim/launcher.py). Only the
        launcher that is running: one started later never handed those out."""
        purged, self.purged = self.purged, []
        launcher = self.process
        if not purged or launcher is None or launcher.poll() is not None or launcher.stdin is None:
            return
        try:
            launcher.stdin.write("".join(f"purged {path}\n" for path in purged).encode())
            launcher.stdin.flush()
        except (OSError, ValueError):
            pass  # it died: its supervisors end once their attempts do

    def ensure(self) -> subprocess.Popen:
        if self.process is None or self.process.poll() is not None:
            # -I -S: the supervisor needs only the standard library; isolated from the user's env
            self.process = subprocess.Popen(
                # in a systemd scope, the launcher moves itself to its supervisors' leaf before it
                # forks any: every supervisor is born there, and none is left behind in gflowd's unit
                [
                    self.python,
                    "-I",
                    "-S",
                    MAIN_FILE,
                    "--launcher",
                    str(self.wake_fd),
                    *([os.path.join(self.scope.supervisors, "cgroup.procs")] if self.scope is not None else []),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(self.wake_fd,),  # it wakes us when a supervisor it reuses ended an attempt
                start_new_session=True,
            )
            assert self.process.stdin is not None
            try:  # a burst of starts is written at once; the launcher forks at its own pace
                fcntl.fcntl(self.process.stdin.fileno(), F_SETPIPE_SZ, LAUNCH_PIPE_BYTES)
            except OSError:
                pass  # the default 64 KiB: ~600 starts before gflowd waits for the launcher
        return self.process

    def close(self) -> None:
        """gflowd is stopping: the launcher exits (its supervisors and their jobs live on)."""
        self.hand_over()
        if self.process is not None and self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
