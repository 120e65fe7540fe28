"""Who may do what (SPEC.md section 8): checks on the spec directory's own permissions.

The spec directory is the only door: a job runs as the owner of its manifest file. A folder anyone
may write to, without the sticky bit, would let any user replace or delete another user's
manifest (and so run or stop jobs in their name), so gflowd refuses to serve one.
"""

from __future__ import annotations

import os
import stat


def spec_dir_problem(spec_dir: os.PathLike[str] | str) -> str | None:
    """One sentence saying what is unsafe about ``spec_dir`` (and how to fix it), or None."""
    try:
        st = os.stat(spec_dir)
    except OSError as exc:
        return f"cannot read the spec dir {spec_dir}: {exc.strerror}"
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return (
            f"the spec dir {spec_dir} is world-writable without the sticky bit, so anyone could replace "
            f"or delete other users' manifests; run: chmod o-w {spec_dir} (or chmod +t {spec_dir} to share it)"
        )
    return None
