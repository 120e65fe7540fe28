"""Fixtures for running the real pynvml path against the stand-in ``libnvidia-ml.so.1``.

``fake_nvml_lib`` compiles ``tests/nvml_stub/fake_nvml.c`` once per session; ``nvml_env`` gives
the environment that makes pynvml's ``CDLL("libnvidia-ml.so.1")`` load it (LD_LIBRARY_PATH) and
names the JSON file it answers from (FAKE_NVML_FILE). ``nvml_probe`` starts a Python subprocess
that drives :class:`controller.observe.gpus.nvml.NvmlInventory` by JSON-line commands, so a test can
change the file between two reads, the way a GPU changes under a running controller.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

STUB_SOURCE = Path(__file__).parent / "nvml_stub" / "fake_nvml.c"
GiB = 1 << 30


def build_stub(source: Path, library: str, folder: Path) -> Path:
    """Compile a stand-in shared library (C, one file) as ``folder/library``; returns ``folder``.
    Skips the test where there is no gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip(f"gcc is not installed: cannot build the stand-in {library}")
    result = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(folder / library), str(source)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        pytest.fail(f"compiling {source} failed:\n{result.stderr}")
    return folder


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory) -> Path:
    """The directory holding the compiled stub ``libnvidia-ml.so.1``."""
    return build_stub(STUB_SOURCE, "libnvidia-ml.so.1", tmp_path_factory.mktemp("fake-nvml"))


def write_fake_nvml(path: Path, data: dict[str, Any]) -> Path:
    """Write the stub's JSON atomically (rename), with an mtime that surely differs from before."""
    path = Path(path)
    try:
        before = path.stat().st_mtime_ns
    except FileNotFoundError:
        before = None
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
    if before is not None and path.stat().st_mtime_ns == before:  # coarse timestamps: force a change
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
    return path


def gpu(index: int, **fields: Any) -> dict[str, Any]:
    """One GPU entry for the stub's file, with realistic defaults."""
    entry: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:08x}-1111-2222-3333-44445555666{index % 10}",
        "memoryTotal": 80 * GiB,
        "utilization": 0,
        "processes": [],
    }
    entry.update(fields)
    return entry


@pytest.fixture
def nvml_env(fake_nvml_lib: Path, tmp_path: Path) -> dict[str, str]:
    """Environment for a process that should see the stub: LD_LIBRARY_PATH + FAKE_NVML_FILE."""
    old = os.environ.get("LD_LIBRARY_PATH")
    return {
        "LD_LIBRARY_PATH": str(fake_nvml_lib) + (os.pathsep + old if old else ""),
        "FAKE_NVML_FILE": str(tmp_path / "fake-nvml.json"),
    }


PROBE = r"""
import dataclasses, json, sys, time
from controller.observe.gpus.nvml import NvmlInventory

inventory = NvmlInventory()
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["op"]
    started = time.monotonic()
    if op == "read":
        result = [dataclasses.asdict(g) for g in inventory.read()]
    elif op == "describe":
        result = {"text": inventory.describe(), "available": inventory.available}
    elif op == "topology":
        result = {f"{i},{j}": level for (i, j), level in inventory.topology().items()}
    elif op == "close":
        result = inventory.close()
    elif op == "stats":
        import ctypes, pynvml
        counts = [ctypes.c_uint() for _ in range(3)]
        pynvml.nvmlLib.fakeNvmlStats(*(ctypes.byref(c) for c in counts))
        result = dict(zip(("inits", "shutdowns", "loads"), (c.value for c in counts)))
    elif op == "loaded":  # which file the dynamic loader really mapped for libnvidia-ml
        with open("/proc/self/maps") as maps:
            result = sorted({l.split()[-1] for l in maps if "libnvidia-ml" in l})
    else:
        result = {"error": f"unknown op {op}"}
    print(json.dumps({"result": result, "seconds": time.monotonic() - started}), flush=True)
"""


class NvmlProbe:
    """A subprocess holding one NvmlInventory; ``call(op)`` sends a command and returns the answer."""

    def __init__(self, env: dict[str, str], cwd: Path):
        full_env = dict(os.environ)
        for name in ("LD_LIBRARY_PATH", "FAKE_NVML_FILE"):
            full_env.pop(name, None)
        full_env.update(env)
        self.stderr_path = Path(cwd) / "probe.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=full_env,
            cwd=str(cwd),
            text=True,
            bufsize=1,
        )
        self.last_seconds = 0.0

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def call(self, op: str, timeout: float = 10) -> Any:
        self.proc.stdin.write(json.dumps({"op": op}) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while not selector.select(max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    raise AssertionError(f"probe did not answer {op!r} within {timeout}s\n{self.stderr()}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"probe exited ({self.proc.poll()}) on {op!r}:\n{self.stderr()}")
        answer = json.loads(line)
        self.last_seconds = answer["seconds"]
        return answer["result"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def nvml_probe(tmp_path: Path):
    """Factory: ``nvml_probe(env)`` starts a probe subprocess; every probe is stopped at teardown."""
    probes: list[NvmlProbe] = []

    def start(env: dict[str, str]) -> NvmlProbe:
        probe = NvmlProbe(env, tmp_path)
        probes.append(probe)
        return probe

    yield start
    for probe in probes:
        probe.close()
