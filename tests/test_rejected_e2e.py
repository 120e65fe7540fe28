"""Rejected jobs, as a user meets them: every error at once (apply and the status), and delete,
cancel and describe working on every job ``get jobs`` lists, YAML syntax errors included.

Real gflowctl and gflowd processes on a temp home."""

from __future__ import annotations

from helpers import ctl, wait_for, wait_phase, write_manifest

TYPOS = """\
metadata: {name: typo}
spec:
  command: [python3, train.py]
  resources:
    gpu: 1
  priority: high
  timeLimit: soon
"""
ERRORS = (
    "3 errors: spec.resources.gpu: unknown field; did you mean gpus? ({where} line 5); "
    "spec.priority: must be an integer ({where} line 6); "
    "spec.timeLimit: 'soon' is not a duration; use e.g. 90s, 30m, 4h30m, 2d or a number of seconds ({where} line 7)"
)


def test_apply_and_the_status_show_every_error_at_once(home, gflowd, tmp_path):
    daemon = gflowd()
    src = tmp_path / "typo.yaml"
    src.write_text(TYPOS)
    applied = ctl(home, "apply", "-f", str(src))
    assert (applied.returncode, applied.stdout) == (1, "")
    assert applied.stderr == f"error: {ERRORS.format(where=src)}\n"

    write_manifest(home / "jobs", "typo.yaml", TYPOS)
    status = wait_phase(home, "typo", "Rejected", daemon=daemon)
    assert status["message"] == ERRORS.format(where="jobs/typo.yaml")


def test_delete_cancel_and_describe_work_on_rejected_jobs(home, gflowd):
    daemon = gflowd()
    write_manifest(home / "jobs", "broken.yaml", "spec:\n  command: [python3, train.py\n")
    write_manifest(home / "jobs", "typo.yaml", TYPOS)
    wait_phase(home, "broken", "Rejected", reason="YAMLError", daemon=daemon)
    wait_phase(home, "typo", "Rejected", reason="Invalid", daemon=daemon)
    listed = ctl(home, "get", "jobs").stdout
    assert "broken" in listed and "typo" in listed

    for name, reason in (("broken", "YAMLError"), ("typo", "Invalid")):
        described = ctl(home, "describe", "job", name)
        assert described.returncode == 0 and reason in described.stdout, described.stderr
        cancelled = ctl(home, "cancel", name)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout == (
            f"job/{name} is Rejected ({reason}) and never runs: nothing to cancel; "
            f"fix jobs/{name}.yaml, or gflowctl delete job {name}\n"
        )

    deleted = ctl(home, "delete", "job", "broken", "typo")
    assert (deleted.returncode, deleted.stdout, deleted.stderr) == (0, "job/broken deleted\njob/typo deleted\n", "")
    assert list((home / "jobs").iterdir()) == []
    wait_for(
        lambda: not (home / "status" / "broken.yaml").exists() and not (home / "status" / "typo.yaml").exists(),
        message="the Rejected statuses to go",
    )


def test_delete_never_takes_a_file_that_names_another_job(home):
    write_manifest(home / "jobs", "a.yaml", "metadata: {name: b}\nspec:\n  command: ['true']\n")
    deleted = ctl(home, "delete", "job", "a")
    assert deleted.returncode == 1 and "job/a not found" in deleted.stderr
    assert (home / "jobs" / "a.yaml").exists()
