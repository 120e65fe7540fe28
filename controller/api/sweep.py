"""The Sweep manifest model (``kind: Sweep``): one Job template, many children.

``spec.matrix`` (key -> list of values; the cross product, keys in written order, the last key
varying fastest) or ``spec.indices`` (``"0-99"``, ``"0-9,20,30-39"``) says which children exist;
``exclude`` drops combinations; ``parallelism`` caps how many run at once. Expansion into child
Jobs is ``controller.api.sweep_children`` (run as the Sweep is validated).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictInt, StrictStr, model_validator

from controller import API_VERSION
from controller.api.indices import MAX_CHILDREN, parse_indices
from controller.api.job import JobSpec, ObjectMeta, _Model

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Scalar = StrictStr | StrictInt | float | bool


def _check_indices(text: str) -> str:
    parse_indices(text)
    return text


def _check_matrix(matrix: dict[str, list[Any]]) -> dict[str, list[Any]]:
    total = 1
    for key, values in matrix.items():
        if not _KEY_RE.match(key):
            raise ValueError(f"matrix key {key!r} must be a valid identifier (it becomes an env var: {key.upper()})")
        if not values:
            raise ValueError(f"matrix key {key!r} has no values")
        total *= len(values)
    if not matrix:
        raise ValueError("matrix needs at least one key")
    if total > MAX_CHILDREN:
        raise ValueError(f"matrix makes {total} children, over the limit of {MAX_CHILDREN}")
    return matrix


class SweepSpec(_Model):
    template: JobSpec = Field(description="The Job spec every child gets; {key} and {index} are substituted.")
    matrix: Annotated[dict[StrictStr, list[Scalar]], AfterValidator(_check_matrix)] | None = Field(
        default=None,
        description="Key -> list of values; one child per combination (keys in written order, the last "
        "varying fastest). Each child gets the values as env vars named by the upper-cased keys.",
    )
    indices: Annotated[StrictStr, AfterValidator(_check_indices)] | None = Field(
        default=None, description='Instead of a matrix: an array of children, e.g. "0-99" or "0-9,20".'
    )
    exclude: list[dict[StrictStr, Scalar]] = Field(
        default_factory=list, description="Matrix combinations to skip: each entry matches on the keys it names."
    )
    parallelism: StrictInt | None = Field(
        default=None, ge=1, description="At most this many children run at once (default: no limit)."
    )
    name_template: StrictStr | None = Field(
        default=None,
        description='Child names, default "{sweep}-{index}"; may use {sweep}, {index} and matrix keys.',
    )

    @model_validator(mode="after")
    def _one_source(self) -> SweepSpec:
        if (self.matrix is None) == (self.indices is None):
            raise ValueError("exactly one of matrix and indices is required")
        if self.exclude and self.matrix is None:
            raise ValueError("exclude needs a matrix")
        return self


class Sweep(_Model):
    """A parameter sweep or job array: child Jobs the controller creates and owns."""

    api_version: Literal["gflow.dev/v1alpha1"] = Field(default=API_VERSION, description="gflow.dev/v1alpha1")
    kind: Literal["Sweep"] = Field(default="Sweep", description="Sweep")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Name, labels and annotations.")
    spec: SweepSpec = Field(description="The template, the matrix or indices, and how many may run at once.")
