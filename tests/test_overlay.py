"""The mapping a pass layers over the previous pass's records: reads through, never writes through."""

from __future__ import annotations

import random

import pytest

import controller.model.overlay as overlay
from controller.model.overlay import Overlay


def test_an_overlay_reads_through_and_leaves_its_base_as_it_was():
    base = {"a": 1, "b": 2, "c": 3}
    layer = Overlay(base)
    layer["a"] = 10
    layer["d"] = 4
    del layer["b"]
    assert layer.pop("c") == 3 and layer.pop("c", None) is None
    with pytest.raises(KeyError):
        layer.pop("c")
    with pytest.raises(KeyError):
        del layer["b"]
    assert base == {"a": 1, "b": 2, "c": 3}
    assert dict(layer.items()) == {"a": 10, "d": 4} and len(layer) == 2 and sorted(layer) == ["a", "d"]
    assert "b" not in layer and layer.get("b", "x") == "x" and layer["a"] == 10
    with pytest.raises(KeyError):
        layer["b"]
    assert layer.keys() - {"a"} == {"d"} and sorted(layer.values()) == [4, 10]
    assert layer == {"a": 10, "d": 4} and layer != {"a": 10}
    layer["b"] = 20  # back after a delete
    assert len(layer) == 3 and layer["b"] == 20


def test_layers_over_layers_match_a_dict_and_never_change_the_layers_below(monkeypatch):
    monkeypatch.setattr(overlay, "MIN_FLATTEN", 4)  # flatten now and then within the walk
    rng = random.Random(7)
    truth: dict[str, int] = {f"k{i}": i for i in range(40)}
    current: Overlay | dict = dict(truth)
    history = []
    for _ in range(60):
        layer = Overlay(current)
        for _ in range(rng.randint(0, 6)):
            key = f"k{rng.randrange(50)}"
            if rng.random() < 0.4:
                layer.pop(key, None)
                truth.pop(key, None)
            else:
                layer[key] = truth[key] = rng.randrange(1000)
        assert dict(layer.items()) == truth and len(layer) == len(truth) and set(layer) == set(truth)
        assert all(layer.get(k) == v for k, v in truth.items())
        history.append((layer, dict(truth)))
        current = layer
    assert all(dict(layer.items()) == seen for layer, seen in history)  # earlier passes' views unchanged
    assert any(not isinstance(layer._base, Overlay) and layer._base is not history[0][0]._base for layer, _ in history)
