"""The Python client, and the read model gflowctl and the dashboard share.

``from controller.client import Client`` gives what gflowctl does from Python (``api.Client``),
plus functions as jobs (``Client.submit_function``, ``Client.map``). The read model (``state``:
index, rows, status files, is gflowd running; ``events``; ``review``) and the writers gflowctl's
verbs share with the client (``manifests``, ``submit``, ``edit``, ``logs``) are modules here.

The names below load on first use, so importing this package costs nothing the caller did not ask
for (gflowctl imports ``controller.client.errors`` at start-up).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported: gflowctl's start-up loads this package (errors)
if TYPE_CHECKING:
    from controller.client.api import Client
    from controller.client.errors import GflowError, JobError, NotFound
    from controller.client.functions import Future, RemoteError
    from controller.client.objects import Gpu, Job, Submitted, Sweep

_WHERE = {
    "Client": "controller.client.api",
    "GflowError": "controller.client.errors",
    "JobError": "controller.client.errors",
    "NotFound": "controller.client.errors",
    "Future": "controller.client.functions",
    "RemoteError": "controller.client.functions",
    "Gpu": "controller.client.objects",
    "Job": "controller.client.objects",
    "Submitted": "controller.client.objects",
    "Sweep": "controller.client.objects",
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
