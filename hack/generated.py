"""What every generator of committed files shares: the stale check and the ``--check`` command line.

``hack/gen_schemas.py`` (crd-schemas/, docs/manifest.md) and ``hack/gen_reasons.py``
(docs/reasons.md) each give a ``generate()`` returning ``{relative path: text}`` and the name of
their source of truth; tests run both with ``--check`` to catch drift.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

Generate = Callable[[], dict[str, str]]


def stale(generate: Generate, root: Path) -> list[str]:
    """Relative paths whose committed text differs from what ``generate`` makes (or that are missing)."""
    out = []
    for rel, text in generate().items():
        try:
            current = (root / rel).read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != text:
            out.append(rel)
    return out


def main(argv: list[str] | None, *, doc: str, generate: Generate, root: Path, source: str, script: str) -> int:
    """Write every generated file, or with ``--check`` exit 1 naming the first stale one and the fix."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if a file is stale")
    parser.add_argument("--root", type=Path, default=root, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root
    if args.check:
        outdated = stale(generate, root)
        if outdated:
            first = outdated[0]
            state = "is missing" if not (root / first).exists() else f"is out of date with {source}"
            more = f" (and {len(outdated) - 1} more)" if len(outdated) > 1 else ""
            print(f"{first}{more} {state}; run: python {script}", file=sys.stderr)
            return 1
        return 0
    for rel, text in generate().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {rel}")
    return 0
