"""Resources as one vector: every kind a job may ask for in ``spec.resources``, keyed by name.

Modelled on Kueue's ``pkg/resources`` (``Requests``: a map from resource name to an amount, with
add, subtract and fits-in): a job's requests, a machine's capacity and what running jobs use are all
:class:`ResourceVector` s, and the table :data:`KINDS` says, per kind, how the scheduler treats it
and how messages name it. What a kind means for *where* a job runs (which GPUs, which cores) is
``controller.decide.placement``'s; this module is plain data and arithmetic, it imports nothing.

A kind is placed one of four ways:

- ``devices``: which GPUs (gang, strategy, topology, sharing, gpuType, gpuMemory);
- ``cores``: which CPU cores (a cpuset near the bound GPUs' NUMA node);
- ``counted``: how much, against the machine's capacity, with no placement (``shm``);
- ``limit``: enforced on the job's process tree, never scheduled (``memory``, ``pids``).

Adding a counted kind is one row here, its field on ``controller.api.job.Resources``, and where
observe measures the machine's capacity of it (``controller.observe.host``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

Placement = Literal["devices", "cores", "counted", "limit"]


@dataclass(frozen=True)
class Kind:
    """One kind of resource: its ``spec.resources`` field, how it is placed, how it is named."""

    name: str  # the field on the wire (camelCase): gpus, cpus, shm, ...
    placement: Placement
    noun: str = ""  # what one unit is called in messages ("GPU": "needs 4 GPUs"); "" for bytes
    of: str = ""  # for bytes: what they are of ("/dev/shm": "needs 2Gi of /dev/shm")

    @property
    def in_bytes(self) -> bool:
        return not self.noun


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("gpus", "devices", noun="GPU"),
        Kind("cpus", "cores", noun="CPU"),
        Kind("shm", "counted", of="/dev/shm"),
        Kind("memory", "limit"),
        Kind("pids", "limit", noun="process"),
    )
}
COUNTED = tuple(name for name, kind in KINDS.items() if kind.placement == "counted")


def count(n: int, noun: str) -> str:
    """``4 GPUs``, ``1 CPU``: the one place a count of a kind is spelled."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


class ResourceVector(Mapping[str, int]):
    """Amounts by kind name (absent: 0); immutable and hashable, so a request's shape can key a cache.

    ``a + b``, ``a - b``, ``a.fits_in(b)`` (every kind of ``a`` at most ``b``'s) and ``a.over(b)``
    (the kinds where it is not) are all the arithmetic the scheduler needs."""

    __slots__ = ("_amounts", "_hash")

    def __init__(self, amounts: Mapping[str, int] | None = None, **more: int) -> None:
        merged = {**(amounts or {}), **more}
        self._amounts = {name: value for name, value in sorted(merged.items()) if value}
        self._hash = hash(tuple(self._amounts.items()))

    def __getitem__(self, name: str) -> int:
        return self._amounts[name]

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]  # absent kinds are 0
        return self._amounts.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._amounts)

    def __len__(self) -> int:
        return len(self._amounts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceVector):
            return self._amounts == other._amounts
        return NotImplemented

    def __repr__(self) -> str:
        return f"ResourceVector({self._amounts!r})"

    def __add__(self, other: Mapping[str, int]) -> ResourceVector:
        names = set(self) | set(other)
        return ResourceVector({n: self.get(n) + other.get(n, 0) for n in names})

    def __sub__(self, other: Mapping[str, int]) -> ResourceVector:
        names = set(self) | set(other)
        return ResourceVector({n: self.get(n) - other.get(n, 0) for n in names})

    def over(self, capacity: Mapping[str, int]) -> list[str]:
        """The kinds of which this asks more than ``capacity`` has, in name order."""
        return [n for n in self if self[n] > capacity.get(n, 0)]

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        return not self.over(capacity)


EMPTY = ResourceVector()
