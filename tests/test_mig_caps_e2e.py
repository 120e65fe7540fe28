"""MIG device isolation end to end on cgroup v1: a real root gflowd on the NVML stand-in (GPU 0, minor
3, sliced into two 1g.10gb instances with GPU instance ids 9 and 10; GPU 1 whole), a /proc made in a
temp folder with the driver's capabilities (``--proc-dir``) and the nodes made with mknod
(``--device-dir``). An ordinary user's MIG job opens its parent's /dev/nvidia3 and its own
instance's caps nodes, and is denied the sibling instance's caps (the attack: clearing
CUDA_VISIBLE_DEVICES and opening them) and the config/monitor caps; whole-GPU and CPU jobs open no
caps node. With no driver behind the nodes an allowed open fails with ENXIO, a denied one EPERM."""

from __future__ import annotations

import json
from pathlib import Path

import test_mig_caps
from device_harness import OPENS, box, make_nodes, opened_by_job  # noqa: F401
from helpers import wait_phase, write_manifest
from nvml_fixtures import GiB, fake_nvml_lib, gpu, nvml_env, write_fake_nvml  # noqa: F401
from shared_box import SYSTEM_PYTHON
from test_mig_caps import CAPS_MAJOR, make_proc

CAPS = {folder.replace("gpu0/", "gpu3/"): minor for folder, minor in test_mig_caps.CAPS.items()}  # GPU 0's minor
NODES = {"nvidia3": (195, 3), "nvidia1": (195, 1), "nvidiactl": (195, 255)}
INSTANCE_CAPS = {2: ("gpu3/mig/gi9", "gpu3/mig/gi9/ci0"), 3: ("gpu3/mig/gi10", "gpu3/mig/gi10/ci0")}  # unit: caps


def make_dev(root: Path) -> Path:
    caps = {f"nvidia-caps/nvidia-cap{minor}": (CAPS_MAJOR, minor) for minor in CAPS.values()}
    return make_nodes(root / "dev", {**NODES, **caps})


def opener(name: str, dev: Path, resources: str) -> str:
    paths = [str(dev / n) for n in NODES] + [str(dev / "nvidia-caps" / f"nvidia-cap{m}") for m in CAPS.values()]
    command = json.dumps([SYSTEM_PYTHON, "-c", OPENS, *paths])
    return f"metadata: {{name: {name}}}\nspec:\n  command: {command}\n" + (
        f"  resources: {resources}\n" if resources else ""
    )


def test_a_users_mig_job_opens_its_own_caps_and_not_a_sibling_instances(box, gflowd, nvml_env):
    a100 = "NVIDIA A100-SXM4-80GB"
    instances = [
        {"profile": "1g.10gb", "memoryTotal": 10 * GiB, "gpuInstanceId": 9, "computeInstanceId": 0},
        {"profile": "1g.10gb", "memoryTotal": 10 * GiB, "gpuInstanceId": 10, "computeInstanceId": 0},
    ]
    write_fake_nvml(nvml_env["FAKE_NVML_FILE"], {"gpus": [gpu(0, name=a100, minor=3, mig=instances), gpu(1)]})
    dev, proc = make_dev(box.root), make_proc(box.root, CAPS)
    owner = (box.user.pw_uid, box.user.pw_gid)
    jobs = box.home / "jobs"
    write_manifest(jobs, "slice.yaml", opener("slice", dev, "{gpus: 1, gpuType: 1g.10gb}"), owner=owner)
    write_manifest(jobs, "whole.yaml", opener("whole", dev, "{gpus: 1, gpuType: H100}"), owner=owner)
    write_manifest(jobs, "cpu.yaml", opener("cpu", dev, ""), owner=owner)
    daemon = gflowd("--device-dir", dev, "--proc-dir", proc, home=box.home, env=nvml_env)
    unit = wait_phase(box.home, "slice", "Succeeded", timeout=60, daemon=daemon)["devices"][0]
    assert wait_phase(box.home, "whole", "Succeeded", timeout=60, daemon=daemon)["devices"] == [1]
    wait_phase(box.home, "cpu", "Succeeded", timeout=60, daemon=daemon)

    own = {f"nvidia-cap{CAPS[cap]}" for cap in INSTANCE_CAPS[unit]}
    caps = {f"nvidia-cap{m}" for m in CAPS.values()}
    assert len(own) == 2 and own < caps
    assert opened_by_job(box.home, "slice") == {
        "nvidia3": "ENXIO",  # its parent GPU
        "nvidia1": "EPERM",
        "nvidiactl": "ENXIO",
        **{cap: "ENXIO" if cap in own else "EPERM" for cap in caps},  # the sibling's, config, monitor: denied
    }
    none = {cap: "EPERM" for cap in caps}
    assert opened_by_job(box.home, "whole") == {"nvidia3": "EPERM", "nvidia1": "ENXIO", "nvidiactl": "ENXIO", **none}
    assert opened_by_job(box.home, "cpu") == {"nvidia3": "EPERM", "nvidia1": "EPERM", "nvidiactl": "ENXIO", **none}
