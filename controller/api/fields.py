"""The field types and model base every API model shares (job, config, reservation, status): the
config model imports these, not the Job models, so a start with a config.yaml builds no Job class."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

from controller.api.units import parse_duration, parse_quantity

# Bytes, written as "16Gi" or an integer byte count.
Quantity = Annotated[
    int,
    BeforeValidator(parse_quantity),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?([KMGTP]i?)?$"},
            ],
            "description": "bytes, or a number with a unit: K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024)",
        }
    ),
]
# Seconds, written as "4h30m", "90s" or a number of seconds.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ms|d|h|m|s))+$"},
            ],
            "description": "a Go-style duration (90s, 30m, 4h30m, 2d) or a number of seconds",
        }
    ),
]


class _Model(BaseModel):
    """Common config: camelCase on the wire, unknown fields rejected, strict types."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        frozen=True,
    )
