"""At gflowd's start: the modes of files an older gflowd left more open than this one writes them.

What gflowd writes that holds a user's private text is written closed from the first byte (the
parse cache 0600, attempt scripts 0700, records and supervisor traces 0600); this step closes what an earlier version
left behind, so an upgrade does not keep yesterday's cache readable by all. It only ever removes
permission bits or removes gflowd's own caches; it never opens a file, so a user's FIFO or
symlink in the home costs nothing. docs/multi-user.md, "What other users can read", lists each
file and who may read it.
"""

from __future__ import annotations

import logging
import os
import stat

from controller.paths import Home

log = logging.getLogger("gflowd")

MANIFEST_CACHE = "manifest-cache.json"


def tighten_home(home: Home) -> list[str]:
    """Close what an older gflowd left open; returns what it changed (for the log and tests)."""
    changed: list[str] = []
    cache = home.run_dir / MANIFEST_CACHE
    try:
        st = os.lstat(cache)
    except OSError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            _remove(cache, changed)  # not ours: a cache only, gflowd parses the manifests again
        elif _close(cache, st, 0o600):
            changed.append(str(cache))
    try:
        entries = list(os.scandir(home.run_dir / "attempts"))
    except OSError:
        entries = []
    for entry in entries:
        # a job's script: its owner's text, runnable by its owner alone; a supervisor's trace may quote
        # the job's command: root's (and the supervisor's) alone
        allowed = 0o700 if entry.name.endswith(".sh") else 0o600 if entry.name.endswith(".log") else None
        if allowed is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and _close(entry.path, st, allowed):
            changed.append(entry.path)
    if os.geteuid() == 0:
        _functions_folder(home)
    if changed:
        log.info("closed %d file(s) an earlier gflowd left readable by other users", len(changed))
    return changed


def _functions_folder(home: Home) -> None:
    """A shared home (a sticky spec dir others may write to, docs/multi-user.md) gets ``functions/``
    with the spec dir's mode and group: whoever may submit a job may submit a function, each into
    their own ``functions/<uid>/`` (Client.submit_function). A private home gets none from gflowd."""
    try:
        spec = os.stat(home.spec_dir)
    except OSError:
        return
    mode = stat.S_IMODE(spec.st_mode)
    if not (mode & stat.S_ISVTX and mode & (stat.S_IWGRP | stat.S_IWOTH)):
        return
    try:
        os.mkdir(home.functions_dir, 0o700)
    except FileExistsError:
        return  # the admin's, or an earlier start's: left as it is
    except OSError as exc:
        log.warning("cannot create %s (%s): users' submit_function will ask for it", home.functions_dir, exc.strerror)
        return
    os.chown(home.functions_dir, 0, spec.st_gid)
    os.chmod(home.functions_dir, mode & 0o1777)


def _close(path: os.PathLike | str, st: os.stat_result, allowed: int) -> bool:
    mode = stat.S_IMODE(st.st_mode)
    if mode & ~allowed == 0:
        return False
    try:
        os.chmod(path, mode & allowed, follow_symlinks=False)
    except (OSError, NotImplementedError):
        return False
    return True


def _remove(path: os.PathLike | str, changed: list[str]) -> None:
    try:
        os.unlink(path)
        changed.append(str(path))
    except OSError:
        pass
