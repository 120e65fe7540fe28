"""``gflowctl get events [-w] [--for job/NAME] [-o json]`` and the event aggregation ``describe`` shows.

Events live in ``$GFLOW_HOME/events.jsonl`` (one JSON object per line, appended by gflowd) and,
after a size rotation, ``events.jsonl.1``; both are read, oldest first. ``-w`` follows the file
like ``tail -F``: when gflowd rotates it, the rest of the old file is drained before the new one
is opened, so no event is lost or shown twice. Standard library only (fast start-up).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from controller.api.units import format_age
from controller.cli.common import EVERY_KIND, CliError, parse_refs, printable
from controller.model.records import from_rfc3339
from controller.paths import Home
from controller.util.jsonlog import parse_lines, previous_of

POLL = 0.2


def parse_target(text: str | None) -> str | None:
    """``job/NAME``, ``sweep/NAME``, ``reservation/NAME`` or a bare ``NAME`` (a job) -> the ``object``
    events carry."""
    if not text:
        return None
    try:
        kind, name = parse_refs([text], kinds=EVERY_KIND)[0]
    except CliError:
        raise CliError(f"--for {text!r}: use job/NAME, sweep/NAME or reservation/NAME") from None
    return f"{kind}/{name}"


def read_events(home: Home, target: str | None = None) -> list[dict[str, Any]]:
    """Every event (of ``target``, when given), oldest first, from the rotated file and the current one."""
    events: list[dict[str, Any]] = []
    # a cheap text test first: describe of one job should not parse 20 MiB of other jobs' events
    needle = json.dumps(target) if target else ""
    for path in (previous_of(home.events_file), home.events_file):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                lines = (line for line in handle if needle in line) if needle else handle
                events.extend(_matching(parse_lines(lines), target))
        except OSError:
            continue
    return events


def _matching(events: Iterable[dict[str, Any]], target: str | None) -> Iterator[dict[str, Any]]:
    for event in events:
        if target is None or event.get("object") == target:
            yield event


def get_events(home: Home, target_text: str | None, output: str | None, watch: bool) -> int:
    if output not in (None, "json", "wide"):
        raise CliError(f"get events prints a table or -o json, not -o {output}")
    target = parse_target(target_text)
    if watch:
        return _watch(home, target, output)
    events = read_events(home, target)
    if output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}, indent=2))
        return 0
    if not events:
        print("No events found." if target is None else f"No events for {target}.", file=sys.stderr)
        return 0
    _print_rows(events, header=True)
    return 0


HEADER = ("LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE")


def _row(event: dict[str, Any], now: float) -> tuple[str, ...]:
    when = from_rfc3339(event.get("time"))
    return (
        format_age(now - when) if when else "?",
        printable(event.get("type", "")),
        printable(event.get("reason", "")),
        printable(event.get("object", "")) or "-",
        printable(event.get("message", "")),
    )


def _print_rows(events: list[dict[str, Any]], header: bool, widths: list[int] | None = None) -> list[int]:
    now = time.time()
    rows = [_row(e, now) for e in events]
    if widths is None:
        widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER) - 1)]
    lines = [HEADER] if header else []
    out = []
    for row in lines + rows:
        out.append("   ".join([row[i].ljust(widths[i]) for i in range(len(widths))] + [row[-1]]).rstrip())
    if out:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.flush()
    return widths


def _watch(home: Home, target: str | None, output: str | None) -> int:
    """Print what is there, then every new event as it is appended, across rotations."""

    def emit(events: list[dict[str, Any]], header: bool, widths):
        if output == "json":
            for event in events:
                sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()
            return widths
        if not events and not header:
            return widths
        return _print_rows(events, header, widths)

    try:
        old = previous_of(home.events_file)
        history: list[dict[str, Any]] = []
        try:
            with open(old, encoding="utf-8", errors="replace") as handle:
                history.extend(_matching(parse_lines(handle), target))
        except OSError:
            pass
        follower = _Follower(home.events_file)
        history.extend(_matching(follower.read(), target))
        widths = emit(history, True, [9, 7, 20, 20])
        while True:
            time.sleep(POLL)
            new = list(_matching(follower.read(), target))
            widths = emit(new, False, widths)
    except KeyboardInterrupt:
        return 0


class _Follower:
    """Reads whole new lines from a file that may not exist yet and may be rotated (renamed away
    and re-created): like ``tail -F``."""

    def __init__(self, path):
        self.path = path
        self.handle = None
        self.partial = ""

    def _open(self) -> bool:
        try:
            self.handle = open(self.path, encoding="utf-8", errors="replace")
        except OSError:
            return False
        self.partial = ""
        return True

    def read(self) -> list[dict[str, Any]]:
        if self.handle is None and not self._open():
            return []
        assert self.handle is not None  # _open() made it
        events = self._drain()
        try:
            rotated = os.stat(self.path).st_ino != os.fstat(self.handle.fileno()).st_ino
        except OSError:
            rotated = False  # renamed away, the new one not created yet: keep the old handle
        if rotated:
            events += self._drain()  # the old file's last lines, then the new file from its start
            self.handle.close()
            self.handle = None
            if self._open():
                events += self._drain()
        return events

    def _drain(self) -> list[dict[str, Any]]:
        assert self.handle is not None  # read() opened it
        text = self.partial + self.handle.read()
        lines = text.splitlines(keepends=True)
        self.partial = lines.pop() if lines and not lines[-1].endswith("\n") else ""
        return list(parse_lines(lines))


def age_text(group: dict[str, Any], now: float) -> str:
    """``3m`` for one event, ``3m (x4 over 20m)`` for repeats."""
    age = format_age(now - group["last"])
    if group["count"] == 1:
        return age
    return f"{age} (x{group['count']} over {format_age(group['last'] - group['first'])})"
