"""MIG through NVML's own calls, end to end: a real gflowd on the NVML stand-in whose GPU 0 has MIG
mode on with two 1g.10gb instances (nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount,
nvmlDeviceGetMigDeviceHandleByIndex, the instance's name, UUID, memory and processes)."""

from __future__ import annotations

import subprocess

from helpers import read_log, wait_for, wait_phase, write_manifest
from nvml_fixtures import GiB, fake_nvml_lib, gpu, nvml_env, write_fake_nvml  # noqa: F401

from controller.util.yamlio import load_one

UUID_A = "MIG-8f2c1a4e-0b1d-5e7f-9a3c-000000000001"
UUID_B = "MIG-8f2c1a4e-0b1d-5e7f-9a3c-000000000002"


def sliced(foreign_pid: int) -> dict:
    a100 = "NVIDIA A100-SXM4-80GB"
    instances = [
        {"profile": "1g.10gb", "uuid": UUID_A, "memoryTotal": 10 * GiB, "gpuInstanceId": 9, "computeInstanceId": 0,
         "processes": [{"pid": foreign_pid, "usedMemory": 2 * GiB}]},
        {"profile": "1g.10gb", "uuid": UUID_B, "memoryTotal": 10 * GiB, "gpuInstanceId": 10, "computeInstanceId": 0},
    ]  # fmt: skip
    return {"gpus": [gpu(0, name=a100, mig=instances), gpu(1, name=a100)]}


def test_a_mig_job_lands_on_a_free_instance_nvml_reports(home, gflowd, nvml_env, tmp_path):
    foreign = subprocess.Popen(["sleep", "600"])  # someone's process on instance 0, outside gflow
    try:
        write_fake_nvml(nvml_env["FAKE_NVML_FILE"], sliced(foreign.pid))
        daemon = gflowd(env=nvml_env)

        def units_seen():  # node.yaml comes with a later pass, and a foreign process is judged over passes
            node = home / "node.yaml"
            if not node.exists():
                return None
            units = {g["index"]: g for g in load_one(node.read_text())["gpus"]}
            return units if units.get(2, {}).get("state") == "Unmanaged" else None

        units = wait_for(units_seen, timeout=60, message="instance 2 to be Unmanaged")
        assert sorted(units) == [1, 2, 3], units  # GPU 0 is no unit; its instances are 2 and 3
        assert units[2]["name"] == "MIG 1g.10gb (GPU 0)" and units[2]["uuid"] == UUID_A
        assert units[2]["memory"] == "10Gi" and units[2]["state"] == "Unmanaged"
        assert units[3]["uuid"] == UUID_B and units[3]["state"] == "Free"
        write_manifest(
            home / "jobs",
            "slice.yaml",
            "metadata: {name: slice}\nspec:\n  resources: {gpus: 1, gpuType: 1g.10gb}\n"
            "  command: [sh, -c, 'echo devices=$CUDA_VISIBLE_DEVICES']\n",
        )
        status = wait_phase(home, "slice", "Succeeded", daemon=daemon)
        assert status["devices"] == [3] and status["deviceUUIDs"] == [UUID_B]
        wait_for(lambda: "devices=" in read_log(home, "slice"), timeout=30)
        assert read_log(home, "slice").strip() == f"devices={UUID_B}"
    finally:
        foreign.kill()
        foreign.wait()
