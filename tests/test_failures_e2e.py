"""Why a job died, end to end: a real gflowd, real processes that fail for real (a segfault, an
import of a module that is not there, the kernel's OOM killer in a cgroup v1 memory limit), a job
printing a user's real PyTorch CUDA OOM traceback (tests/fixtures/failure_logs/), an Xid injected by the NVML stand-in on the GPU a job
runs on; the status reason gflowd records and what ``gflowctl triage`` prints."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import job_status, wait_for, wait_phase, write_manifest
from nvml_fixtures import fake_nvml_lib, gpu, nvml_env, write_fake_nvml  # noqa: F401
from test_metrics import metrics_url, scrape, value

from controller.act.runtime.cgroups import probe
from controller.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures" / "failure_logs"


def ctl(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


def job(name: str, command: list[str], extra: str = "") -> str:
    return f"metadata: {{name: {name}}}\nspec:\n  command: {json.dumps(command)}\n{extra}"


def test_a_real_cuda_oom_traceback_fails_the_job_as_cuda_out_of_memory_and_triage_shows_why(home, gflowd):
    daemon = gflowd("--metrics-port", "0")
    url = metrics_url(daemon)
    assert value(scrape(url), "gflow_job_failures_total", reason="CUDAOutOfMemory") == 0  # served before the first
    fixture = FIXTURES / "cuda_oom-1.log"  # a user's real PyTorch 2.1 traceback tail
    write_manifest(home / "jobs", "oom.yaml", job("oom", ["sh", "-c", f"cat {fixture} >&2; exit 1"]))
    write_manifest(home / "jobs", "fine.yaml", job("fine", ["sh", "-c", "echo 'CUDA out of memory: retrying'"]))
    status = wait_phase(home, "oom", "Failed", daemon=daemon)
    assert (status["reason"], status["exitCode"]) == ("CUDAOutOfMemory", 1), status
    assert "Tried to allocate 496.00 MiB" in status["message"] and "lower the batch size" in status["message"]
    assert wait_phase(home, "fine", "Succeeded", daemon=daemon)["reason"] == "Completed"
    wait_for(
        lambda: value(scrape(url), "gflow_job_failures_total", reason="CUDAOutOfMemory") == 1,
        message="gflow_job_failures_total{reason=CUDAOutOfMemory} to count the job",
    )
    assert value(scrape(url), "gflow_job_failures_total", reason="Error") == 0

    code, out, err = ctl(home, "triage", "oom")
    assert code == 0, err
    assert out.startswith("job/oom attempt 1 failed: CUDAOutOfMemory (exit code 1)\nfix: the GPU's memory ran out"), out
    assert "  exit code 1\n" in out and "  log line 3: torch.cuda.OutOfMemoryError: CUDA out of memory." in out
    assert len(out.splitlines()) <= 24  # one screen
    assert ctl(home, "triage", "oom", "--attempt", "1")[1] == out  # its latest attempt: the same report
    code, out, _ = ctl(home, "triage", "job/fine")
    assert (code, out) == (0, "job/fine did not fail: it is Succeeded (Completed)\n")
    code, _, err = ctl(home, "triage", "oom", "--attempt", "2")
    assert (code, err) == (1, "error: job/oom has no attempt 2 (attempts 1 to 1)\n"), err
    code, _, err = ctl(home, "triage", "ghost")
    assert code == 1 and "ghost" in err and "Traceback" not in err


def test_a_real_segfault_and_a_real_missing_module_are_named_with_their_fix(home, gflowd):
    daemon = gflowd()
    write_manifest(
        home / "jobs", "crash.yaml", job("crash", [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"])
    )
    write_manifest(home / "jobs", "imports.yaml", job("imports", ["python3", "-c", "import apex_missing_mod"]))
    crash = wait_phase(home, "crash", "Failed", daemon=daemon)
    assert crash["reason"] == "Segfault", crash
    assert "SIGSEGV" in crash["message"] and "PYTHONFAULTHANDLER=1" in crash["message"]
    imports = wait_phase(home, "imports", "Failed", daemon=daemon)
    assert imports["reason"] == "MissingModule", imports
    assert "No module named 'apex_missing_mod'" in imports["message"] and "the job's python is /" in imports["message"]
    code, out, _ = ctl(home, "triage", "imports")
    assert code == 0 and "failed: MissingModule (exit code 1)" in out
    assert "  log line 3: ModuleNotFoundError: No module named 'apex_missing_mod'" in out, out


def test_a_job_over_its_cgroup_v1_memory_limit_ends_oom_killed_with_the_kernels_count(home, gflowd):
    found = probe()
    if os.geteuid() != 0 or found.mode == "none" or not found.features["memory"].available:
        pytest.skip("needs root and the cgroup memory controller")
    daemon = gflowd()
    hog = "b = bytearray(200 << 20); print('survived')"
    write_manifest(home / "jobs", "hog.yaml", job("hog", ["python3", "-c", hog], "  resources: {memory: 50Mi}\n"))
    status = wait_phase(home, "hog", "Failed", timeout=30, daemon=daemon)
    assert status["reason"] == "OOMKilled", status
    assert "OOM kill" in status["message"], status  # the cgroup's own counter, not a guess
    code, out, _ = ctl(home, "triage", "hog")
    assert code == 0 and "failed: OOMKilled" in out and "fix: host RAM ran out" in out and "OOM kill" in out, out


def test_an_xid_on_the_jobs_gpu_while_it_runs_fails_it_as_gpu_xid(home, gflowd, nvml_env, tmp_path):
    path = Path(nvml_env["FAKE_NVML_FILE"])
    write_fake_nvml(path, {"gpus": [gpu(0), gpu(1)]})
    daemon = gflowd(env=nvml_env)
    go = tmp_path / "go"
    body = "  resources: {gpus: 1}\n"
    write_manifest(
        home / "jobs", "hit.yaml", job("hit", ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 1"], body)
    )
    assert wait_phase(home, "hit", "Running", daemon=daemon)["devices"] == [0]
    write_fake_nvml(path, {"gpus": [gpu(0, xids=[79]), gpu(1)]})  # its GPU falls off the bus
    wait_for(
        lambda: any(c["type"] == "GPUUnhealthy" for c in (job_status(home, "hit") or {}).get("conditions", [])),
        message=lambda: f"gflowd to see the Xid: {job_status(home, 'hit')!r}\n{daemon.stderr()[-2000:]}",
    )
    go.touch()
    status = wait_phase(home, "hit", "Failed", daemon=daemon)
    assert status["reason"] == "GPUXid", status
    assert "GPU 0 reported Xid 79 (GPU has fallen off the bus)" in status["message"]
    code, out, _ = ctl(home, "triage", "hit")
    assert code == 0 and "failed: GPUXid (exit code 1)" in out and "Xid 79" in out, out
