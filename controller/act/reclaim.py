"""Stop a leftover of an ended attempt that holds GPU memory (``controller.decide.gpu_leaks``):
TERM, then KILL after the job's grace. Each signal goes through a pidfd after checking the
process's start time, so a pid reused in the meantime is never signalled."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable

from controller.act.runtime.orphans import signal_processes
from controller.act.runtime.shim.procfs import start_ticks
from controller.model.gpu_leaks import Reclaim


class Reclaimer:
    """Sends the TERMs now and the KILLs later, from a timer thread; knows what it is stopping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping: dict[tuple[int, int], threading.Timer] = {}

    def stopping(self) -> frozenset[tuple[int, int]]:
        """(pid, start ticks) of the processes TERMed and not yet gone."""
        with self._lock:
            for key in [k for k in self._stopping if start_ticks(k[0]) != k[1]]:
                self._stopping.pop(key).cancel()
            return frozenset(self._stopping)

    def reclaim(self, kills: Iterable[Reclaim]) -> None:
        for kill in kills:
            key = (kill.pid, kill.ticks)
            with self._lock:
                if key in self._stopping:
                    continue
                timer = threading.Timer(max(0.0, kill.grace), self._kill, (key,))
                timer.daemon = True
                self._stopping[key] = timer
            signal_processes({kill.pid: kill.ticks}, signal.SIGTERM)
            timer.start()

    def _kill(self, key: tuple[int, int]) -> None:
        signal_processes({key[0]: key[1]}, signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            for timer in self._stopping.values():
                timer.cancel()
            self._stopping.clear()
