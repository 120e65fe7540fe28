"""gflow controller: a declarative GPU job scheduler for one machine.

Users declare Jobs as YAML manifests in a spec directory; ``gflowd`` reconciles them into
running processes and status files; ``gflowctl`` reads and edits those files.
"""

__version__ = "0.1.0"
API_VERSION = "gflow.dev/v1alpha1"
