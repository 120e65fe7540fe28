"""The control socket's wire format (docs/interactive.md): frames of one kind byte, a 4-byte
big-endian length, the payload. Shared by the server (``act/runtime/control_socket.py``, which a
supervisor run as a plain file loads, with this file, by path) and the client
(``client/terminal.py``); standard library only."""

from __future__ import annotations

import json
import struct

FRAME_HEAD = struct.Struct("!cI")
MAX_FRAME = 1 << 20


def frame(kind: bytes, payload: bytes | str | dict | list | int = b"") -> bytes:
    """One frame; text is UTF-8, anything else but bytes JSON."""
    if isinstance(payload, str):
        payload = payload.encode()
    elif not isinstance(payload, bytes):
        payload = json.dumps(payload).encode()
    return FRAME_HEAD.pack(kind, len(payload)) + payload


def split_frames(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """The whole frames at the head of ``buffer`` (removed from it; a partial one stays). Raises
    ValueError for a frame longer than MAX_FRAME: not our peer."""
    frames = []
    while len(buffer) >= FRAME_HEAD.size:
        kind, size = FRAME_HEAD.unpack_from(buffer)
        if size > MAX_FRAME:
            raise ValueError(f"a frame of {size} bytes (at most {MAX_FRAME})")
        if len(buffer) < FRAME_HEAD.size + size:
            break
        frames.append((kind, bytes(buffer[FRAME_HEAD.size : FRAME_HEAD.size + size])))
        del buffer[: FRAME_HEAD.size + size]
    return frames
