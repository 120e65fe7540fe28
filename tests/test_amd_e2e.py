"""AMD GPUs, end to end: a real gflowd reading GPUs through the real amdsmi code path, answered at the
hardware edge by the stand-in ``tests/amdsmi_stub/amdsmi`` (on gflowd's PYTHONPATH), beside the NVML
stand-in for a mixed box. The device folder (``--device-dir``) holds ``kfd`` and ``renderD*`` nodes made
with mknod: its ``kfd`` is how gflowd knows the machine has AMD GPUs, as ``/dev/kfd`` on a real one.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from device_harness import OPENS, box, make_nodes, need_devices_isolation, opened_by_job  # noqa: F401
from helpers import job_status, read_log, wait_for, wait_phase, write_manifest
from nvml_fixtures import fake_nvml_lib, gpu, nvml_env, write_fake_nvml  # noqa: F401
from shared_box import SYSTEM_PYTHON
from test_amd import AMD_BOX, make_drm

from controller.util.yamlio import load_one

STUB = Path(__file__).parent / "amdsmi_stub"
KFD_MAJOR = 241  # dynamic on a real box; any unused char major does here
GiB = 1 << 30
NOBODY = 65534
ENV_CODE = (
    "import os\n"
    "for k in ('ROCR_VISIBLE_DEVICES', 'HIP_VISIBLE_DEVICES', 'CUDA_VISIBLE_DEVICES'):\n"
    "    print(k, repr(os.environ.get(k)))\n"
)


def amd_gpu(local: int, **fields) -> dict:
    return {
        "name": "AMD Instinct MI300X",
        "uuid": f"{local:08x}-aaaa-bbbb-cccc-dddddddddddd",
        "memoryTotal": 192 * GiB,
        "gfx": 0,
        "renderMinor": 128 + local,
        "processes": [],
        **fields,
    }


def write_amd(path: Path, gpus: list[dict], **top) -> None:
    write_fake_nvml(path, {"gpus": gpus, **top})  # the same atomic write, JSON


@pytest.fixture
def amd_box(tmp_path):
    """(device folder with kfd, renderD128, renderD129 and renderD130, gflowd env for the amdsmi stand-in)."""
    nodes = {"kfd": (KFD_MAJOR, 0), **{f"dri/renderD{m}": (226, m) for m in (128, 129, 130)}}
    dev = make_nodes(tmp_path / f"dev-amd-{os.getpid()}", nodes)
    env = {
        "PYTHONPATH": os.pathsep.join([str(STUB), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "FAKE_AMDSMI_FILE": str(tmp_path / "fake-amdsmi.json"),
    }
    return dev, env


def job(name: str, body: str) -> str:
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n{body}"


def env_job(name: str, resources: str) -> str:
    return job(name, f"  command: [python3, -c, {json.dumps(ENV_CODE)}]\n  resources: {resources}\n")


def sleeper(name: str, resources: str) -> str:
    return job(name, f"  command: [sleep, '600']\n  resources: {resources}\n")


def job_env_seen(home: Path, name: str) -> dict[str, str | None]:
    pairs = (line.split(" ", 1) for line in read_log(home, name).splitlines() if " " in line)
    return {key: ast.literal_eval(value) for key, value in pairs}


def node_gpus(home: Path) -> list[dict]:
    try:
        return load_one((home / "node.yaml").read_text()).get("gpus") or []
    except Exception:
        return []


def test_an_amd_job_gets_rocr_visible_devices_of_its_gpu(home, gflowd, amd_box, tmp_path):
    dev, env = amd_box
    write_amd(Path(env["FAKE_AMDSMI_FILE"]), [amd_gpu(0), amd_gpu(1)])
    write_manifest(home / "jobs", "first.yaml", sleeper("first", "{gpus: 1, gpuType: MI300X}"))
    daemon = gflowd("--device-dir", dev, env=env)
    assert wait_phase(home, "first", "Running", daemon=daemon)["devices"] == [0]
    write_manifest(home / "jobs", "second.yaml", env_job("second", "{gpus: 1, gpuType: amd}"))
    status = wait_phase(home, "second", "Succeeded", daemon=daemon)
    assert status["devices"] == [1]
    assert status["deviceUUIDs"] == ["00000001-aaaa-bbbb-cccc-dddddddddddd"]
    assert job_env_seen(home, "second") == {
        "ROCR_VISIBLE_DEVICES": "1",
        "HIP_VISIBLE_DEVICES": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    gpus = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", "get", "gpus"],
        capture_output=True,
        text=True,
        env={**os.environ, "GFLOW_HOME": str(home)},
        timeout=60,
    )
    assert gpus.returncode == 0, gpus.stderr
    assert "AMD Instinct MI300X" in gpus.stdout, gpus.stdout


def test_a_mixed_box_places_by_vendor_and_a_two_gpu_job_never_mixes(home, gflowd, amd_box, nvml_env):
    dev, env = amd_box
    write_fake_nvml(nvml_env["FAKE_NVML_FILE"], {"gpus": [gpu(0), gpu(1)]})
    write_amd(Path(env["FAKE_AMDSMI_FILE"]), [amd_gpu(0), amd_gpu(1)])
    daemon = gflowd("--device-dir", dev, env={**nvml_env, **env})
    wait_for(
        lambda: [g.get("name") for g in node_gpus(home)][2:] == ["AMD Instinct MI300X"] * 2,
        message=lambda: f"node GPUs {node_gpus(home)}",
    )
    jobs = home / "jobs"
    write_manifest(jobs, "hold-nv.yaml", sleeper("hold-nv", "{gpus: 1, gpuType: nvidia}"))
    write_manifest(jobs, "hold-amd.yaml", sleeper("hold-amd", "{gpus: 1, gpuType: MI300X}"))
    assert wait_phase(home, "hold-nv", "Running", daemon=daemon)["devices"] == [0]
    assert wait_phase(home, "hold-amd", "Running", daemon=daemon)["devices"] == [2]
    write_manifest(jobs, "nv.yaml", env_job("nv", "{gpus: 1, gpuType: NVIDIA}"))
    assert wait_phase(home, "nv", "Succeeded", daemon=daemon)["devices"] == [1]
    assert job_env_seen(home, "nv")["CUDA_VISIBLE_DEVICES"] == "1"
    assert job_env_seen(home, "nv")["ROCR_VISIBLE_DEVICES"] is None
    # one NVIDIA and one AMD GPU are free: a 2-GPU job without gpuType waits rather than mix them
    write_manifest(jobs, "pair.yaml", env_job("pair", "{gpus: 2}"))
    wait_phase(home, "pair", "Pending", daemon=daemon)
    wait_for(lambda: "job/pair" in daemon.stderr(), message="gflowd to tell why pair waits")
    assert job_status(home, "pair")["phase"] == "Pending"
    os.remove(jobs / "hold-amd.yaml")  # both AMD GPUs free: the pair takes them, not GPU 1 + an AMD one
    assert wait_phase(home, "pair", "Succeeded", daemon=daemon)["devices"] == [2, 3]
    assert job_env_seen(home, "pair") == {
        "ROCR_VISIBLE_DEVICES": "0,1",
        "HIP_VISIBLE_DEVICES": "0,1",
        "CUDA_VISIBLE_DEVICES": "",
    }


def test_a_foreign_process_on_an_amd_gpu_makes_it_unmanaged(home, gflowd, amd_box):
    dev, env = amd_box
    stranger = subprocess.Popen(["sleep", "600"], user=NOBODY, group=NOBODY)
    try:
        amd_file = Path(env["FAKE_AMDSMI_FILE"])
        write_amd(amd_file, [amd_gpu(0, processes=[{"pid": stranger.pid, "vram": 3 * GiB}]), amd_gpu(1)])
        daemon = gflowd("--device-dir", dev, env=env)
        wait_for(
            lambda: [g.get("state") for g in node_gpus(home)] == ["Unmanaged", "Free"],
            message=lambda: f"node GPUs {node_gpus(home)}\n{daemon.stderr()[-2000:]}",
        )
        write_manifest(home / "jobs", "a.yaml", env_job("a", "{gpus: 1, gpuType: amd}"))
        assert wait_phase(home, "a", "Succeeded", daemon=daemon)["devices"] == [1]
        assert job_env_seen(home, "a")["ROCR_VISIBLE_DEVICES"] == "1"
        write_amd(amd_file, [amd_gpu(0), amd_gpu(1)])  # it ended: the GPU is gflow's again
        wait_for(
            lambda: [g.get("state") for g in node_gpus(home)] == ["Free", "Free"],
            message=lambda: f"node GPUs {node_gpus(home)}",
        )
    finally:
        stranger.kill()
        stranger.wait()


def test_an_amd_job_opens_kfd_and_its_render_node_only_and_a_cpu_job_neither(home, gflowd, amd_box):
    need_devices_isolation()
    dev, env = amd_box
    write_amd(Path(env["FAKE_AMDSMI_FILE"]), [amd_gpu(0), amd_gpu(1), amd_gpu(2)])
    nodes = [str(dev / "kfd"), *(str(dev / "dri" / f"renderD{m}") for m in (128, 129, 130))]
    command = f"  command: [python3, -c, {json.dumps(OPENS)}, {', '.join(nodes)}]\n"
    write_manifest(home / "jobs", "hold.yaml", sleeper("hold", "{gpus: 1, gpuType: amd}"))
    daemon = gflowd("--device-dir", dev, env=env)
    assert wait_phase(home, "hold", "Running", daemon=daemon)["devices"] == [0]
    write_manifest(home / "jobs", "amd.yaml", job("amd", command + "  resources: {gpus: 1, gpuType: amd}\n"))
    write_manifest(home / "jobs", "cpu.yaml", job("cpu", command))
    assert wait_phase(home, "amd", "Succeeded", timeout=30, daemon=daemon)["devices"] == [1]
    wait_phase(home, "cpu", "Succeeded", timeout=30, daemon=daemon)
    # no driver behind the nodes: an allowed open fails with ENXIO, a denied one with EPERM
    assert read_log(home, "amd").split() == [
        "kfd",
        "ENXIO",
        "renderD128",
        "EPERM",
        "renderD129",
        "ENXIO",
        "renderD130",
        "EPERM",
    ]
    assert read_log(home, "cpu").split() == [
        "kfd",
        "EPERM",
        "renderD128",
        "EPERM",
        "renderD129",
        "EPERM",
        "renderD130",
        "EPERM",
    ]


def test_without_amdsmi_gflowd_says_so_once_and_runs_nvidia_and_cpu_jobs(home, gflowd, amd_box, nvml_env):
    dev, _ = amd_box  # kfd is there, but amdsmi is not on the path
    write_fake_nvml(nvml_env["FAKE_NVML_FILE"], {"gpus": [gpu(0)]})
    write_manifest(home / "jobs", "nv.yaml", env_job("nv", "{gpus: 1}"))
    write_manifest(home / "jobs", "cpu.yaml", job("cpu", "  command: ['true']\n"))
    daemon = gflowd("--device-dir", dev, env=nvml_env)
    assert wait_phase(home, "nv", "Succeeded", daemon=daemon)["devices"] == [0]
    wait_phase(home, "cpu", "Succeeded", daemon=daemon)
    said = [line for line in daemon.stderr().splitlines() if "no amdsmi" in line]
    assert len(said) == 1, said
    assert "no amdsmi: the amdsmi package is not installed (pip install 'gflow-controller[amd]')" in said[0]


def test_a_users_amd_job_opens_its_own_card_node_and_not_another_amd_gpus(box, gflowd, amd_box):
    """The cardN nodes, end to end on cgroup v1: an ordinary user's AMD job (the attack: ignoring
    ROCR_VISIBLE_DEVICES and opening every /dev/dri node) opens its own GPU's card and render nodes
    and neither of another AMD GPU; cards of no AMD GPU (NVIDIA's, a BMC's VGA) stay open. The nodes
    are paired by PCI device through a sysfs made in a temp folder (``--sys-dir``)."""
    _, env = amd_box
    nodes = {**{f"card{n}": n for n in range(5)}, **{f"renderD{m}": m for m in (128, 129, 130)}}
    dri = {f"dri/{name}": (226, minor) for name, minor in nodes.items()}
    dev = make_nodes(box.root / "dev", {"kfd": (KFD_MAJOR, 0), **dri})
    sys_dir = make_drm(box.root / "sys", AMD_BOX)
    write_amd(Path(env["FAKE_AMDSMI_FILE"]), [amd_gpu(0), amd_gpu(1), amd_gpu(2)])
    paths = [str(dev / "dri" / name) for name in nodes]
    command = json.dumps([SYSTEM_PYTHON, "-c", OPENS, *paths])
    manifest = job("mine", f"  command: {command}\n  resources: {{gpus: 1, gpuType: amd}}\n")
    write_manifest(box.home / "jobs", "mine.yaml", manifest, owner=(box.user.pw_uid, box.user.pw_gid))
    daemon = gflowd("--device-dir", dev, "--sys-dir", sys_dir, home=box.home, env=env)
    unit = wait_phase(box.home, "mine", "Succeeded", timeout=60, daemon=daemon)["devices"][0]
    own = next(set(names) for names in AMD_BOX.values() if f"renderD{128 + unit}" in names)  # card, render
    others = {"card0", "card1", "card3", "renderD128", "renderD129", "renderD130"} - own
    got = opened_by_job(box.home, "mine")
    assert got == {name: "EPERM" if name in others else "ENXIO" for name in nodes}
    assert got["card2"] == got["card4"] == "ENXIO"  # NVIDIA's card and the BMC's: not AMD GPUs, open


def test_a_hung_amdsmi_call_is_said_as_amdsmis_not_nvmls(home, gflowd, amd_box):
    dev, env = amd_box
    amd_file = Path(env["FAKE_AMDSMI_FILE"])
    write_amd(amd_file, [amd_gpu(0)])
    daemon = gflowd("--device-dir", dev, env=env)
    wait_for(lambda: [g.get("state") for g in node_gpus(home)] == ["Free"], message=lambda: f"{node_gpus(home)}")
    write_amd(amd_file, [amd_gpu(0)], hangMs=600_000)  # every amdsmi call now hangs 10 min

    def inventory() -> str:
        try:
            return load_one((home / "node.yaml").read_text()).get("inventory") or ""
        except Exception:
            return ""

    said = wait_for(lambda: "not answering" in inventory() and inventory(), timeout=60, message=inventory)
    assert "amdsmi is not answering" in said and "NVML is not answering" not in said, said
    wait_for(lambda: [g.get("state") for g in node_gpus(home)] == ["Unhealthy"], message=lambda: f"{node_gpus(home)}")
    assert "NVML" not in "".join(line for line in daemon.stderr().splitlines() if "did not answer" in line)
