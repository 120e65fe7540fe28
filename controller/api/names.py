"""Job and Sweep names, and which name a manifest document defines. No pydantic: the CLI uses
this on paths that must stay fast (``gflowctl apply`` finding a job's document in its file)."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # not typing's: gflowctl run loads this module, typing costs it ~3 ms
if TYPE_CHECKING:
    from typing import Any

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAME_RE = re.compile(NAME_PATTERN)


def is_valid_name(name: object) -> bool:
    """A DNS-1123 label: lowercase alphanumerics and ``-``, at most 63 characters."""
    return isinstance(name, str) and len(name) <= 63 and bool(_NAME_RE.match(name))


def document_name(data: Any, stem: str | None, single: bool) -> tuple[str | None, bool]:
    """(name, named_in_metadata): metadata.name when valid, else the file stem for single-document files."""
    if isinstance(data, dict):
        meta = data.get("metadata")
        if isinstance(meta, dict) and is_valid_name(meta.get("name")):
            return meta["name"], True
    if single and stem is not None and is_valid_name(stem):
        return stem, False
    return None, False
