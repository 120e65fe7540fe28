"""The plain YAML most manifests are written in, read without ruamel: block mappings and block
sequences of scalars, one-line flow sequences and mappings of scalars, plain words, integers and
quotes without escapes. Anything else (and any text this module is not sure of) gives None, and
the caller parses it with ruamel, whose answer (or error) stands.

Why: ruamel's safe loader takes ~0.4-0.6 ms for a three-line manifest (its C scanner, then its
constructor in Python); gflowd parses each manifest of a flood once, and that was a sixth of its
CPU per job in a drain (docs/performance.md). What is accepted here gives exactly the data ruamel
gives (``tests/test_yaml_plain.py`` compares the two): so a plain scalar is only a string when no
YAML type could claim it (no leading digit, dot, sign or indicator; not one of the words YAML 1.1
or 1.2 reads as a bool or null), only an integer in its plainest form, and nothing else.
Standard library only, no imports beyond ``re``.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # not typing's: gflowctl's paths load this module (see yamlio)
if TYPE_CHECKING:
    from typing import Any

# characters that make a text more than this module reads: tabs, anchors and aliases, tags, block
# scalars, directives, reserved indicators, complex keys, escapes, CR, NUL
_NOT_PLAIN = re.compile(r"[\t&*!|>%@`?\\\r\x00]|^---|^\.\.\.", re.MULTILINE)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
_WORD = re.compile(r"-*[A-Za-z_/][A-Za-z0-9_./=+-]*(?: [A-Za-z0-9_./=+-]+)*\Z")  # --epochs too
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})\Z")
# words some YAML version reads as a bool, a null or a float, in any case: left to ruamel
_SPECIAL = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf"})


def plain_documents(text: str) -> list[Any] | None:
    """``[mapping]`` for a one-document text of the plain form (module docstring); else None."""
    if _NOT_PLAIN.search(text):
        return None
    lines = []
    for line in text.split("\n"):
        content = line.lstrip(" ")
        if "#" in content:  # a comment: a whole line, or after a space where no quote came before
            if content.startswith("#"):
                continue
            cut = content.find(" #")
            if cut < 0 or "'" in content[:cut] or '"' in content[:cut]:
                return None
            content = content[:cut]
        content = content.rstrip(" ")
        if content:
            lines.append((len(line) - len(line.lstrip(" ")), content))
    if not lines or lines[0][0] != 0:
        return None
    at, found = _mapping(lines, 0, 0)
    if found is None or at != len(lines):
        return None
    return [found]


def _mapping(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[int, dict | None]:
    """The block mapping whose keys sit at ``indent`` from ``lines[at]``: (next line, mapping)."""
    found: dict[str, Any] = {}
    while at < len(lines) and lines[at][0] == indent:
        content = lines[at][1]
        key, colon, rest = content.partition(":")
        if not colon or not _is_key(key) or key in found or (rest and rest[0] != " "):
            return at, None
        at += 1
        rest = rest.strip(" ")
        if rest:
            value = _flow_or_scalar(rest)
            if value is _BAD:
                return at, None
            found[key] = value
            continue
        if at < len(lines) and lines[at][0] > indent:  # a nested block
            deeper = lines[at][0]
            at, value = _sequence(lines, at, deeper) if lines[at][1].startswith("- ") else _mapping(lines, at, deeper)
        elif at < len(lines) and lines[at][0] == indent and lines[at][1].startswith("- "):
            at, value = _sequence(lines, at, indent)  # a sequence may sit at its key's indent
        else:
            return at, None  # a key with no value (null): left to ruamel
        if value is None:
            return at, None
        found[key] = value
    if at < len(lines) and lines[at][0] > indent:
        return at, None  # deeper than the mapping it would belong to
    return at, found


def _sequence(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[int, list | None]:
    """The block sequence of scalars whose dashes sit at ``indent``: (next line, items)."""
    found = []
    while at < len(lines) and lines[at][0] == indent and lines[at][1].startswith("- "):
        value = _flow_or_scalar(lines[at][1][2:].strip(" "))
        if value is _BAD or isinstance(value, (dict, list)):
            return at, None
        found.append(value)
        at += 1
    if at < len(lines) and lines[at][0] > indent:
        return at, None
    return at, found


_BAD = object()  # not of the plain form


def _flow_or_scalar(text: str) -> Any:
    if text.startswith("["):
        if not text.endswith("]"):
            return _BAD
        items = _flow_items(text[1:-1])
        if items is _BAD:
            return _BAD
        values = [_scalar(item) for item in items]
        return _BAD if _BAD in values else values
    if text.startswith("{"):
        if not text.endswith("}"):
            return _BAD
        pairs = _flow_items(text[1:-1])
        if pairs is _BAD:
            return _BAD
        return _flow_mapping(pairs)
    return _scalar(text)


def _flow_items(inner: str) -> Any:
    """The scalars of a one-line flow collection's inside, split at commas (no quote may hold a
    comma or bracket, no collection may nest)."""
    if any(c in inner for c in "[]{}"):
        return _BAD
    if not inner.strip(" "):
        return []
    items = []
    for part in inner.split(","):
        part = part.strip(" ")
        if not part:
            return _BAD  # an empty entry or a trailing comma
        items.append(part)
    return items


def _flow_mapping(pairs: list[str]) -> Any:
    found: dict[str, Any] = {}
    for pair in pairs:
        key, colon, value = pair.partition(": ")
        if not colon or not _is_key(key) or key in found:
            return _BAD
        parsed = _scalar(value.strip(" "))
        if parsed is _BAD:
            return _BAD
        found[key] = parsed
    return found


def _is_key(text: str) -> bool:
    return bool(_KEY.match(text)) and text.lower() not in _SPECIAL


def _scalar(text: str) -> Any:
    """A quoted string without escapes, a plain word, or a plain integer; else _BAD."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        if text[0] in inner or not inner.isprintable():
            return _BAD  # a '' escape or a quote closing early; a character ruamel may refuse
        return inner
    if text.lower() in _SPECIAL or ": " in text or text.endswith(":"):
        return _BAD
    if _INT.match(text):
        return int(text)
    if _WORD.match(text):
        return text
    return _BAD
