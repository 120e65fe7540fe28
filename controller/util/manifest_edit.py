"""In-place manifest edits that keep the user's text: comments, order, quoting, blank lines.

``set_field`` changes one scalar at a key path in one document of a YAML stream by editing only
the line that holds it (or inserting one line), using the round-trip loader's positions. Only
where that is impossible (a flow-style mapping, a multi-line value) does it fall back to
re-serialising that one document with ruamel's round-trip dumper, which still keeps comments.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, cast

from controller.util.yamlio import YAMLSyntaxError, iter_documents_text, load_one


class EditError(ValueError):
    pass


def yaml_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def merge_patch(text: str, doc_index: int, patch: dict[str, Any]) -> str:
    """Apply a JSON merge patch (RFC 7386) to one document: mappings merge, ``null`` deletes, any
    other value replaces. Scalars are edited line by line; the rest goes through ``set_field``'s
    round-trip fallback, which still keeps comments."""
    for path, value in _leaves(patch, ()):
        text = set_field(text, doc_index, path, value)
    return text


def _leaves(patch: dict[str, Any], prefix: tuple[str, ...]):
    for key, value in patch.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, prefix + (str(key),))
        else:
            yield prefix + (str(key),), value


_DELETE = object()


def place_working_dir(kind: str, data: Any, text: str, folder: str) -> str | None:
    """One document's text as applied from ``folder`` (see ``manifests.run_where_applied``): with an
    absent or relative ``workingDir`` made absolute against ``folder`` (the rest of the text kept),
    or None when it needs no change (a reservation, an absolute or ``~`` folder, no spec mapping)."""
    if kind == "reservation":
        return None  # nothing runs: no working directory
    spec = data.get("spec") if isinstance(data, dict) else None
    path: tuple[str, ...] = ("spec", "workingDir")
    if kind == "sweep" and isinstance(spec, dict):
        spec, path = spec.get("template"), ("spec", "template", "workingDir")
    if not isinstance(spec, dict):
        return None
    current = spec.get("workingDir")
    if isinstance(current, str) and (current.startswith("~") or os.path.isabs(current)):
        return None
    value = os.path.normpath(os.path.join(folder, current or "."))
    if kind == "job" and "workingDir" not in spec:
        placed = _first_under_spec(text, data, value)
        if placed is not None:
            return placed
    return set_field(text, 0, path, value)


_ODD_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")  # str.splitlines' breaks that YAML's lines are not


def _first_under_spec(text: str, data: dict[str, Any], folder: str) -> str | None:
    """``set_field``'s insertion of ``spec.workingDir`` (a line before spec's first key, at its
    indent) found in the text alone, for a Job whose ``spec:`` is a plain block mapping: ruamel's
    round-trip load costs ~1 ms a document, which gflowd's review paid for every file of an
    ``apply -f DIR``. Kept only when the result parses to ``data`` with that one key first in spec;
    else None (and ``set_field`` does it)."""
    if not _ODD_BREAKS.isdisjoint(text):
        return None
    lines = text.splitlines(keepends=True)
    heads = [i for i, line in enumerate(lines) if line.startswith("spec:") and _nothing_after(line[5:])]
    if len(heads) != 1:
        return None
    for at in range(heads[0] + 1, len(lines)):
        body = lines[at].lstrip(" ")
        if body.strip() and not body.startswith("#"):
            break
    else:
        return None
    indent = len(lines[at]) - len(body)
    if not indent:
        return None
    placed = "".join([*lines[:at], f"{' ' * indent}workingDir: {yaml_scalar(folder)}\n", *lines[at:]])
    try:
        check = load_one(placed)
    except YAMLSyntaxError:
        return None
    spec = check.get("spec") if isinstance(check, dict) else None
    if not isinstance(spec, dict) or next(iter(spec)) != "workingDir":
        return None
    return placed if check == {**data, "spec": {"workingDir": folder, **data["spec"]}} else None


def _nothing_after(rest: str) -> bool:
    """``rest`` of a ``key:`` line holds no value: blanks, or a comment after a blank."""
    body = rest.rstrip("\n")
    return not body.strip() or (body[0] in " \t" and body.lstrip(" \t").startswith("#"))


def set_field(text: str, doc_index: int, path: tuple[str, ...], value: Any) -> str:
    """Return ``text`` with ``path`` (e.g. ``("spec", "cancelled")``) set to ``value`` in document
    ``doc_index``; missing parent mappings are created; ``None`` removes the key."""
    if value is None or isinstance(value, (list, dict)):
        return _reserialize(text, doc_index, path, _DELETE if value is None else value)
    from ruamel.yaml import YAML  # lazy: ruamel (~20 ms) only when a manifest is edited

    docs = list(YAML(typ="rt").load_all(text))
    real = [d for d in docs if d is not None]
    if doc_index >= len(real):
        raise EditError(f"document {doc_index} not found")
    doc = real[doc_index]
    if not isinstance(doc, dict):
        raise EditError("the document is not a mapping")
    lines = text.splitlines(keepends=True)
    try:
        edited = _edit_lines(lines, doc, path, value)
    except _Fallback:
        return _reserialize(text, doc_index, path, value)
    return "".join(edited)


class _Fallback(Exception):
    pass


def _is_block(node: Any) -> bool:
    fa = getattr(node, "fa", None)
    return fa is not None and not fa.flow_style()


def _edit_lines(lines: list[str], doc: Any, path: tuple[str, ...], value: Any) -> list[str]:
    node = doc
    for depth, key in enumerate(path):
        last = depth == len(path) - 1
        if not isinstance(node, dict) or not _is_block(node) or not node:
            raise _Fallback
        if key in node:
            if last:
                line, col = cast(Any, node).lc.value(key)
                if isinstance(node[key], (dict, list)):
                    raise _Fallback
                key_line = cast(Any, node).lc.key(key)[0]
                if line != key_line:
                    raise _Fallback  # value on its own line(s): a block scalar
                old = lines[line]
                end = _value_end(old, col)
                lines[line] = old[:col] + yaml_scalar(value) + old[end:]
                return lines
            node = node[key]
            continue
        # insert the missing remainder of the path before the mapping's first key
        first = next(iter(node))
        line, col = cast(Any, node).lc.key(first)
        indent = " " * col
        new = []
        for offset, part in enumerate(path[depth:]):
            pad = indent + "  " * offset
            if depth + offset == len(path) - 1:
                new.append(f"{pad}{_key(part)}: {yaml_scalar(value)}\n")
            else:
                new.append(f"{pad}{_key(part)}:\n")
        return lines[:line] + new + lines[line:]
    raise _Fallback


def _key(key: str) -> str:
    return key if all(c.isalnum() or c in "-_./" for c in key) else json.dumps(key)


def _value_end(line: str, col: int) -> int:
    """End of the scalar starting at ``col``: before a trailing comment or the line end."""
    body = line.rstrip("\r\n")
    if col < len(body) and body[col] in "\"'":
        quote = body[col]
        i = col + 1
        while i < len(body):
            if body[i] == "\\" and quote == '"':
                i += 2
                continue
            if body[i] == quote:
                if quote == "'" and i + 1 < len(body) and body[i + 1] == "'":
                    i += 2
                    continue
                return i + 1
            i += 1
        return len(body)
    hash_at = body.find(" #", col)
    end = hash_at if hash_at >= 0 else len(body)
    return len(body[:end].rstrip())


def _reserialize(text: str, doc_index: int, path: tuple[str, ...], value: Any) -> str:
    from ruamel.yaml import YAML  # lazy: ruamel (~20 ms) only when a manifest is edited

    parts = [p for p in iter_documents_text(text)]
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.preserve_quotes = True
    doc = yaml.load(parts[doc_index])
    node = doc
    for key in path[:-1]:
        if key not in node or node[key] is None:
            if value is _DELETE:
                return text  # nothing to delete
            node[key] = {}
        node = node[key]
    if value is _DELETE:
        if path[-1] not in node:
            return text
        del node[path[-1]]
    else:
        node[path[-1]] = value
    out = io.StringIO()
    yaml.dump(doc, out)
    parts[doc_index] = out.getvalue()
    return join_documents(parts)


def join_documents(parts: list[str]) -> str:
    return "---\n".join(p if p.endswith("\n") else p + "\n" for p in parts)
