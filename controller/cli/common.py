"""What every verb shares: the instance (home + spec dir), user errors, the terminal. The state
files are read through ``controller.client.read.state``."""

from __future__ import annotations

import os
import sys

from controller.client.errors import GflowError
from controller.paths import Home

# A user error: printed as one line on stderr, exit code 1. The Python client raises the same
# type with the same text (controller.client.GflowError), so the functions both share raise it.
CliError = GflowError


def printable(text: object) -> str:
    """``text`` as a terminal may show it: control characters, line breaks and other invisible
    characters (ESC, BEL, ``\\n``, U+202E) escaped the way Python's ``repr`` writes them (``\\x1b``,
    ``\\n``, ``\\u202e``), everything else unchanged. File names, job messages and event text come
    from users, and a raw escape sequence could repaint a terminal or forge a row. Used for every
    human-readable output; -o json and -o yaml keep the exact data."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def print_error(message: object) -> None:
    sys.stderr.write(f"error: {printable(message)}\n")


def resolve_home(home: str | None, spec_dir: str | None, *, lean: bool = False) -> Home:
    """``lean``: for run and apply, whose path takes a Home of LeanPaths (no pathlib to import)."""
    return Home.locate_lean(home, spec_dir) if lean else Home.locate(home, spec_dir)


def warn_if_not_running(home: Home) -> None:
    from controller.client.read.state import is_running  # lazy: every verb loads this module, few warn

    if not is_running(home):
        sys.stderr.write(f"warning: gflowd is not running for {home.root}; what you see may be stale\n")


JOB_WORDS = ("job", "jobs", "j")
SWEEP_WORDS = ("sweep", "sweeps")
RESERVATION_WORDS = ("reservation", "reservations")
EVERY_KIND = ("job", "sweep", "reservation")  # what get, describe and delete take


def resource_type(word: str) -> str | None:
    """``job``, ``sweep`` or ``reservation`` for any spelling of the type (``jobs``, ``j``, ``res``), else None."""
    if word in JOB_WORDS:
        return "job"
    if word in SWEEP_WORDS:
        return "sweep"
    if word in RESERVATION_WORDS:
        return "reservation"
    return None


def parse_refs(
    words: list[str], *, type_first: bool = False, kinds: tuple[str, ...] = ("job", "sweep")
) -> list[tuple[str, str]]:
    """The objects a verb was given, as ``(kind, name)``, the ways kubectl names them: ``TYPE/NAME``
    (what ``get -o name`` prints, so ``get jobs -o name | xargs gflowctl describe`` works) and, for
    verbs whose first word is a type (``type_first``: describe, delete, get, patch), ``TYPE NAME...``;
    elsewhere a bare word is a job's name. Every bad word is named in one CliError."""
    refs: list[tuple[str, str]] = []
    errors: list[str] = []
    default: str | None = "job"
    rest = words
    if type_first and words and "/" not in words[0]:
        default = resource_type(words[0])
        if default is None:
            raise CliError(f"unknown resource type {words[0]!r}; use {_either(kinds)} (or TYPE/NAME)")
        rest = words[1:]
    elif type_first:
        default = None  # kubectl: once names come as TYPE/NAME, every one does
    for word in rest:
        head, slash, name = word.partition("/")
        if slash and not head.isalpha():
            # `../x` names no type: a (bad) name, refused as one where it is used ("not a job name")
            refs.append((default or "job", word))
            continue
        kind = resource_type(head) if slash else default
        if not slash:
            name = word
        if slash and kind is None:
            errors.append(f"{word!r}: unknown resource type {head!r}; use {_either([f'{k}/NAME' for k in kinds])}")
        elif kind is None:
            errors.append(f"{word!r}: give a type, as the other names do ({words[0]})")
        elif not name or "/" in name:
            errors.append(f"{word!r}: use {kind}/NAME")
        elif kind not in kinds:
            errors.append(f"{word!r}: this verb takes {_either([f'{k}s' for k in kinds])}, not {kind}s")
        else:
            refs.append((kind, name))
    if errors:
        raise CliError("; ".join(errors))
    return refs


def _either(words: list[str] | tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def parse_selector_args(items: list[str]) -> list[tuple[str, str, bool]]:
    """``-l`` options as one label selector; a bad one is a CliError."""
    from controller.api.labels import parse_selector  # lazy: every verb loads this module, few select

    try:
        return [term for item in items for term in parse_selector(item)]
    except ValueError as exc:
        raise CliError(str(exc)) from None


def is_tty() -> bool:
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
