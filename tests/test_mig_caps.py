"""MIG device isolation on the nvidia-caps nodes: the rules gflowd computes from the driver's
capabilities (a /proc made in a temp folder, as /proc/driver/nvidia/capabilities and /proc/devices
are on a box with MIG), and the same rules as the cgroup v2 BPF program, checked by opening real
nodes made with mknod as nobody from inside the cgroup (ENXIO: allowed, no driver; EPERM: denied).
A MIG job may open its own instance's GI and CI caps and no other instance's, nor config/monitor."""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

import pytest
from device_harness import cgroup, nodes, opened_as_nobody  # noqa: F401

from controller.act.runtime.cgroups import bpf_devices, devices
from controller.act.runtime.cgroups.devices import (
    DeviceRule,
    cap_minor,
    caps_major,
    gpu_deny_rules,
    mig_caps_deny_rules,
)
from controller.observe.gpus.inventory import parse_fake_gpus

CAPS_MAJOR = 237  # the kernel picks it on a real box (/proc/devices); any unused char major does here
# (folder under capabilities/, its DeviceFileMinor): GPU 0 sliced in two 1g instances, GI 9 and GI 10
INSTANCES = [(0, 9, 0), (0, 10, 0)]  # (GPU minor, GI id, CI id), as gflowd's inventory knows them
CAPS = {
    "mig/config": 1,
    "mig/monitor": 2,
    "gpu0/mig/gi9": 84,
    "gpu0/mig/gi9/ci0": 85,
    "gpu0/mig/gi10": 93,
    "gpu0/mig/gi10/ci0": 94,
}


def make_proc(root: Path, caps: dict[str, int] = CAPS, major: int | None = CAPS_MAJOR) -> Path:
    """A /proc with the driver's capabilities and /proc/devices, as the NVIDIA driver writes them."""
    proc = root / "proc"
    for folder, minor in caps.items():
        (proc / "driver/nvidia/capabilities" / folder).mkdir(parents=True, exist_ok=True)
        (proc / "driver/nvidia/capabilities" / folder / "access").write_text(
            f"DeviceFileMinor: {minor}\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
        )
    chars = "Character devices:\n  1 mem\n195 nvidia-frontend\n" + (f"{major} nvidia-caps\n" if major else "")
    (proc / "devices").write_text(chars + "\nBlock devices:\n  8 sd\n")
    return proc


def test_the_caps_minors_and_major_are_read_as_the_driver_lists_them(tmp_path):
    proc = make_proc(tmp_path)
    assert caps_major(str(proc)) == CAPS_MAJOR
    assert {folder: cap_minor(folder, str(proc)) for folder in CAPS} == CAPS
    assert cap_minor("gpu0/mig/gi11", str(proc)) is None  # no such instance (yet)
    assert caps_major(str(tmp_path / "nowhere")) is None


def test_a_mig_job_keeps_only_its_own_gi_and_ci_caps(tmp_path):
    proc = make_proc(tmp_path)
    # no node made yet (nvidia-modprobe makes them when first wanted): the known instances' caps are denied
    rules = mig_caps_deny_rules([(0, 10, 0)], INSTANCES, str(proc), str(tmp_path / "dev"))
    assert rules == [DeviceRule("c", CAPS_MAJOR, m) for m in (1, 2, 84, 85)]
    whole_or_cpu = mig_caps_deny_rules([], INSTANCES, str(proc), str(tmp_path / "dev"))
    assert whole_or_cpu == [DeviceRule("c", CAPS_MAJOR, m) for m in sorted(CAPS.values())]


def test_a_caps_node_the_driver_does_not_list_is_denied_too(tmp_path):
    proc, dev = make_proc(tmp_path), tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    os.mknod(dev / "nvidia-caps" / "nvidia-cap200", 0o666 | stat.S_IFCHR, os.makedev(CAPS_MAJOR, 200))
    os.mknod(dev / "nvidia-caps" / "other", 0o666 | stat.S_IFCHR, os.makedev(CAPS_MAJOR + 1, 7))  # not a cap
    rules = mig_caps_deny_rules([(0, 9, 0)], INSTANCES, str(proc), str(dev))
    assert rules == [DeviceRule("c", CAPS_MAJOR, m) for m in (1, 2, 93, 94, 200)]
    # an instance gflowd does not know of: its node, once made, is denied all the same
    os.mknod(dev / "nvidia-caps" / "nvidia-cap93", 0o666 | stat.S_IFCHR, os.makedev(CAPS_MAJOR, 93))
    rules = mig_caps_deny_rules([(0, 9, 0)], [(0, 9, 0)], str(proc), str(dev))
    assert rules == [DeviceRule("c", CAPS_MAJOR, m) for m in (1, 2, 93, 200)]


def test_without_the_drivers_capabilities_it_says_so_once_and_denies_no_caps(tmp_path, caplog):
    devices._said.clear()
    caplog.set_level(logging.WARNING, logger="gflowd.runtime")
    no_caps = tmp_path / "plain"
    (no_caps).mkdir()
    (no_caps / "devices").write_text("Character devices:\n195 nvidia-frontend\n")
    for _ in range(3):
        assert mig_caps_deny_rules([(0, 9, 0)], INSTANCES, str(no_caps), str(tmp_path)) == []
        assert mig_caps_deny_rules([], INSTANCES, str(no_caps), str(tmp_path)) == []
    said = [r.getMessage() for r in caplog.records if "nvidia-caps" in r.getMessage()]
    assert len(said) == 1 and "not constrained" in said[0], said
    no_major = make_proc(tmp_path / "nomajor", major=None)
    assert mig_caps_deny_rules([(0, 9, 0)], INSTANCES, str(no_major), str(tmp_path)) == []


def test_the_fake_gpu_file_gives_instances_their_gi_and_ci():
    gpus = parse_fake_gpus(
        "gpus:\n  - name: NVIDIA A100-SXM4-80GB\n    memory: 80Gi\n"
        "    mig: [{profile: 1g.10gb}, {profile: 1g.10gb, gi: 13, ci: 2}]\n"
    )
    assert [g.mig_ids for g in gpus] == [(1, 0), (13, 2)]
    with pytest.raises(ValueError, match=r"gpus\[0\]\.mig\[0\]: gi and ci must be whole numbers"):
        parse_fake_gpus("gpus:\n  - name: A100\n    memory: 80Gi\n    mig: [{profile: 1g.10gb, gi: x}]\n")


# -- cgroup v2: the same rules as the BPF device program ---------------------------------------

NODES = {  # what the `nodes` fixture (device_harness) makes
    "nvidia0": (195, 0),
    "nvidia1": (195, 1),
    "nvidiactl": (195, 255),
    **{f"nvidia-cap{minor}": (CAPS_MAJOR, minor) for minor in sorted(CAPS.values())},
    "null": (1, 3),
}


@pytest.mark.e2e
def test_a_mig_job_on_v2_opens_its_parent_and_its_own_caps_only(cgroup, nodes, tmp_path):
    proc = make_proc(tmp_path)
    rules = gpu_deny_rules([0], known=[0, 1], dev_dir=nodes)
    rules += mig_caps_deny_rules([(0, 10, 0)], INSTANCES, str(proc), nodes)
    bpf_devices.deny(cgroup, rules)
    got = opened_as_nobody(cgroup, nodes, NODES)
    denied = {"nvidia1", "nvidia-cap1", "nvidia-cap2", "nvidia-cap84", "nvidia-cap85"}
    allowed = {"nvidia0", "nvidiactl", "nvidia-cap93", "nvidia-cap94"}
    assert got == {**{n: errno.EPERM for n in denied}, **{n: errno.ENXIO for n in allowed}, "null": 0}


@pytest.mark.e2e
def test_a_whole_gpu_job_on_v2_opens_no_caps_node(cgroup, nodes, tmp_path):
    proc = make_proc(tmp_path)
    rules = gpu_deny_rules([1], known=[0, 1], dev_dir=nodes) + mig_caps_deny_rules([], INSTANCES, str(proc), nodes)
    bpf_devices.deny(cgroup, rules)
    got = opened_as_nobody(cgroup, nodes, NODES)
    caps = {f"nvidia-cap{m}": errno.EPERM for m in CAPS.values()}
    assert got == {"nvidia0": errno.EPERM, "nvidia1": errno.ENXIO, "nvidiactl": errno.ENXIO, **caps, "null": 0}


@pytest.mark.e2e
def test_a_full_mig_box_program_loads_and_denies_every_other_instance(cgroup, nodes, tmp_path):
    """8 GPUs of 7 instances each: 114 caps to deny, one program the verifier must still accept."""
    instances = [(gpu, gi, 0) for gpu in range(8) for gi in range(1, 8)]
    caps = {"mig/config": 1, "mig/monitor": 2}
    for n, (gpu, gi, ci) in enumerate(instances):
        caps[f"gpu{gpu}/mig/gi{gi}"], caps[f"gpu{gpu}/mig/gi{gi}/ci{ci}"] = 300 + 2 * n, 301 + 2 * n
    caps.update({"gpu0/mig/gi9": 84, "gpu0/mig/gi9/ci0": 85, "gpu0/mig/gi10": 93, "gpu0/mig/gi10/ci0": 94})
    proc = make_proc(tmp_path, caps)
    rules = mig_caps_deny_rules([(0, 10, 0)], [*instances, *INSTANCES], str(proc), nodes)
    assert len(rules) == len(caps) - 2
    bpf_devices.deny(cgroup, rules)
    got = opened_as_nobody(cgroup, nodes, NODES)
    assert {name: got[name] for name in ("nvidia-cap84", "nvidia-cap93", "nvidia-cap94", "nvidia-cap1")} == {
        "nvidia-cap84": errno.EPERM,
        "nvidia-cap93": errno.ENXIO,
        "nvidia-cap94": errno.ENXIO,
        "nvidia-cap1": errno.EPERM,
    }
