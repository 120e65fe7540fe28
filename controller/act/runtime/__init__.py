"""The runtime wing: start, watch and stop job processes.

- ``protocol.Runtime``: what the daemon asks of a backend, declared whole.
- ``backends/``: one folder per backend (``local``: a crash-safe supervisor per attempt on this
  machine; ``slurm``: a Slurm cluster) and the registry ``make_runtime`` looks ``--backend`` up in.
- ``shim/``: the per-attempt supervisor process the local backend starts (standard library only;
  it outlives gflowd), with ``record.py`` (the attempt record's format) and ``control_socket.py``
  (attach, exec, notices) beside it.
- ``holds.py``: launches the disk refused, held and retried with backoff, for every backend.
- ``cgroups/``, ``command.py``, ``login.py``, ``orphans.py``: what the backends build launches with.
"""

from __future__ import annotations

from controller.act.runtime.backends import make_runtime, start_problem
from controller.act.runtime.protocol import Runtime

__all__ = ["Runtime", "make_runtime", "start_problem"]
