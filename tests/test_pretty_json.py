"""util/pretty_json.py gives exactly ``json.dumps(value, indent=2)``'s text (what ``gflowctl get
jobs -o json`` prints from gflowd's JSON copies, and from a status file's YAML when a copy is
missing): the statuses gflowd writes, and every kind of value JSON has."""

from __future__ import annotations

import enum
import json

import pytest

from controller.model.conditions import set_condition
from controller.model.reasons import Condition, Phase, Reason
from controller.model.records import JobState
from controller.util import pretty_json

T0 = 1_800_000_000.0


class Level(enum.IntEnum):
    HIGH = 3


def _statuses() -> list[dict]:
    pending = JobState(name="p", phase=Phase.Pending, reason=Reason.Queued, message="waits — ünïcode ✓", created=T0)
    running = JobState(
        name="r",
        phase=Phase.Running,
        reason=Reason.Started,
        created=T0,
        attempt=1,
        start_time=T0 + 0.25,
        devices=[0, 3],
    )
    done = JobState(
        name="d",
        phase=Phase.Succeeded,
        reason=Reason.Completed,
        message='exited "0"\n\ttab \\ slash',
        created=T0,
        attempt=2,
        start_time=T0,
        completion_time=T0 + 1.5,
        exit_code=0,
        labels={"team": "a", "empty": ""},
    )
    done.conditions = set_condition(
        done.conditions, Condition.Admitted, "True", "Admitted", "ok", "2027-01-15T08:00:00Z"
    )
    done.usage = {"cpuSeconds": 0.25, "maxMemoryBytes": 1 << 33}
    return [state.to_status() for state in (pending, running, done)]


@pytest.mark.parametrize("document", _statuses(), ids=["pending", "running", "succeeded"])
def test_status_documents_come_out_as_json_dumps_makes_them(document):
    assert pretty_json.dumps(document) == json.dumps(document, indent=2)


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": {}, "b": [], "c": [{}], "d": [[1, [2, []]], {"e": None}]},
        {"float": 1.0, "small": 1e-300, "big": 1.5e300, "nan": float("nan"), "inf": float("-inf"), "neg": -0.0},
        {"true": True, "false": False, "none": None, "int": -12345678901234567890},
        {"tuple": (1, "two", (3,)), "enum": Phase.Running, "intenum": Level.HIGH},
        {"ключ": "значение", "emoji": "🚀", "ctl": "\x00\x1f\x7f", "quote": '"', "slash": "/\\"},
        "just a string",
        42,
        None,
    ],
)
def test_every_kind_of_value_comes_out_as_json_dumps_makes_it(value):
    assert pretty_json.dumps(value) == json.dumps(value, indent=2)


def test_what_the_walk_leaves_to_json_dumps_comes_out_the_same_or_fails_the_same():
    odd_keys = {1: "int key", 2.5: "float key", False: "bool key", None: "none key", "s": {3: [4]}}
    assert pretty_json.dumps(odd_keys) == json.dumps(odd_keys, indent=2)
    with pytest.raises(TypeError):
        pretty_json.dumps({"set": {1, 2}})
    looped: list = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        pretty_json.dumps({"loop": looped})
