"""Live terminal views for ``get jobs -w`` and ``get gpus -w``, and progress lines on stderr.

On a terminal, :class:`LiveTable` redraws the table in place (cursor up over what it drew last,
clear to the end of the screen, draw), like ``watch``; the scrollback above is left alone. When
stdout is not a terminal the callers print kubectl-style appended rows instead, so a pipe or a log
file gets plain text without escape codes.
"""

from __future__ import annotations

import os
import sys
import time

UP_AND_CLEAR = "\x1b[{n}F\x1b[J"  # cursor to the start of the line n lines up; clear to the end


class LiveTable:
    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.drawn = 0  # lines on screen from the last draw

    def draw(self, lines: list[str], footer: str = "") -> None:
        import shutil  # lazy: only a live view measures the terminal; apply's progress would pay ~2 ms

        size = shutil.get_terminal_size((120, 40))
        room = max(3, size.lines - 2)
        if len(lines) > room:  # taller than the terminal: cursor-up cannot reach above it
            lines = lines[: room - 1] + [f"... and {len(lines) - room + 1} more"]
        if footer:
            lines = lines + [footer]
        out = UP_AND_CLEAR.format(n=self.drawn) if self.drawn else ""
        out += "".join(line[: size.columns] + "\n" for line in lines)
        self.stream.write(out)
        self.stream.flush()
        self.drawn = len(lines)


def clock_footer() -> str:
    return time.strftime("updated %H:%M:%S  (Ctrl-C to stop)")


class Progress:
    """``applying 120/500`` on stderr, rewritten in place; silent when stderr is not a terminal
    or when there is too little work to be worth it."""

    def __init__(self, total: int, what: str, minimum: int = 20, stream=None):
        self.stream = stream or sys.stderr
        self.total = total
        self.what = what
        self.enabled = total >= minimum and self.stream.isatty() and os.environ.get("TERM") != "dumb"
        self.last = 0.0

    def step(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < self.total and now - self.last < 0.05:
            return  # at most ~20 redraws a second
        self.last = now
        self.stream.write(f"\r\x1b[K{self.what} {done}/{self.total}")
        self.stream.flush()

    def clear(self) -> None:
        """Before printing a result line on a terminal shared with the progress line."""
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
