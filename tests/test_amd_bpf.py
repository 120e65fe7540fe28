"""AMD device isolation on cgroup v2: the rules gflowd computes for an AMD job (its render node and
/dev/kfd) and for a CPU job, as the BPF device program a v2 attempt gets, checked by opening real
nodes made with mknod as nobody from inside the cgroup (ENXIO: allowed, no driver; EPERM: denied)."""

from __future__ import annotations

import errno

import pytest
from device_harness import bpf_unavailable, cgroup, nodes, opened_as_nobody  # noqa: F401
from test_amd import AMD_BOX, make_drm

from controller.act.runtime.cgroups import bpf_devices
from controller.act.runtime.cgroups.devices import amd_deny_rules, gpu_deny_rules

pytestmark = [pytest.mark.skipif(bool(bpf_unavailable()), reason=bpf_unavailable() or "-"), pytest.mark.e2e]

PROBED = {"kfd": (241, 0), "renderD128": (226, 128), "renderD129": (226, 129), "nvidia0": (195, 0), "null": (1, 3)}
CARDS = {f"card{n}": (226, n) for n in range(5)}  # test_amd.AMD_BOX: card1, card0, card3 AMD's; card2, card4 not
NODES = {**PROBED, **CARDS}  # what the `nodes` fixture (device_harness) makes


def test_an_amd_job_on_v2_opens_kfd_and_its_render_node_only(cgroup, nodes):
    rules = gpu_deny_rules([], known=[0], dev_dir=nodes) + amd_deny_rules([129], [128, 129], nodes)
    bpf_devices.deny(cgroup, rules)
    got = opened_as_nobody(cgroup, nodes, PROBED)
    assert got == {"kfd": errno.ENXIO, "renderD128": errno.EPERM, "renderD129": errno.ENXIO,
                   "nvidia0": errno.EPERM, "null": 0}  # fmt: skip


def test_a_cpu_job_on_v2_opens_neither_kfd_nor_a_render_node(cgroup, nodes):
    rules = gpu_deny_rules([], known=[0], dev_dir=nodes) + amd_deny_rules([], [128, 129], nodes)
    bpf_devices.deny(cgroup, rules)
    got = opened_as_nobody(cgroup, nodes, PROBED)
    assert got == {"kfd": errno.EPERM, "renderD128": errno.EPERM, "renderD129": errno.EPERM,
                   "nvidia0": errno.EPERM, "null": 0}  # fmt: skip


def test_an_amd_job_on_v2_opens_its_own_card_node_only(cgroup, nodes, tmp_path):
    sys_dir = make_drm(tmp_path / "sys", AMD_BOX)
    rules = amd_deny_rules([129], [128, 129, 130], nodes, str(sys_dir))  # renderD129 is card0's GPU
    bpf_devices.deny(cgroup, rules)
    got = opened_as_nobody(cgroup, nodes, [*CARDS, "renderD129"])
    assert got == {"card0": errno.ENXIO, "card1": errno.EPERM, "card2": errno.ENXIO, "card3": errno.EPERM,
                   "card4": errno.ENXIO, "renderD129": errno.ENXIO}  # fmt: skip
