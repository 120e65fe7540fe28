"""hack/gpu-acceptance.py, the real-GPU acceptance run, on machines without a GPU.

- Its pure half (hack/gpu_facts.py, hack/gpu_probe.py's bus ids): nvidia-smi's real output
  formats, the inventory comparison (a match and each kind of mismatch), the verdicts, the report.
- The probe against a stand-in libcuda.so.1 (tests/gpu_sim/fake_cuda.c): the ctypes signatures
  meet a C ABI, CUDA_VISIBLE_DEVICES, a stop mid-allocation frees what it holds.
- The script for real in a subprocess: with no GPU (every check SKIP, exit 0, report written,
  nothing left in the temp folder); and on a simulated 2-GPU machine (stand-in libcuda, NVML and
  nvidia-smi; real gflowd, gflowctl and probe jobs), where each check must reach the outcome this
  build deserves; and interrupted with Ctrl-C, which must still clean up.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from gpu_sim_fixtures import fake_cuda_lib, gpu_sim  # noqa: F401
from nvml_fixtures import fake_nvml_lib  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
HACK = ROOT / "hack"
SCRIPT = HACK / "gpu-acceptance.py"
sys.path.insert(0, str(HACK))

import gpu_facts as facts  # noqa: E402
from gpu_probe import normalize_bus_id  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
TOKEN_VAR = "GFLOW_GPU_ACCEPTANCE_RUN"

# -- real nvidia-smi output -------------------------------------------------------------------------

# nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv,noheader,nounits
# on a DGX A100 (8 x 80 GB; 81920 MiB each) and on a workstation (H100 PCIe + RTX 4090).
QUERY_GPU_DGX = """\
0, GPU-1d5f5c6b-8b3c-3f5e-0f6a-7a1e6e0b9a11, NVIDIA A100-SXM4-80GB, 81920, 00000000:07:00.0
1, GPU-2a7c1e90-44b1-9d2e-51c3-0e8f7b6a5d22, NVIDIA A100-SXM4-80GB, 81920, 00000000:0F:00.0
2, GPU-3b8d2fa1-55c2-ae3f-62d4-1f907c7b6e33, NVIDIA A100-SXM4-80GB, 81920, 00000000:47:00.0
3, GPU-4c9e30b2-66d3-bf40-73e5-20a18d8c7f44, NVIDIA A100-SXM4-80GB, 81920, 00000000:4E:00.0
4, GPU-5daf41c3-77e4-c051-84f6-31b29e9d8055, NVIDIA A100-SXM4-80GB, 81920, 00000000:87:00.0
5, GPU-6eb052d4-88f5-d162-9507-42c3afae9166, NVIDIA A100-SXM4-80GB, 81920, 00000000:90:00.0
6, GPU-7fc163e5-9906-e273-a618-53d4b0bfa277, NVIDIA A100-SXM4-80GB, 81920, 00000000:B7:00.0
7, GPU-80d274f6-aa17-f384-b729-64e5c1c0b388, NVIDIA A100-SXM4-80GB, 81920, 00000000:BD:00.0
"""
QUERY_GPU_MIXED = """\
0, GPU-9e3f6a71-0c2b-4d8e-a5f1-7b2c3d4e5f60, NVIDIA H100 PCIe, 81559, 00000000:17:00.0
1, GPU-a04b7b82-1d3c-5e9f-b602-8c3d4e5f6071, NVIDIA GeForce RTX 4090, 24564, 00000000:65:00.0
"""

# --query-compute-apps=pid,gpu_uuid,used_memory: MIG or WDDM setups print [N/A] for memory.
COMPUTE_APPS = """\
31337, GPU-1d5f5c6b-8b3c-3f5e-0f6a-7a1e6e0b9a11, 1536
31338, GPU-2a7c1e90-44b1-9d2e-51c3-0e8f7b6a5d22, [N/A]
"""

# nvidia-smi pmon -c 1 -s um, three drivers' layouts.
PMON_R535 = """\
# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command
# Idx           #    C/G      %      %      %      %      %      %     MB     MB    name
    0      48213     C     98     41      -      -      -      -   1007      0    python3
    0          -     -      -      -      -      -      -      -      -      -    -
    1       2210     G      -      3      -      -      -      -     25      0    Xorg
"""
PMON_R470 = """\
# gpu        pid  type    sm   mem   enc   dec    fb   command
# Idx          #   C/G     %     %     %     %    MB   name
    0      48213     C    97    40     -     -  1007   python3
    1          -     -     -     -     -     -     -   -
"""
PMON_MU_FB_FIRST = """\
# gpu        pid  type    fb    sm   mem   enc   dec   command
# Idx          #   C/G    MB     %     %     %     %   name
    0      25985     C   893     0     0     -     -   python3.7
    0      92760     C   893    12     0     -     -   my job
"""


# -- parsing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, want",
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML / nvidia-smi
        ("0000:3B:00.0", "0000:3b:00.0"),  # CUDA
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000001:af:1f.7", "0001:af:1f.7"),  # a second PCI domain
        ("3b:00.0", "0000:3b:00.0"),  # lspci's short form
        (" 00000000:07:00.0\n", "0000:07:00.0"),
    ],
)
def test_bus_ids_from_nvml_and_cuda_compare_equal(text, want):
    assert normalize_bus_id(text) == want


@pytest.mark.parametrize("text", ["", "[N/A]", "GPU-1234", "0000:3b:00", "0000:3b:00.8", "zz:00.0"])
def test_a_bus_id_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="not a PCI bus id"):
        normalize_bus_id(text)


def test_query_gpu_csv_of_a_dgx_and_a_workstation():
    dgx = facts.parse_query_gpu_csv(QUERY_GPU_DGX)
    assert [g.index for g in dgx] == list(range(8))
    assert dgx[0] == facts.SmiGpu(
        0, "GPU-1d5f5c6b-8b3c-3f5e-0f6a-7a1e6e0b9a11", "NVIDIA A100-SXM4-80GB", 81920, "0000:07:00.0"
    )
    assert dgx[7].pci_bus_id == "0000:bd:00.0"
    mixed = facts.parse_query_gpu_csv(QUERY_GPU_MIXED)
    assert [(g.name, g.memory_mib) for g in mixed] == [("NVIDIA H100 PCIe", 81559), ("NVIDIA GeForce RTX 4090", 24564)]


def test_query_gpu_csv_unsupported_memory_and_every_bad_line_at_once():
    gpus = facts.parse_query_gpu_csv("0, GPU-x, NVIDIA GH200 480GB, [N/A], 00000009:01:00.0\n\n")
    assert gpus[0].memory_mib is None and gpus[0].pci_bus_id == "0009:01:00.0"
    bad = "0, GPU-x, A100, 81920\nx, GPU-y, A100, 81920, 00000000:07:00.0\n2, GPU-z, A100, lots, 00000000:0F:00.0\n"
    with pytest.raises(ValueError) as err:
        facts.parse_query_gpu_csv(bad)
    text = str(err.value)
    assert "line 1: expected 5 fields" in text and "line 2:" in text and "line 3: not a number: 'lots'" in text


def test_compute_apps_csv():
    apps = facts.parse_compute_apps_csv(COMPUTE_APPS)
    assert apps == [
        facts.ComputeApp(31337, "GPU-1d5f5c6b-8b3c-3f5e-0f6a-7a1e6e0b9a11", 1536),
        facts.ComputeApp(31338, "GPU-2a7c1e90-44b1-9d2e-51c3-0e8f7b6a5d22", None),
    ]
    assert facts.parse_compute_apps_csv("") == []
    assert facts.parse_compute_apps_csv("No running processes found\n") == []
    with pytest.raises(ValueError, match="line 1: expected 3 fields"):
        facts.parse_compute_apps_csv("31337, GPU-x\n")


def test_pmon_of_a_recent_driver():
    rows = facts.parse_pmon(PMON_R535)
    assert rows == [
        facts.PmonRow(gpu=0, pid=48213, kind="C", sm=98, mem=41, fb_mib=1007, command="python3"),
        facts.PmonRow(gpu=1, pid=2210, kind="G", sm=None, mem=3, fb_mib=25, command="Xorg"),
    ]


def test_pmon_of_an_older_driver_and_of_fb_first():
    assert facts.parse_pmon(PMON_R470) == [facts.PmonRow(0, 48213, "C", 97, 40, 1007, "python3")]
    rows = facts.parse_pmon(PMON_MU_FB_FIRST)
    assert [(r.pid, r.sm, r.fb_mib, r.command) for r in rows] == [
        (25985, 0, 893, "python3.7"),
        (92760, 12, 893, "my job"),
    ]


def test_pmon_without_a_header_or_with_short_rows_is_refused():
    with pytest.raises(ValueError, match="header"):
        facts.parse_pmon("    0      48213     C     98     41\n")
    with pytest.raises(ValueError, match="no '# gpu pid"):
        facts.parse_pmon("")
    with pytest.raises(ValueError, match="line 3: 3 fields"):
        facts.parse_pmon("# gpu pid type sm mem command\n# Idx # C/G % % name\n 0 1 C\n")


@pytest.mark.parametrize(
    "n_bytes",
    [
        81920 * MIB,
        81559 * MIB,
        24564 * MIB,
        40 * GIB,
        16 * GIB,
        512 * MIB,
        1023,
        150 * GIB + 7,
        2 * (1 << 40),
    ],
)
def test_memory_is_written_the_way_gflow_writes_node_yaml(n_bytes):
    from controller.api.units import format_quantity  # the test may import gflow; the script must not

    assert facts.format_binary(n_bytes) == format_quantity(n_bytes)


def test_quantities():
    assert facts.parse_quantity("1.5Gi") == 3 * GIB // 2
    assert facts.parse_quantity("512Mi") == 512 * MIB
    assert facts.parse_quantity(1024) == 1024
    assert facts.parse_quantity("2G") == 2 * 10**9
    assert facts.parse_quantity("lots") is None and facts.parse_quantity(None) is None


# -- the inventory comparison ------------------------------------------------------------------------


def node_of(smi: list[facts.SmiGpu]) -> list[dict]:
    """What gflow's node.yaml says for these GPUs when it is right."""
    return [
        {
            "index": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "memory": facts.format_binary(g.memory_mib * MIB),
            "memoryUsed": "0",
            "state": "Free",
            "jobs": [],
        }
        for g in smi
    ]


def test_inventory_match():
    smi = facts.parse_query_gpu_csv(QUERY_GPU_DGX + "")
    assert facts.compare_inventory(smi, node_of(smi)) == []
    mixed = facts.parse_query_gpu_csv(QUERY_GPU_MIXED)
    assert node_of(mixed)[0]["memory"] == "79.6Gi"  # node.yaml rounds; compared at that precision
    assert facts.compare_inventory(mixed, node_of(mixed)) == []


def test_inventory_each_kind_of_mismatch():
    smi = facts.parse_query_gpu_csv(QUERY_GPU_MIXED)
    good = node_of(smi)

    missing = facts.compare_inventory(smi, good[:1])
    assert missing == ["GPU 1 (GPU-a04b7b82-1d3c-5e9f-b602-8c3d4e5f6071): nvidia-smi lists it, get gpus does not"]

    extra = facts.compare_inventory(smi[:1], good)
    assert extra == ["GPU 1 (GPU-a04b7b82-1d3c-5e9f-b602-8c3d4e5f6071): get gpus lists it, nvidia-smi does not"]

    swapped = [dict(good[0], index=1), dict(good[1], index=0)]
    problems = facts.compare_inventory(smi, swapped)
    assert any(
        "GPU 0: index order differs: get gpus has GPU-a04b7b82" in p and "nvidia-smi calls GPU 1" in p for p in problems
    )

    uuid = [dict(good[0], uuid="GPU-00000000-0000-0000-0000-000000000000"), good[1]]
    assert facts.compare_inventory(smi, uuid) == [
        "GPU 0: UUID 'GPU-00000000-0000-0000-0000-000000000000' in get gpus, 'GPU-9e3f6a71-0c2b-4d8e-a5f1-7b2c3d4e5f60' in nvidia-smi"
    ]

    name = [good[0], dict(good[1], name="NVIDIA GeForce RTX 4080")]
    assert facts.compare_inventory(smi, name) == [
        "GPU 1: name 'NVIDIA GeForce RTX 4080' in get gpus, 'NVIDIA GeForce RTX 4090' in nvidia-smi"
    ]

    memory = [dict(good[0], memory="80Gi"), good[1]]
    assert facts.compare_inventory(smi, memory) == [
        "GPU 0: memory '80Gi' in get gpus, nvidia-smi's 81559 MiB is 79.6Gi"
    ]

    duplicate = facts.compare_inventory(smi, [good[0], good[0], good[1]])
    assert duplicate == ["get gpus lists GPU 0 twice"]


def test_inventory_exact_bytes_when_gflow_gives_them_and_no_memory_from_nvidia_smi():
    smi = facts.parse_query_gpu_csv(QUERY_GPU_MIXED)
    exact = [dict(n, memoryBytes=g.memory_mib * MIB) for n, g in zip(node_of(smi), smi)]
    assert facts.compare_inventory(smi, exact) == []
    exact[1]["memoryBytes"] -= MIB
    assert facts.compare_inventory(smi, exact) == [
        f"GPU 1: memory {24563 * MIB} bytes (24563 MiB) in get gpus, 24564 MiB in nvidia-smi"
    ]
    unknown = [facts.SmiGpu(0, smi[0].uuid, smi[0].name, None, smi[0].pci_bus_id)]
    assert facts.compare_inventory(unknown, node_of(smi)[:1]) == [
        "GPU 0: nvidia-smi gives no memory.total to compare with"
    ]


# -- verdicts on what the probe saw ------------------------------------------------------------------

SMI = {g.index: g for g in facts.parse_query_gpu_csv(QUERY_GPU_DGX)}


def probe_doc(
    *bus_ids: str,
    visible: str | None,
    order: str | None = "PCI_BUS_ID",
    init_error: str | None = None,
    used: list[str] | None = None,
    nodes: dict | None = None,
    cleared: bool = False,
) -> dict:
    return {
        "env": {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": order},
        "clearedVisible": cleared,
        "init": {"ok": init_error is None, "error": init_error},
        "devices": [] if init_error else [{"ordinal": i, "pciBusId": b} for i, b in enumerate(bus_ids)],
        "used": [{"pciBusId": b, "allocated": 64 * MIB, "error": None} for b in (used or [])],
        "nodes": nodes or {},
    }


def test_binding_right_and_each_way_wrong():
    ok = facts.judge_binding(probe_doc("0000:47:00.0", "0000:4e:00.0", visible="2,3"), [2, 3], SMI)
    assert ok.ok and ok.reason == "GPUs 2,3 -> CUDA sees 0000:47:00.0, 0000:4e:00.0"
    cases = {
        "CUDA sees 0000:07:00.0; NVML gives 0000:47:00.0 for GPUs 2": probe_doc("0000:07:00.0", visible="2"),
        "bound to 1 GPU(s) (2) but CUDA sees 2": probe_doc("0000:47:00.0", "0000:07:00.0", visible="2"),
        "CUDA_DEVICE_ORDER is None, not PCI_BUS_ID": probe_doc("0000:47:00.0", visible="2", order=None),
        "CUDA_VISIBLE_DEVICES is '0', bound devices are 2": probe_doc("0000:47:00.0", visible="0"),
        "cuInit failed in the job: cuInit returned CUDA_ERROR_NO_DEVICE (100)": probe_doc(
            visible="2", init_error="cuInit returned CUDA_ERROR_NO_DEVICE (100)"
        ),
    }
    for want, doc in cases.items():
        verdict = facts.judge_binding(doc, [2], SMI)
        assert not verdict.ok and verdict.reason.startswith(want), verdict.reason
    assert not facts.judge_binding(None, [2], SMI).ok
    wrong_order = facts.judge_binding(probe_doc("0000:4e:00.0", "0000:47:00.0", visible="2,3"), [2, 3], SMI)
    assert not wrong_order.ok and "NVML gives 0000:47:00.0, 0000:4e:00.0" in wrong_order.reason


def test_concurrent_jobs_must_not_share_a_device():
    apart = {"a": ([0], probe_doc("0000:07:00.0", visible="0")), "b": ([1], probe_doc("0000:0f:00.0", visible="1"))}
    assert facts.judge_distinct(apart, SMI).ok
    # gflow bound both to GPU 0: each sees what it was told, and they collide
    shared = {"a": ([0], probe_doc("0000:07:00.0", visible="0")), "b": ([0], probe_doc("0000:07:00.0", visible="0"))}
    verdict = facts.judge_distinct(shared, SMI)
    assert not verdict.ok and verdict.reason == "b and a both see 0000:07:00.0"


def test_isolation_verdicts():
    own = [1]
    fails = facts.judge_isolation(
        probe_doc(
            visible=None,
            init_error="cuInit returned CUDA_ERROR_NO_DEVICE (100)",
            cleared=True,
            nodes={"/dev/nvidia0": "EPERM"},
        ),
        own,
        SMI,
    )
    assert fails.ok and "cuInit fails" in fails.reason and "/dev/nvidia0 EPERM" in fails.reason
    only_own = facts.judge_isolation(
        probe_doc("0000:0f:00.0", visible=None, cleared=True, used=["0000:0f:00.0"]), own, SMI
    )
    assert only_own.ok and "CUDA sees only 0000:0f:00.0" in only_own.reason
    sees_all = facts.judge_isolation(probe_doc("0000:07:00.0", "0000:0f:00.0", visible=None, cleared=True), own, SMI)
    assert not sees_all.ok and sees_all.reason == "CUDA sees 0000:07:00.0 besides the job's own GPUs"
    uses = facts.judge_isolation(
        probe_doc("0000:07:00.0", "0000:0f:00.0", visible=None, cleared=True, used=["0000:07:00.0"]), own, SMI
    )
    assert not uses.ok and "allocated memory on 0000:07:00.0" in uses.reason
    opened = facts.judge_isolation(
        probe_doc("0000:0f:00.0", visible=None, cleared=True, nodes={"/dev/nvidia0": "ok"}), own, SMI
    )
    assert not opened.ok and "could open /dev/nvidia0" in opened.reason
    cpu_job = facts.judge_isolation(probe_doc("0000:07:00.0", visible=None, cleared=True), [], SMI)
    assert not cpu_job.ok
    not_cleared = facts.judge_isolation(probe_doc("0000:0f:00.0", visible="1"), own, SMI)
    assert not not_cleared.ok and "did not clear" in not_cleared.reason


@pytest.mark.parametrize(
    "usage",
    [
        [{"index": 2, "utilMean": 96.5, "utilPeak": 100, "memoryMean": "900Mi", "memoryPeak": "1Gi"}],
        {
            "gpus": [
                {"gpu": 2, "utilization": {"mean": "96.5%", "peak": 100}, "memory": {"mean": "900Mi", "peak": "1Gi"}}
            ]
        },
        {
            "2": {
                "meanUtilization": 96.5,
                "peakUtilization": 100,
                "memUtilMean": 40,
                "meanMemory": "900Mi",
                "maxMemory": 1 * GIB,
            }
        },
    ],
)
def test_gpu_usage_is_read_in_any_reasonable_shape(usage):
    entry = facts.gpu_usage_entry(usage, 2)
    assert entry == {"utilMean": 96.5, "utilPeak": 100.0, "memoryMean": 900.0 * MIB, "memoryPeak": float(GIB)}
    assert facts.gpu_usage_entry(usage, 5) is None


def test_usage_figures_against_nvidia_smi():
    busy = {"utilMean": 95.0, "utilPeak": 100.0, "memoryMean": 1000.0 * MIB, "memoryPeak": 1024.0 * MIB}
    idle = {"utilMean": 0.0, "utilPeak": 0.0, "memoryMean": 0.0, "memoryPeak": 0.0}
    assert facts.judge_usage(busy, idle, [99, 100, 98, 97, 99], 1030, tolerance=10).ok
    assert facts.judge_usage(busy, None, [99, 100, 98], 1030, tolerance=10).ok  # a 1-GPU box: no idle GPU
    low = facts.judge_usage(busy, idle, [60, 61, 59], 1030, tolerance=10)
    assert not low.ok and "mean util 95% in gflow, 60.0% in pmon" in low.reason
    memory = facts.judge_usage(busy, idle, [99, 98], 2048, tolerance=10)
    assert not memory.ok and "peak memory 1024 MiB in gflow, 2048 MiB in nvidia-smi" in memory.reason
    touched = facts.judge_usage(busy, dict(idle, memoryPeak=300.0 * MIB), [99], 1030, tolerance=10)
    assert not touched.ok and "untouched GPU" in touched.reason
    assert not facts.judge_usage(busy, idle, [], 1030, tolerance=10).ok
    assert not facts.judge_usage(None, idle, [99], 1030, tolerance=10).ok


def test_metric_and_minor_and_cgroup_parsing(tmp_path):
    text = (
        "# HELP gflow_gpu_sample_duration_seconds one NVML sweep\n"
        'gflow_gpu_sample_duration_seconds_bucket{le="0.005"} 40\n'
        "gflow_gpu_sample_duration_seconds_sum 0.08\ngflow_gpu_sample_duration_seconds_count 40\n"
        "gflow_reconcile_duration_seconds_sum 9\ngflow_reconcile_duration_seconds_count 3\n"
    )
    assert facts.metric_mean_ms(text) == pytest.approx(2.0)
    assert facts.metric_mean_ms("gflow_reconcile_duration_seconds_sum 9\n") is None

    info = tmp_path / "0000:3b:00.0"
    info.mkdir()
    (info / "information").write_text(
        "Model: \t\t NVIDIA H100 PCIe\nIRQ:   \t\t 156\nGPU UUID: \t GPU-9e3f\n"
        "Video BIOS: \t 96.00.30.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 3\n"
    )
    assert facts.device_minor("0000:3b:00.0", tmp_path) == 3
    assert facts.device_minor("0000:5e:00.0", tmp_path) is None

    hybrid = (
        "cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0\n"
        "cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,xattr,name=systemd 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
        "proc /proc proc rw 0 0\n"
    )
    mounts = facts.cgroup_mounts(hybrid)
    assert mounts == {
        "memory": Path("/sys/fs/cgroup/memory"),
        "devices": Path("/sys/fs/cgroup/devices"),
        "cpu": Path("/sys/fs/cgroup/cpu,cpuacct"),
        "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct"),
        "name=systemd": Path("/sys/fs/cgroup/systemd"),
        "": Path("/sys/fs/cgroup/unified"),
    }
    lines = [
        "5:devices:/gflow/acc-iso-gpu",
        "4:memory:/gflow/acc-iso-gpu",
        "2:cpu,cpuacct:/gflow/x",
        "0::/",
        "3:pids:/gflow/y",
    ]
    assert facts.cgroup_dirs(lines, mounts) == [
        Path("/sys/fs/cgroup/cpu,cpuacct/gflow/x"),
        Path("/sys/fs/cgroup/devices/gflow/acc-iso-gpu"),
        Path("/sys/fs/cgroup/memory/gflow/acc-iso-gpu"),
    ]  # pids is not mounted in this sample; / is the root
    v2 = facts.cgroup_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n")
    assert facts.cgroup_dirs(["0::/system.slice/gflow.slice/acc-usage"], v2) == [
        Path("/sys/fs/cgroup/system.slice/gflow.slice/acc-usage")
    ]


# -- the report ----------------------------------------------------------------------------------------


def test_checkpoint_timing_verdicts():
    confirmed = {"conditions": [{"type": "Checkpointed", "status": "True"}]}
    ok = facts.judge_checkpoint_timing({"started": 100.0, "signalled": 110.4}, confirmed, 20, 10, 3)
    assert ok.ok and ok.numbers["signalledAfterSeconds"] == 10.4
    late = facts.judge_checkpoint_timing({"started": 100.0, "signalled": 119.9}, confirmed, 20, 10, 3)
    assert not late.ok and "19.9s in, not ~10s" in late.reason
    assert not facts.judge_checkpoint_timing({"started": 100.0, "signalled": None}, confirmed, 20, 10, 3).ok
    assert not facts.judge_checkpoint_timing(None, confirmed, 20, 10, 3).ok
    unrecorded = facts.judge_checkpoint_timing({"started": 100.0, "signalled": 110.0}, {}, 20, 10, 3)
    assert not unrecorded.ok and "no Checkpointed condition" in unrecorded.reason


def test_report_json_and_exit_codes():
    results = [
        facts.Result("venv", "PASS", "ready", {"x": 1}, 0.5),
        facts.Result("inventory", "FAIL", "GPU 0: name differs", detail="gflowd.log (tail): ..."),
        facts.Result("two-gpu-job", "SKIP", "needs 2 GPUs, this machine has 1"),
    ]
    report = facts.build_report(
        results,
        gpu={"present": True, "driver": "550.54.15"},
        gflowd={"version": "gflowd 0.1.0"},
        started=1_700_000_000.0,
        finished=1_700_000_075.5,
        interrupted=False,
        run_dir="/tmp/x",
    )
    decoded = json.loads(json.dumps(report))
    assert decoded["kind"] == "GpuAcceptanceReport" and decoded["version"] == 1
    assert decoded["started"] == "2023-11-14T22:13:20Z" and decoded["seconds"] == 75.5
    assert decoded["summary"] == {"PASS": 1, "FAIL": 1, "SKIP": 1} and decoded["exitCode"] == 1
    assert decoded["checks"][1] == {
        "name": "inventory",
        "outcome": "FAIL",
        "reason": "GPU 0: name differs",
        "numbers": {},
        "seconds": 0.0,
        "detail": "gflowd.log (tail): ...",
    }
    assert results[1].line() == "FAIL inventory — GPU 0: name differs"
    assert facts.exit_code(results[:1], interrupted=False) == 0
    assert facts.exit_code(results[:1], interrupted=True) == 130
    assert facts.exit_code([results[2]], interrupted=False) == 0
    assert [r.name for r in facts.all_skipped("no GPU")] == facts.CHECK_NAMES


# -- the probe against a stand-in libcuda ----------------------------------------------------------------


def probe(env: dict[str, str], *args: str, timeout: float = 60) -> dict:
    out = subprocess.run(
        [sys.executable, str(HACK / "gpu_probe.py"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def cuda_env(lib: Path, state: Path, visible: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(
        LD_LIBRARY_PATH=str(lib),
        FAKE_CUDA_STATE=str(state),
        FAKE_CUDA_GPUS="0000:3B:00.0|NVIDIA H100 PCIe|85520809984;0000:5E:00.0|NVIDIA H100 PCIe|85520809984",
    )
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def test_probe_sees_what_cuda_visible_devices_allows(fake_cuda_lib, tmp_path):
    all_gpus = probe(cuda_env(fake_cuda_lib, tmp_path, None), "--use", "none")
    assert [d["pciBusId"] for d in all_gpus["devices"]] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert (
        all_gpus["devices"][0]["rawPciBusId"] == "0000:3B:00.0" and all_gpus["devices"][0]["totalMemory"] == 85520809984
    )

    second = probe(cuda_env(fake_cuda_lib, tmp_path, "1"), "--use", "first", "--alloc-mib", "64", "--busy", "0.2")
    assert [d["pciBusId"] for d in second["devices"]] == ["0000:5e:00.0"]
    assert second["used"] == [
        {"ordinal": 0, "pciBusId": "0000:5e:00.0", "context": True, "allocated": 64 * MIB, "error": None}
    ]
    assert second["busy"]["memsets"] > 0 and second["phase"] == "done"

    none = probe(cuda_env(fake_cuda_lib, tmp_path, ""), "--use", "all")
    assert none["init"] == {"ok": False, "error": "cuInit returned CUDA_ERROR_NO_DEVICE (100)", "code": 100}
    cleared = probe(
        cuda_env(fake_cuda_lib, tmp_path, ""),
        "--clear-visible",
        "--use",
        "none",
        "--open-node",
        str(tmp_path / "nvidia9"),
    )
    assert cleared["clearedVisible"] and len(cleared["devices"]) == 2
    assert cleared["nodes"] == {str(tmp_path / "nvidia9"): "ENOENT"}

    too_much = probe(cuda_env(fake_cuda_lib, tmp_path, "0"), "--use", "first", "--alloc-mib", str(90 * 1024))
    assert too_much["used"][0]["error"] == "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY (2)"


def test_probe_exit_on_error_fails_as_a_cuda_program_does_and_gflow_names_it(fake_cuda_lib, tmp_path):
    """cuda-oom-reason's job: the driver's words on stderr, exit 1; gflowd's classification of that
    log (the one table, controller/model/failures.py) is CUDAOutOfMemory, not a bare Error."""
    from controller.model.failures import classify

    env = cuda_env(fake_cuda_lib, tmp_path, "0")
    argv = [sys.executable, str(HACK / "gpu_probe.py"), "--use", "first", "--alloc-mib", str(160 * 1024)]
    ended = subprocess.run([*argv, "--exit-on-error"], env=env, capture_output=True, text=True, timeout=60)
    assert ended.returncode == 1, ended.stderr
    lines = ended.stderr.splitlines()
    assert lines[0] == "gpu_probe: CUDA error: out of memory", lines
    assert json.loads(ended.stdout.splitlines()[-1])["phase"] == "failed"
    assert classify(1, None, None, (), lines).reason == "CUDAOutOfMemory"
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode == 0  # without it: a report


@pytest.mark.e2e
def test_probe_without_libcuda_says_so(tmp_path):
    doc = probe(dict(os.environ), "--library", str(tmp_path / "libcuda.so.1"))
    assert not doc["init"]["ok"] and doc["init"]["error"].startswith(f"cannot load {tmp_path / 'libcuda.so.1'}")


def test_probe_stopped_mid_allocation_frees_its_memory(fake_cuda_lib, tmp_path):
    state, out = tmp_path / "state", tmp_path / "probe.json"
    state.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HACK / "gpu_probe.py"),
            "--out",
            str(out),
            "--use",
            "first",
            "--alloc-mib",
            "8192",
            "--alloc-step-mib",
            "256",
            "--step-interval",
            "0.2",
        ],
        env=cuda_env(fake_cuda_lib, state, "0"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and json.loads(out.read_text())["used"][0]["allocated"] >= 512 * MIB):
            assert time.monotonic() < deadline, "the probe never allocated"
            time.sleep(0.05)
        held = (state / str(proc.pid)).read_text().split()
        assert int(held[1]) >= 512 * MIB + (256 << 20)  # allocations plus the context
        os.kill(proc.pid, signal.SIGTERM)
        os.kill(proc.pid, signal.SIGTERM)  # the supervisor signals the group and the pid
        stdout, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    doc = json.loads(stdout.strip().splitlines()[-1])
    assert doc["phase"] == "stopped" and doc["stoppedBy"] == "SIGTERM"
    assert (state / str(proc.pid)).read_text() == ""  # every byte and the context given back


# -- the script, for real -----------------------------------------------------------------------------------


def run_script(
    tmp_path: Path, env: dict[str, str], *args: str, timeout: float = 600
) -> tuple[subprocess.CompletedProcess, dict]:
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    report = tmp_path / "report.json"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--report", str(report), *args],
        env=dict(env, TMPDIR=str(temp)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.stderr == "" or "Traceback" not in out.stderr, out.stderr
    assert report.exists(), (out.stdout, out.stderr)
    assert list(temp.iterdir()) == [], "the run left files in the temp folder"
    return out, json.loads(report.read_text())


def fake_tool(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


def assert_all_skipped(out: subprocess.CompletedProcess, report: dict, why: str) -> None:
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    assert lines[0] == f"gpu-acceptance: no NVIDIA GPU here ({why}): every check SKIP"
    assert [line.split()[:2] for line in lines[1:-1]] == [["SKIP", name] for name in facts.CHECK_NAMES]
    assert lines[-1].startswith(f"summary: 0 PASS, 0 FAIL, {len(facts.CHECK_NAMES)} SKIP")
    assert report["summary"] == {"PASS": 0, "FAIL": 0, "SKIP": len(facts.CHECK_NAMES)} and report["exitCode"] == 0
    assert report["gpu"] == {"present": False, "reason": why}
    assert {c["outcome"] for c in report["checks"]} == {"SKIP"}


@pytest.mark.e2e
def test_no_gpu_on_this_machine_every_check_skips(tmp_path):
    env = dict(
        os.environ,
        PATH=os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()),
    )
    out, report = run_script(tmp_path, env)
    assert_all_skipped(out, report, "nvidia-smi is not on the PATH")


@pytest.mark.e2e
def test_nvidia_smi_without_a_driver_skips(tmp_path):
    tools = fake_tool(
        tmp_path / "bin",
        "nvidia-smi",
        "#!/bin/sh\n"
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        'Make sure that the latest NVIDIA driver is installed and running."\nexit 9\n',
    )
    out, report = run_script(tmp_path, dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}"))
    assert_all_skipped(
        out,
        report,
        "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
    )


@pytest.mark.e2e
def test_gpus_listed_but_no_libcuda_skips(tmp_path):
    if (
        subprocess.run(
            [sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True
        ).returncode
        == 0
    ):
        pytest.skip("this machine has a libcuda.so.1")
    tools = fake_tool(tmp_path / "bin", "nvidia-smi", f"#!/bin/sh\nprintf '%s' '{QUERY_GPU_MIXED}'\n")
    out, report = run_script(tmp_path, dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}"))
    assert report["gpu"]["reason"].startswith(
        "libcuda.so.1 cannot be loaded (libcuda.so.1: cannot open shared object file"
    )
    assert_all_skipped(out, report, report["gpu"]["reason"])


@pytest.mark.e2e
def test_default_report_is_kept_in_the_run_folder_alone(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), PATH="/usr/bin:/bin")
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    path = Path(out.stdout.splitlines()[-1].rsplit("; report ", 1)[1])
    (folder,) = temp.iterdir()
    assert path == folder / "report.json" and list(folder.iterdir()) == [path]
    assert json.loads(path.read_text())["summary"]["SKIP"] == len(facts.CHECK_NAMES)


@pytest.mark.e2e
def test_unknown_check_name_is_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "inventory,warp-drive"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--only: unknown check(s) warp-drive" in out.stderr.splitlines()[-1]


def gflowd_features() -> dict[str, bool]:
    help_text = subprocess.run(
        [str(Path(sys.executable).parent / "gflowd"), "--help"], capture_output=True, text=True
    ).stdout
    return {"cgroups": "--cgroups" in help_text, "unusedGpuWindow": "--unused-gpu-window" in help_text}


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # replaced meanwhile
        return ""


def leftover_processes(script_pid: int) -> list[int]:
    """Processes carrying the token of the run the script with this pid made."""
    prefix = f"{TOKEN_VAR}={script_pid}-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if any(v.startswith(prefix) for v in (entry / "environ").read_bytes().split(b"\0")):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def kill_run(proc: subprocess.Popen) -> list[int]:
    """Stop the script if a test failed midway, and every process its run left; what was left."""
    proc.kill()
    proc.wait()
    left = leftover_processes(proc.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.fixture
def short_tmp():
    """TMPDIR for a run that starts gflowd: its home must stay short, as gflowd binds an AF_UNIX
    socket under it (108 bytes at most), which pytest's deep tmp_path can exceed."""
    path = Path(tempfile.mkdtemp(prefix="gacc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_simulated_two_gpu_machine_every_check_reaches_its_outcome(gpu_sim, tmp_path, short_tmp):
    _, env = gpu_sim(2)
    temp = short_tmp
    report_path = tmp_path / "report.json"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--report", str(report_path), "--timeout-scale", "3"],
        env=dict(os.environ, **env, TMPDIR=str(temp)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        left = kill_run(proc)
    assert left == [], "the run left processes behind"
    assert "Traceback" not in stderr, stderr
    report = json.loads(report_path.read_text())
    outcome = {c["name"]: c for c in report["checks"]}
    assert list(outcome) == facts.CHECK_NAMES

    passes = [
        "venv",
        "cuda-driver",
        "gflowd-nvml",
        "inventory",
        "one-gpu-job",
        "two-gpu-job",
        "concurrent-jobs",
        "shared-gpu-memory",
        "foreign-process",
        "cuda-oom-reason",
        "apply-to-first-cuda",
        "nvml-sampling-cost",
        "checkpoint-signal",
        "reclaimed-leak",
        "cleanup",
    ]
    assert {n: outcome[n]["outcome"] for n in passes} == {n: "PASS" for n in passes}, stdout
    assert outcome["inventory"]["reason"].startswith("2 GPU(s) match (NVIDIA H100 80GB HBM3)")
    assert outcome["two-gpu-job"]["reason"] == "GPUs 0,1 -> CUDA sees 0000:3b:00.0, 0000:5e:00.0"
    assert "acc-concurrent-2 waited (Resources)" in outcome["concurrent-jobs"]["reason"]
    assert outcome["shared-gpu-memory"]["numbers"]["reason"] == "GPUMemoryExceeded"
    assert outcome["foreign-process"]["numbers"]["gpu"] in (0, 1)
    assert outcome["cuda-oom-reason"]["numbers"]["reason"] == "CUDAOutOfMemory"
    if not os.path.exists("/dev/kfd"):  # no AMD GPU: the AMD checks skip, saying so
        for name in ("amd-inventory", "amd-job"):
            assert (
                outcome[name]["outcome"] == "SKIP" and outcome[name]["reason"] == "no AMD GPU: /dev/kfd does not exist"
            )

    features = gflowd_features()
    later = {
        "isolation-gpu-job": ("cgroups", "gflowd --cgroups"),
        "isolation-cpu-job": ("cgroups", "gflowd --cgroups"),
        "gpus-unused": ("unusedGpuWindow", "gflowd --unused-gpu-window"),
    }
    for name, (feature, what) in later.items():
        if not features[feature]:
            assert outcome[name]["outcome"] == "FAIL" and outcome[name]["reason"].startswith(
                f"feature missing in this build: {what}"
            )
        else:  # the stand-in libcuda ignores device cgroups: only "it ran and judged" can be asserted
            assert outcome[name]["outcome"] != "SKIP" and outcome[name]["reason"]
    if not features["unusedGpuWindow"]:
        assert outcome["gpu-usage-figures"]["reason"].startswith("feature missing in this build: status.gpuUsage")
        assert len(outcome["gpu-usage-figures"]["numbers"]["pmonSm"]) >= 5  # pmon was sampled all the same
    assert proc.returncode == (1 if "FAIL" in {c["outcome"] for c in outcome.values()} else 0)
    assert stdout.splitlines()[-1].startswith(
        f"summary: {report['summary']['PASS']} PASS, {report['summary']['FAIL']} FAIL"
    )
    assert list(temp.iterdir()) == []


def test_isolation_checks_fail_when_a_job_can_reach_another_gpu(gpu_sim, tmp_path, short_tmp):
    """A gflowd that takes --cgroups but isolates nothing (here: the real one behind a shim that
    drops the flag; the stand-in libcuda ignores device cgroups anyway) must fail both checks,
    naming the GPU the job could use."""
    _, env = gpu_sim(2)
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    real = Path(sys.executable).parent
    for tool in ("gflowctl", "python"):
        (venv / tool).symlink_to(real / tool)
    fake_tool(
        venv,
        "gflowd",
        f"""#!{sys.executable}
import os, subprocess, sys
real, args = "{real / "gflowd"}", sys.argv[1:]
if "--help" in args:
    print(subprocess.run([real, "--help"], capture_output=True, text=True).stdout + "  --cgroups {{auto,required,off}}")
    sys.exit(0)
if "--cgroups" in args:
    del args[args.index("--cgroups"):args.index("--cgroups") + 2]
os.execv(real, [real, *args])
""",
    )
    out, report = run_script(
        short_tmp,
        dict(os.environ, **env),
        "--venv",
        str(venv.parent),
        "--timeout-scale",
        "3",
        "--only",
        "isolation-gpu-job,isolation-cpu-job",
    )
    outcome = {c["name"]: c for c in report["checks"]}
    assert outcome["venv"]["reason"].endswith("given with --venv, not rebuilt)")
    gpu_job, cpu_job = outcome["isolation-gpu-job"], outcome["isolation-cpu-job"]
    assert gpu_job["outcome"] == "FAIL" and gpu_job["reason"].startswith(
        "the job allocated memory on 0000:3b:00.0, not its own GPU"
    )
    assert gpu_job["numbers"]["own"] == [1] and gpu_job["numbers"]["otherJobGpu"] == 0
    assert cpu_job["outcome"] == "FAIL" and cpu_job["reason"].startswith(
        "the job allocated memory on 0000:3b:00.0, 0000:5e:00.0"
    )
    assert "gflowd says nothing about cgroups in get node" in cpu_job["reason"]
    assert outcome["cleanup"]["outcome"] == "PASS" and out.returncode == 1


def test_ctrl_c_mid_run_still_cleans_up(gpu_sim, tmp_path, short_tmp):
    _, env = gpu_sim(1)
    temp = short_tmp
    report_path = tmp_path / "report.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--report",
            str(report_path),
            "--timeout-scale",
            "3",
            "--only",
            "concurrent-jobs,foreign-process",
        ],
        env=dict(os.environ, **env, TMPDIR=str(temp)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as at a prompt, whatever the worker ignores
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("PASS gflowd-nvml"):
                break
        else:
            pytest.fail(f"gflowd never started: {''.join(lines)}")
        # Ctrl-C while a job of concurrent-jobs runs: it holds its GPU until the check has seen every
        # job settle (seconds), so the signal lands mid-check. Watching /proc for the job's processes
        # instead was too slow on a loaded machine: the signal came during the cleanup, which ignores it.
        deadline = time.monotonic() + 120
        while not any(
            "phase: Running" in _text(status)
            for status in temp.glob("gflow-gpu-acceptance-*/home/status/acc-concurrent-*.yaml")
        ):
            assert time.monotonic() < deadline and proc.poll() is None, f"no job of concurrent-jobs started: {lines}"
            time.sleep(0.05)
        assert len(leftover_processes(proc.pid)) >= 3  # gflowd, a supervisor, a job: the cleanup has work to do
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=180)
    finally:
        left = kill_run(proc)
    assert proc.returncode == 130, rest
    assert "gpu-acceptance: interrupted; cleaning up" in rest and "Traceback" not in stderr
    assert left == []
    report = json.loads(report_path.read_text())
    assert report["interrupted"] is True and report["exitCode"] == 130
    outcome = {c["name"]: c for c in report["checks"]}
    assert outcome["cleanup"]["outcome"] == "PASS", outcome["cleanup"]
    assert outcome["foreign-process"] == dict(outcome["foreign-process"], outcome="SKIP", reason="not run: interrupted")
    assert list(temp.iterdir()) == []


def test_amd_verdicts():
    good = {
        "available": True,
        "describe": "amdsmi",
        "gpus": [
            {
                "local_index": 0,
                "healthy": True,
                "uuid": "u",
                "name": "AMD Instinct MI300X",
                "memory_total": 1,
                "minor": 128,
            }
        ],
    }
    assert facts.judge_amd(good, {128}).ok
    assert "no /dev/dri/renderD128" in facts.judge_amd(good, set()).reason
    assert not facts.judge_amd({"available": False, "describe": "no amdsmi: x"}, {128}).ok
    assert not facts.judge_amd({"available": True, "gpus": []}, set()).ok
    assert not facts.judge_amd(None, set()).ok
    assert facts.judge_amd({**good, "cards": {"128": [1]}}, {128}).ok
    unpaired = facts.judge_amd({**good, "cards": {"128": []}}, {128})
    assert not unpaired.ok and "pairs renderD128 with card nodes [], not one" in unpaired.reason


def test_free_memory_is_read_from_nvidia_smi_and_judged_within_a_tolerance():
    assert facts.parse_free_csv("0, 81037\n1, [N/A]\n") == {0: 81037, 1: None}
    node = [{"index": 0, "memoryFree": "79.1Gi"}, {"index": 1, "memoryFree": "80Gi"}]
    ok = facts.judge_free_memory({0: 81000, 1: None}, node)
    assert ok.ok and ok.reason == "within 512 MiB on 2 GPU(s)"
    off = facts.judge_free_memory({0: 60000, 1: 81920}, node)
    assert not off.ok and off.reason == "GPU 0: gflow says 80998 MiB free, nvidia-smi 60000 MiB"
    missing = facts.judge_free_memory({0: 81000}, [{"index": 0, "memory": "80Gi"}])
    assert not missing.ok and "no memoryFree" in missing.reason


def test_mig_caps_isolation_verdicts():
    own = {"/dev/nvidia-caps/nvidia-cap93": "ok", "/dev/nvidia-caps/nvidia-cap94": "ok"}
    denied = {"/dev/nvidia-caps/nvidia-cap1": "EPERM", "/dev/nvidia-caps/nvidia-cap84": "EPERM"}
    good = facts.judge_mig_caps(probe_doc("0000:07:00.0", visible=None, cleared=True, nodes={**own, **denied}))
    assert good.ok and "the other 2 EPERM" in good.reason
    sibling_open = {**own, "/dev/nvidia-caps/nvidia-cap84": "ok"}  # no caps isolation: a sibling's caps open
    assert not facts.judge_mig_caps(probe_doc(visible=None, cleared=True, nodes=sibling_open)).ok
    two_seen = probe_doc("0000:07:00.0", "0000:07:00.0", visible=None, cleared=True, nodes={**own, **denied})
    assert "CUDA sees 2 devices" in facts.judge_mig_caps(two_seen).reason
    assert not facts.judge_mig_caps(None).ok


AMD_GPUS = [  # a box with two AMD GPUs after two NVIDIA ones: gflow ids 2 and 3, ROCm's 0 and 1
    {"id": 2, "localIndex": 0, "render": 128, "cards": [1]},
    {"id": 3, "localIndex": 1, "render": 129, "cards": [2]},
]
ISOLATED = "cgroup v1: memory, cpuset, pids, devices, cputime, freezer; no kill: cgroup v1 has no cgroup.kill"


def amd_job_doc(**nodes: str) -> dict:
    """What the amd-job check's program records for a job bound to gflow GPU 3 (ROCm's 1)."""
    seen = {
        "/dev/kfd": "ok",
        "/dev/dri/renderD128": "EPERM",
        "/dev/dri/renderD129": "ok",
        "/dev/dri/card1": "EPERM",
        "/dev/dri/card2": "ok",
    }
    env = {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": ""}
    return {"env": env, "nodes": {**seen, **nodes}}


def test_amd_job_verdicts():
    done = {"phase": "Succeeded", "devices": [3]}
    good = facts.judge_amd_job(amd_job_doc(), done, AMD_GPUS, ISOLATED)
    assert good.ok, good.reason
    assert good.reason == (
        "GPU 3 -> ROCR/HIP_VISIBLE_DEVICES=1, CUDA_VISIBLE_DEVICES empty, opens /dev/kfd; "
        "other AMD GPUs' nodes EPERM: /dev/dri/renderD128, /dev/dri/card1"
    )

    wrong = amd_job_doc()
    wrong["env"].update(ROCR_VISIBLE_DEVICES="3", CUDA_VISIBLE_DEVICES=None)
    verdict = facts.judge_amd_job(wrong, done, AMD_GPUS, ISOLATED)
    assert not verdict.ok
    assert verdict.reason == "ROCR_VISIBLE_DEVICES is '3', not '1'; CUDA_VISIBLE_DEVICES is None, not set empty"
    on_nvidia = facts.judge_amd_job(amd_job_doc(), {"phase": "Succeeded", "devices": [0]}, AMD_GPUS, ISOLATED)
    assert not on_nvidia.ok and on_nvidia.reason == "bound to GPUs [0], the AMD GPUs are [2, 3]"

    leak = facts.judge_amd_job(amd_job_doc(**{"/dev/dri/renderD128": "ok"}), done, AMD_GPUS, ISOLATED)
    assert not leak.ok and leak.reason == "another AMD GPU's /dev/dri/renderD128 is ok, not EPERM"
    card = facts.judge_amd_job(amd_job_doc(**{"/dev/dri/card1": "ok"}), done, AMD_GPUS, ISOLATED)
    assert not card.ok and "/dev/dri/card1 is ok, not EPERM" in card.reason
    own_denied = facts.judge_amd_job(amd_job_doc(**{"/dev/kfd": "EPERM"}), done, AMD_GPUS, ISOLATED)
    assert not own_denied.ok and own_denied.reason == "cannot open /dev/kfd: EPERM"

    # no device isolation: the other GPU's nodes open, and the verdict says so rather than failing
    open_all = amd_job_doc(**{"/dev/dri/renderD128": "ok", "/dev/dri/card1": "ok"})
    for limits in ("cgroups unavailable: not root", "cgroup v1: memory, cpuset; no devices: not mounted", None):
        loose = facts.judge_amd_job(open_all, done, AMD_GPUS, limits)
        assert loose.ok and loose.numbers["isolated"] is False
        assert "not isolated: gflowd reports no device isolation" in loose.reason
        assert loose.reason.endswith("other AMD GPUs' nodes opened: /dev/dri/renderD128, /dev/dri/card1")

    failed = facts.judge_amd_job(amd_job_doc(), {"phase": "Failed", "reason": "Error", "message": "exit 1"}, AMD_GPUS)
    assert not failed.ok and failed.reason == "the job ended Failed/Error: exit 1"
    assert not facts.judge_amd_job(None, done, AMD_GPUS, ISOLATED).ok
    alone = facts.judge_amd_job(amd_job_doc(), done, AMD_GPUS[1:], ISOLATED)
    assert alone.ok and alone.reason.endswith("no other AMD GPU here to be denied")


def test_amd_job_check_is_registered_after_the_amd_inventory():
    names = facts.CHECK_NAMES
    assert names.index("amd-job") == names.index("amd-inventory") + 1
    assert "amd-job" in [r.name for r in facts.all_skipped("no GPU")]
    script = SCRIPT.read_text()
    assert '("amd-job", gflow, self.check_amd_job)' in script  # a mixed box: the NVML run's gflowd
    assert '("amd-job", {"venv"}, self.check_amd_job)' in script  # an AMD-only box: a gflowd on amdsmi


@pytest.mark.e2e
def test_amd_job_program_records_what_the_job_was_given(tmp_path, monkeypatch):
    """The amd-job check's program, run as a process: unset is None, set-empty is "", and a node it
    cannot open is named by its errno (here /dev/kfd, absent on a machine without AMD GPUs)."""
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_acceptance", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    program = tmp_path / "amd_job.py"
    program.write_text(module.AMD_JOB)
    out = tmp_path / "acc-amd-job.json"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VISIBLE_DEVICES")}
    env.update(ROCR_VISIBLE_DEVICES="1", CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, str(program), str(out)], env=env, check=True, timeout=60)
    doc = json.loads(out.read_text())
    assert doc["env"] == {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": None, "CUDA_VISIBLE_DEVICES": ""}
    assert any(line.startswith("0::") or line.count(":") >= 2 for line in doc["cgroups"])
    if not os.path.exists("/dev/kfd"):
        assert doc["nodes"]["/dev/kfd"] == "ENOENT"
        verdict = facts.judge_amd_job(doc, {"phase": "Succeeded", "devices": [3]}, AMD_GPUS, ISOLATED)
        assert not verdict.ok
        assert verdict.reason.startswith("HIP_VISIBLE_DEVICES is None, not '1'; cannot open /dev/kfd: ENOENT")


def test_device_isolation_is_read_from_the_limits_line_gflowd_writes():
    from controller.act.runtime.cgroups.probe import FEATURES, Feature, Probe

    def summary(mode: str, denied: set[str]) -> str:
        features = {
            n: Feature(n, reason="not mounted") if n in denied else Feature(n, f"/sys/fs/cgroup/{n}") for n in FEATURES
        }
        return Probe(mode, {}, features).summary()

    assert facts.devices_isolated(summary("v1", set()))
    assert facts.devices_isolated(summary("v2", {"freezer", "kill"}))
    assert not facts.devices_isolated(summary("v1", {"devices"}))
    assert not facts.devices_isolated(Probe.none("not root").summary())
    assert not facts.devices_isolated(None)
