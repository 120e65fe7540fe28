"""Fault injection against a real gflowd: a full or read-only state directory, the spec directory
deleted and recreated, a burst of 2,000 file changes, GPU failures (fake-GPU file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from helpers import fill_filesystem, job_status, pid_alive, read_index, wait_for, wait_phase, write_manifest
from nvml_fixtures import fake_nvml_lib, gpu, nvml_env, write_fake_nvml  # noqa: F401

from controller.record.writeguard import WriteFailures

SLEEPER = "metadata: {{name: {name}}}\nspec:\n  command: [sleep, '600']\n"
QUICK = "metadata: {{name: {name}}}\nspec:\n  command: ['true']\n"


def events(home) -> list[dict]:
    try:
        return [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def event(home, reason: str) -> dict | None:
    return next((e for e in events(home) if e["reason"] == reason), None)


# -- the backoff itself ------------------------------------------------------------------------------


def test_write_failures_back_off_exponentially_to_a_cap_and_report_the_first():
    failures = WriteFailures(base=0.5, cap=4.0)
    full = OSError(28, "No space left on device", "/h/status/a.yaml")
    steps = [failures.failed(full) for _ in range(6)]
    assert [d for d, _ in steps] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert [first for _, first in steps] == [True] + [False] * 5
    assert failures.first_error == "No space left on device (ENOSPC) writing /h/status/a.yaml"
    assert failures.succeeded() == 6 and not failures.failing
    assert failures.failed(full) == (0.5, True)  # a new run of failures starts over


# -- a full state directory (a real small filesystem) ----------------------------------------------------


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.fixture
def small_status_fs(home):
    """``status/`` on its own 256 KiB tmpfs, so it can really fill up (ENOSPC)."""
    if not _can_mount():
        pytest.skip("needs root and mount(8) for a size-limited tmpfs")
    status = home / "status"
    status.mkdir(exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(status)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    yield status
    subprocess.run(["umount", "-l", str(status)], check=False)


def test_full_status_dir_backs_off_warns_keeps_jobs_and_catches_up(home, gflowd, small_status_fs):
    write_manifest(home / "jobs", "runner.yaml", SLEEPER.format(name="runner"))
    daemon = gflowd()
    runner = wait_for(lambda: (job_status(home, "runner") or {}).get("pid"), message="runner running")
    fill_filesystem(small_status_fs)

    write_manifest(home / "jobs", "late.yaml", QUICK.format(name="late"))  # its status cannot be written
    warning = wait_for(lambda: event(home, "StateWriteFailed"), message=lambda: daemon.stderr()[-2000:])
    assert warning["type"] == "Warning"
    assert "No space left on device (ENOSPC)" in warning["message"] and "status/" in warning["message"]
    assert "retrying in" in daemon.stderr()
    assert not (small_status_fs / "late.yaml").exists()
    assert daemon.proc.poll() is None and pid_alive(runner)

    for name in ("filler", "filler2"):
        (small_status_fs / name).unlink()
    wait_phase(home, "late", "Succeeded", timeout=40, daemon=daemon)  # caught up
    assert job_status(home, "runner")["pid"] == runner and pid_alive(runner)
    recovered = wait_for(lambda: event(home, "StateWritable"))
    assert "status files caught up" in recovered["message"]
    assert len([e for e in events(home) if e["reason"] == "StateWriteFailed"]) == 1  # said once, not per retry


def test_read_only_status_dir_backs_off_and_catches_up(home, gflowd, small_status_fs):
    write_manifest(home / "jobs", "runner.yaml", SLEEPER.format(name="runner"))
    daemon = gflowd()
    runner = wait_for(lambda: (job_status(home, "runner") or {}).get("pid"), message="runner running")
    subprocess.run(["mount", "-o", "remount,ro", str(small_status_fs)], check=True)
    try:
        write_manifest(home / "jobs", "late.yaml", QUICK.format(name="late"))
        warning = wait_for(lambda: event(home, "StateWriteFailed"), message=lambda: daemon.stderr()[-2000:])
        assert "Read-only file system (EROFS)" in warning["message"]
        assert daemon.proc.poll() is None and pid_alive(runner)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_status_fs)], check=True)
    wait_phase(home, "late", "Succeeded", timeout=40, daemon=daemon)
    assert job_status(home, "runner")["pid"] == runner


# -- the spec directory ----------------------------------------------------------------------------------


def test_spec_dir_deleted_and_recreated(home, gflowd):
    write_manifest(home / "jobs", "first.yaml", QUICK.format(name="first"))
    daemon = gflowd()
    wait_phase(home, "first", "Succeeded", daemon=daemon)
    shutil.rmtree(home / "jobs")
    wait_for(lambda: job_status(home, "first") is None, message="the deleted manifest's status to go")
    assert daemon.proc.poll() is None
    (home / "jobs").mkdir()
    write_manifest(home / "jobs", "second.yaml", QUICK.format(name="second"))
    wait_phase(home, "second", "Succeeded", daemon=daemon)  # the resync finds the new folder
    write_manifest(home / "jobs", "third.yaml", QUICK.format(name="third"))
    wait_phase(home, "third", "Succeeded", daemon=daemon)


def test_burst_of_2000_file_changes_loses_no_update(home, gflowd, tmp_path):
    """Like a git checkout: 2,000 manifests written at once, then all edited at once."""
    daemon = gflowd()
    count = 2000
    jobs = home / "jobs"
    text = "metadata: {{name: b{i:04d}}}\nspec:\n  command: ['true']\n  suspend: true\n  priority: {p}\n"
    staging = tmp_path / "staging"
    staging.mkdir()
    for i in range(count):
        (staging / f"b{i:04d}.yaml").write_text(text.format(i=i, p=1))
    for i in range(count):
        os.rename(staging / f"b{i:04d}.yaml", jobs / f"b{i:04d}.yaml")

    def all_with(priority: int):
        index = json.loads((home / "run" / "index.json").read_text())
        rows = index["jobs"]
        done = [n for n in rows if n.startswith("b") and rows[n].get("priority") == priority]
        return len(done) == count or len(done)

    wait_for(lambda: all_with(1) is True, timeout=120, message="2,000 jobs admitted")
    for i in range(count):
        (staging / f"b{i:04d}.yaml").write_text(text.format(i=i, p=2))
    for i in range(count):
        os.replace(staging / f"b{i:04d}.yaml", jobs / f"b{i:04d}.yaml")
    wait_for(lambda: all_with(2) is True, timeout=120, message="every edit seen")
    assert job_status(home, "b1999")["priority"] == 2 and job_status(home, "b0000")["phase"] == "Pending"
    assert daemon.proc.poll() is None


# -- GPUs ------------------------------------------------------------------------------------------------


def test_gpu_lost_mid_run_is_reported_on_the_job_and_the_gpu_is_not_reused(home, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: NVIDIA H100, memory: 80Gi}\n  - {name: NVIDIA H100, memory: 80Gi}\n")
    write_manifest(
        home / "jobs",
        "trainer.yaml",
        "metadata: {name: trainer}\nspec:\n  command: [sleep, '600']\n  resources: {gpus: 1}\n",
    )
    daemon = gflowd("--fake-gpus", fake)
    status = wait_for(lambda: (job_status(home, "trainer") or {}).get("pid") and job_status(home, "trainer"))
    lost = status["devices"][0]
    lines = ["  - {name: NVIDIA H100, memory: 80Gi" + (", health: Lost}" if i == lost else "}") for i in range(2)]
    tmp = tmp_path / ".gpus.tmp"
    tmp.write_text("gpus:\n" + "\n".join(lines) + "\n")
    tmp.rename(fake)

    def unhealthy():
        st = job_status(home, "trainer")
        return next((c for c in st.get("conditions", []) if c["type"] == "GPUUnhealthy"), None)

    condition = wait_for(unhealthy, message=lambda: f"GPUUnhealthy on trainer; {job_status(home, 'trainer')}")
    assert f"GPU {lost}" in condition["message"]
    assert pid_alive(status["pid"])  # the job decides what a lost GPU means; gflowd does not kill it
    write_manifest(
        home / "jobs", "next.yaml", "metadata: {name: next}\nspec:\n  command: [sleep, '600']\n  resources: {gpus: 1}\n"
    )
    nxt = wait_for(lambda: (job_status(home, "next") or {}).get("pid") and job_status(home, "next"))
    assert nxt["devices"] == [1 - lost]
    write_manifest(
        home / "jobs", "third.yaml", "metadata: {name: third}\nspec:\n  command: ['true']\n  resources: {gpus: 1}\n"
    )
    third = wait_phase(home, "third", "Pending", daemon=daemon)
    assert third["reason"] == "Resources" and not third.get("devices")  # the lost GPU is never handed out
    assert f"GPU {lost}" in third["message"]


# -- NVML through the stand-in libnvidia-ml (tests/nvml_stub) ------------------------------------------


def _node(home) -> dict:
    from ruamel.yaml import YAML

    try:
        return YAML(typ="safe").load((home / "node.yaml").read_text()) or {}
    except FileNotFoundError:
        return {}


def test_nvml_init_failure_runs_cpu_jobs_and_says_why(home, gflowd, nvml_env):
    write_fake_nvml(nvml_env["FAKE_NVML_FILE"], {"initError": 9, "gpus": [gpu(0)]})  # DRIVER_NOT_LOADED
    write_manifest(home / "jobs", "cpu.yaml", QUICK.format(name="cpu"))
    write_manifest(
        home / "jobs",
        "wants-gpu.yaml",
        "metadata: {name: wants-gpu}\nspec:\n  command: ['true']\n  resources: {gpus: 1}\n",
    )
    daemon = gflowd(env=nvml_env)
    wait_phase(home, "cpu", "Succeeded", daemon=daemon)
    status = wait_phase(home, "wants-gpu", "Pending", reason="Unschedulable", daemon=daemon)
    assert "this machine has no GPUs" in status["message"]
    assert "the NVIDIA driver is not loaded" in _node(home).get("inventory", "")


def test_a_hung_nvml_call_never_stalls_the_loop(home, gflowd, nvml_env):
    nvml_file = nvml_env["FAKE_NVML_FILE"]
    write_fake_nvml(nvml_file, {"gpus": [gpu(0), gpu(1)]})
    write_manifest(
        home / "jobs",
        "trainer.yaml",
        "metadata: {name: trainer}\nspec:\n  command: [sleep, '600']\n  resources: {gpus: 1}\n",
    )
    daemon = gflowd(env=nvml_env)
    trainer = wait_for(lambda: (job_status(home, "trainer") or {}).get("pid") and job_status(home, "trainer"))
    write_fake_nvml(nvml_file, {"gpus": [gpu(0), gpu(1)], "hangMs": 600_000})  # every NVML call now hangs 10 min

    # the loop goes on: new CPU jobs start and end, edits are acted on, the node says what is wrong
    write_manifest(home / "jobs", "cpu.yaml", QUICK.format(name="cpu"))
    wait_phase(home, "cpu", "Succeeded", timeout=30, daemon=daemon)
    wait_for(
        lambda: "NVML is not answering" in _node(home).get("inventory", ""),
        timeout=30,
        message=lambda: f"node.yaml to say NVML hangs: {_node(home)}",
    )
    assert all(g["state"] == "Unhealthy" for g in _node(home)["gpus"])
    write_manifest(
        home / "jobs", "second.yaml", "metadata: {name: second}\nspec:\n  command: ['true']\n  resources: {gpus: 1}\n"
    )
    second = wait_phase(home, "second", "Pending", timeout=30, daemon=daemon)
    assert not second.get("devices")  # no GPU is handed out while NVML cannot vouch for it
    write_manifest(
        home / "jobs",
        "trainer.yaml",
        "metadata: {name: trainer}\nspec:\n  command: [sleep, '600']\n  resources: {gpus: 1}\n  cancelled: true\n",
    )
    wait_phase(home, "trainer", "Cancelled", timeout=30, daemon=daemon)
    assert not pid_alive(trainer["pid"])
    assert daemon.proc.poll() is None
    assert (read_index(home) or {}).get("controller", {}).get("pid") == daemon.pid
