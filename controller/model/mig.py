"""MIG profiles as NVIDIA names them (docs/mig.md). A module of its own, without dataclasses:
``gflowctl run --gpus 1g.10gb`` reads them, and run's start-up imports neither dataclasses nor inspect
(tests/test_cli_startup.py)."""

from __future__ import annotations

import re

# a MIG profile as NVIDIA names it: 1g.10gb, 3g.40gb, 1g.10gb+me, 1c.3g.40gb (compute-instance split)
MIG_PROFILE = (
    r"(?i)(?:\d+c\.)?\d+g\.(\d+)gb(?:\+me)?"  # compiled on first use (re's cache): not at every gflowctl start
)


def mig_profile_ok(text: str) -> bool:
    return re.fullmatch(MIG_PROFILE, text.strip()) is not None


def mig_profile_memory(profile: str) -> str:
    """The memory a profile names (``1g.10gb``: ``10Gi``), for instances whose size nobody gave."""
    match = re.fullmatch(MIG_PROFILE, profile.strip())
    return f"{match.group(1)}Gi" if match else "0"


def mig_profile_of(name: str) -> str:
    """The profile in NVML's name of a MIG device: ``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` -> ``1g.5gb``."""
    last = name.rsplit(" ", 1)[-1]
    return last.lower() if " MIG " in f" {name} " and mig_profile_ok(last) else ""
