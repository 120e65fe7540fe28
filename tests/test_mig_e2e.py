"""MIG instances as schedulable units, end to end: a real gflowd on a fake-GPU file whose GPU 0 is
split into MIG instances (``mig: [{profile: 1g.10gb}, ...]``), real jobs, ``gflowctl run`` and
``get gpus`` as users meet them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import helpers
from helpers import job_status, read_log, wait_for, wait_phase, write_manifest

# GPU 0 sliced in two 1g.10gb instances (units 2 and 3: ids continue after the 2 physical GPUs);
# GPU 1 whole (unit 1, its NVML index)
SLICED = """\
gpus:
  - name: NVIDIA A100-SXM4-80GB
    memory: 80Gi
    mig: [{profile: 1g.10gb}, {profile: 1g.10gb}]
  - {name: NVIDIA A100-SXM4-80GB, memory: 80Gi}
"""
MIG_UUIDS = {2: "MIG-fake-0000-0000-0000-000000000000", 3: "MIG-fake-0000-0001-0000-000000000000"}


def held_job(name: str, release: Path, gpu_type: str | None = None, gpus: int = 1) -> str:
    kind = f", gpuType: {gpu_type}" if gpu_type else ""
    return f"""\
metadata: {{name: {name}}}
spec:
  resources: {{gpus: {gpus}{kind}}}
  script: |
    echo "devices=$CUDA_VISIBLE_DEVICES"
    while [ ! -e {release}/{name} ]; do sleep 0.05; done
"""


def ctl(home: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return helpers.ctl(home, *argv, cwd=cwd, env={"XDG_STATE_HOME": str(home.parent / "state")})


def seen_devices(home: Path, name: str) -> str:
    wait_for(lambda: "devices=" in read_log(home, name), timeout=60, message=f"{name} to print its devices")
    return read_log(home, name).split("devices=")[1].split()[0]


def test_mig_jobs_share_the_sliced_gpu_and_whole_gpu_jobs_never_land_on_it(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(SLICED)
    release = tmp_path / "release"
    release.mkdir()
    daemon = gflowd("--fake-gpus", fake)
    for name in ("slice-a", "slice-b"):
        write_manifest(home / "jobs", f"{name}.yaml", held_job(name, release, "1g.10gb"))
    write_manifest(home / "jobs", "whole-a.yaml", held_job("whole-a", release))

    slices = {name: wait_phase(home, name, "Running", daemon=daemon) for name in ("slice-a", "slice-b")}
    assert sorted(s["devices"][0] for s in slices.values()) == [2, 3]  # both instances of GPU 0, at once
    for name, status in slices.items():
        (unit,) = status["devices"]
        assert status["deviceUUIDs"] == [MIG_UUIDS[unit]]
        assert seen_devices(home, name) == MIG_UUIDS[unit]  # CUDA names a MIG instance by its UUID
    first = wait_phase(home, "whole-a", "Running", daemon=daemon)
    assert first["devices"] == [1] and seen_devices(home, "whole-a") == "1"
    write_manifest(home / "jobs", "whole-b.yaml", held_job("whole-b", release))
    # the other whole-GPU job waits for GPU 1, though GPU 0's instances are free again soon
    for name in ("slice-a", "slice-b"):
        (release / name).touch()
        wait_phase(home, name, "Succeeded", daemon=daemon)
    waiting = wait_phase(home, "whole-b", "Pending", daemon=daemon)
    wait_for(lambda: (job_status(home, "whole-b") or {}).get("reason") == "Resources", timeout=60)
    assert waiting.get("devices") in (None, [])
    (release / "whole-a").touch()
    assert wait_phase(home, "whole-b", "Running", daemon=daemon)["devices"] == [1]
    (release / "whole-b").touch()
    wait_phase(home, "whole-b", "Succeeded", daemon=daemon)

    table = ctl(home, "get", "gpus")
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
    assert sorted(rows) == ["1", "2", "3"]
    assert "MIG 1g.10gb (GPU 0)" in rows["2"] and "10Gi" in rows["2"]
    assert "NVIDIA A100-SXM4-80GB" in rows["1"]


def test_a_profile_no_instance_has_is_unschedulable_and_says_what_there_is(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(SLICED)
    daemon = gflowd("--fake-gpus", fake)
    write_manifest(home / "jobs", "big.yaml", held_job("big", tmp_path, "3g.40gb"))
    write_manifest(home / "jobs", "two-whole.yaml", held_job("two-whole", tmp_path, gpus=2))
    big = wait_phase(home, "big", "Pending", daemon=daemon)
    wait_for(lambda: (job_status(home, "big") or {}).get("reason") == "Unschedulable", timeout=60)
    big = job_status(home, "big")
    assert "no MIG 3g.40gb instance: GPU 0 has 1g.10gb x2" in big["message"], big
    wait_for(lambda: (job_status(home, "two-whole") or {}).get("reason") == "Unschedulable", timeout=60)
    whole = job_status(home, "two-whole")
    assert "this machine has 1 whole" in whole["message"] and "GPU 0 has 1g.10gb x2" in whole["message"], whole


def test_sbatch_gres_and_run_gpus_ask_for_a_mig_instance(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text(SLICED)
    proj = tmp_path / "proj"
    proj.mkdir()
    script = proj / "slice.sbatch"
    script.write_text('#!/bin/bash\n#SBATCH --gres=gpu:1g.10gb:1\necho "devices=$CUDA_VISIBLE_DEVICES"\n')
    daemon = gflowd("--fake-gpus", fake)
    submitted = ctl(home, "run", "slice.sbatch", cwd=proj)
    assert submitted.returncode == 0, submitted.stderr
    name = submitted.stdout.strip().split("/")[1].split()[0]
    status = wait_phase(home, name, "Succeeded", daemon=daemon)
    assert status["devices"][0] in MIG_UUIDS and seen_devices(home, name) == MIG_UUIDS[status["devices"][0]]

    for flags in (["--gpus", "1g.10gb"], ["--gpus", "2:1g.10gb"]):
        submitted = ctl(home, "run", *flags, "--", "sh", "-c", 'echo "devices=$CUDA_VISIBLE_DEVICES"', cwd=proj)
        assert submitted.returncode == 0, submitted.stderr
        name = submitted.stdout.strip().split("/")[1].split()[0]
        status = wait_phase(home, name, "Succeeded", daemon=daemon)
        count = int(flags[1].split(":")[0]) if ":" in flags[1] else 1
        assert len(status["devices"]) == count and set(status["devices"]) <= set(MIG_UUIDS), status
        assert seen_devices(home, name) == ",".join(MIG_UUIDS[d] for d in sorted(status["devices"]))
