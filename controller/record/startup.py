"""gflowd's writes under the state directory outside a pass: at start-up and at the end.

What a pass writes is :mod:`controller.record.recorder`'s; these are the notes gflowd leaves for
its readers about itself (which spec dir it watches, where its dashboard listens) and the
clearing of what an earlier gflowd's cut-short writes left. Called by ``daemon/main.py`` while it
holds the home's lock, so only this gflowd writes here.
"""

from __future__ import annotations

import json
import logging
import os

from controller.paths import Home
from controller.util.fsutil import atomic_write, remove_stale_temps

log = logging.getLogger("gflowd")


def remove_dead_temps(home: Home) -> None:
    """Temp files of atomic writes that a kill -9 cut short: only this gflowd (it holds the home's
    lock now) writes in these folders, so every one found is dead."""
    removed = remove_stale_temps(home.root, only=frozenset({home.node_file.name}))
    for folder in (home.status_dir, home.run_dir, home.run_dir / "attempts"):
        removed += remove_stale_temps(folder)
    if removed:
        log.info("removed %d temporary file(s) left by writes an earlier gflowd did not finish", removed)


def note_spec_dir(home: Home) -> None:
    """``run/spec-dir``: which spec dir gflowd watches, so gflowctl finds a custom --spec-dir."""
    try:
        atomic_write(home.spec_dir_file, str(home.spec_dir) + "\n", durable=False)
    except OSError as exc:  # a full disk: gflowd must run all the same, its jobs need it most then
        log.warning(
            "could not write %s (%s); gflowctl finds a custom spec dir once it can be written", home.spec_dir_file, exc
        )


def note_dashboard(home: Home, url: str, port: int, socket: bool) -> None:
    """``run/web.json``: where the dashboard serves (for ``port 0``, for scripts and for the admin).
    Written once it serves, so a reader that finds the file can connect."""
    record: dict[str, object] = {"url": url, "port": port, "pid": os.getpid()}
    if socket:
        record["socket"] = str(home.web_socket)
    atomic_write(home.web_file, json.dumps(record) + "\n", durable=False)


def forget_dashboard(home: Home) -> None:
    """The dashboard stopped: its note goes."""
    try:
        home.web_file.unlink()
    except FileNotFoundError:
        pass
