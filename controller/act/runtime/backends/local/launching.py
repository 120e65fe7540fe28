"""Starting an attempt of the local backend: its cgroup made, its files and record written (the
decision, on disk before anything runs), and the record handed to the launcher. A launch the disk
refuses is held (``holds.py``) and launched again by the runtime's ``tick``."""

from __future__ import annotations

import logging
import os
import time

from controller.act.runtime import record
from controller.act.runtime.backends.local.attempt import Attempt
from controller.act.runtime.backends.local.attempt_cgroups import AttemptCgroups
from controller.act.runtime.backends.local.launch_record import write_file
from controller.act.runtime.backends.local.launcher_pipe import LauncherPipe
from controller.act.runtime.backends.local.news import News
from controller.act.runtime.cgroups import CgroupError
from controller.act.runtime.holds import hold as hold_after
from controller.model.plan import RunObservation
from controller.paths import Home
from controller.util.fsutil import describe
from controller.util.spares import Spares

log = logging.getLogger("gflowd.runtime")


class Launches:
    def __init__(self, home: Home, spares: Spares, cgroups: AttemptCgroups, launcher: LauncherPipe, news: News) -> None:
        self.home = home
        self.spares = spares  # the attempts' records are created over purged ones (``util/spares.py``)
        self.cgroups = cgroups
        self.launcher = launcher
        self.news = news

    def launch(self, attempt: Attempt) -> None:
        """Record the attempt and hand it to the launcher; if the disk refuses a record, hold it."""
        if self.cgroups.cgroups is not None and attempt.spec is not None and "cgroup" not in attempt.spec:
            try:
                attempt.spec["cgroup"] = self.cgroups.make(attempt.name, attempt.attempt, attempt.spec)
            except CgroupError as exc:
                if self.cgroups.request == "required":
                    now = time.time()
                    attempt.result = RunObservation(
                        attempt.name, attempt.attempt, None, now, False, 126, None, now, str(exc)
                    )
                    self.news.poke()
                    return
                log.warning("job/%s: %s; it runs without a cgroup (memory polled)", attempt.name, exc)
                attempt.spec["cgroup"] = None
        try:
            self.write(attempt)
        except OSError as exc:
            self.hold(attempt, f"cannot record its launch: {describe(exc)}", exc.errno)
            return
        if attempt.held:
            log.info("job/%s attempt %d: its launch is recorded now; starting it", attempt.name, attempt.attempt)
        attempt.held = None
        attempt.submitted = time.monotonic()
        self.launcher.handing.append(attempt.record)

    def write(self, attempt: Attempt) -> None:
        """The script, the rotated log, then the record (the decision, created whole before
        anything runs: ``record.py``). Not fsync'd: it must survive gflowd crashing, which the page
        cache does; a machine crash takes the job with it, and the status (fsync'd, written as
        Running in this same pass) then says Lost. Each step is skipped once done, so a retry redoes
        only what failed."""
        spec = attempt.spec or {}
        if attempt.script is not None:  # written before the record that names it: no temp file needed
            write_file(attempt.written("sh"), attempt.script.encode(), 0o700, spec.get("uid"), spec.get("gid"))
            attempt.script = None
        if not attempt.log_rotated:
            self.rotate_log(attempt.name, attempt.attempt)
            attempt.log_rotated = True
        data = record.contents(spec)
        try:
            self.spares.create(attempt.record, data, 0o600, pad=True)
        except FileExistsError:  # handed over before (a retry); one that does not read was never finished
            if (record.read(str(attempt.record), ("launch",)) or {}).get("launch") is None:
                os.unlink(attempt.record)
                self.spares.create(attempt.record, data, 0o600, pad=True)

    def hold(self, attempt: Attempt, why: str, error: int | None) -> None:
        """The launch cannot be recorded now: nothing runs; the job shows Pending; retried later."""
        if not attempt.held:
            log.warning("job/%s attempt %d: %s; it starts once that can be written", attempt.name, attempt.attempt, why)
        attempt.held, attempt.was_held = hold_after(attempt.held, why, error, time.monotonic()), True
        attempt.submitted = 0.0
        self.news.poke()

    def rotate_log(self, name: str, attempt: int) -> None:
        """Attempt N-1's log becomes ``<name>.<N-1>.log`` before attempt N's may be created."""
        current = self.home.log_file(name)
        if attempt > 1 and os.path.lexists(current):  # a symlink is moved, never followed
            os.replace(current, self.home.log_file(name, attempt - 1))
