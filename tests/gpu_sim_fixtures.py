"""Stand-in GPU hardware for running hack/gpu-acceptance.py end to end on a machine without one.

Faked at the hardware edge only: ``libcuda.so.1`` (tests/gpu_sim/fake_cuda.c), ``libnvidia-ml.so.1``
(tests/nvml_stub/fake_nvml.c) and ``nvidia-smi`` (tests/gpu_sim/nvidia-smi). gflowd, gflowctl, the
probe and the acceptance script are the real ones, in real processes.

:class:`SimDriver` plays the kernel driver's part between them: the stand-in libcuda records what
each process holds (``FAKE_CUDA_STATE/<pid>``: GPU, bytes, last busy time); every 50 ms the
driver turns the live processes' records into the stand-in NVML's JSON file, which the NVML stub
(so gflowd) and the stand-in nvidia-smi read. A process that exits drops off, as on a real GPU.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from nvml_fixtures import build_stub, write_fake_nvml

SIM_DIR = Path(__file__).parent / "gpu_sim"
BUSY_WINDOW_MS = 1000  # a process that ran a memset within this long counts as 100 % busy


@pytest.fixture(scope="session")
def fake_cuda_lib(tmp_path_factory) -> Path:
    """The directory holding the compiled stand-in ``libcuda.so.1``."""
    return build_stub(SIM_DIR / "fake_cuda.c", "libcuda.so.1", tmp_path_factory.mktemp("fake-cuda"))


def sim_gpu(index: int, **fields: Any) -> dict[str, Any]:
    """One simulated GPU: what NVML, CUDA and nvidia-smi all report for it."""
    entry: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:08x}-aaaa-bbbb-cccc-ddddeeeeff0{index % 10}",
        "memoryTotal": 81559 * (1 << 20),  # what an H100 80GB reports: 79.6Gi, not a round number
        "pciBusId": f"00000000:{0x3B + 0x23 * index:02X}:00.0",
    }
    entry.update(fields)
    return entry


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class SimDriver:
    def __init__(self, gpus: list[dict[str, Any]], state_dir: Path, nvml_file: Path):
        self.gpus, self.state_dir, self.nvml_file = gpus, state_dir, nvml_file
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim-driver", daemon=True)
        self._last = ""
        self.publish()

    def env(self, cuda_lib: Path, nvml_lib: Path) -> dict[str, str]:
        """What a process needs to see this simulated machine (PATH, libraries, their files)."""
        gpus = ";".join(f"{g['pciBusId'][4:]}|{g['name']}|{g['memoryTotal']}" for g in self.gpus)
        return {
            "PATH": f"{SIM_DIR}{os.pathsep}{os.environ.get('PATH', '')}",
            "LD_LIBRARY_PATH": os.pathsep.join(
                [str(cuda_lib), str(nvml_lib), os.environ.get("LD_LIBRARY_PATH", "")]
            ).rstrip(os.pathsep),
            "FAKE_NVML_FILE": str(self.nvml_file),
            "FAKE_CUDA_GPUS": gpus,  # CUDA spells the domain with 4 digits: 0000:3B:00.0
            "FAKE_CUDA_STATE": str(self.state_dir),
        }

    def start(self) -> SimDriver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self.publish()

    def publish(self) -> None:
        now_ms = time.time() * 1000
        gpus = [dict(g, processes=[]) for g in self.gpus]
        for record in self.state_dir.iterdir():
            if not record.name.isdigit():
                continue
            pid = int(record.name)
            if not _alive(pid):
                record.unlink(missing_ok=True)
                continue
            try:
                lines = record.read_text().split("\n")
            except OSError:
                continue
            for line in filter(None, lines):
                index, used, busy = (int(x) for x in line.split())
                util = 100 if now_ms - busy < BUSY_WINDOW_MS else 0
                gpus[index]["processes"].append({"pid": pid, "usedMemory": used, "utilization": util})
        for gpu in gpus:
            gpu["utilization"] = max((p["utilization"] for p in gpu["processes"]), default=0)
        text = json.dumps({"driver": "550.54.15", "gpus": gpus}, sort_keys=True)
        if text != self._last:
            write_fake_nvml(self.nvml_file, json.loads(text))
            self._last = text


@pytest.fixture
def gpu_sim(fake_cuda_lib: Path, fake_nvml_lib: Path, tmp_path: Path):
    """Factory: ``gpu_sim(count)`` -> (driver, env) for a simulated machine with ``count`` GPUs."""
    drivers: list[SimDriver] = []

    def make(count: int) -> tuple[SimDriver, dict[str, str]]:
        state = tmp_path / f"cuda-state-{len(drivers)}"
        state.mkdir()
        driver = SimDriver(
            [sim_gpu(i) for i in range(count)], state, tmp_path / f"fake-nvml-{len(drivers)}.json"
        ).start()
        drivers.append(driver)
        return driver, driver.env(fake_cuda_lib, fake_nvml_lib)

    yield make
    for driver in drivers:
        driver.stop()
