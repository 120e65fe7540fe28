"""Bounded GPU inventory calls: a hung NVML call never stalls the reconcile loop.

A driver in trouble can block an NVML call for minutes. :class:`GuardedInventory` runs each call
of the wrapped inventory (its construction, i.e. ``nvmlInit``, included) on a daemon thread and
waits at most ``timeout`` seconds. A call that does not answer in time leaves its thread behind;
no new call is made until it returns. Meanwhile the GPUs last seen are reported unhealthy (they
are not handed to new jobs; running jobs are not touched), and ``describe()`` says why.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from controller.model.gpus import Gpu

log = logging.getLogger("gflowd.gpus")
DEFAULT_TIMEOUT = 5.0


class _Call:
    def __init__(self, what: str, fn: Callable[..., Any], args: tuple):
        self.what, self.fn, self.args = what, fn, args
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args)
        except BaseException as exc:  # handed to the caller, never lost in the thread
            self.error = exc
        finally:
            self.done.set()


class GuardedInventory:
    """Wraps an inventory factory (e.g. ``NvmlInventory``); implements the Inventory protocol. The
    messages name the factory's library and init call (its ``LIBRARY``/``INIT``: NVML's by default)."""

    def __init__(self, factory: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.library = getattr(factory, "LIBRARY", "NVML")
        self.init_name = getattr(factory, "INIT", "nvmlInit")
        self._inner: Any = None
        self._hung: _Call | None = None
        self._last: list[Gpu] = []
        self._init = self._call(self.init_name, factory)

    # -- the Inventory protocol ---------------------------------------------------------------

    def describe(self) -> str:
        if self._ready() is None:
            return (
                f"{self.library} did not answer {self.init_name} within {self.timeout:g}s (a hung driver?); "
                "no GPUs until it does"
            )
        text = self._inner.describe()
        if self._hung is not None:
            text += f"; {self.library} is not answering ({self._hung.what} hung for over {self.timeout:g}s)"
        return text

    def read(self) -> list[Gpu]:
        if self._ready() is None:
            return []
        ok, gpus = self._try("read", self._inner.read)
        if ok:
            self._last = gpus
            return gpus
        message = f"{self.library} did not answer within {self.timeout:g}s (a hung driver call)"
        return [dataclasses.replace(g, healthy=False, error=message) for g in self._last]

    def topology(self) -> dict[tuple[int, int], int]:
        reader = getattr(self._ready(), "topology", None)
        if reader is None:
            return {}
        ok, result = self._try("topology", reader)
        return result if ok else {}

    def close(self) -> None:
        if self._ready() is not None and self._hung is None:  # nvmlShutdown would queue behind a hung call
            getattr(self._inner, "close", lambda: None)()

    @property
    def available(self) -> bool:
        return bool(getattr(self._ready(), "available", False))

    # -- internals ----------------------------------------------------------------------------

    def _ready(self) -> Any:
        """The wrapped inventory once its construction has returned, else None."""
        if self._inner is None and self._init is not None and self._init.done.is_set():
            if self._init.error is not None:
                log.warning("GPU inventory could not start: %s", self._init.error)
                self._init = None
                return None
            self._inner, self._init = self._init.result, None
            if self._hung is not None and self._hung.what == self.init_name:
                self._hung = None
        return self._inner

    def _try(self, what: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        if self._hung is not None:
            if not self._hung.done.is_set():
                return False, None
            log.warning("%s answers again (%s returned)", self.library, self._hung.what)
            self._hung = None
        call = self._call(what, fn)
        if call is None:
            return False, None
        if call.error is not None:
            raise call.error
        return True, call.result

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> _Call | None:
        call = _Call(what, fn, args)
        threading.Thread(target=call.run, name=f"gpu-{what}", daemon=True).start()
        if call.done.wait(self.timeout):
            return call
        log.warning(
            "%s %s did not answer within %gs: not waiting for it; GPUs are marked unhealthy until it does",
            self.library,
            what,
            self.timeout,
        )
        self._hung = call
        return None if what != self.init_name else call
