#!/usr/bin/env python3
"""The shim's entry point, run as a plain file: ``python -I -S shim/main.py --launcher [WAKE_FD
[SCOPE_CGROUP_PROCS]]`` (the zygote gflowd starts, ``launcher.py``) or ``python -I -S shim/main.py
RECORD_FILE`` (one supervisor for one attempt, ``supervisor.py``). ``-I -S``: the standard
library only, isolated from the user's environment, so it starts without the project's
dependencies; the shim's modules are found beside this file, ``record.py``, ``control_socket.py``,
``holds.py`` and ``cgroups/`` in the folder above.
"""

from __future__ import annotations

import errno
import os
import sys

if __name__ == "__main__":  # a plain file: no package to import from
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_here, os.path.dirname(_here)]
    from launcher import launcher
    from supervisor import Supervisor
else:
    from controller.act.runtime.shim.launcher import launcher
    from controller.act.runtime.shim.supervisor import Supervisor


def main(argv: list[str]) -> int:
    if argv[:1] == ["--launcher"]:
        return launcher(
            int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else None, argv[2] if len(argv) > 2 else None
        )
    if len(argv) != 1:
        sys.stderr.write("usage: main.py RECORD_FILE | --launcher [WAKE_FD [SCOPE_CGROUP_PROCS]]\n")
        return 2
    os.setsid() if os.getpid() != os.getsid(0) else None
    return Supervisor(argv[0]).run()


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            sys.exit(0)
        raise
