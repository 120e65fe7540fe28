"""Finished jobs' records kept lean: a finished job a start read back is kept as a few facts (its
phase, hashes, manifest, owner, priority, GPUs, labels, times and admission verdict) until something
reads it as a record; then its record is built (the recorder reads it from its status file, which the
start found as the records journal described it) and kept.

At 50,000 finished jobs a start held a ``JobState`` and the journal row it came from per job (~60 MiB,
~0.5 s to build) that nothing but a pass's check "is it unchanged?" ever read. :class:`LeanRecords` is
the mapping name -> record the loop keeps; the record built for a name is kept, so every later read
returns the very same object (passes compare records by identity). Readers that need a field or two
of many records (decide's first pass, admission's owners of names, a resync of the status files) ask
:func:`loaded_facts` instead, and build nothing.

A name has facts while its record is the one the start read; setting or deleting it takes it out
for good (a new record is a new object). The records built are shared, by name, among the copies made
of one load (the states a pass hands on, the recorder's ``written``): they stand for one status file,
so both give the same object. Not thread-safe, like the dicts it replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from controller.model.overlay import Overlay
from controller.model.reasons import Condition
from controller.model.records import JobState, condition_verdicts

# What a finished job's facts hold, in this order (``facts_of``): what decide's first pass, admission
# and the jobs table read of every finished job.
FACT_FIELDS = (
    "phase",
    "reason",
    "spec_hash",
    "run_hash",
    "manifest",
    "owner",
    "priority",
    "gpus",
    "labels",
    "created",
    "completion_time",
)
Facts = tuple[Any, ...]  # FACT_FIELDS' values, then VALID: its conditions say its manifest was admitted as valid
PHASE, REASON, SPEC_HASH, RUN_HASH, MANIFEST, OWNER, PRIORITY, GPUS, LABELS, CREATED, COMPLETION_TIME, VALID = range(12)
VALID_VERDICT = [("True", "Valid", "manifest is valid")]  # Admitted and DuplicateName of a job admitted as valid


def facts_of(state: JobState) -> Facts:
    """The facts of a record (``FACT_FIELDS``, then whether it says its manifest was valid)."""
    verdicts = condition_verdicts(state.conditions, (Condition.Admitted, Condition.DuplicateName))
    return (*(getattr(state, name) for name in FACT_FIELDS), verdicts == VALID_VERDICT)


def _unbuildable(name: str) -> JobState:
    raise KeyError(name)


class LeanRecords(MutableMapping[str, JobState]):
    __slots__ = ("_build", "_built", "_facts", "_plain")

    def __init__(
        self,
        facts: dict[str, Facts] | None = None,
        plain: dict[str, JobState] | None = None,
        built: dict[str, JobState] | None = None,
        build: Callable[[str], JobState] | None = None,
    ) -> None:
        self._facts = facts if facts is not None else {}  # finished records as loaded, as their facts
        self._plain = plain if plain is not None else {}  # every other record (never a name of _facts)
        self._built = built if built is not None else {}  # records built so far (shared among copies)
        self._build = build or _unbuildable  # name -> its record as loaded (the recorder reads its status file)

    def __getitem__(self, name: str) -> JobState:
        state = self._plain.get(name)
        if state is not None:
            return state
        if name not in self._facts:
            raise KeyError(name)
        state = self._built.get(name)
        if state is None:
            state = self._built[name] = self._build(name)
        return state

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return name in self._plain or name in self._facts

    def __setitem__(self, name: str, state: JobState) -> None:
        self._facts.pop(name, None)
        self._plain[name] = state

    def __delitem__(self, name: str) -> None:
        if self._plain.pop(name, None) is None and self._facts.pop(name, None) is None:
            raise KeyError(name)

    def __len__(self) -> int:
        return len(self._facts) + len(self._plain)

    def __iter__(self) -> Iterator[str]:
        yield from self._facts
        yield from self._plain

    def facts(self, name: str) -> Facts | None:
        """The facts of ``name`` while its record is the one loaded; None otherwise."""
        return self._facts.get(name)

    def facts_items(self) -> list[tuple[str, Facts]]:
        """(name, facts) of every record still as loaded."""
        return list(self._facts.items())

    def loaded_names(self) -> Any:
        """The names whose record is still the one loaded (a keys view: cheap set operations)."""
        return self._facts.keys()

    def plain_items(self) -> list[tuple[str, JobState]]:
        """(name, record) of every record that is not the one loaded."""
        return list(self._plain.items())

    def flat_copy(self) -> LeanRecords:
        """A copy to change (``Overlay`` flattening its layer): the facts stay facts."""
        return LeanRecords(dict(self._facts), dict(self._plain), self._built, self._build)

    def sibling(self) -> LeanRecords:
        """A copy sharing the records built: what the recorder keeps as written (``written``)."""
        return self.flat_copy()


def loaded_facts(states: Mapping[str, JobState], name: str) -> Facts | None:
    """The facts of ``name`` when ``states`` (lean records, or an ``Overlay`` over them that did not
    change ``name``) still holds the record as loaded; None for any other record or mapping."""
    if type(states) is Overlay:
        if states.layered(name):
            return None
        states = states.base
    if type(states) is LeanRecords:
        return states.facts(name)
    return None


def loaded_facts_items(states: Mapping[str, JobState]) -> list[tuple[str, Facts]]:
    """(name, facts) of every record in ``states`` still as loaded (see :func:`loaded_facts`)."""
    layer = None
    if type(states) is Overlay:
        layer, states = states, states.base
    if type(states) is not LeanRecords:
        return []
    if layer is not None and layer.layered_keys():
        layered = layer.layered_keys()
        return [(n, f) for n, f in states.facts_items() if n not in layered]
    return states.facts_items()


def loaded_names(states: Mapping[str, JobState]) -> set[str]:
    """Every name whose record in ``states`` is the one loaded (see :func:`loaded_facts`)."""
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


def phases_and_reasons(states: Mapping[str, JobState]) -> list[tuple[str, str]]:
    """(phase, reason) of every record in ``states``, those still as loaded read off their facts."""
    pairs = [(f[PHASE], f[REASON]) for _, f in loaded_facts_items(states)]
    pairs.extend((s.phase, s.reason) for _, s in changed_items(states))
    return pairs


def records_where(states: Mapping[str, JobState], keep: Callable[[Facts], bool]) -> list[tuple[str, JobState]]:
    """(name, record) of every record in ``states``, but of those still as loaded only the ones
    whose facts ``keep`` says a reader needs (built then): a reader of running jobs, or of recent
    ones, builds none of 50,000 finished jobs."""
    pairs = [(n, states[n]) for n, f in loaded_facts_items(states) if keep(f)]
    pairs.extend(changed_items(states))
    return pairs


def finished_times(states: Mapping[str, JobState]) -> list[tuple[str, str, float | None]]:
    """(name, phase, completion time) of every record in ``states``, without building any."""
    triples = [(n, f[PHASE], f[COMPLETION_TIME]) for n, f in loaded_facts_items(states)]
    triples.extend((n, s.phase, s.completion_time) for n, s in changed_items(states))
    return triples
