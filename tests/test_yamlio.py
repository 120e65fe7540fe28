"""The status-file emitter and its fast reader: whatever ``dump`` writes, ``load_own`` and the real
YAML loader read back as the same data; anything else ``load_own`` refuses (callers fall back)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.util.yamlio import dump, load_one, load_own

keys = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\x85\u2028\u2029"), min_size=1, max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)
documents = st.dictionaries(keys, values, min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(documents)
@example({"0": "A\n"})  # found by hypothesis: a plain scalar lost its trailing newline
def test_load_own_and_the_real_loader_agree_on_everything_dump_writes(data):
    text = dump(data)
    real = load_one(text)
    assert real == data
    try:
        fast = load_own(text)
    except ValueError:
        return  # refusing is always allowed: the caller falls back to the real loader
    assert fast == data


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\n  b: 2\n",  # bad indentation
        "a: [1, [2]]\n",  # nested flow list
        "a: {b: 1}\n",  # flow mapping
        "# a comment\na: 1\n",
        "a: yes\n",  # YAML 1.1 boolean spelling
        "a: &x 1\n",
    ],
)
def test_load_own_refuses_what_dump_never_writes(text):
    with pytest.raises(ValueError):
        load_own(text)


def test_a_status_file_round_trips_through_the_fast_reader():
    from controller.model.records import JobState

    state = JobState(
        name="a",
        phase="Failed",
        reason="Error",
        message='exited with code 3: "quoted", colon: here',
        devices=[0, 2],
        device_uuids=["GPU-1", "GPU-2"],
        labels={"team": "vision", "x/y": "true"},
        conditions=[
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Valid",
                "message": "ok",
                "lastTransitionTime": "2026-01-01T00:00:00.000Z",
            }
        ],
        exit_code=3,
        owner="sweep",
    )
    text = dump(state.to_status())
    assert load_own(text) == load_one(text) == state.to_status()
    assert JobState.from_status(load_own(text)) == state


@pytest.mark.parametrize(
    "text", ["a\x7fb", "tab\there", "\x00", "line\nbreak", "caf\u00e9 \x85", "\ufeffbom", "x\u2028y"]
)
def test_characters_yaml_forbids_are_escaped_also_in_ascii_text(text):
    """``dump`` quotes through JSON and escapes what YAML forbids even in double quotes; printable
    ASCII skips the second pass, so DEL (0x7f: printable to JSON) must still be escaped."""
    line = dump({"k": text})
    assert all(c == "\n" or (" " <= c < "\x7f") or c in "\u00e9" for c in line), line
    assert load_one(line) == {"k": text}


def test_the_scalar_texts_kept_stay_bounded_and_give_the_same_text(monkeypatch):
    from controller.model.reasons import Phase
    from controller.util import yamlio

    monkeypatch.setattr(yamlio, "_SCALARS_MAX", 8)
    monkeypatch.setattr(yamlio, "_SCALARS", {})
    texts = ["plain", "yes", "a: b", "x\ny", "\x85", "2026-11-29", "007", "", *(f"v{i}" for i in range(20))]
    first = [dump({"k": text, "phase": Phase.Running}) for text in texts]
    assert len(yamlio._SCALARS) <= 8
    assert [dump({"k": text, "phase": "Running"}) for text in texts] == first  # kept or not, one text
    assert [load_one(text) for text in first] == [{"k": text, "phase": "Running"} for text in texts]
