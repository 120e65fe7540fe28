"""gflowd's settings on a start the config model has nothing more to check, without pydantic.

No config.yaml, and every flag given is one whose whole check the flag table records (a plain
string, a choice, GPU indices, a duration or quantity parsed by units.py, a gt/ge/lt/le bound): the
settings are the model's defaults (``config_flags.DEFAULTS``) with those flags over them, as
attributes like ``ControllerConfig``'s, or a FlagError in the model's words. Anything else (a config
file, a flag with a validator of its own) is validated by the model (``controller/api/config.py``).
"""

from __future__ import annotations

import copy
import operator
import os
from types import SimpleNamespace
from typing import Any

from controller.api.config_flags import DEFAULTS, FLAGS, SECTIONS
from controller.api.units import parse_duration, parse_quantity

PLAIN = {path: (kind, bounds) for path, _, kind, _, plain, bounds in FLAGS if plain}
_PARSERS = {"duration": parse_duration, "quantity": parse_quantity}
# pydantic's words for a violated Field(gt=...) etc., so both paths report a flag alike
_BOUNDS = {
    "gt": (operator.gt, "greater than"),
    "ge": (operator.ge, "greater than or equal to"),
    "lt": (operator.lt, "less than"),
    "le": (operator.le, "less than or equal to"),
}


class FlagError(ValueError):
    """A flag's value the model would reject; the message is the one load_config gives."""


def every_error(parts: list[str]) -> str:
    """Every error at once, on one line, as admission says a manifest's (api/validation.py)."""
    return parts[0] if len(parts) == 1 else f"{len(parts)} errors: " + "; ".join(parts)


def flag_name(path: tuple[str, ...]) -> str:
    return "--" + "-".join(path).replace("_", "-")


def flag_overrides(values: dict[tuple[str, ...], object]) -> dict:
    """Flag values keyed by path -> the nested mapping ``load_config`` merges (unset flags left out)."""
    out: dict = {}
    for path, value in values.items():
        if value is None:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _checked(path: tuple[str, ...], value: Any) -> Any:
    """``value`` as the model would keep it: parsed by the flag's unit parser, within its bounds."""
    kind, bounds = PLAIN[path]
    parse = _PARSERS.get(kind)
    try:
        value = parse(value) if parse else value
    except ValueError as exc:
        raise FlagError(f"{flag_name(path)}: {exc}") from None
    for name, limit in bounds:
        compare, words = _BOUNDS[name]
        if not compare(value, limit):
            raise FlagError(f"{flag_name(path)}: Input should be {words} {limit}")
    return value


def plain_settings(config_file: str | os.PathLike[str], flags: dict[tuple[str, ...], object]) -> SimpleNamespace | None:
    """The settings, when neither a config file nor a flag needs the model; else None.

    ``flags``: every flag's value by path (None: not given), in the table's (the model's field)
    order, so the bad ones are named in the model's order. A config file that exists, or may
    (it cannot be looked at), is the model's to read and report on. FlagError: a value it rejects."""
    given = {path: value for path, value in flags.items() if value is not None}
    if not all(path in PLAIN for path in given):
        return None
    try:
        os.stat(config_file)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    else:
        return None
    values = copy.deepcopy(DEFAULTS)
    checked, errors = {}, []
    for path, value in given.items():
        try:
            checked[path] = _checked(path, value)
        except FlagError as exc:
            errors.append(str(exc))
    if errors:  # every one at once, in the model's order and words
        raise FlagError(every_error(errors))
    for key, value in flag_overrides(checked).items():
        if isinstance(value, dict):
            values[key] = {**values[key], **value}  # type: ignore[dict-item]
        else:
            values[key] = value
    sections = {name: SimpleNamespace(**values[name]) for name in SECTIONS}  # type: ignore[arg-type]
    return SimpleNamespace(**{**values, **sections})
