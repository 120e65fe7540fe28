"""``HOME/cordon.yaml``: the GPUs an admin cordoned or drained (``gflowctl cordon|drain|uncordon gpu
N`` write it; an admin may edit it by hand). Trusted only when gflowd's own user owns it and no one
else may write it: a user who could write it could drain everyone's jobs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from controller.api.cordon import parse_cordons
from controller.model.gpus import Cordon

log = logging.getLogger("gflowd.cordon")


class CordonFile:
    """The file, re-read when it changes (stat), with its last good content kept on a bad edit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._key: tuple[int, int, int] | None = None
        self.cordons: dict[int, Cordon] = {}

    def read(self) -> dict[int, Cordon]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._key, self.cordons = None, {}
            return self.cordons
        except OSError as exc:
            log.warning("cannot read %s: %s (keeping the GPUs' last cordons)", self.path, exc.strerror)
            return self.cordons
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._key:
            return self.cordons
        self._key = key
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            log.warning(
                "ignoring %s: only gflowd's user (uid %d) may own and write it (owner uid %d, mode %o)",
                self.path,
                os.geteuid(),
                st.st_uid,
                st.st_mode & 0o777,
            )
            self.cordons = {}
            return self.cordons
        try:
            self.cordons = parse_cordons(self.path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.warning("%s: %s (keeping the GPUs' last cordons)", self.path, exc)
        return self.cordons
