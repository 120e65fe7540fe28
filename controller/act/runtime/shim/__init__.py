"""The shim: the per-attempt supervisor process, like containerd's shim or conmon. Small, standard
library only, and outliving gflowd: it owns the job's stdio, cgroup and exit record.

``main.py`` is the plain-file entry point (``python -I -S shim/main.py``); ``launcher.py`` the
zygote and its pool of supervisor processes; ``supervisor.py`` one attempt as a state machine;
``start.py`` the job's start, ``child.py`` what the forked child does before it execs, ``exits.py``
the exit record, ``procfs.py`` what is read from /proc. Nothing here imports the rest of the project
(only ``record.py``, ``control_socket.py``, ``holds.py`` and ``cgroups/``, standard library only too).
"""

import os

MAIN_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "main.py"
)  # what gflowd runs: python -I -S MAIN_FILE
