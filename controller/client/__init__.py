"""The Python client, and what gflowctl, the dashboard and the client share, in rooms by job.

``from controller.client import Client`` gives what gflowctl does from Python (``api.Client``),
plus functions as jobs (``functions``: ``Client.submit_function``, ``Client.map``; ``runner`` is
their far side, run by path inside the job). The rooms the verbs share with the client:
``read/`` (what gflowd wrote: index, rows, status files, events, logs, usage, expected starts),
``write/`` (apply, edit, run: what writes the spec dir), ``review`` (apply asking gflowd; its
answering half is gflowd's, in ``daemon/``), ``terminal`` and ``control_peer`` (attach and exec),
``explain``, ``errors`` (``GflowError``).

The names below load on first use, so importing this package costs nothing the caller did not ask
for (gflowctl imports ``controller.client.errors`` at start-up).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported: gflowctl's start-up loads this package (errors)
if TYPE_CHECKING:
    from controller.client.api import Client
    from controller.client.errors import GflowError, JobError, NotFound
    from controller.client.functions import Checkpointable, DelayedSubmission, Future, RemoteError
    from controller.client.read.objects import Gpu, Job, Submitted, Sweep

_WHERE = {
    "Client": "controller.client.api",
    "GflowError": "controller.client.errors",
    "JobError": "controller.client.errors",
    "NotFound": "controller.client.errors",
    "Future": "controller.client.functions",
    "Checkpointable": "controller.client.functions",
    "DelayedSubmission": "controller.client.functions",
    "RemoteError": "controller.client.functions",
    "Gpu": "controller.client.read.objects",
    "Job": "controller.client.read.objects",
    "Submitted": "controller.client.read.objects",
    "Sweep": "controller.client.read.objects",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'controller.client' has no attribute {name!r}")
    from importlib import import_module  # lazy: a name is loaded on first use (PEP 562)

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
