"""One attempt's record: a single file, ``run/attempts/<name>.<N>``, for gflowd and its supervisor.

Standard library only, like ``supervisor.py``, which imports it (also as the module beside it when
it runs as a plain file). Job names are DNS-1123 labels (no dots), so ``<name>.<N>`` never collides,
and ``attempt_of`` reads the name and number back; the few other files of an attempt (a stop or
limits request, a ``script:`` job's script, a tty job's input stamp, the supervisor's trace, a
running job's latest confirmed checkpoint) are
``<name>.<N>.<kind>`` beside it: never digits after the last dot, so never taken for a record.

The file has three regions at fixed offsets, each ``<length:10> <crc32:8>\\n<JSON>`` or nothing:

    [0, 4 KiB)         the run record: supervisor and job pid + kernel start time (the supervisor)
    [4 KiB, 12 KiB)    the exit record: code or signal, reason, times (the supervisor, fsync'd)
    [12 KiB, end)      the launch record: what to run (gflowd)

(Each region starts on its own page, so no write to one touches a block of another.)

gflowd creates the file once (``O_EXCL``) in one write: the launch record after the zeroed room
for the other two, before it tells the launcher. A region whose length or checksum does not match
(zeros, or a write torn by a crash) is absent; so a record whose launch region does not read was
never handed over. The supervisor writes its two records in place, into blocks the file already
has: an exit record needs nothing from a full disk (``supervisor.py``). It holds an flock on the
file for its whole life: a free lock means no supervisor is alive. Purging an attempt is one rename:
gflowd keeps the file as a spare (``util/spares.py``), and a later attempt's record is written
over it once no supervisor holds its lock, so a flood of attempts creates and frees no inodes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import zlib

RUN_AT = 0
EXIT_AT = 4096  # the run record uses ~200 bytes of its page
LAUNCH_AT = EXIT_AT + 8192  # the exit record gets 8 KiB: its error text is cut to fit (ERROR_CHARS)
HEADER = 20  # b"%010d %08x\n"
# the other files an attempt may have (ckpt: its latest confirmed checkpoint, shim/checkpoint.py; .new while written)
SUFFIXES = ("stop", "limits", "sh", "input", "log", "ckpt", "ckpt.new")


def record_name(name: str, attempt: int) -> str:
    return f"{name}.{attempt}"


def attempt_of(filename: str) -> tuple[str, int] | None:
    """``train.3`` -> ("train", 3); None for anything else in the folder (``train.3.stop``)."""
    name, dot, number = filename.rpartition(".")
    if not dot or not name or not number.isdigit() or "." in name:
        return None
    return name, int(number)


def encode(record: dict) -> bytes:
    payload = json.dumps(record, separators=(",", ":")).encode()
    return b"%010d %08x\n" % (len(payload), zlib.crc32(payload)) + payload


def decode(block: bytes) -> dict | None:
    """A region's record, or None when it holds none (never written, or torn)."""
    head = block[:HEADER]
    if len(head) < HEADER or head[10:11] != b" " or head[19:20] != b"\n" or not head[:10].isdigit():
        return None
    length = int(head[:10])
    payload = block[HEADER : HEADER + length]
    try:
        if len(payload) != length or zlib.crc32(payload) != int(head[11:19], 16):
            return None
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def contents(launch: dict) -> bytes:
    """A new record's whole text: empty run and exit regions (their room), then the launch record."""
    return bytes(LAUNCH_AT) + encode(launch)


def unlocked(fd: int) -> bool:
    """No supervisor holds this record (its lifetime lock is free)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def create(path: str, launch: dict, mode: int = 0o600) -> None:
    """The attempt's record, with its launch region, created once; raises FileExistsError if it
    exists. A write the disk refuses removes the file (so the attempt stays unrecorded) and raises
    OSError naming it."""
    data = contents(launch)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    try:
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            os.close(fd)
    except OSError as exc:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise OSError(exc.errno, exc.strerror, path) from None


def read_launch(fd: int) -> dict | None:
    return decode(launch_region(fd))


def launch_region(fd: int) -> bytes:
    """The launch region's bytes as they are (``decode`` reads its record): a supervisor compares
    them to tell its record was not recycled meanwhile, without parsing the JSON again."""
    size = os.fstat(fd).st_size
    return os.pread(fd, size - LAUNCH_AT, LAUNCH_AT) if size > LAUNCH_AT else b""


def read_run(fd: int) -> dict | None:
    return decode(os.pread(fd, EXIT_AT - RUN_AT, RUN_AT))


def read_exit(fd: int) -> dict | None:
    return decode(os.pread(fd, LAUNCH_AT - EXIT_AT, EXIT_AT))


def read(path: str, regions: tuple[str, ...] = ("launch", "run", "exit")) -> dict[str, dict | None] | None:
    """The named regions of the record at ``path`` (each a record or None); None if there is no file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        readers = {"launch": read_launch, "run": read_run, "exit": read_exit}
        return {region: readers[region](fd) for region in regions}
    except OSError:
        return None
    finally:
        os.close(fd)


def write_run(fd: int, record: dict) -> None:
    _write_region(fd, RUN_AT, EXIT_AT - RUN_AT, encode(record))


def write_exit(fd: int, data: bytes) -> None:
    """``data`` from ``encode``; in place over the exit region, then fsync'd. ValueError if it does
    not fit (the caller cuts it)."""
    _write_region(fd, EXIT_AT, LAUNCH_AT - EXIT_AT, data)
    os.fsync(fd)


def exit_fits(data: bytes) -> bool:
    return len(data) <= LAUNCH_AT - EXIT_AT


def clear_run(fd: int) -> None:
    """A run record written for a job that then never ran (best effort)."""
    try:
        os.pwrite(fd, bytes(HEADER), RUN_AT)
    except OSError:
        pass


def _write_region(fd: int, offset: int, room: int, data: bytes) -> None:
    if len(data) > room:
        raise ValueError(f"a record of {len(data)} bytes does not fit in {room}")
    if os.pwrite(fd, data, offset) != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
