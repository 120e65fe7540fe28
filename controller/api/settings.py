"""gflowd's settings on a start the config model has nothing to check, without pydantic.

No config.yaml, and every flag given is one argparse checks in full (a plain string, a choice, GPU
indices): the settings are the model's defaults (``config_flags.DEFAULTS``) with those flags over
them, as attributes like ``ControllerConfig``'s. Anything else (a config file, a duration, a bound
number) is validated by the model (``controller/api/config.py``), which reports its errors.
"""

from __future__ import annotations

import copy
import os
from types import SimpleNamespace

from controller.api.config_flags import DEFAULTS, FLAGS, SECTIONS

PLAIN = frozenset(path for path, _, _, _, plain in FLAGS if plain)


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


def plain_settings(config_file: str | os.PathLike[str], flags: dict[tuple[str, ...], object]) -> SimpleNamespace | None:
    """The settings, when neither a config file nor a flag needs the model; else None.

    ``flags``: every flag's value by path (None: not given). A config file that exists, or may (it
    cannot be looked at), is the model's to read and report on."""
    given = {path: value for path, value in flags.items() if value is not None}
    if not PLAIN.issuperset(given):
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
    for key, value in flag_overrides(given).items():
        if isinstance(value, dict):
            values[key] = {**values[key], **value}  # type: ignore[dict-item]
        else:
            values[key] = value
    sections = {name: SimpleNamespace(**values[name]) for name in SECTIONS}  # type: ignore[arg-type]
    return SimpleNamespace(**{**values, **sections})
