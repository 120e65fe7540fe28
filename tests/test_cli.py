"""gflowctl verbs against real files (no gflowd needed): apply, delete, edits, get, logs, wait, explain."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.cli.main import main
from controller.client.read.usage import series_json
from controller.model.records import JobState
from controller.paths import Home
from controller.record.recorder import Recorder

JOB = """\
# training run for the paper
apiVersion: gflow.dev/v1alpha1
kind: Job
metadata:
  name: {name}
  labels: {{team: vision}}
spec:
  command: [python3, -c, "print('hi')"]   # keep it short
  priority: 3
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Home:
    monkeypatch.setenv("GFLOW_HOME", str(tmp_path / "home"))
    h = Home.resolve(tmp_path / "home")
    h.ensure()
    return h


def run(*argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """Run gflowctl in-process, returning (exit code, stdout, stderr)."""
    raw_out = io.BytesIO()
    out, err = io.TextIOWrapper(raw_out, encoding="utf-8", write_through=True), io.StringIO()
    old = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr = out, err
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(argv))
        out.flush()
    finally:
        sys.stdout, sys.stderr, sys.stdin = old
    return code, raw_out.getvalue().decode(), err.getvalue()


def record(home: Home, *states: JobState) -> None:
    recorder = Recorder(home)
    recorder.write_states({s.name: s for s in states}, [])
    recorder.write_index({})


# -- apply --------------------------------------------------------------------------------------


def test_apply_creates_then_unchanged_then_configured_keeping_text(home, tmp_path):
    src = tmp_path / "train.yaml"
    src.write_text(JOB.format(name="train"))
    assert run("apply", "-f", str(src)) == (
        0,
        "job/train created\n",
        f"warning: gflowd is not running for {home.root}; the jobs start when it runs (gflowd up)\n",
    )
    stored = home.spec_dir / "train.yaml"
    # comments and order kept verbatim; one line says where it runs: the folder it was applied from
    assert stored.read_text() == JOB.format(name="train").replace("spec:\n", f'spec:\n  workingDir: "{tmp_path}"\n')

    assert run("apply", "-f", str(src))[1] == "job/train unchanged\n"
    src.write_text(JOB.format(name="train").replace("priority: 3", "priority: 7"))
    assert run("apply", "-f", str(src))[1] == "job/train configured\n"
    assert "priority: 7" in stored.read_text()
    assert "# keep it short" in stored.read_text()


def test_apply_dry_run_writes_nothing(home, tmp_path):
    src = tmp_path / "a.yaml"
    src.write_text(JOB.format(name="a"))
    code, out, _ = run("apply", "-f", str(src), "--dry-run")
    assert (code, out) == (0, "job/a created (dry run)\n")
    assert not (home.spec_dir / "a.yaml").exists()


def test_apply_from_stdin_and_multi_document(home):
    text = JOB.format(name="one") + "---\n" + JOB.format(name="two")
    code, out, err = run("apply", "-f", "-", stdin=text)
    assert code == 0, err
    assert out.splitlines() == ["job/one created", "job/two created"]
    assert (home.spec_dir / "one.yaml").read_text().startswith("# training run")
    assert "name: two" in (home.spec_dir / "two.yaml").read_text()


def test_apply_stdin_without_name_is_a_clear_error(home):
    code, out, err = run("apply", "-f", "-", stdin="spec:\n  command: [true]\n")
    assert code == 1
    assert out == ""
    assert err.strip() == "error: metadata.name: required when applying from stdin (<stdin> line 1)"  # no Python None


def test_apply_uses_file_stem_when_name_is_omitted(home, tmp_path):
    src = tmp_path / "quick-test.yaml"
    src.write_text("spec:\n  command: [echo, ok]\n")
    assert run("apply", "-f", str(src))[1] == "job/quick-test created\n"
    assert (home.spec_dir / "quick-test.yaml").exists()


def test_apply_invalid_manifest_is_refused_with_field_and_line(home, tmp_path):
    src = tmp_path / "bad.yaml"
    src.write_text("metadata:\n  name: bad\nspec:\n  command: [echo]\n  resources:\n    gpus: -2\n")
    code, _out, err = run("apply", "-f", str(src))
    assert code == 1
    assert "spec.resources.gpus: must be >= 0" in err and "line 6" in err
    assert not (home.spec_dir / "bad.yaml").exists()


def test_apply_dir_applies_good_files_and_reports_bad_ones(home, tmp_path):
    folder = tmp_path / "many"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.yaml").write_text(JOB.format(name="a"))
    (folder / "broken.yaml").write_text("spec: [unclosed\n")
    (folder / "sub" / "c.yml").write_text(JOB.format(name="c"))
    code, out, err = run("apply", "-f", str(folder))
    assert code == 1
    assert out == "job/a created\n"
    assert "YAML syntax error" in err
    code, out, _ = run("apply", "-R", "-f", str(folder))
    assert "job/c created" in out


def test_apply_updates_a_job_inside_a_multi_document_file_in_place(home, tmp_path):
    multi = home.spec_dir / "team.yaml"
    multi.write_text(JOB.format(name="x") + "---\n# second\n" + JOB.format(name="y"))
    record(home, JobState(name="y", manifest="jobs/team.yaml"))
    src = tmp_path / "y.yaml"
    src.write_text(JOB.format(name="y").replace("priority: 3", "priority: 9"))
    assert run("apply", "-f", str(src))[1] == "job/y configured\n"
    text = multi.read_text()
    assert text.count("kind: Job") == 2
    assert "priority: 9" in text and "priority: 3" in text  # x untouched
    assert not (home.spec_dir / "y.yaml").exists()


# -- delete -------------------------------------------------------------------------------------


def test_delete_removes_single_file_and_one_document(home):
    (home.spec_dir / "solo.yaml").write_text(JOB.format(name="solo"))
    multi = home.spec_dir / "pair.yaml"
    multi.write_text(JOB.format(name="p1") + "---\n" + JOB.format(name="p2"))
    record(home, JobState(name="p1", manifest="jobs/pair.yaml"), JobState(name="p2", manifest="jobs/pair.yaml"))
    code, out, _ = run("delete", "job", "solo", "p1")
    assert code == 0 and out.splitlines() == ["job/solo deleted", "job/p1 deleted"]
    assert not (home.spec_dir / "solo.yaml").exists()
    assert "name: p1" not in multi.read_text() and "name: p2" in multi.read_text()


def test_delete_unknown_job_exits_1(home):
    code, _, err = run("delete", "job", "ghost")
    assert code == 1 and err == "error: job/ghost not found\n"


def test_delete_by_file(home, tmp_path):
    src = tmp_path / "d.yaml"
    src.write_text(JOB.format(name="d"))
    run("apply", "-f", str(src))
    assert run("delete", "-f", str(src))[1] == "job/d deleted\n"
    assert not (home.spec_dir / "d.yaml").exists()


# -- in-place edits -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, expect_line",
    [
        (("cancel", "e"), "  cancelled: true"),
        (("suspend", "e"), "  suspend: true"),
        (("set", "priority", "e", "42"), "  priority: 42"),
    ],
)
def test_edit_verbs_change_one_line_and_keep_comments(home, argv, expect_line):
    path = home.spec_dir / "e.yaml"
    path.write_text(JOB.format(name="e"))
    before = path.read_text().splitlines()
    code, _, err = run(*argv)
    assert code == 0, err
    after = path.read_text().splitlines()
    assert expect_line in [line.split("#")[0].rstrip() for line in after]
    assert "# training run for the paper" in after and any("# keep it short" in ln for ln in after)
    assert len(after) - len(before) in (0, 1)


def test_resume_flips_suspend_back(home):
    path = home.spec_dir / "r.yaml"
    path.write_text(JOB.format(name="r").replace("priority: 3", "priority: 3\n  suspend: true  # hold"))
    assert run("resume", "r")[0] == 0
    assert "  suspend: false  # hold" in path.read_text()


def test_rerun_bumps_annotation(home):
    path = home.spec_dir / "rr.yaml"
    path.write_text(JOB.format(name="rr"))
    assert run("rerun", "rr")[0] == 0
    from controller.util.yamlio import load_one

    assert "gflow.dev/rerun" in load_one(path.read_text())["metadata"]["annotations"]


def test_set_priority_rejects_non_integer(home):
    (home.spec_dir / "p.yaml").write_text(JOB.format(name="p"))
    code, _, err = run("set", "priority", "p", "high")
    assert code == 1 and "integer" in err


# -- get / describe / logs / wait ----------------------------------------------------------------


def _states() -> list[JobState]:
    now = time.time()
    return [
        JobState(
            name="alpha",
            phase="Running",
            reason="Started",
            gpus=2,
            devices=[1, 3],
            priority=5,
            created=now - 30,
            labels={"team": "vision"},
            attempt=1,
        ),
        JobState(
            name="beta",
            phase="Pending",
            reason="Resources",
            message="needs 4 GPUs, 1 free",
            gpus=4,
            created=now - 20,
            labels={"team": "nlp"},
        ),
        JobState(name="gamma", phase="Failed", reason="Error", exit_code=3, created=now - 10, attempt=1),
    ]


def test_get_jobs_table(home):
    record(home, *_states())
    code, out, _ = run("get", "jobs")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["NAME", "USER", "PHASE", "GPUS", "DEVICES", "PRIORITY", "AGE", "REASON"]
    assert lines[1].split()[:6] == ["alpha", "?", "Running", "2", "1,3", "5"]  # ?: no manifest left to own it
    assert [ln.split()[0] for ln in lines[1:]] == ["alpha", "beta", "gamma"]


def test_get_jobs_selectors_and_formats(home):
    record(home, *_states())
    assert run("get", "jobs", "-l", "team=vision", "-o", "name")[1] == "job/alpha\n"
    assert run("get", "jobs", "--phase", "Failed", "-o", "name")[1] == "job/gamma\n"
    assert run("get", "jobs", "-l", "team!=vision", "-o", "name")[1] == "job/beta\njob/gamma\n"
    code, out, _ = run("get", "jobs", "gamma", "-o", "json")
    assert code == 0 and json.loads(out)["status"]["exitCode"] == 3
    wide = run("get", "jobs", "-o", "wide")[1]
    assert "needs 4 GPUs, 1 free" in wide and "MESSAGE" in wide
    assert "phase: Running" in run("get", "jobs", "alpha", "-o", "yaml")[1]


def test_get_unknown_job_exits_1(home):
    record(home, *_states())
    code, out, err = run("get", "jobs", "nope")
    assert code == 1 and "job/nope not found" in err
    assert out == ""  # no header before the error, as kubectl (issue 37 item 6)
    code, out, err = run("get", "jobs", "nope", "alpha")
    assert code == 1 and out.splitlines()[0].startswith("NAME") and out.splitlines()[1].startswith("alpha")


def test_describe_prints_yaml_booleans_as_yaml_writes_them(home):
    (home.spec_dir / "flags.yaml").write_text(
        "metadata: {name: flags}\nspec:\n  command: [sh, -c, 'true']\n  suspend: true\n"
    )
    code, out, err = run("describe", "job", "flags")
    assert code == 0, err
    assert "Suspend:" in out and out.split("Suspend:")[1].split()[0] == "true", out


def test_describe_shows_status_and_spec(home):
    (home.spec_dir / "alpha.yaml").write_text(JOB.format(name="alpha"))
    record(home, *_states())
    code, out, err = run("describe", "job", "alpha")
    assert code == 0
    assert "Phase:" in out and "Running" in out and "python3 -c" in out and "Devices:" in out
    # no gflowd runs on this home: said once, on stderr, after what was shown
    assert err.count("warning: gflowd is not running for") == 1 and "may be stale" in err


def test_logs_tail(home):
    record(home, *_states())
    home.log_file("gamma").write_text("".join(f"line {i}\n" for i in range(10)))
    assert run("logs", "gamma", "--tail", "2")[1] == "line 8\nline 9\n"
    assert run("logs", "gamma")[1].count("\n") == 10
    code, _, err = run("logs", "ghost")
    assert code == 1 and "not found" in err


def test_wait_for_phase(home):
    record(home, *_states())
    assert run("wait", "job/alpha", "--for=phase=Running")[0] == 0
    code, _, err = run("wait", "job/gamma", "--for=phase=Succeeded", "--timeout", "5s")
    assert code == 1 and "Failed" in err  # impossible: exits at once
    code, _, err = run("wait", "job/beta", "--for=phase=Running", "--timeout", "0.2s")
    assert code == 1 and "timed out" in err


def test_explain(home):
    code, out, _ = run("explain", "job.spec.resources.gpus")
    assert code == 0 and "Whole GPUs" in out
    code, _, err = run("explain", "job.spec.nope")
    assert code == 1 and "does not exist" in err


@pytest.mark.e2e
@pytest.mark.parametrize(
    "argv",
    [
        ["get"],
        ["get", "pods"],
        ["apply"],
        ["apply", "-f", "/nonexistent/file.yaml"],
        ["set", "priority", "x"],
        ["wait", "job/x", "--for=color=red"],
        ["frobnicate"],
    ],
)
def test_user_errors_are_one_line_exit_1_no_traceback(home, argv):
    proc = subprocess.run(
        [sys.executable, "-m", "controller.cli.main", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("argv", "config", "expected"),
    [
        (["--resync", "soon"], None, "gflowd: --resync: 'soon' is not a duration"),
        (["--termination-grace-period", "x"], None, "gflowd: --termination-grace-period:"),
        (["--finished-jobs-history", "five"], None, "invalid int value"),
        (["--allocation-strategy", "fastest"], None, "invalid choice"),
        ([], "resync: later\n", "gflowd: config.yaml: resync:"),
        ([], "resynk: 10s\n", "gflowd: config.yaml: resynk:"),
        (["--fake-gpus", "/nonexistent.yaml"], None, "is not a file"),
    ],
)
def test_gflowd_bad_flags_and_config_are_one_line_errors(tmp_path, argv, config, expected):
    home = tmp_path / "h"
    home.mkdir()
    if config:
        (home / "config.yaml").write_text(config)
    proc = subprocess.run(
        [sys.executable, "-m", "controller.daemon", "--home", str(home), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
def test_gflowd_as_a_user_who_cannot_see_the_homes_config_says_so_in_one_line(tmp_path):
    # e.g. `sudo -u nobody gflowd` with HOME still /root: the default home is under a 0700 folder
    from helpers import run_as

    from controller.daemon.main import main as gflowd_main

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    home = locked / "home"
    code, err = run_as(65534, lambda: gflowd_main(["--home", str(home)]))
    assert code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines() == [
        f"gflowd: cannot read {home / 'config.yaml'}: Permission denied; choose a home this user can read (--home or $GFLOW_HOME)"
    ], err


@pytest.mark.e2e
def test_get_jobs_watch_prints_a_row_when_a_job_changes_and_stops_on_ctrl_c(home):
    import os
    import signal

    from helpers import wait_for

    record(home, JobState(name="w", phase="Pending", reason="Resources", created=time.time()))
    env = {**os.environ, "GFLOW_HOME": str(home.root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli.main", "get", "jobs", "-w"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a shell's background job inherits SIGINT ignored, and Python then never raises
        # KeyboardInterrupt: give the CLI the terminal's default, as a user's shell would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    import threading

    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    try:

        def read_lines():
            return lines

        wait_for(lambda: len(read_lines()) >= 2, timeout=15, message="the initial table")
        assert lines[0].split()[:3] == ["NAME", "USER", "PHASE"] and lines[1].split()[:3] == ["w", "?", "Pending"]
        record(home, JobState(name="w", phase="Running", reason="Started", created=time.time()))
        wait_for(
            lambda: any(ln.split()[:3] == ["w", "?", "Running"] for ln in read_lines()), timeout=15, message="a new row"
        )
        assert sum(1 for ln in lines if ln.startswith("NAME")) == 1  # the header once, then rows
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_get_jobs_wide_shows_the_effective_priority_of_pending_jobs(home):
    now = time.time()
    record(
        home,
        JobState(
            name="old", phase="Pending", reason="Priority", priority=1, effective_priority=6, created=now - 5 * 3600
        ),
        JobState(name="busy", phase="Running", reason="Started", priority=2, effective_priority=2, created=now),
    )
    lines = run("get", "jobs", "-o", "wide")[1].splitlines()
    header = lines[0].split()
    column = header.index("EFFECTIVE")
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["old"][column] == "6" and rows["old"][header.index("PRIORITY")] == "1"
    assert rows["busy"][column] == "-"  # only while Pending


USAGE = {
    "attempt": 1,
    "sampledAt": "2026-11-23T10:00:00.000Z",
    "samples": 12,
    "utilMean": 41.5,
    "gpuHoursAllocated": 2.0,
    "gpuHoursUsed": 0.5,
    "gpus": [
        {"index": 2, "utilMean": 83.0, "utilPeak": 100, "memoryMean": 10 * 2**30, "memoryPeak": 12 * 2**30},
        {"index": 3, "utilMean": 0.0, "utilPeak": 0, "memoryMean": 0, "memoryPeak": 0},
    ],
}


def test_get_jobs_wide_shows_the_mean_gpu_utilization(home):
    record(
        home,
        JobState(
            name="ddp",
            phase="Running",
            reason="Started",
            gpus=2,
            devices=[2, 3],
            created=time.time(),
            attempt=1,
            gpu_usage=USAGE,
        ),
        JobState(name="cpu", phase="Running", reason="Started", created=time.time()),
    )
    lines = run("get", "jobs", "-o", "wide")[1].splitlines()
    column = lines[0].split().index("UTIL")
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["ddp"][column] == "42%" and rows["cpu"][column] == "-"


def test_describe_shows_gpu_usage_per_gpu_with_a_sparkline_of_recent_samples(home):
    (home.spec_dir / "ddp.yaml").write_text(JOB.format(name="ddp"))
    record(
        home,
        JobState(
            name="ddp",
            phase="Running",
            reason="Started",
            gpus=2,
            devices=[2, 3],
            created=time.time(),
            attempt=1,
            gpu_usage=USAGE,
        ),
    )
    series = [(1.0 + k, [(k * 10, 1024), (0, 0)]) for k in range(11)]
    live = {**USAGE, "samples": 20, "gpuHoursAllocated": 2.5, "gpuHoursUsed": 0.75}  # gflowd's latest sample
    home.gpu_usage_file.write_text(
        json.dumps({"jobs": {"ddp": {**series_json(series, [2, 3], since=1.0), "summary": live}}})
    )
    out = run("describe", "job", "ddp")[1].splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("GPU Usage:"))
    assert "20 samples, 0.75 of 2.50 GPU-hours used (30%)" in out[start]  # live, not the status's minute-old copy
    assert out[start + 2].split() == ["2", "83%", "100%", "10Gi", "12Gi", "▁▂▂▃▄▅▅▆▇▇█"]  # 0..100% in steps of 10
    assert out[start + 3].split() == ["3", "0%", "0%", "0", "0", "▁" * 11]


def test_describe_shows_the_effective_priority_while_pending(home):
    (home.spec_dir / "old.yaml").write_text(JOB.format(name="old"))
    record(
        home,
        JobState(name="old", phase="Pending", reason="Priority", priority=1, effective_priority=6, created=time.time()),
    )
    out = run("describe", "job", "old")[1]
    assert any(line.split() == ["Effective", "Priority:", "6"] for line in out.splitlines()), out


# -- the machine failing -------------------------------------------------------------------------


@pytest.mark.e2e
def test_apply_on_a_full_disk_is_one_line_not_a_traceback(home, tmp_path):
    """ENOSPC while writing the manifest: exit 1 and one line naming the file and the cause."""
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a size-limited tmpfs")
    jobs = Path(home.spec_dir)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(jobs)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        fd = os.open(jobs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        manifest = tmp_path / "big.yaml"
        manifest.write_text(JOB.format(name="big") + "#" + "x" * 20000 + "\n")
        code, out, err = run("apply", "-f", str(manifest))
        assert code == 1, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "No space left on device" in lines[0], err
        assert "Traceback" not in err
        assert not list(jobs.glob("big*")), "a failed write leaves no file behind"
    finally:
        subprocess.run(["umount", "-l", str(jobs)], check=False)


def test_phase_words_are_checked_against_the_kind_listed(home):
    record(home, *_states())
    assert run("get", "reservations", "--phase", "Active")[0] == 0  # a reservation's phase, not a job's
    code, out, err = run("get", "reservations", "--phase", "Running")
    assert (code, out) == (1, "") and "no reservation phase 'Running'" in err and "Active" in err
    code, out, err = run("get", "jobs", "--phase", "f,CA", "-o", "name")
    assert (code, out) == (0, "job/gamma\n"), err


def test_apply_reads_a_folders_manifests_in_name_order_and_below_it_only_with_r(tmp_path):
    """``-f DIR``: its ``*.yaml``/``*.yml`` files (a symlink to one too), sorted by name; not hidden
    files, other suffixes or sub-folders (those with ``-R``); an empty or unreadable folder says so."""
    from controller.client.errors import GflowError
    from controller.client.write.manifests import read_inputs

    src = tmp_path / "jobs src"
    (src / "sub").mkdir(parents=True)
    for name in ("b.yaml", "a.yml", "sub/c.yaml", ".hidden.yaml", "notes.txt", "b.yaml~"):
        (src / name).write_text(f"# {name}\n")
    (src / "link.yaml").symlink_to(src / "sub" / "c.yaml")
    (src / "dir.yaml").mkdir()
    flat = read_inputs([str(src)], False)
    assert flat == [
        (str(src / n), f"# {t}\n") for n, t in (("a.yml", "a.yml"), ("b.yaml", "b.yaml"), ("link.yaml", "sub/c.yaml"))
    ]
    assert [o for o, _ in read_inputs([str(src)], True)] == [
        str(src / n) for n in ("a.yml", "b.yaml", "link.yaml", "sub/c.yaml")
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GflowError, match=r"empty: no \.yaml or \.yml files \(use -R for sub-folders\)$"):
        read_inputs([str(empty)], False)
    if os.geteuid() != 0:  # root reads any folder
        empty.chmod(0)
        with pytest.raises(GflowError, match=r"no \.yaml or \.yml files"):
            read_inputs([str(empty)], False)
