"""Quantities (``16Gi``) and durations (``4h30m``): parsing, formatting, bad input, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.api.units import format_age, format_duration, format_quantity, parse_duration, parse_quantity

Ki, Mi, Gi, Ti, Pi = 2**10, 2**20, 2**30, 2**40, 2**50


# --- parse_quantity --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16Gi", 16 * Gi),
        ("512Mi", 512 * Mi),
        ("2Ki", 2 * Ki),
        ("1Ti", Ti),
        ("1Pi", Pi),
        ("1.5Gi", int(1.5 * Gi)),
        ("500M", 500 * 10**6),
        ("1G", 10**9),
        ("2K", 2000),
        ("3T", 3 * 10**12),
        ("16gi", 16 * Gi),  # units are case-insensitive
        ("10GB", 10 * 10**9),  # a trailing B is tolerated
        ("  2Ki ", 2 * Ki),  # surrounding spaces are tolerated
        ("0", 0),
        ("4096", 4096),
        (0, 0),
        (1024, 1024),
        (80 * Gi, 80 * Gi),
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "is not a quantity"),
        ("abc", "is not a quantity"),
        ("16 Xi", "is not a quantity"),
        ("-1Gi", "is not a quantity"),
        ("1e3", "is not a quantity"),
        ("Gi", "is not a quantity"),
        (".5Gi", "is not a quantity"),
        (-1, "must not be negative"),
        (True, "not a boolean"),
        (False, "not a boolean"),
        (None, "must be a quantity"),
        (1.5, "must be a quantity"),
        ([16], "must be a quantity"),
    ],
)
def test_parse_quantity_rejects(value, message):
    with pytest.raises(ValueError, match=message):
        parse_quantity(value)


def test_parse_quantity_error_suggests_a_unit():
    with pytest.raises(ValueError) as info:
        parse_quantity("sixteen")
    assert "'sixteen' is not a quantity" in str(info.value)
    assert "16Gi" in str(info.value)


# --- format_quantity -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_bytes", "expected"),
    [
        (None, ""),
        (0, "0"),
        (1023, "1023"),
        (Ki, "1Ki"),
        (1536, "1.5Ki"),
        (512 * Mi, "512Mi"),
        (16 * Gi, "16Gi"),
        (int(1.5 * Gi), "1.5Gi"),
        (80 * Gi, "80Gi"),
        (200 * Ti, "200Ti"),
        (Gi - 1, "1024Mi"),  # >= 100 of a unit: no decimals
    ],
)
def test_format_quantity(n_bytes, expected):
    assert format_quantity(n_bytes) == expected


@given(st.integers(min_value=0, max_value=1023), st.sampled_from([Ki, Mi, Gi, Ti]))
def test_format_quantity_round_trips_whole_binary_units(count, unit):
    """A whole number of a binary unit formats exactly and parses back to the same bytes."""
    n_bytes = count * unit
    text = format_quantity(n_bytes)
    assert parse_quantity(text) == n_bytes
    assert "." not in text


# --- parse_duration --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("4h30m", 16200.0),
        ("90s", 90.0),
        ("1.5h", 5400.0),
        ("2d", 172800.0),
        ("500ms", 0.5),
        ("1h1m1s", 3661.0),
        ("1d2h", 93600.0),
        ("30m", 1800.0),
        (" 10s ", 10.0),
        ("3600", 3600.0),
        ("0", 0.0),
        ("2.5", 2.5),
        (3600, 3600.0),
        (0.5, 0.5),
        (0, 0.0),
    ],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds
    assert isinstance(parse_duration(value), float)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "is not a duration"),
        ("h", "is not a duration"),
        ("1x", "is not a duration"),
        ("10s junk", "is not a duration"),
        ("1h 30m", "is not a duration"),
        ("30m1", "is not a duration"),
        ("m30", "is not a duration"),
        ("-5", "must not be negative"),
        ("-5s", "is not a duration"),
        (-1, "must not be negative"),
        (-0.5, "must not be negative"),
        (True, "must be a duration"),
        (None, "must be a duration"),
        ([1], "must be a duration"),
    ],
)
def test_parse_duration_rejects(value, message):
    with pytest.raises(ValueError, match=message):
        parse_duration(value)


@pytest.mark.parametrize(
    "value",
    ["nan", "inf", float("nan"), float("inf")],
    ids=["text-nan", "text-inf", "float-nan", "float-inf"],
)
def test_parse_duration_rejects_non_finite(value):
    """A time limit must be a real number of seconds: NaN makes every ``now >= deadline`` false (the
    limit is silently never enforced) and infinity makes ``format_duration`` raise OverflowError."""
    try:
        seconds = parse_duration(value)
    except ValueError:
        return
    pytest.fail(f"parse_duration({value!r}) returned {seconds!r}; expected ValueError")


def test_parse_duration_error_shows_examples():
    with pytest.raises(ValueError) as info:
        parse_duration("soon")
    assert "'soon' is not a duration" in str(info.value)
    assert "4h30m" in str(info.value)


# --- format_duration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (None, ""),
        (0, "0s"),
        (0.5, "500ms"),
        (0.001, "1ms"),
        (1, "1s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (3600, "1h"),
        (16200, "4h30m"),
        (86400, "1d"),
        (90061, "1d1h1m1s"),
        (59.6, "1m"),  # rounds to whole seconds from 1 s up
        (1.4, "1s"),
        (0.9996, "1s"),  # rounds up to a whole second, not "1000ms"
    ],
)
def test_format_duration(seconds, expected):
    assert format_duration(seconds) == expected


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_duration_round_trip_whole_seconds(seconds):
    """format_duration is the inverse of parse_duration for whole seconds, both ways."""
    text = format_duration(seconds)
    assert parse_duration(text) == seconds
    assert format_duration(parse_duration(text)) == text


@given(
    st.integers(min_value=0, max_value=30),
    st.integers(min_value=0, max_value=23),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
)
def test_canonical_duration_text_is_a_fixed_point(d, h, m, s):
    """A canonical text (units descending, none zero) formats back to itself."""
    text = "".join(f"{n}{u}" for n, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if n) or "0s"
    assert format_duration(parse_duration(text)) == text


# --- format_age ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m0s"),
        (192, "3m12s"),
        (600, "10m"),
        (3 * 3600, "3h0m"),
        (5 * 3600 + 30 * 60, "5h30m"),
        (8 * 3600, "8h"),
        (2 * 86400 + 4 * 3600, "2d4h"),
        (10 * 86400, "10d"),
    ],
)
def test_format_age(seconds, expected):
    assert format_age(seconds) == expected
