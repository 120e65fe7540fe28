"""gflowd's start-up imports, measured in the process users start (``-X importtime``), up to the
first pass recorded: a restart with no config.yaml, plain flags and every manifest in the parse
cache judges nothing, so the models (pydantic, ~0.1 s of CPU and what it loads: importlib.metadata,
email) are not imported before gflowd is ready; nor is tenacity (NVML's retries are a loop)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import read_index, wait_for, wait_phase, write_manifest

pytestmark = pytest.mark.e2e

NOT_AT_START = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "importlib.metadata",
    "email",
    "controller.api.job",
    "tenacity",
)


@contextmanager
def _started(home: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Path]:
    """A gflowd on ``home`` with only ``args`` (no ``--resync 1s`` added, as the conftest fixture
    does), ready; yields its stderr file; stopped after."""
    err_path = tmp_path / "started.stderr"
    full_env = {**os.environ, "GFLOW_HOME": str(home), **(env or {})}
    full_env.pop("CUDA_VISIBLE_DEVICES", None)
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.daemon", "--home", str(home), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=full_env,
            cwd=str(tmp_path),
        )
    try:

        def ready() -> bool:
            assert proc.poll() is None, err_path.read_text()
            return (read_index(home) or {}).get("controller", {}).get("pid") == proc.pid

        wait_for(ready, timeout=60, message=lambda: f"gflowd to start\n{err_path.read_text()}")
        yield err_path
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def _imported_by_ready(home: Path, tmp_path: Path, *args: str) -> set[str]:
    """Every module a gflowd started on ``home`` imported until run/index.json named it."""
    with _started(home, tmp_path, *args, env={"PYTHONPROFILEIMPORTTIME": "1"}) as err_path:
        lines = err_path.read_text().splitlines()  # what it imported until then (stderr is unbuffered)
    return {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}


def _settled_home(home: Path, gflowd, fake_gpus: Path) -> None:
    """A home whose one job has finished, stopped: its manifest is in the parse cache."""
    write_manifest(home / "jobs", "done.yaml", "metadata: {name: done}\nspec:\n  command: ['true']\n")
    daemon = gflowd("--fake-gpus", fake_gpus)
    wait_phase(home, "done", "Succeeded", daemon=daemon)
    daemon.wait_pass()  # the parse cache written after the job's pass
    daemon.terminate()


def test_a_restart_on_cached_manifests_imports_no_models(home, gflowd, fake_gpus, tmp_path):
    _settled_home(home, gflowd, fake_gpus)
    loaded = _imported_by_ready(
        home,
        tmp_path,
        "--fake-gpus",
        str(fake_gpus),
        "--resync",
        "1s",
        "--max-running-cpu-jobs",
        "8",
        "--log-level",
        "warning",
    )
    assert "controller.daemon.loop" in loaded  # the probe saw the start itself
    assert not set(NOT_AT_START) & loaded, sorted(set(NOT_AT_START) & loaded)
    status = wait_phase(home, "done", "Succeeded")
    assert status["attempt"] == 1  # read back, not run again


def test_a_config_file_is_checked_by_the_model_before_ready(home, gflowd, fake_gpus, tmp_path):
    """What a lab box with config.yaml gets: its settings validated at start (errors reported then)."""
    _settled_home(home, gflowd, fake_gpus)
    (home / "config.yaml").write_text("resync: 30s\n")
    loaded = _imported_by_ready(home, tmp_path, "--fake-gpus", str(fake_gpus))
    assert "pydantic" in loaded
    assert "controller.api.job" not in loaded  # the config model's field types only: no Job class made


def test_a_config_error_is_one_line_at_start(home, tmp_path):
    (home / "config.yaml").write_text("resync: soon\nbogusKey: 1\n")
    out = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GFLOW_HOME": str(home)},
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("gflowd: 2 errors: config.yaml: resync: 'soon' is not a duration")  # every one at once
    assert "; config.yaml: bogusKey: " in out.stderr


def test_a_gflowd_started_without_the_models_judges_a_new_manifest(home, fake_gpus, tmp_path):
    """The settings built without pydantic run jobs, and a manifest written later is validated (the
    models imported then): a valid one runs, an invalid one is rejected naming its field."""
    with _started(home, tmp_path, "--fake-gpus", str(fake_gpus)):
        write_manifest(home / "jobs", "ok.yaml", "metadata: {name: ok}\nspec:\n  command: ['true']\n")
        write_manifest(home / "jobs", "bad.yaml", "metadata: {name: bad}\nspec:\n  comand: ['true']\n")
        wait_phase(home, "ok", "Succeeded")
        rejected = wait_phase(home, "bad", "Rejected")
        assert "spec.comand: unknown field; did you mean command?" in rejected["message"]


def _gflowd_stderr(home: Path, *args: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GFLOW_HOME": str(home)},
    )
    return out.returncode, out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--resync", "abc"),
        ("--resync", "-3"),
        ("--resync", "0"),
        ("--reservations-max-duration", "0"),  # a section's flag, named as the flag given
        ("--gpu-sample-interval", "0"),
        ("--unmanaged-memory-threshold", "1Zi"),
        ("--metrics-port", "70000"),
    ],
    ids=" ".join,
)
def test_a_bad_flag_is_reported_alike_with_and_without_a_config_file(home, tmp_path, args):
    """The plain path (no config.yaml) and the model's (an empty one) refuse a flag in one same line."""
    plain = _gflowd_stderr(home, *args)
    (home / "config.yaml").write_text("{}\n")
    model = _gflowd_stderr(home, *args)
    assert plain == model
    assert plain[0] == 1 and plain[1].startswith(f"gflowd: {args[0]}: ") and plain[1].count("\n") == 1
