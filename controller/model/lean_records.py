"""Finished jobs' records kept lean: a record read back from the records journal stays the journal's
row (a tuple of plain values, ``JobState.to_row``) until something reads it as a record.

At 50,000 finished jobs a start built a ``JobState`` per job (~15 MiB, ~0.3 s) that nothing but a
pass's check "is it unchanged?" ever read. :class:`LeanRecords` is the mapping name -> record the
loop keeps, holding such records as their rows and building each one (``JobState.from_row``) the
first time it is read; the record built is kept, so every later read returns the very same object
(passes compare records by identity). Readers that need only a field or two of many records (decide's
first pass, admission's owners of names, a resync of the status files) ask :func:`loaded_row`
instead, and build nothing.

A name is in ``rows`` while its record is the one the start read; setting or deleting it takes it
out for good (a new record is a new object). The records built are shared, by name, among the copies
made of one load (the states a pass hands on, the recorder's ``written``): both were read from the
same row, so both give the same object. Not thread-safe, like the dicts it replaces.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from controller.model.overlay import Overlay
from controller.model.records import JobState

Row = tuple[Any, ...]


class LeanRecords(MutableMapping[str, JobState]):
    __slots__ = ("_built", "_plain", "_rows")

    def __init__(
        self,
        rows: dict[str, Row] | None = None,
        plain: dict[str, JobState] | None = None,
        built: dict[str, JobState] | None = None,
    ) -> None:
        self._rows = rows if rows is not None else {}  # records as the journal's rows, as loaded
        self._plain = plain if plain is not None else {}  # every other record (never a name of _rows)
        self._built = built if built is not None else {}  # rows built into records so far (shared)

    def __getitem__(self, name: str) -> JobState:
        state = self._plain.get(name)
        if state is not None:
            return state
        row = self._rows[name]
        state = self._built.get(name)
        if state is None:
            state = self._built[name] = JobState.from_row(row)
        return state

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return name in self._plain or name in self._rows

    def __setitem__(self, name: str, state: JobState) -> None:
        self._rows.pop(name, None)
        self._plain[name] = state

    def __delitem__(self, name: str) -> None:
        if self._plain.pop(name, None) is None and self._rows.pop(name, None) is None:
            raise KeyError(name)

    def __len__(self) -> int:
        return len(self._rows) + len(self._plain)

    def __iter__(self) -> Iterator[str]:
        yield from self._rows
        yield from self._plain

    def row(self, name: str) -> Row | None:
        """The journal row of ``name`` while its record is the one loaded; None otherwise."""
        return self._rows.get(name)

    def loaded_names(self) -> Any:
        """The names whose record is still the one loaded (a keys view: cheap set operations)."""
        return self._rows.keys()

    def plain_items(self) -> list[tuple[str, JobState]]:
        """(name, record) of every record that is not the one loaded."""
        return list(self._plain.items())

    def flat_copy(self) -> LeanRecords:
        """A copy to change (``Overlay`` flattening its layer): the rows stay rows."""
        return LeanRecords(dict(self._rows), dict(self._plain), self._built)

    def sibling(self) -> LeanRecords:
        """A copy sharing the records built: what the recorder keeps as written (``written``)."""
        return self.flat_copy()


def loaded_row(states: Mapping[str, JobState], name: str) -> Row | None:
    """The journal row of ``name`` when ``states`` (lean records, or an ``Overlay`` over them that
    did not change ``name``) still holds the record as loaded; None for any other record or mapping."""
    if type(states) is Overlay:
        if states.layered(name):
            return None
        states = states.base
    if type(states) is LeanRecords:
        return states.row(name)
    return None


def loaded_names(states: Mapping[str, JobState]) -> set[str]:
    """Every name whose record in ``states`` is the one loaded (see :func:`loaded_row`)."""
    layer = None
    if type(states) is Overlay:
        layer, states = states, states.base
    if type(states) is not LeanRecords:
        return set()
    if layer is not None:
        return states.loaded_names() - layer.layered_keys()
    return set(states.loaded_names())


def changed_items(states: Mapping[str, JobState]) -> list[tuple[str, JobState]]:
    """(name, record) of every record in ``states`` except those still as loaded: what may differ
    from the status files a start read them from."""
    if type(states) is Overlay:
        base = states.base
        if type(base) is not LeanRecords:
            return states.items()
        pairs = [(n, s) for n, s in base.plain_items() if not states.layered(n)]
        pairs.extend(states.own_items())
        return pairs
    if type(states) is LeanRecords:
        return states.plain_items()
    return list(states.items())
