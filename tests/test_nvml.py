"""NvmlInventory through the real pynvml, against a stand-in libnvidia-ml.so.1 (tests/nvml_stub).

Each test runs the inventory in a subprocess whose LD_LIBRARY_PATH points at the compiled stub
and whose FAKE_NVML_FILE names the JSON the stub answers from; the stub re-reads that file when
it changes, so a test can change the machine between two reads.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import job_status, read_log, wait_for, wait_phase, write_manifest
from nvml_fixtures import GiB, fake_nvml_lib, gpu, nvml_env, nvml_probe, write_fake_nvml  # noqa: F401
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

DRIVER = "550.54.15"


def machine(*gpus: dict, **top) -> dict:
    return {"driver": DRIVER, "gpus": list(gpus), **top}


def by_index(gpus: list[dict]) -> dict[int, dict]:
    return {g["index"]: g for g in gpus}


# -- reading -------------------------------------------------------------------------------------


def test_four_gpus_read_through_the_real_pynvml_path(nvml_env, nvml_probe, fake_nvml_lib):
    write_fake_nvml(
        Path(nvml_env["FAKE_NVML_FILE"]),
        machine(
            gpu(0, utilization=12, processes=[{"pid": 4242, "usedMemory": 2 * GiB}]),
            gpu(1, name="NVIDIA A100-SXM4-40GB", memoryTotal=40 * GiB, memoryUsed=3 * GiB, utilization=97),
            gpu(2, utilization=None),  # utilization unsupported -> None
            gpu(3, processes=[{"pid": 7, "usedMemory": GiB}, {"pid": 8, "usedMemory": 18446744073709551615}]),
        ),
    )
    probe = nvml_probe(nvml_env)
    # it is the stub that got loaded, not some system library
    assert probe.call("loaded") == [str(fake_nvml_lib / "libnvidia-ml.so.1")]
    assert probe.call("describe") == {"text": f"NVML (driver {DRIVER})", "available": True}

    gpus = by_index(probe.call("read"))
    assert sorted(gpus) == [0, 1, 2, 3]
    assert all(g["healthy"] and g["error"] == "" for g in gpus.values())
    assert [gpus[i]["uuid"] for i in range(4)] == [gpu(i)["uuid"] for i in range(4)]
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert gpus[0]["memory_total"] == 80 * GiB and gpus[0]["memory_used"] == 2 * GiB
    assert gpus[0]["utilization"] == 12
    assert [(p["pid"], p["used_memory"]) for p in gpus[0]["processes"]] == [(4242, 2 * GiB)]
    assert gpus[1]["name"] == "NVIDIA A100-SXM4-40GB"
    assert (gpus[1]["memory_total"], gpus[1]["memory_used"], gpus[1]["utilization"]) == (40 * GiB, 3 * GiB, 97)
    assert gpus[2]["utilization"] is None and gpus[2]["processes"] == []
    # NVML_VALUE_NOT_AVAILABLE memory (pynvml: None) counts as 0
    assert [(p["pid"], p["used_memory"]) for p in gpus[3]["processes"]] == [(7, GiB), (8, 0)]

    for _ in range(3):
        assert len(probe.call("read")) == 4
    assert probe.call("stats") == {"inits": 1, "shutdowns": 0, "loads": 1}  # nvmlInit once
    probe.call("close")
    assert probe.call("stats")["shutdowns"] == 1
    assert probe.call("read") == []
    probe.call("close")  # closing twice is harmless
    assert probe.call("stats")["shutdowns"] == 1


def test_minor_numbers_and_cpu_affinity_come_from_nvml(nvml_env, nvml_probe):
    # the devices cgroup needs the node's minor (not the index); the cpuset the GPU's near cores
    write_fake_nvml(
        Path(nvml_env["FAKE_NVML_FILE"]),
        machine(
            gpu(0, numaNode=0),
            gpu(1, minor=5, numaNode=1),
            gpu(2, numaNode=3),
            numaNodes={"0": "0-3", "1": "4-5,7"},
        ),
    )
    gpus = by_index(nvml_probe(nvml_env).call("read"))
    assert [gpus[i]["minor"] for i in range(3)] == [0, 5, 2]  # the stub's default minor is the index
    assert gpus[0]["cpus"] == [0, 1, 2, 3]
    assert gpus[1]["cpus"] == [4, 5, 7]
    assert gpus[2]["cpus"] == []  # node 3 is not declared: NOT_SUPPORTED, no cores


def test_a_lost_gpu_is_unhealthy_and_the_others_are_fine(nvml_env, nvml_probe):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, machine(*(gpu(i) for i in range(4))))
    probe = nvml_probe(nvml_env)
    assert all(g["healthy"] for g in probe.call("read"))

    # mid-run: GPU 1 falls off the bus (even its handle is gone); GPU 3 fails once it has a handle
    write_fake_nvml(path, machine(gpu(0), gpu(1, lost=True), gpu(2), gpu(3, error=15)))
    gpus = by_index(probe.call("read"))
    assert sorted(gpus) == [0, 1, 2, 3]
    for index in (1, 3):
        assert gpus[index]["healthy"] is False
        assert "lost" in gpus[index]["error"].lower(), gpus[index]["error"]
        # it keeps the identity last seen, so node.yaml still says which board it is
        assert gpus[index]["uuid"] == gpu(index)["uuid"] and gpus[index]["memory_total"] == 80 * GiB
    for index in (0, 2):
        assert gpus[index]["healthy"] is True and gpus[index]["error"] == ""
        assert gpus[index]["uuid"] == gpu(index)["uuid"]

    write_fake_nvml(path, machine(*(gpu(i) for i in range(4))))  # it comes back after a reset
    assert all(g["healthy"] for g in probe.call("read"))


def test_critical_xids_ecc_errors_and_pending_page_retirement_make_a_gpu_unhealthy(nvml_env, nvml_probe):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, machine(*(gpu(i, xids=[79] if i == 3 else []) for i in range(5))))
    probe = nvml_probe(nvml_env)
    # Xids from before gflowd watched are not its to judge (the driver only sends new ones)
    assert all(g["healthy"] for g in probe.call("read"))

    write_fake_nvml(
        path,
        machine(
            gpu(0, xids=[13]),  # a job's own fault (graphics engine exception): the GPU is fine
            gpu(1, xids=[13, 79]),  # fallen off the bus
            gpu(2, eccUncorrected=2),
            gpu(3, xids=[79], retiredPagesPending=1),
            gpu(4, eccUncorrected=-1, retiredPagesPending=-1),  # no ECC on this board: nothing to say
        ),
    )
    gpus = by_index(probe.call("read"))
    assert [gpus[i]["healthy"] for i in range(5)] == [True, False, False, False, True]
    assert re.fullmatch(r"Xid 79 \(GPU has fallen off the bus\) at \d\d:\d\d:\d\d: reset the GPU .*", gpus[1]["error"])
    assert gpus[2]["error"].startswith("2 uncorrectable ECC errors since the driver loaded: reset the GPU")
    assert gpus[3]["error"].startswith("retired memory pages wait for a GPU reset")

    # the ECC counter and pending pages clear with a reset; a critical Xid stays until gflowd restarts
    write_fake_nvml(path, machine(gpu(0), gpu(1), gpu(2), gpu(3), gpu(4)))
    gpus = by_index(probe.call("read"))
    assert [gpus[i]["healthy"] for i in range(5)] == [True, False, True, True, True]
    assert gpus[1]["error"].startswith("Xid 79")


def test_lost_before_ever_seen_still_gets_a_record(nvml_env, nvml_probe):
    write_fake_nvml(Path(nvml_env["FAKE_NVML_FILE"]), machine(gpu(0, lost=True), gpu(1)))
    gpus = by_index(nvml_probe(nvml_env).call("read"))
    assert gpus[0]["healthy"] is False and "lost" in gpus[0]["error"].lower()
    assert gpus[0]["uuid"] == "GPU-unknown-0"
    assert gpus[1]["healthy"] is True


def test_transient_errors_are_retried_quickly(nvml_env, nvml_probe):
    write_fake_nvml(
        Path(nvml_env["FAKE_NVML_FILE"]),
        machine(
            gpu(0, transientErrors=2),  # Unknown twice, then fine: retried away
            gpu(1, transientErrors=2, transientCode=10),  # Timeout twice
            gpu(2, transientErrors=10_000),  # Unknown for good: unhealthy after a few attempts
            gpu(3),
        ),
    )
    probe = nvml_probe(nvml_env)
    gpus = by_index(probe.call("read"))
    assert probe.last_seconds < 1.0, f"retrying took {probe.last_seconds:.2f}s"
    assert gpus[0]["healthy"] and gpus[1]["healthy"] and gpus[3]["healthy"]
    assert gpus[0]["uuid"] == gpu(0)["uuid"] and gpus[1]["uuid"] == gpu(1)["uuid"]
    assert gpus[2]["healthy"] is False and "Unknown Error" in gpus[2]["error"]


def test_more_processes_than_the_first_buffer_are_all_read(nvml_env, nvml_probe):
    processes = [{"pid": 10_000 + k, "usedMemory": (k + 1) * 1024 * 1024} for k in range(70)]
    write_fake_nvml(Path(nvml_env["FAKE_NVML_FILE"]), machine(gpu(0, processes=processes), gpu(1)))
    gpus = by_index(nvml_probe(nvml_env).call("read"))
    assert [(p["pid"], p["used_memory"]) for p in gpus[0]["processes"]] == [
        (p["pid"], p["usedMemory"]) for p in processes
    ]
    assert gpus[0]["memory_used"] == sum(p["usedMemory"] for p in processes)


def test_process_names_come_from_proc_for_ignore_processes(nvml_env, nvml_probe):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, machine(gpu(0)))
    probe = nvml_probe(nvml_env)
    gone = 2**22 + 12345  # above any pid_max default: no such process
    write_fake_nvml(path, machine(gpu(0, processes=[{"pid": probe.proc.pid, "usedMemory": GiB}, {"pid": gone}])))
    names = {p["pid"]: p["name"] for p in probe.call("read")[0]["processes"]}
    assert names == {probe.proc.pid: Path(f"/proc/{probe.proc.pid}/comm").read_text().strip(), gone: ""}
    assert names[probe.proc.pid]


def test_per_process_utilization_comes_from_nvmlDeviceGetProcessUtilization(nvml_env, nvml_probe):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(
        path,
        machine(
            gpu(
                0,
                utilization=70,
                processes=[{"pid": 11, "usedMemory": GiB, "utilization": 55}, {"pid": 12, "usedMemory": GiB}],
            ),
            gpu(1, processes=[{"pid": 13, "usedMemory": 2 * GiB}]),  # no samples at all: NOT_FOUND, i.e. idle
        ),
    )
    probe = nvml_probe(nvml_env)
    gpus = by_index(probe.call("read"))
    assert [(p["pid"], p["utilization"]) for p in gpus[0]["processes"]] == [(11, 55), (12, 0)]
    assert [(p["pid"], p["utilization"]) for p in gpus[1]["processes"]] == [(13, 0)]
    write_fake_nvml(path, machine(gpu(0, processes=[{"pid": 11, "usedMemory": GiB, "utilization": 5}]), gpu(1)))
    assert [(p["pid"], p["utilization"]) for p in by_index(probe.call("read"))[0]["processes"]] == [(11, 5)]


def test_a_changed_file_is_seen_on_the_next_read(nvml_env, nvml_probe):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, machine(gpu(0), gpu(1)))
    probe = nvml_probe(nvml_env)
    assert [g["processes"] for g in probe.call("read")] == [[], []]
    write_fake_nvml(path, machine(gpu(0), gpu(1, processes=[{"pid": 4242, "usedMemory": 4 * GiB}])))
    gpus = by_index(probe.call("read"))
    assert gpus[0]["processes"] == []
    assert [(p["pid"], p["used_memory"]) for p in gpus[1]["processes"]] == [(4242, 4 * GiB)]
    assert probe.call("stats")["loads"] == 2
    write_fake_nvml(path, machine(gpu(0), gpu(1), gpu(2)))  # and a third GPU appears
    assert len(probe.call("read")) == 3


def test_topology_pairs(nvml_env, nvml_probe):
    # two NVLink'd pairs (0,1) and (2,3) under one CPU each; the pairs talk across CPUs
    matrix = [[0, 10, 50, 50], [10, 0, 50, 50], [50, 50, 0, 20], [50, 50, 20, 0]]
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, machine(*(gpu(i, topology=matrix[i]) for i in range(4))))
    probe = nvml_probe(nvml_env)
    expected = {f"{i},{j}": matrix[i][j] for i in range(4) for j in range(4) if i != j}
    assert probe.call("topology") == expected
    assert probe.call("topology") == expected  # cached while the GPUs stay the same

    write_fake_nvml(path, machine(gpu(0, topology=matrix[0]), gpu(1, lost=True), gpu(2, topology=matrix[2])))
    assert probe.call("topology") == {"0,2": 50, "2,0": 50}  # pairs with a lost GPU are left out

    write_fake_nvml(path, machine(gpu(0), gpu(1)))  # this machine cannot tell
    assert probe.call("topology") == {}


# -- no NVML -----------------------------------------------------------------------------------


def _real_nvml_installed() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_real_nvml_installed(), reason="a real libnvidia-ml.so.1 is installed on this machine")
def test_no_library_means_no_gpus_and_one_clear_sentence(nvml_probe, tmp_path):
    probe = nvml_probe({"FAKE_NVML_FILE": str(tmp_path / "unused.json")})  # no LD_LIBRARY_PATH: no stub
    described = probe.call("describe")
    assert described["available"] is False
    assert described["text"] == (
        "no NVML: the NVML library libnvidia-ml.so.1 was not found (no NVIDIA driver installed); running CPU jobs only"
    )
    assert probe.call("read") == []
    assert probe.call("topology") == {}
    probe.call("close")
    assert probe.stderr() == ""  # never raised, nothing printed


def test_driver_not_loaded_means_no_gpus(nvml_env, nvml_probe):
    # the stub answers NVML_ERROR_DRIVER_NOT_LOADED when its file does not exist
    probe = nvml_probe(nvml_env)
    assert probe.call("loaded")  # the library is there...
    described = probe.call("describe")  # ...the driver is not
    assert described == {"text": "no NVML: the NVIDIA driver is not loaded; running CPU jobs only", "available": False}
    assert probe.call("read") == []


def test_other_init_errors_are_reported_not_raised(nvml_env, nvml_probe):
    write_fake_nvml(Path(nvml_env["FAKE_NVML_FILE"]), machine(gpu(0), initError=4))
    described = nvml_probe(nvml_env).call("describe")
    assert described["available"] is False
    assert "no permission" in described["text"] and described["text"].endswith("running CPU jobs only")


def test_importable_without_the_stub():
    # the module itself never needs NVML to import (gflowd on a CPU box imports it)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_FILE")}
    code = "from controller.observe.gpus.nvml import NvmlInventory; i = NvmlInventory(); i.read(); i.close()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


# -- end to end: gflowd on the stub ------------------------------------------------------------------

_yaml = YAML(typ="safe")


def read_node(home: Path) -> dict | None:
    try:
        data = _yaml.load((home / "node.yaml").read_text())
    except (OSError, YAMLError):
        return None
    return data if isinstance(data, dict) else None


def test_gflowd_on_nvml_binds_a_gpu_job_to_a_usable_gpu(home, gflowd, nvml_env, tmp_path):
    """Needs gflowd to use controller.observe.gpus.nvml.NvmlInventory (the import in controller/daemon/main.py)."""
    write_fake_nvml(
        Path(nvml_env["FAKE_NVML_FILE"]),
        machine(
            gpu(0, processes=[{"pid": 4242, "usedMemory": 4 * GiB}]),  # someone else's process: Unmanaged
            gpu(1, lost=True),  # Unhealthy
            gpu(2),
            gpu(3),
        ),
    )
    daemon = gflowd(env=nvml_env)
    go = tmp_path / "go"
    write_manifest(
        home / "jobs",
        "train.yaml",
        f"""\
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: train
spec:
  resources:
    gpus: 1
  command: [sh, -c, 'echo "devices=$CUDA_VISIBLE_DEVICES"; while [ ! -e "{go}" ]; do sleep 0.02; done']
""",
    )
    status = wait_phase(home, "train", "Running", daemon=daemon)
    assert len(status["devices"]) == 1 and status["devices"][0] in (2, 3), status
    device = status["devices"][0]
    assert status["deviceUUIDs"] == [gpu(device)["uuid"]]
    seen = wait_for(
        lambda: "devices=" in read_log(home, "train") and read_log(home, "train"),
        message=lambda: f"the job to print its devices; log: {read_log(home, 'train')!r}",
    )
    assert seen.split("devices=")[1].split()[0] == str(device)

    def node_settled():
        node = read_node(home)
        if not node or len(node.get("gpus") or []) != 4:
            return None
        states = {g["index"]: g["state"] for g in node["gpus"]}
        return node if states.get(device) == "Allocated" else None

    node = wait_for(node_settled, message=lambda: f"node.yaml to show GPU {device} Allocated: {read_node(home)!r}")
    assert node["inventory"] == f"NVML (driver {DRIVER})"
    gpus = {g["index"]: g for g in node["gpus"]}
    assert gpus[0]["state"] == "Unmanaged" and gpus[0]["processes"][0]["pid"] == 4242
    assert gpus[1]["state"] == "Unhealthy" and "lost" in gpus[1]["error"].lower()
    assert gpus[device]["jobs"] == ["train"]
    assert gpus[5 - device]["state"] == "Free"
    assert [gpus[i]["uuid"] for i in (0, 2, 3)] == [gpu(i)["uuid"] for i in (0, 2, 3)]
    assert [gpus[i]["memoryBytes"] for i in (0, 2, 3)] == [gpu(i)["memoryTotal"] for i in (0, 2, 3)]  # exact

    go.touch()
    wait_phase(home, "train", "Succeeded", daemon=daemon)
    wait_for(
        lambda: {g["index"]: g["state"] for g in (read_node(home) or {}).get("gpus") or []}.get(device) == "Free",
        message=lambda: f"GPU {device} to be Free again: {read_node(home)!r}",
    )


def test_an_xid_under_a_running_job_warns_it_and_new_jobs_avoid_the_gpu(home, gflowd, nvml_env, tmp_path):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, machine(gpu(0), gpu(1)))
    daemon = gflowd(env=nvml_env)
    go = tmp_path / "go"
    job = "metadata: {{name: {name}}}\nspec:\n  resources: {{gpus: 1}}\n  command: [sh, -c, 'while [ ! -e {go} ]; do sleep 0.05; done']\n"
    write_manifest(home / "jobs", "first.yaml", job.format(name="first", go=go))
    assert wait_phase(home, "first", "Running", daemon=daemon)["devices"] == [0]

    write_fake_nvml(path, machine(gpu(0, xids=[79]), gpu(1)))  # its GPU falls off the bus
    status = wait_for(
        lambda: (s := job_status(home, "first")) and any(c["type"] == "GPUUnhealthy" for c in s["conditions"]) and s,
        message=lambda: f"the running job to be warned: {job_status(home, 'first')!r}\n{daemon.stderr()[-2000:]}",
    )
    (condition,) = [c for c in status["conditions"] if c["type"] == "GPUUnhealthy"]
    assert condition["message"].startswith("GPU 0: Xid 79 (GPU has fallen off the bus)")
    node = wait_for(lambda: (n := read_node(home)) and n["gpus"][0]["state"] == "Unhealthy" and n, message="node.yaml")
    assert node["gpus"][0]["error"].startswith("Xid 79")
    write_manifest(home / "jobs", "second.yaml", job.format(name="second", go=go))
    assert wait_phase(home, "second", "Running", daemon=daemon)["devices"] == [1]
    go.touch()
