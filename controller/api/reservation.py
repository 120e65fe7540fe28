"""The Reservation manifest model (``kind: Reservation``): GPUs held for some users during a window.

``spec.users`` may use the reserved GPUs inside the window; ``spec.gpus`` (any N GPUs, chosen by the
controller) or ``spec.devices`` (these GPU indices) says which; ``spec.start`` (RFC 3339, or ``+1h``
from when the controller first saw the manifest, as a Job's ``startAfter``) and ``spec.duration``
say when. Rules that need the machine or other reservations (overlaps, GPUs that do not exist,
unknown users) belong to ``controller.decide.reservations``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, StrictInt, StrictStr, model_validator

from controller import API_VERSION
from controller.api.job import Duration, ObjectMeta, _check_start_after, _Model, _time_text

_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\$?$")  # what useradd accepts


def _check_users(users: list[str]) -> list[str]:
    if not users:
        raise ValueError("needs at least one user")
    for user in users:
        if not _USER_RE.match(user) or len(user) > 32:
            raise ValueError(f"{user!r} is not a user name")
    if len(set(users)) != len(users):
        raise ValueError("a user is listed twice")
    return users


def _check_devices(devices: list[int]) -> list[int]:
    if not devices:
        raise ValueError("needs at least one GPU index")
    if any(d < 0 for d in devices):
        raise ValueError("GPU indices are >= 0")
    if len(set(devices)) != len(devices):
        raise ValueError("a GPU index is listed twice")
    return devices


class ReservationSpec(_Model):
    users: Annotated[list[StrictStr], AfterValidator(_check_users)] = Field(
        description="Unix user names whose jobs may use the reserved GPUs inside the window."
    )
    gpus: StrictInt | None = Field(
        default=None, ge=1, description="How many GPUs to hold; the controller picks which (the lowest free indices)."
    )
    devices: Annotated[list[StrictInt], AfterValidator(_check_devices)] | None = Field(
        default=None, description="Instead of gpus: these GPU indices, as nvidia-smi numbers them."
    )
    start: Annotated[
        StrictStr,
        BeforeValidator(_time_text, json_schema_input_type=str),
        AfterValidator(_check_start_after),
    ] = Field(
        description="When the window opens: RFC 3339 (2026-12-01T14:00:00; no offset means local time) "
        "or +DURATION from when the controller first saw the manifest."
    )
    duration: Duration = Field(gt=0, description="How long the window lasts, e.g. 2h.")

    @model_validator(mode="after")
    def _one_form(self) -> ReservationSpec:
        if (self.gpus is None) == (self.devices is None):
            raise ValueError("exactly one of gpus and devices is required")
        return self


class Reservation(_Model):
    """GPUs held for some users during a time window."""

    api_version: Literal["gflow.dev/v1alpha1"] = Field(default=API_VERSION, description="gflow.dev/v1alpha1")
    kind: Literal["Reservation"] = Field(default="Reservation", description="Reservation")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Name, labels and annotations.")
    spec: ReservationSpec = Field(description="Who, which GPUs, and when.")
