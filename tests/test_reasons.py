"""The phase and reason tables (``controller/model/reasons.py``) and what is derived from them.

Each reason's row is its one place: the phases a job shows it in, the docs line, the hint, whether
gflowd stops an attempt for it. These tests check the rows are complete, that what the code does
agrees with them (an ended attempt's outcome, a cluster's reasons), and that the metrics, the hints
and docs/reasons.md come from them (the docs checked for drift like crd-schemas/).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from builders import T0, exited, state

from controller.client.explain import explain_pending
from controller.client.read.objects import Gpu, Job
from controller.decide.exits import record_exit
from controller.model.reasons import (
    PENDING_REASONS,
    QUEUE_REASONS,
    SETTLED_PHASES,
    STOP_REASONS,
    TERMINAL_PHASES,
    WARNING_REASONS,
    Condition,
    Phase,
    Reason,
    StopReason,
    facts_of,
)

ROOT = Path(__file__).resolve().parent.parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_reasons", ROOT / "hack" / "gen_reasons.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


# --- the rows ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", list(Reason), ids=str)
def test_every_reason_has_its_text_a_docs_line_a_hint_and_its_phases(reason):
    assert reason.value == reason.name  # a member is its text: files read as before
    assert reason.doc.strip() and reason.hint.strip(), reason
    assert all(isinstance(p, Phase) for p in reason.phases)
    if not reason.phases:  # never a status.reason: the docs line says where it shows instead
        assert reason.doc.startswith("event"), reason


@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_every_phase_has_its_text_and_a_docs_line(phase):
    assert phase.value == phase.name and phase.doc.strip()


@pytest.mark.parametrize("condition", list(Condition), ids=str)
def test_every_condition_has_its_text_and_a_docs_line(condition):
    assert condition.value == condition.name and condition.doc.strip()


def test_the_phase_sets_are_derived_from_the_rows():
    assert {Phase.Succeeded, Phase.Failed, Phase.Cancelled} == TERMINAL_PHASES
    assert TERMINAL_PHASES | {Phase.Rejected} == SETTLED_PHASES
    assert [str(p) for p in Phase] == ["Pending", "Running", "Succeeded", "Failed", "Cancelled", "Rejected"]


def test_stop_reasons_are_the_rows_marked_stop_not_a_second_list():
    assert list(StopReason) == [r for r in Reason if r.stop]
    assert {r for r in Reason if r.stop} == STOP_REASONS
    assert StopReason.Deleted == Reason.Deleted == "Deleted" and hash(StopReason.Deleted) == hash("Deleted")
    assert StopReason("Preempted") == Reason.Preempted


def test_the_queues_answers_and_the_warnings_are_rows_too():
    from controller.record import fold, recorder

    assert {Reason.Resources, Reason.Priority, Reason.Queued, Reason.GPUMemory, Reason.Quota} == QUEUE_REASONS
    assert all(r.phases == (Phase.Pending,) for r in QUEUE_REASONS)
    assert recorder.QUEUE_REASONS is QUEUE_REASONS and fold.WAITING_REASONS is QUEUE_REASONS
    assert {Reason.Unschedulable, Reason.DependencyFailed, Reason.DiskFull} <= WARNING_REASONS  # announced as Warnings


def test_a_reason_read_from_a_file_finds_its_row():
    assert facts_of("DiskFull") is Reason.DiskFull
    assert facts_of("SomethingASlurmSaid") is None and facts_of(None) is None and facts_of("") is None


# --- the code agrees with the rows ------------------------------------------------------------------


TERM = {"code": 143, "signal": 15}


def _stop(reason: str) -> dict[str, str]:
    return {"type": "Terminating", "status": "True", "reason": reason, "message": "why", "lastTransitionTime": "t"}


@pytest.mark.parametrize("reason", list(StopReason), ids=str)
def test_a_stop_reason_ends_the_attempt_in_a_phase_its_row_names(reason):
    record = state("a", phase="Running", attempt=1)
    record_exit(record, exited("a", TERM["code"], T0 + 10, signal=TERM["signal"]), _stop(reason), 0)
    assert record.reason == reason and record.phase in Reason[reason].phases, (record.phase, record.reason)


@pytest.mark.parametrize(
    ("code", "facts", "limit", "failed"),
    [
        (0, {}, 0, 0),  # Completed
        (3, {}, 0, 0),  # Error
        (3, {}, 2, 0),  # BackOff
        (3, {}, 2, 2),  # BackoffLimitExceeded
        (137, {"signal": 9, "reason": "OOMKilled"}, 0, 0),  # OOMKilled
        (None, {"lost": True, "error": "supervisor vanished"}, 0, 0),  # Lost
    ],
)
def test_an_ended_attempt_gets_a_reason_whose_row_names_its_phase(code, facts, limit, failed):
    record = state("a", phase="Running", attempt=1, failed=failed)
    record_exit(record, exited("a", code, T0 + 10, **facts), None, limit)
    assert record.phase in Reason[record.reason].phases, (record.phase, record.reason)


def test_a_clusters_pending_reasons_are_rows_with_the_phase_pending():
    from controller.act.runtime.backends.slurm.words import PENDING_REASONS as SLURM_REASONS  # the runtime's own table

    assert {facts_of(r) for r in SLURM_REASONS.values()} <= set(PENDING_REASONS)


def test_a_held_launch_reason_is_a_pending_row():
    # the runtimes report a launch the disk refused as queued with one of these (act/runtime/)
    assert {Reason.DiskFull, Reason.DiskError} <= set(PENDING_REASONS)


# --- what is derived: metrics, hints, docs ----------------------------------------------------------


def test_every_pending_reason_has_a_metric_label_served_from_the_start():
    from controller.sinks import metrics

    assert set(metrics.PENDING_REASONS) == {r for r in Reason if Phase.Pending in r.phases}
    assert {"DiskFull", "DiskError", "JobLimit", "Held", "Reserved"} <= set(metrics.PENDING_REASONS)  # missing before
    assert tuple(Phase) == metrics.PHASES and set(metrics.FINISHED) == TERMINAL_PHASES


def test_the_status_schema_lists_the_phases_of_the_table():
    from controller.api.status import PHASES

    assert tuple(Phase) == PHASES


@pytest.mark.parametrize("reason", PENDING_REASONS, ids=str)
def test_explain_gives_each_waiting_reason_its_hint(reason):
    job = Job(name="a", phase="Pending", reason=reason, message="the numbers", queue_position=1)
    out = explain_pending(job, {"a": {"phase": "Pending", "queuePosition": 1}}, [Gpu(0, "H100", "Free")])
    assert out["explanation"] == f"job/a waits: {reason} (the numbers); {reason.hint}"


def test_explain_of_a_reason_without_a_row_says_to_read_the_message():
    job = Job(name="a", phase="Pending", reason="Licenses", message="Slurm job 4 is pending in Slurm (Licenses)")
    assert explain_pending(job, {}, [])["explanation"].endswith("; see its message")


def test_the_reasons_doc_has_every_row():
    text = gen.reasons_doc()
    for reason in Reason:
        assert f"| `{reason}` | {reason.doc}" in text, reason
        assert reason.hint in text.replace("\\|", "|")
    for phase in Phase:
        assert f"| `{phase}` | {'yes' if phase.terminal else 'no'} | {phase.doc} |" in text
        assert f"\n## {phase}\n" in text
    for condition in Condition:
        assert f"| `{condition}` | {condition.doc} |" in text


def test_committed_reasons_doc_matches_the_table():
    for rel, text in gen.generate().items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is missing: run python hack/gen_reasons.py"
        assert path.read_text(encoding="utf-8") == text, f"{rel} is out of date: run python hack/gen_reasons.py"


@pytest.mark.e2e  # runs a process
def test_check_mode_passes_on_the_committed_tree():
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_reasons.py"), "--check"], capture_output=True, text=True
    )
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.e2e  # runs a process
def test_check_mode_fails_with_one_line_naming_the_stale_file(tmp_path):
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.stale(tmp_path) == []
    doc = tmp_path / "docs" / "reasons.md"
    doc.write_text(doc.read_text().replace("`Reserved`", "`Held back`"))
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_reasons.py"), "--check", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert (
        result.stderr
        == "docs/reasons.md is out of date with controller/model/reasons.py; run: python hack/gen_reasons.py\n"
    )
    doc.unlink()
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
