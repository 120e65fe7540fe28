"""YAML in and out: the fast C safe loader for reading, round-trip only for line numbers,
and a small emitter for the plain data the controller writes (status, node, index).

ruamel is imported lazily so CLI paths that never parse YAML do not pay for it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from controller.util.yaml_plain import plain_documents

TYPE_CHECKING = False  # not typing's: gflowctl run and apply load this module, typing costs them ~3 ms
if TYPE_CHECKING:
    from typing import Any

_safe = None


class YAMLSyntaxError(ValueError):
    """The text is not valid YAML; ``line`` is 1-based (None when unknown)."""

    def __init__(self, message: str, line: int | None):
        super().__init__(message)
        self.line = line


def _safe_yaml():
    global _safe
    if _safe is None:
        # lazy: ruamel (~20 ms) only where YAML is parsed; get jobs and status files need none
        from ruamel.yaml import YAML

        _safe = YAML(typ="safe")  # CParser when ruamel.yaml.clib is installed
    return _safe


def load_all(text: str) -> list[Any]:
    """Every document of ``text`` as plain data. Raises :class:`YAMLSyntaxError`."""
    plain = plain_documents(text)  # most manifests: the same data in ~1/30 of ruamel's time
    if plain is not None:
        return plain
    from ruamel.yaml.error import MarkedYAMLError, YAMLError  # lazy: as above, only with the loader

    if _flow_too_deep(text):  # before the C parser, which overflows its stack on ~30,000 levels
        raise YAMLSyntaxError(f"document is nested too deeply (over {MAX_FLOW_DEPTH} levels of [ or {{)", None)
    try:
        docs = list(_safe_yaml().load_all(text))
        if "&" in text:  # only anchors make aliases: plain manifests skip the walk
            for doc in docs:
                _check_aliases(doc)
        return docs
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise YAMLSyntaxError(_without_values(problem), line) from None
    except YAMLError as exc:  # e.g. a reader error on a control character
        text_ = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
        raise YAMLSyntaxError(text_, None) from None
    except RecursionError:
        raise YAMLSyntaxError("document is nested too deeply", None) from None


# ruamel quotes both values of a duplicate key; the message lands in a status everyone reads, and
# the values may be an env's secrets: name the key only
_DUPLICATE_VALUES = r'(?s)^(found duplicate key ".*?") with value .*$'  # compiled on first use (re's cache)


def _without_values(problem: str) -> str:
    return re.sub(_DUPLICATE_VALUES, r"\1; keep one of them", problem)


MAX_EXPANDED_VALUES = 100_000
MAX_FLOW_DEPTH = 500
_BRACKETS = r"[\[\]{}]"  # compiled on first use (re's cache)


def _flow_too_deep(text: str) -> bool:
    """Bracket depth, counted naively (quotes ignored, so it can only over-count what is quoted)."""
    if text.count("[") + text.count("{") <= MAX_FLOW_DEPTH:
        return False
    depth = 0
    for match in re.finditer(_BRACKETS, text):
        if match.group() in "[{":
            depth += 1
            if depth > MAX_FLOW_DEPTH:
                return True
        elif depth:
            depth -= 1
    return False


def _check_aliases(doc: Any) -> None:
    """Aliases share one object between many places, which is cheap to load but expands on every
    later walk (validation, hashing, JSON): a "billion laughs" document would exhaust memory. Count
    what the document expands to (each shared object counted once per use) and refuse cycles."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise YAMLSyntaxError("a YAML alias refers to itself (the document would be infinite)", None)
        active.add(key)
        total = 1
        for item in node.items() if isinstance(node, dict) else node:
            total += size(item[0]) + size(item[1]) if isinstance(node, dict) else size(item)
            if total > MAX_EXPANDED_VALUES:
                raise YAMLSyntaxError(
                    f"document expands to more than {MAX_EXPANDED_VALUES} values through YAML aliases "
                    "(an alias bomb?); write the values out or use fewer aliases",
                    None,
                )
        active.discard(key)
        sizes[key] = total
        return total

    size(doc)


def load_one(text: str) -> Any:
    docs = load_all(text)
    return docs[0] if docs else None


def roundtrip_documents(text: str) -> list[Any]:
    """Documents as ruamel CommentedMaps, which remember line and column of every key."""
    from ruamel.yaml import YAML  # lazy: ruamel (~20 ms) only where YAML is parsed; get jobs and status files need none

    return list(YAML(typ="rt").load_all(text))


def line_of(document: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the value at ``loc`` in a round-trip document; the deepest known ancestor
    when the path runs past what exists (e.g. a missing field reports its parent's line)."""
    line = None
    node = document
    for key in loc:
        lc = getattr(node, "lc", None)
        try:
            if isinstance(node, dict) and key in node:
                if lc is not None:
                    line = lc.key(key)[0] + 1
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                if lc is not None:
                    line = lc.item(key)[0] + 1
                node = node[key]
            else:
                break
        except (KeyError, IndexError, TypeError, AttributeError):
            break
    if line is None and getattr(document, "lc", None) is not None:
        line = document.lc.line + 1
    return line


# --- emitting -------------------------------------------------------------------------------

_PLAIN_SAFE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@+-]*\Z")  # \Z: $ also matches before a final newline
# compiled on first use (re's cache): ~0.5-1 ms, and a scalar of printable ASCII needs it not
_NOT_YAML_PRINTABLE = "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff\\ufeff\\ufffe\\uffff]"
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


_SCALARS: dict[str, str] = {}  # str -> its YAML text: a status repeats most of its keys and values
_SCALARS_MAX = 4096


def _scalar(value: Any) -> str:
    if type(value) is str:
        text = _SCALARS.get(value)
        if text is None:
            if len(_SCALARS) >= _SCALARS_MAX:
                _SCALARS.clear()
            text = _SCALARS[value] = _scalar_text(value)
        return text
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return _scalar(str(value))  # a StrEnum member (phase, reason) as its text


def _scalar_text(text: str) -> str:
    if _PLAIN_SAFE.match(text) and text.lower() not in _RESERVED:
        return text
    # a JSON string is a valid YAML double-quoted scalar, once the characters YAML forbids even
    # there (control characters, DEL, C1, surrogates, U+FEFF/U+FFFE/U+FFFF) are escaped too
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isascii() and quoted.isprintable():  # no DEL: nothing more to escape
        return quoted
    return re.sub(_NOT_YAML_PRINTABLE, lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _emit(value: Any, indent: str, out: list[str], blocks: bool = False) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if (isinstance(item, dict) and item) or (
                isinstance(item, list) and item and any(isinstance(x, (dict, list)) for x in item)
            ):
                out.append(f"{indent}{_scalar(key)}:\n")
                _emit(item, indent + "  ", out, blocks)
            elif blocks and isinstance(item, str) and (block := _literal(item, indent)) is not None:
                out.append(f"{indent}{_scalar(key)}:{block}")
            else:
                out.append(f"{indent}{_scalar(key)}: {_inline(item)}\n")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                lines: list[str] = []
                _emit(item, indent + "  ", lines, blocks)
                first = lines[0]
                lines[0] = indent + "- " + first[len(indent) + 2 :]
                out.extend(lines)
            else:
                out.append(f"{indent}- {_inline(item)}\n")
    else:
        out.append(f"{indent}{_inline(value)}\n")


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k)}: {_inline(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return _scalar(value)


def dump(data: dict[str, Any], blocks: bool = False) -> str:
    """Block-style YAML for plain data (dicts, lists, str, int, float, bool, None). ``blocks``: a
    multi-line string as a literal block (``|``), as people write scripts, not one quoted line
    (``load_own`` reads neither back: the files gflowd writes leave it off)."""
    out: list[str] = []
    _emit(data, "", out, blocks)
    return "".join(out)


def _literal(text: str, indent: str) -> str | None:
    """``text`` as a literal block scalar's lines after ``key:``, or None when a block cannot say it
    exactly (characters YAML escapes, a first line that starts with a space, trailing blank lines)."""
    if "\n" not in text.rstrip("\n") or re.search(_NOT_YAML_PRINTABLE, text) or "\r" in text:
        return None
    if text[0] in " \t" or text.endswith("\n\n") or any(line.rstrip(" \t") != line for line in text.split("\n")):
        return None
    chomp = "" if text.endswith("\n") else "-"
    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    return f" |{chomp}\n" + "".join(f"{indent}  {line}\n" if line else "\n" for line in lines)


def iter_documents_text(text: str) -> Iterator[str]:
    """Split a YAML stream into the text of each document (comments kept), on ``---`` lines."""
    current: list[str] = []
    seen_content = False
    for line in text.splitlines(keepends=True):
        if line.startswith("---") and (len(line) == 3 or line[3] in " \t\r\n"):
            if seen_content:
                yield "".join(current)
            current, seen_content = [], False
            rest = line[3:].strip()
            if rest:
                current.append(rest + "\n")
                seen_content = True
            continue
        if line.rstrip() == "...":
            continue
        current.append(line)
        if line.strip() and not line.lstrip().startswith("#"):
            seen_content = True
    if seen_content:
        yield "".join(current)


# --- reading back what ``dump`` wrote -------------------------------------------------------------


class _NotOurs(ValueError):
    """The text is not in ``dump``'s subset (e.g. edited by hand): use the real YAML loader."""


_decoder = json.JSONDecoder()
_WORDS = {"null": None, "true": True, "false": False}


def _parse_scalar(token: str) -> Any:
    if not token:
        raise _NotOurs("empty scalar")
    if token[0] == '"':
        value, end = _decoder.raw_decode(token)
        if end != len(token):
            raise _NotOurs(token)
        return value
    if token in _WORDS:
        return _WORDS[token]
    if token == "[]":
        return []
    if token == "{}":
        return {}
    if token[0] == "[":
        return _parse_flow_list(token)
    if _PLAIN_SAFE.match(token):
        if token.lower() in _RESERVED:
            raise _NotOurs(token)
        return token
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        raise _NotOurs(token) from None


def _parse_flow_list(token: str) -> list[Any]:
    if not token.endswith("]"):
        raise _NotOurs(token)
    items, pos, body = [], 1, token
    while pos < len(body) - 1:
        if body[pos] == '"':
            value, end = _decoder.raw_decode(body, pos)
            items.append(value)
            pos = end
        else:
            end = body.find(",", pos)
            end = len(body) - 1 if end < 0 else end
            piece = body[pos:end].strip()
            if piece.startswith(("[", "{")):
                raise _NotOurs(token)  # nested flow collections: not ours
            items.append(_parse_scalar(piece))
            pos = end
        if body[pos : pos + 2] == ", ":
            pos += 2
        elif pos != len(body) - 1:
            raise _NotOurs(token)
    return items


def _split_key(rest: str) -> tuple[str, str]:
    if rest.startswith('"'):
        key, end = _decoder.raw_decode(rest)
    else:
        end = rest.find(":")
        if end < 0:
            raise _NotOurs(rest)
        key = rest[:end]
    if rest[end : end + 1] != ":":
        raise _NotOurs(rest)
    return str(key), rest[end + 1 :].strip()


def load_own(text: str) -> Any:
    """Parse text written by :func:`dump` in about a tenth of the real loader's time (status files
    at start-up). Anything outside that subset raises ValueError: callers fall back to ``load_one``."""
    lines = [line for line in text.split("\n") if line.strip()]
    pos = 0

    def indent_of(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def block(indent: int) -> Any:
        nonlocal pos
        if pos < len(lines) and lines[pos][indent:].startswith("- "):
            out_list: list[Any] = []
            while pos < len(lines) and indent_of(lines[pos]) == indent and lines[pos][indent:].startswith("- "):
                rest = lines[pos][indent + 2 :]
                if (":" in rest and not rest.startswith(("[", '"'))) or (
                    rest.startswith('"') and _looks_like_key(rest)
                ):
                    lines[pos] = " " * (indent + 2) + rest  # the item's first key, at the item's indent
                    out_list.append(mapping(indent + 2))
                else:
                    out_list.append(_parse_scalar(rest.strip()))
                    pos += 1
            return out_list
        return mapping(indent)

    def mapping(indent: int) -> dict[str, Any]:
        nonlocal pos
        out: dict[str, Any] = {}
        while pos < len(lines):
            line = lines[pos]
            current = indent_of(line)
            if current < indent:
                break
            if current > indent or line.lstrip().startswith("#"):
                raise _NotOurs(line)
            key, value = _split_key(line[indent:])
            pos += 1
            if value:
                out[key] = _parse_scalar(value)
            else:
                if pos >= len(lines) or (indent_of(lines[pos]) <= indent and not lines[pos][indent:].startswith("- ")):
                    raise _NotOurs(line)
                child_indent = indent_of(lines[pos])
                out[key] = block(child_indent)
        return out

    try:
        result = block(0)
    except (IndexError, json.JSONDecodeError) as exc:
        raise _NotOurs(str(exc)) from None
    if pos != len(lines):
        raise _NotOurs("trailing text")
    return result


def _looks_like_key(rest: str) -> bool:
    try:
        _, end = _decoder.raw_decode(rest)
    except json.JSONDecodeError:
        return False
    return rest[end : end + 1] == ":"
