"""The BPF device program on the real cgroup2 mount: an ordinary user's process in the attempt's
cgroup cannot open a GPU node it was not bound to (EPERM), can open its own (ENXIO: no driver here),
the control nodes and every other device. Nodes are made with mknod in a temp dir."""

from __future__ import annotations

import errno
import os
import tempfile

import pytest
from device_harness import UNIFIED, bpf_unavailable, cgroup, nodes, opened_as_nobody  # noqa: F401

from controller.act.runtime.cgroups import bpf_devices

pytestmark = pytest.mark.skipif(bool(bpf_unavailable()), reason=bpf_unavailable() or "-")

NODES = {  # what the `nodes` fixture (device_harness) makes
    "nvidia0": (195, 0),
    "nvidia1": (195, 1),
    "nvidia7": (195, 7),
    "nvidiactl": (195, 255),
    "nvidia-modeset": (195, 254),
    "null": (1, 3),
}


@pytest.mark.e2e
def test_a_job_bound_to_gpu_1_cannot_open_gpu_0(cgroup, nodes):
    bpf_devices.confine_gpus(cgroup, [1])
    got = opened_as_nobody(cgroup, nodes, NODES)
    assert got["nvidia0"] == errno.EPERM and got["nvidia7"] == errno.EPERM
    assert got["nvidia1"] == errno.ENXIO  # allowed: the open reaches the (absent) driver
    assert got["nvidiactl"] == errno.ENXIO and got["nvidia-modeset"] == errno.ENXIO
    assert got["null"] == 0


@pytest.mark.e2e
def test_a_cpu_job_can_open_no_gpu_but_the_control_nodes(cgroup, nodes):
    bpf_devices.confine_gpus(cgroup, [])
    got = opened_as_nobody(cgroup, nodes, NODES)
    assert [got[name] for name in ("nvidia0", "nvidia1", "nvidia7")] == [errno.EPERM] * 3
    assert got["nvidiactl"] == errno.ENXIO and got["null"] == 0


@pytest.mark.e2e
def test_without_the_program_every_gpu_opens(cgroup, nodes):
    """The check above can fail: the same probe, no program, reaches the driver for every GPU."""
    got = opened_as_nobody(cgroup, nodes, NODES)
    assert [got[name] for name in ("nvidia0", "nvidia1", "nvidia7")] == [errno.ENXIO] * 3


def test_a_refused_program_says_why_in_one_line():
    with pytest.raises(bpf_devices.BpfError, match="cannot load the BPF device program"):
        bpf_devices.load(b"\x95\0\0\0\0\0\0\0")  # exit without setting r0: the verifier refuses


@pytest.mark.e2e
def test_the_v1_style_deny_rules_gflowd_computes_work_as_a_program(cgroup, nodes):
    """What a v2 attempt gets: gpu_deny_rules (known GPUs 0, 1, 7; bound to 1) as a program."""
    from controller.act.runtime.cgroups.devices import gpu_deny_rules

    bpf_devices.deny(cgroup, gpu_deny_rules([1], known=[0, 1, 7], dev_dir=nodes))
    got = opened_as_nobody(cgroup, nodes, NODES)
    assert got["nvidia0"] == errno.EPERM and got["nvidia7"] == errno.EPERM
    assert got["nvidia1"] == errno.ENXIO and got["nvidiactl"] == errno.ENXIO and got["null"] == 0


@pytest.mark.e2e
def test_a_job_bound_to_every_gpu_denies_nothing_and_the_program_still_loads(cgroup, nodes):
    """No deny rule (every GPU bound): found in the lab box, where such a job's program was refused
    (its deny tail unreachable: EINVAL) and the job ran without a cgroup."""
    bpf_devices.deny(cgroup, [])
    got = opened_as_nobody(cgroup, nodes, NODES)
    assert [got[name] for name in ("nvidia0", "nvidia1", "nvidia7", "nvidiactl")] == [errno.ENXIO] * 4
    assert got["null"] == 0


@pytest.mark.e2e
def test_a_v2_attempt_cgroup_gets_the_program_from_its_limits(nodes):
    """The wiring: Cgroups.create on v2 attaches the deny rules. This machine's cgroup2 has no
    memory controller, so the probe is made by hand with only devices available."""
    from controller.act.runtime.cgroups import Cgroups, Limits
    from controller.act.runtime.cgroups.devices import gpu_deny_rules
    from controller.act.runtime.cgroups.discover import UNIFIED as KEY
    from controller.act.runtime.cgroups.probe import FEATURES, Feature, Probe

    base = tempfile.mkdtemp(prefix="gflow-bpf-base-", dir=UNIFIED)
    features = {name: Feature(name, reason="not in this test") for name in FEATURES}
    features["devices"] = Feature("devices", base)
    cgroups = Cgroups(Probe("v2", {KEY: base}, features), "gflow")
    try:
        cgroups.prepare()
        attempt = cgroups.create("job-1", Limits(deny_devices=gpu_deny_rules([1], known=[0, 1, 7])))
        got = opened_as_nobody(attempt.dirs[KEY], nodes, NODES)
        assert got["nvidia0"] == errno.EPERM and got["nvidia7"] == errno.EPERM
        assert got["nvidia1"] == errno.ENXIO and got["null"] == 0
    finally:
        for directory in (os.path.join(base, "gflow", "job-1"), os.path.join(base, "gflow"), base):
            if os.path.isdir(directory):
                os.rmdir(directory)
