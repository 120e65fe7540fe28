"""gflow controller: a declarative GPU job scheduler for one machine.

Users declare Jobs as YAML manifests in a spec directory; ``gflowd`` reconciles them into
running processes and status files; ``gflowctl`` reads and edits those files.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: gflowctl's start-up never imports typing (type checkers read it as theirs)
if TYPE_CHECKING:
    from typing import Final

__version__ = "0.1.0"
API_VERSION: Final = "gflow.dev/v1alpha1"
