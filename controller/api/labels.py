"""Label selectors (``team=vision,tier!=low``), kubectl's equality subset. No pydantic: the CLI's
``-l``, webhook filters and ``gflowctl stats`` all parse and match them the same way."""

from __future__ import annotations

Selector = list[tuple[str, str, bool]]  # (key, value, equal?)


def parse_selector(text: str) -> Selector:
    """``team=vision,tier!=low`` -> [(key, value, equal?)]; ValueError says what is wrong."""
    terms: Selector = []
    for term in text.split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            equal = False
        elif "=" in term:
            key, value = term.split("=", 1)
            value, equal = value.lstrip("="), True  # kubectl also accepts key==value
        else:
            raise ValueError(f"bad label selector term {term!r}; use key=value or key!=value")
        if not key.strip():
            raise ValueError(f"bad label selector term {term!r}: no key")
        terms.append((key.strip(), value.strip(), equal))
    return terms


def selector_matches(terms: Selector, labels: dict[str, str]) -> bool:
    return all((labels.get(k) == v) == equal for k, v, equal in terms)
