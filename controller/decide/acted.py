"""Fold what act reported back into the pass's plan: the records record writes.

Pure, like the rest of decide: a :class:`Plan` and an :class:`ActResult` in, a new Plan out; the
plan act carried out is left as it was (its ``states`` too: the changed records are copies,
layered over it). A started job's record gets the pid (and a cluster's job id) its attempt got. A
start the runtime held back (``held``: its launch could not be recorded, e.g. a full disk) was
never launched: the job shows Pending with the runtime's reason, never Running, and the event
says why instead of "Started".
"""

from __future__ import annotations

from dataclasses import replace

from controller.model.overlay import Overlay
from controller.model.plan import ActResult, Event, Plan, StartFact
from controller.model.reasons import EventType, Phase, Reason
from controller.model.records import JobState


def fold_acted(plan: Plan, acted: ActResult) -> Plan:
    """``plan`` with what ``acted`` learned of its starts; ``plan`` itself when there is nothing."""
    if not acted.started:
        return plan
    states: Overlay[str, JobState] = Overlay(plan.states)
    events = list(plan.events)
    for fact in acted.started:
        old = states.get(fact.name)
        if old is None:
            continue
        states[fact.name] = _held(old, fact, events) if fact.held else _launched(old, fact)
    return replace(plan, states=states, events=tuple(events))


def _launched(old: JobState, fact: StartFact) -> JobState:
    state = old.copy()
    state.pid, state.backend_id = fact.pid, fact.backend_id
    return state


def _held(old: JobState, fact: StartFact, events: list[Event]) -> JobState:
    state = old.copy()
    state.phase, state.reason, state.message = Phase.Pending, fact.reason, fact.message
    state.start_time = state.pid = None
    events[:] = [e for e in events if not (e.object == fact.name and e.reason == Reason.Started)]
    events.append(Event(EventType.Warning, fact.reason, fact.name, fact.message))
    return state
