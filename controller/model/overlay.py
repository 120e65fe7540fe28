"""A mapping layered over a previous one that it never modifies: what a pass changes in 50,000
records (or admitted jobs) without copying them.

``Overlay(base)`` reads through to ``base`` and keeps its own changes (and deletions) in a small
delta, so making one costs what the pass changes, not what exists. Layering over an Overlay takes
its base and a copy of its delta (one level, never a chain); once the delta has grown past a
fraction of the base it is flattened into a plain dict, so each pass pays O(changes) amortized.
The previous mapping stays exactly what it was: a pure function may layer its result over its
input.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_GONE: Any = object()  # a base key deleted in this layer
_MISSING: Any = object()
FLATTEN_AT = 1 / 16  # of the base's size (at least MIN_FLATTEN changes): then the layer is copied flat
MIN_FLATTEN = 256


class Overlay(MutableMapping[K, V]):
    __slots__ = ("_base", "_delta", "_len")

    def __init__(self, base: Mapping[K, V]) -> None:
        if isinstance(base, Overlay):
            if len(base._delta) > max(MIN_FLATTEN, len(base._base) * FLATTEN_AT):
                flat = _flat_copy(base._base)  # a base of lean records stays lean (model/lean_records.py)
                for key, value in base._delta.items():
                    if value is _GONE:
                        if key in flat:  # (not pop: a lean base would build the record to return it)
                            del flat[key]
                    else:
                        flat[key] = value
                self._base: Mapping[K, V] = flat
                self._delta: dict[K, Any] = {}
            else:
                self._base, self._delta = base._base, dict(base._delta)
            self._len = len(base)
        else:
            self._base, self._delta, self._len = base, {}, len(base)

    @property
    def base(self) -> Mapping[K, V]:
        """The mapping this layer reads through to."""
        return self._base

    def layered(self, key: K) -> bool:
        """Whether this layer changed or deleted ``key`` (else it reads through to the base)."""
        return key in self._delta

    def layered_keys(self) -> Any:
        """The keys this layer changed or deleted (a keys view)."""
        return self._delta.keys()

    def own_items(self) -> list[tuple[K, V]]:
        """(key, value) of every key this layer set (not those it deleted)."""
        return [(k, v) for k, v in self._delta.items() if v is not _GONE]

    def __getitem__(self, key: K) -> V:
        value = self._delta.get(key, _MISSING)
        if value is _MISSING:
            return self._base[key]
        if value is _GONE:
            raise KeyError(key)
        return value

    def get(self, key: K, default: Any = None) -> Any:
        value = self._delta.get(key, _MISSING)
        if value is _MISSING:
            return self._base.get(key, default)
        return default if value is _GONE else value

    def __contains__(self, key: object) -> bool:
        value = self._delta.get(key, _MISSING)  # type: ignore[arg-type]
        if value is _MISSING:
            return key in self._base
        return value is not _GONE

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self:
            self._len += 1
        self._delta[key] = value

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self._len -= 1
        if key in self._base:
            self._delta[key] = _GONE
        else:
            del self._delta[key]

    def pop(self, key: K, default: Any = _MISSING) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        del self[key]
        return value

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        delta = self._delta
        if not delta:
            yield from self._base
            return
        for key in self._base:
            if key not in delta:
                yield key
        for key, value in delta.items():
            if value is not _GONE:
                yield key

    def items(self) -> Any:  # a plain list: faster than the mixin's view, and every caller only iterates
        delta = self._delta
        if not delta:
            return list(self._base.items())
        pairs = [(k, v) for k, v in self._base.items() if k not in delta]
        pairs.extend((k, v) for k, v in delta.items() if v is not _GONE)
        return pairs

    def values(self) -> Any:
        return [v for _, v in self.items()]

    def __repr__(self) -> str:
        return f"Overlay({dict(self.items())!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(other.get(k, _MISSING) == v for k, v in self.items())


def _flat_copy(base: Mapping[Any, Any]) -> MutableMapping[Any, Any]:
    """A mutable copy of ``base``: its own ``flat_copy()`` when it has one (lean
    records are copied without building a record each), else a dict."""
    copy = getattr(base, "flat_copy", None)
    return copy() if copy is not None else dict(base)
