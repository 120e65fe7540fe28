"""A real gflowd drains a flood of short CPU-only jobs over ``maxRunningCpuJobs``: each job waits its
turn (JobLimit), runs and ends, and gets one status file write (its end), not one per step; a job
that waits its turn for long still gets its Pending status file (record/recorder.py ``_may_wait``)."""

from __future__ import annotations

from pathlib import Path

from helpers import job_status, read_index, wait_for, write_manifest

FLOOD = 24


def _jobs(prefix: str, n: int, command: str) -> str:
    return "".join(f"---\nmetadata: {{name: {prefix}{i}}}\nspec:\n  command: {command}\n" for i in range(n))


def _index(home: Path) -> tuple[dict, dict]:
    index = read_index(home) or {}
    return index.get("jobs", {}), index.get("controller", {})


def test_a_flood_of_short_jobs_over_the_cpu_job_limit_writes_one_status_per_job(home, gflowd):
    (home / "config.yaml").write_text("maxRunningCpuJobs: 8\n")
    daemon = gflowd()
    write_manifest(home / "jobs", "flood.yaml", _jobs("f", FLOOD, "['true']"))

    def drained() -> bool:
        jobs, _ = _index(home)
        return sum(row.get("phase") == "Succeeded" for name, row in jobs.items() if name.startswith("f")) == FLOOD

    wait_for(drained, timeout=120, message=lambda: daemon.stderr()[-2000:])
    daemon.wait_pass()
    _, info = _index(home)
    for i in range(FLOOD):
        assert (job_status(home, f"f{i}") or {}).get("phase") == "Succeeded"
    # each job's end is one write; Pending/JobLimit, Pending/Queued and Running were three more a
    # job; a job held back longer than QUEUED_UNWRITTEN_MAX (10 s: a very slow machine) gets two
    assert FLOOD <= info["statusWrites"] <= FLOOD * 3 // 2, f"{info['statusWrites']} status writes for {FLOOD} jobs"


def test_a_job_waiting_its_turn_for_long_gets_its_pending_status_file(home, gflowd):
    (home / "config.yaml").write_text("maxRunningCpuJobs: 2\n")
    daemon = gflowd()
    write_manifest(home / "jobs", "long.yaml", _jobs("w", 4, "[sleep, '600']"))

    def limited() -> list[str]:
        return [f"w{i}" for i in range(4) if (job_status(home, f"w{i}") or {}).get("reason") == "JobLimit"]

    # nothing else happens meanwhile: gflowd wakes by itself when the held-back statuses are due
    waiting = wait_for(lambda: len(limited()) == 2 and limited(), timeout=90, message=lambda: daemon.stderr()[-2000:])
    jobs, _ = _index(home)
    assert all(jobs[name]["phase"] == "Pending" for name in waiting)
