"""The lab box's suite runs only inside the VM of hack/labbox (the image carries /etc/gflow-labbox).

Elsewhere every test here skips with one line. Tests that need a reboot mark their second half
``after_reboot`` and call ``request_reboot`` in the first: guest.sh runs the rest of the suite,
reboots the box, then runs the ``after_reboot`` tests (hack/labbox/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

MARKER = Path("/etc/gflow-labbox")
REBOOT_REQUEST = Path("/var/lib/labbox/reboot-requested")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_reboot: runs in the lab box after the reboot a test asked for")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MARKER.exists():
        return
    skip = pytest.mark.skip(reason=f"lab-box test: runs inside the VM of hack/labbox/run.sh (no {MARKER} here)")
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(skip)


def request_reboot(why: str) -> None:
    """Ask guest.sh to reboot the box after this phase; ``after_reboot`` tests check what follows."""
    REBOOT_REQUEST.parent.mkdir(parents=True, exist_ok=True)
    with REBOOT_REQUEST.open("a") as handle:
        handle.write(why + "\n")
