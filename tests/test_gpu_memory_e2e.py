"""Admission against live GPU memory, end to end: a real gflowd on fake GPUs whose file lists a real
process of another user holding memory; a job declaring gpuMemory waits, naming it, and starts once
the memory is free (issue: what the GPU really holds)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers import ctl, job_status, wait_for, wait_phase, write_manifest

NOBODY = 65534


def gpus_file(path: Path, server_pid: int | None, held: str) -> None:
    server = f"processes: [{{pid: {server_pid}, usedMemory: {held}}}]" if server_pid else "processes: []"
    text = f"gpus:\n  - {{name: A100-SXM4-40GB, memory: 40Gi, {server}}}\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.rename(tmp, path)


def test_a_job_declaring_gpu_memory_waits_beside_another_users_server_and_starts_when_it_is_gone(
    home, gflowd, tmp_path
):
    # another user's hand-started server, as NVML would list it (the name and user come from /proc)
    server = subprocess.Popen(["sleep", "600"], user=NOBODY, group=NOBODY)
    try:
        fake = tmp_path / "gpus.yaml"
        gpus_file(fake, server.pid, "21.3Gi")
        (home / "config.yaml").write_text("ignoreProcesses: [sleep]\n")  # not Unmanaged: its memory still counts
        daemon = gflowd("--fake-gpus", fake)
        write_manifest(
            home / "jobs",
            "train.yaml",
            "metadata: {name: train}\nspec:\n  resources: {gpus: 1, gpuMemory: 20Gi}\n  script: echo trained\n",
        )
        status = wait_phase(home, "train", "Pending", reason="GPUMemory", daemon=daemon)
        assert status["message"] == (
            f"needs 20Gi GPU memory on 1 GPU, at most 18.7Gi free on GPU 0: pid {server.pid} (nobody, sleep) holds 21.3Gi"
        )
        gpus = ctl(home, "get", "gpus")
        assert gpus.returncode == 0, gpus.stderr
        header, row = gpus.stdout.splitlines()[:2]
        assert row.split()[header.split().index("FREE")] == "18.7Gi", gpus.stdout
        # memory nobody of ours holds, for an admin to act on: who, what, how much, since when
        assert f"held by processes gflow did not start: GPU 0 pid {server.pid} 21.3Gi" in gpus.stderr
        wide = ctl(home, "get", "gpus", "-o", "wide").stdout.split("\n\n")[1].splitlines()
        assert wide[0].split() == ["GPU", "PID", "USER", "COMMAND", "MEMORY", "UTIL", "AGE"]
        assert wide[1].split()[:5] == ["0", str(server.pid), "nobody", "sleep", "21.3Gi"], wide
        assert wide[1].split()[6].endswith("s"), wide  # an age: seconds old

        gpus_file(fake, None, "0")  # the server ends
        server.kill()
        wait_phase(home, "train", "Succeeded", daemon=daemon)
        wait_for(
            lambda: "40Gi" in ctl(home, "get", "gpus").stdout.splitlines()[1], message="get gpus to show 40Gi free"
        )
    finally:
        server.kill()
        server.wait()
    assert job_status(home, "train")["phase"] == "Succeeded"
