"""Is a lock held: the one question gflowctl asks of gflowd's instance lock on every verb, in a module
light enough for start-up (``fsutil`` loads ``tempfile`` and ``random``, ~3 ms)."""

from __future__ import annotations

import fcntl
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path  # not at run time: get jobs' quick path loads no pathlib


def lock_held(path: str | Path) -> bool:
    """True when some process holds an flock on ``path`` (gflowd's instance lock, a supervisor's
    attempt lock). The kernel drops such a lock when its holder dies, so it is never stale."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        return False
    finally:
        os.close(fd)  # closing drops our shared lock, if we got it
