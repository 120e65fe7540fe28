"""The torture run (``hack/torture.py``) in small: a real gflowd kill -9'd and restarted under a
mixed workload, invariants checked from the jobs' own ledger. Plus proof the checker can fail."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _torture():
    spec = importlib.util.spec_from_file_location("torture", ROOT / "hack" / "torture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["torture"] = module
    spec.loader.exec_module(module)
    return module


torture = _torture()


@pytest.mark.e2e
def test_short_torture_run_keeps_every_invariant(tmp_path):
    report = torture.run_torture(cycles=5, jobs=18, seed=7, workdir=tmp_path, drain_timeout=90, flood=40)
    assert report.violations == [], "\n".join(report.violations)
    assert report.kills == 5 and report.cycles == 5
    assert sum(report.phases.values()) == 18 + 40 == report.jobs
    assert set(report.phases) <= {"Succeeded", "Failed", "Cancelled"}
    assert report.attempts >= 10  # the workload really ran, across the restarts


def _ledger(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "ledger.txt"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _plan(name: str, shared: bool = False, memory: int = 8, kind: str = "ok", gpus: int = 1):
    return torture.JobPlan(name, kind, gpus, shared, memory, 1.0, 0, 0, 0.0)


def test_checker_reports_exclusive_overlap_memory_overcommit_and_double_start(tmp_path):
    plans = [_plan("a"), _plan("b"), _plan("s1", True, 10), _plan("s2", True, 10)]
    ledger = _ledger(
        tmp_path,
        [
            "start a 1 0 10.0 1",
            "start b 1 0 10.5 2",
            "end a 1 0 11.0 1 0",
            "end b 1 0 12.0 2 0",
            "start s1 1 1 20.0 3",
            "start s2 1 1 20.1 4",
            "end s1 1 1 21.0 3 0",
            "end s2 1 1 21.0 4 0",
            "start a 1 0 30.0 5",
        ],
    )
    final = {p.name: {"phase": "Succeeded", "attempt": 1} for p in plans}
    violations = torture.check(plans, {p.name: p for p in plans}, ledger, final, {}, tmp_path)
    text = "\n".join(violations)
    assert "GPU 0: b#1 started while a#1 held it" in text
    assert "GPU 1: Shared jobs ['s1', 's2'] ask 20Gi of 16Gi" in text
    assert "a attempt 1 started twice" in text


def test_checker_reports_a_terminal_phase_that_changed_and_a_wrong_outcome(tmp_path):
    plans = [_plan("a", gpus=0), _plan("f", kind="fail", gpus=0)]
    plans[1].exit_code = 1  # it should fail with 1; the ledger says it exited 0
    ledger = _ledger(tmp_path, ["start a 1 - 1.0 1", "end a 1 - 2.0 1 0", "start f 1 - 1.0 2", "end f 1 - 2.0 2 0"])
    final = {"a": {"phase": "Failed", "attempt": 1}, "f": {"phase": "Failed", "attempt": 1}}
    history = {"a": ["Running", "Succeeded", "Failed"]}
    text = "\n".join(torture.check(plans, {p.name: p for p in plans}, ledger, final, history, tmp_path))
    assert "a: left its terminal phase: Running -> Succeeded -> Failed" in text
    assert "a: expected Succeeded" in text
    assert "f: expected Failed after 1 attempt(s) exiting 1, got Failed after [(1, 0)]" in text
