"""Integer sequences as compact text for JSON files: an ``array`` of a fixed type, little-endian,
base64. Packing and unpacking run in C, so a file of many ring buffers (``run/gpu-usage.json``)
costs a fraction of what JSON lists of numbers cost to write and read.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Iterable


def pack(values: Iterable[int], typecode: str) -> str:
    """``values`` (ints that fit ``typecode``: B, H, I...) as base64 text."""
    data = array(typecode, values)
    if sys.byteorder == "big":
        data.byteswap()
    return base64.b64encode(data.tobytes()).decode("ascii")


def unpack(text: str, typecode: str) -> array:
    """What :func:`pack` wrote; ValueError for text that is not such a sequence."""
    try:
        data = array(typecode, base64.b64decode(text.encode("ascii"), validate=True))
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise ValueError(f"not a packed {typecode!r} sequence: {exc}") from None
    if sys.byteorder == "big":
        data.byteswap()
    return data
