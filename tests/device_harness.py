"""The device-isolation tests' harness (test_bpf_devices, test_mig_caps, test_amd_bpf and the MIG,
AMD and cgroup end-to-end tests): character nodes made with mknod, with no driver behind them, so an
allowed open fails with ENXIO and a denied one with EPERM; opened as nobody from inside a private
cgroup v2 holding the BPF device program, or by a job of a real gflowd (``OPENS``)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest
from helpers import read_log
from shared_box import make_box, remove_box

from controller.act.runtime.cgroups import bpf_devices, probe

UNIFIED = "/sys/fs/cgroup/unified" if os.path.isfile("/sys/fs/cgroup/unified/cgroup.procs") else "/sys/fs/cgroup"


@functools.cache
def bpf_unavailable() -> str:
    """Why BPF device programs cannot be tried here ("" where they can)."""
    if os.geteuid() != 0:
        return "BPF device programs need root"
    if not os.path.isfile(os.path.join(UNIFIED, "cgroup.procs")):
        return "no cgroup2 mount"
    return bpf_devices.unavailable_reason(UNIFIED)


def make_nodes(folder: str | Path, nodes: Mapping[str, tuple[int, int]]) -> Path:
    """``nodes`` (path under ``folder`` -> (major, minor)) made there, open to every user (0666,
    folders 0755: the probe and a box's user run as others)."""
    folder = Path(folder)
    for name, (major, minor) in nodes.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o666)
    return folder


@contextlib.contextmanager
def node_folder(nodes: Mapping[str, tuple[int, int]]) -> Iterator[str]:
    """A temp folder of ``nodes``, outside pytest's 0700 tmp so that nobody can reach them."""
    folder = tempfile.mkdtemp(prefix="gflow-test-nodes-")
    try:
        yield str(make_nodes(folder, nodes))
    finally:
        shutil.rmtree(folder)


@pytest.fixture
def nodes(request: pytest.FixtureRequest) -> Iterator[str]:
    """A temp folder of the test module's ``NODES`` (name -> (major, minor))."""
    with node_folder(request.module.NODES) as folder:
        yield folder


@pytest.fixture
def cgroup() -> Iterator[str]:
    """A private cgroup on the v2 mount (the test skips where BPF device programs cannot load)."""
    why = bpf_unavailable()
    if why:
        pytest.skip(why)
    path = tempfile.mkdtemp(prefix="gflow-bpf-test-", dir=UNIFIED)
    yield path
    os.rmdir(path)  # the probe process has exited; the program goes with the cgroup


# Joins the cgroup, drops to nobody, then tries each node; prints "name errno" (0: opened).
PROBE = """
import os, sys
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
os.setgid(65534); os.setuid(65534)
for name in sys.argv[3:]:
    try:
        os.close(os.open(os.path.join(sys.argv[2], name), os.O_RDWR))
        print(name, 0)
    except OSError as exc:
        print(name, exc.errno)
"""


def opened_as_nobody(cgroup: str, folder: str, names: Iterable[str]) -> dict[str, int]:
    """name -> the errno of opening ``folder``/name read-write as nobody in ``cgroup`` (0: opened)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, cgroup, folder, *names], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return {name: int(code) for name, code in (line.split() for line in out.splitlines())}


# -- the same from a job of a real gflowd ---------------------------------------------------------

# a job's command (python -c OPENS PATH...): prints "node OK" or "node ERRNO-NAME" for each path
OPENS = (
    "import errno, os, sys\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        os.close(os.open(path, os.O_RDWR))\n"
    "        print(os.path.basename(path), 'OK')\n"
    "    except OSError as exc:\n"
    "        print(os.path.basename(path), errno.errorcode[exc.errno])\n"
)


def opened_by_job(home: Path, name: str) -> dict[str, str]:
    """node -> "OK" or the errno's name, as the ``OPENS`` job ``name`` printed them."""
    return dict(line.split() for line in read_log(home, name).splitlines() if line.strip())


def need_devices_isolation() -> None:
    """Skip the test where gflowd cannot isolate devices (no cgroup v1 devices controller here)."""
    found = probe()
    if not found.features["devices"].available:
        pytest.skip(f"no devices isolation here: {found.features['devices'].reason}")


@pytest.fixture
def box():
    """An ordinary user on a shared box (tests/shared_box.py), where the devices cgroup isolates."""
    need_devices_isolation()
    made = make_box()
    yield made
    remove_box(made)
