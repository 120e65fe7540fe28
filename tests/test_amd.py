"""AMD GPUs, the pure parts and the reader: ids after NVIDIA's, placement by vendor (never mixed),
the job's ROCm variables, the deny rules for kfd and render nodes, and AmdInventory on the amdsmi
stand-in (in a subprocess, so the stand-in is imported as gflowd imports it: by PYTHONPATH)."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controller.act.runtime.cgroups import devices
from controller.act.runtime.cgroups.devices import DeviceRule, amd_deny_rules, drm_card_minors
from controller.api.jobenv import amd_env
from controller.decide.placement.gpu_text import memory_holders
from controller.decide.placement.gpus import matches, one_vendor
from controller.model.gpus import Gpu
from controller.model.scheduling import GpuSlot, Request
from controller.observe.gpus.inventory import merge

GiB = 1 << 30
STUB = Path(__file__).parent / "amdsmi_stub"


def nv(i: int) -> Gpu:
    return Gpu(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", 80 * GiB)


def amd(local: int) -> Gpu:
    return Gpu(
        local, f"amd-{local}", "AMD Instinct MI300X", 192 * GiB, vendor="amd", local_index=local, minor=128 + local
    )


def slot(g: Gpu) -> GpuSlot:
    return GpuSlot(g, "Free")


def test_amd_ids_continue_after_every_nvidia_unit_and_keep_their_rocm_index():
    units = merge([nv(0), nv(1)], [amd(0), amd(1)])
    assert [(g.index, g.vendor, g.runtime_index) for g in units] == [
        (0, "nvidia", 0),
        (1, "nvidia", 1),
        (2, "amd", 0),
        (3, "amd", 1),
    ]
    assert [g.index for g in merge([], [amd(0), amd(1)])] == [0, 1]


def test_gpu_type_picks_a_vendor_or_a_name():
    slots = [slot(g) for g in merge([nv(0)], [amd(0)])]

    def picked(gpu_type):
        return [s.index for s in slots if matches(s, Request(name="j", gpus=1, gpu_type=gpu_type))]

    assert picked("amd") == [1]
    assert picked("NVIDIA") == [0]
    assert picked("mi300x") == [1]
    assert picked("H100") == [0]
    assert picked(None) == [0, 1]


def test_a_job_takes_one_vendors_gpus():
    slots = [slot(g) for g in merge([nv(0), nv(1)], [amd(0), amd(1)])]
    assert [s.index for s in one_vendor(slots, 2)] == [0, 1]
    assert [s.index for s in one_vendor([slots[1], *slots[2:]], 2)] == [2, 3]
    assert len(one_vendor([slots[1], slots[3]], 2)) == 1  # one of each: not enough of either


def test_an_amd_jobs_env_names_its_rocm_indices_and_hides_cuda():
    assert amd_env("0,1") == {"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": ""}


def test_deny_rules_keep_an_amd_job_to_its_render_nodes_and_others_off_kfd(tmp_path):
    os.mknod(tmp_path / "kfd", 0o600 | stat.S_IFCHR, os.makedev(241, 0))
    assert amd_deny_rules([129], [128, 129, 130], str(tmp_path), str(tmp_path / "sys")) == [
        DeviceRule("c", 226, 128),
        DeviceRule("c", 226, 130),
    ]
    assert amd_deny_rules([], [128, 129], str(tmp_path), str(tmp_path / "sys")) == [
        DeviceRule("c", 226, 128),
        DeviceRule("c", 226, 129),
        DeviceRule("c", 241, 0),
    ]
    assert amd_deny_rules([], [], str(tmp_path / "none")) == []


def make_drm(sys_dir: Path, devices: dict[str, tuple[str, ...]]) -> Path:
    """A sysfs with ``class/drm/<node>`` linked to ``devices/pci0000:00/<bus id>/drm/<node>``, whose
    ``device`` links back to the PCI device, as the kernel lays them out; returns ``sys_dir``."""
    drm = sys_dir / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    for bus_id, nodes in devices.items():
        pci = sys_dir / "devices" / "pci0000:00" / bus_id
        for node in nodes:
            (pci / "drm" / node).mkdir(parents=True)
            os.symlink("../../../" + bus_id, pci / "drm" / node / "device")
            os.symlink(f"../../devices/pci0000:00/{bus_id}/drm/{node}", drm / node)
    return sys_dir


# bus ids as on a real box; the card numbers do not follow the render numbers (probe order), and
# an NVIDIA GPU's card and a BMC's VGA card sit beside them
AMD_BOX = {
    "0000:03:00.0": ("card1", "renderD128"),
    "0000:43:00.0": ("card0", "renderD129"),
    "0000:83:00.0": ("card3", "renderD130"),
    "0000:c3:00.0": ("card2", "renderD131"),  # NVIDIA's: no AMD render minor names it
    "0000:e1:00.0": ("card4",),  # the BMC's VGA: no render node at all
}


def test_an_amd_jobs_rules_deny_the_other_amd_gpus_card_nodes_found_by_pci_device(tmp_path):
    sys_dir = make_drm(tmp_path / "sys", AMD_BOX)
    assert drm_card_minors([128, 130], str(sys_dir)) == {1, 3}
    assert amd_deny_rules([129], [128, 129, 130], str(tmp_path), str(sys_dir)) == [
        DeviceRule("c", 226, minor) for minor in (1, 3, 128, 130)
    ]
    os.mknod(tmp_path / "kfd", 0o600 | stat.S_IFCHR, os.makedev(241, 0))
    assert amd_deny_rules([], [128, 129, 130], str(tmp_path), str(sys_dir)) == [
        *(DeviceRule("c", 226, minor) for minor in (0, 1, 3, 128, 129, 130)),
        DeviceRule("c", 241, 0),
    ]


def test_without_sysfs_the_card_nodes_stay_open_and_it_is_said_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gflowd.runtime")
    devices._said.clear()
    for _ in range(3):
        assert amd_deny_rules([129], [128, 129], str(tmp_path), str(tmp_path / "nosys")) == [DeviceRule("c", 226, 128)]
    said = [r.getMessage() for r in caplog.records if "cardN" in r.getMessage()]
    assert len(said) == 1, said


READ = """
import dataclasses, json
from controller.observe.gpus.amd import AmdInventory
inv = AmdInventory()
print(json.dumps({"describe": inv.describe(), "gpus": [dataclasses.asdict(g) for g in inv.read()]}))
"""


def read_with_stub(tmp_path: Path, data: dict) -> dict:
    (tmp_path / "amdsmi.json").write_text(json.dumps(data))
    env = {**os.environ, "PYTHONPATH": str(STUB), "FAKE_AMDSMI_FILE": str(tmp_path / "amdsmi.json")}
    out = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, env=env, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.e2e
def test_the_reader_maps_amdsmi_to_gpus_and_marks_a_failing_or_ecc_gpu_unhealthy(tmp_path):
    seen = read_with_stub(
        tmp_path,
        {
            "gpus": [
                {
                    "name": "AMD Instinct MI300X",
                    "uuid": "u0",
                    "memoryTotal": 192 * GiB,
                    "vramUsedMB": 1024,
                    "gfx": 37,
                    "renderMinor": 128,
                    "processes": [{"pid": os.getpid(), "vram": 2 * GiB}],
                },
                {"uuid": "u1", "gfx": "N/A", "uncorrectable": 2},
                {"uuid": "u2", "fail": "amdsmi_get_gpu_activity"},
            ]
        },
    )
    assert seen["describe"] == "amdsmi"
    first, ecc, failing = seen["gpus"]
    assert (first["name"], first["uuid"], first["vendor"], first["local_index"], first["minor"]) == (
        "AMD Instinct MI300X",
        "u0",
        "amd",
        0,
        128,
    )
    assert (first["memory_total"], first["memory_used"], first["utilization"]) == (192 * GiB, 3 * GiB, 37)
    assert [(p["pid"], p["used_memory"]) for p in first["processes"]] == [(os.getpid(), 2 * GiB)]
    assert first["healthy"] and ecc["utilization"] is None
    assert not ecc["healthy"] and "2 uncorrectable ECC errors" in ecc["error"]
    assert not failing["healthy"] and "amdsmi_get_gpu_activity failed on AMD GPU 2" in failing["error"]


@pytest.mark.e2e
def test_amdsmi_init_failing_is_no_gpus_and_one_sentence(tmp_path):
    seen = read_with_stub(tmp_path, {"initError": "AMDSMI_STATUS_DRIVER_NOT_LOADED", "gpus": [{}]})
    assert seen["gpus"] == []
    assert seen["describe"].startswith(
        "no amdsmi: amdsmi_init failed (Error code: 2 | AMDSMI_STATUS_DRIVER_NOT_LOADED)"
    )


def test_a_job_wanting_more_gpus_than_one_vendor_has_never_fits():
    from controller.decide.placement.gpus import GpuPlacer

    slots = [slot(g) for g in merge([nv(0), nv(1)], [amd(0), amd(1)])]
    placer = GpuPlacer(slots, "sequential", None, "strict", 0.0, True)
    assert placer.never(Request(name="j", gpus=3)) == (
        "needs 3 GPUs, this machine has at most 2 of one vendor (a job never mixes vendors)"
    )
    assert placer.never(Request(name="j", gpus=2)) is None


def test_sbatch_gres_and_run_gres_name_an_amd_type_that_picks_amd_gpus():
    from controller.api.submit import _sbatch_gres, parse_gres

    out: dict = {}
    _sbatch_gres("gpu:mi300x:2", out, "", [])
    assert out == {"gpu_type": "mi300x", "gpus": "2"} and parse_gres("gpu:mi300x:2") == out
    slots = [slot(g) for g in merge([nv(0)], [amd(0), amd(1)])]
    assert [s.index for s in slots if matches(s, Request(name="j", gpus=2, gpu_type=out["gpu_type"]))] == [1, 2]


def test_memory_held_by_no_listed_process_names_the_library_that_lists_them():
    assert memory_holders(GpuSlot(amd(0), "Busy", used_memory=2 * GiB)) == "2Gi held by no process amdsmi lists"
    assert memory_holders(GpuSlot(nv(0), "Busy", used_memory=2 * GiB)) == "2Gi held by no process NVML lists"
