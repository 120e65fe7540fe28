"""What every verb shares: the instance (home + spec dir), user errors, the terminal. The state
files are read through ``controller.client.state``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from controller.paths import Home


class CliError(Exception):
    """A user error: printed as one line on stderr, exit code 1."""


def resolve_home(home: str | None, spec_dir: str | None) -> Home:
    resolved = Home.resolve(home, spec_dir)
    if spec_dir is None:
        # follow the spec dir a running (or the last) gflowd watches, e.g. a git checkout
        try:
            recorded = resolved.spec_dir_file.read_text().strip()
        except OSError:
            recorded = ""
        if recorded:
            resolved = Home(resolved.root, Path(recorded))
    return resolved


def warn_if_not_running(home: Home) -> None:
    from controller.client.state import is_running  # lazy: every verb loads this module, only get warns

    if not is_running(home):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; what you see may be stale\n")


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
