"""The CLI as an ordinary user on the shared box (docs/multi-user.md): a root gflowd on fake GPUs
runs each manifest as its file's owner; ``nobody`` (65534) lists, filters, submits and describes
with gflowctl, in a forked child that dropped to that uid. Whose job is whose (USER, --user, --me),
wrong input answered instead of a quiet wrong answer, the flags of sbatch and gbatch, a sweep's
parameters (never read past the manifest's own permissions), and the smaller answers of issue 33."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import run_as, wait_for, wait_phase

from controller.cli.main import main
from controller.util import jobs_table

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run gflowd as root and gflowctl as nobody")


@pytest.fixture
def shared():
    """A home laid out as docs/multi-user.md says: readable by all, a sticky world-writable spec dir."""
    root = Path(tempfile.mkdtemp(prefix="gflow-users-e2e-"))
    os.chmod(root, 0o755)
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "jobs", 0o1777)
    yield home
    shutil.rmtree(root, ignore_errors=True)


def put(home: Path, filename: str, text: str, uid: int = 0, mode: int = 0o644) -> Path:
    """A manifest owned by ``uid`` from its first byte visible: chown before the rename."""
    tmp = home / "jobs" / f".{filename}.tmp"
    tmp.write_text(text)
    os.chown(tmp, uid, uid)
    os.chmod(tmp, mode)
    os.rename(tmp, home / "jobs" / filename)
    return home / "jobs" / filename


def job(name: str, command: str = "sleep 300", gpus: int = 0) -> str:
    return f"metadata: {{name: {name}}}\nspec:\n  command: [sh, -c, '{command}']\n  resources: {{gpus: {gpus}}}\n"


def warm(home: Path, *argv: str) -> None:
    """Run a verb once as root so what it imports lazily is loaded before the fork (nobody may not
    be able to read this interpreter's files)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["--home", str(home), *argv])


def ctl_as(uid: int, home: Path, *argv: str, alarm: int = 0) -> tuple[int, str, str]:
    """gflowctl as ``uid`` in a forked child, from inside the home: (exit code, stdout, stderr).
    ``alarm``: SIGALRM after that many seconds (a verb that must not wait forever)."""
    out = tempfile.TemporaryFile()

    def work() -> int:
        sys.stdout = open(out.fileno(), "w", closefd=False)
        os.chdir(home)
        if alarm:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(alarm)
        try:
            return main(["--home", str(home), *argv])
        finally:
            sys.stdout.flush()

    code, err = run_as(uid, work)
    out.seek(0)
    return code, out.read().decode(), err


def table(text: str) -> dict[str, list[str]]:
    """A table's rows by their first cell, header included."""
    return {line.split()[0]: line.split() for line in text.splitlines() if line.split()}


def test_user_column_and_user_filters(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "mine.yaml", job("mine", gpus=1))
    put(shared, "theirs.yaml", job("theirs", gpus=1), uid=NOBODY)
    wait_phase(shared, "mine", "Running", daemon=daemon)
    wait_phase(shared, "theirs", "Running", daemon=daemon)
    for verb in (
        ["get", "jobs", "-o", "wide"],
        ["get", "jobs", "-o", "json"],
        ["describe", "job", "theirs"],
        ["get", "gpus"],
        ["top", "--once"],
    ):
        warm(shared, *verb)

    code, out, err = ctl_as(NOBODY, shared, "get", "jobs")
    rows = table(out)
    assert code == 0, err
    assert rows["NAME"][:3] == ["NAME", "USER", "PHASE"], out
    assert rows["mine"][1:3] == ["root", "Running"] and rows["theirs"][1:3] == ["nobody", "Running"], out
    assert table(ctl_as(NOBODY, shared, "get", "jobs", "-o", "wide")[1])["theirs"][1] == "nobody"
    for mine_only in (["--me"], ["-u", "nobody"], ["--user", "nobody,nosuchuser"]):
        code, out, err = ctl_as(NOBODY, shared, "get", "jobs", *mine_only)
        assert code == 0 and set(table(out)) == {"NAME", "theirs"}, (mine_only, out, err)
    assert set(table(ctl_as(NOBODY, shared, "get", "jobs", "--user", "root")[1])) == {"NAME", "mine"}
    items = json.loads(ctl_as(NOBODY, shared, "get", "jobs", "-o", "json")[1])["items"]
    assert {i["metadata"]["name"]: i["metadata"]["user"] for i in items} == {"mine": "root", "theirs": "nobody"}
    assert re.search(r"^User:\s+nobody$", ctl_as(NOBODY, shared, "describe", "job", "theirs")[1], re.M)
    gpus = ctl_as(NOBODY, shared, "get", "gpus")[1]
    assert table(gpus)["INDEX"][6:8] == ["JOBS", "USER"], gpus
    assert sorted(row[-2:] for name, row in table(gpus).items() if name != "INDEX") == [
        ["mine", "root"],
        ["theirs", "nobody"],
    ], gpus
    top = ctl_as(NOBODY, shared, "top", "--once")[1]
    assert table(top)["JOB"][:2] == ["JOB", "USER"] and table(top)["theirs"][1] == "nobody", top


def test_wrong_phase_names_after_flags_and_a_stopped_gflowd_are_answered(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "run1.yaml", job("run1", gpus=2), uid=NOBODY)
    put(shared, "wait1.yaml", job("wait1", gpus=1), uid=NOBODY)
    wait_phase(shared, "run1", "Running", daemon=daemon)
    wait_phase(shared, "wait1", "Pending", daemon=daemon)
    warm(shared, "get", "jobs", "--phase", "PD,R", "-o", "name")
    warm(shared, "get", "jobs", "--phase", "Runing")

    code, out, err = ctl_as(NOBODY, shared, "get", "jobs", "--phase", "Runing", "--phase", "Pendign,Zzz")
    assert code == 1 and out == "", (out, err)
    assert len(err.splitlines()) == 1, err  # every bad word in one line
    assert "'Runing' (did you mean Running?)" in err and "'Pendign' (did you mean Pending?)" in err and "'Zzz'" in err
    assert "Pending, Running, Succeeded" in err and "PD,R" in err, err
    for phases in (["--phase", "Pending,Running"], ["--phase", "PD,R"], ["--phase", "pending", "--phase", "r"]):
        code, out, err = ctl_as(NOBODY, shared, "get", "jobs", *phases, "-o", "name")
        assert code == 0 and out.split() == ["job/run1", "job/wait1"], (phases, out, err)
    code, out, err = ctl_as(NOBODY, shared, "get", "jobs", "-o", "wide", "wait1")  # kubectl takes both orders
    assert code == 0 and set(table(out)) == {"NAME", "wait1"}, (out, err)
    code, out, err = ctl_as(NOBODY, shared, "get", "jobs", "--phase", "R", "run1", "-o", "name")
    assert (code, out) == (0, "job/run1\n"), err

    assert daemon.terminate() == 0  # jobs keep running; their statuses say Running, stale
    code, out, err = ctl_as(NOBODY, shared, "get", "jobs")
    assert code == 0 and table(out)["run1"][2] == "Running"
    assert "warning: gflowd is not running" in err and "stale" in err, err


def test_run_takes_the_flags_of_sbatch_and_gbatch_and_suggests_the_rest(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "first.yaml", job("first", command="true"), uid=NOBODY)
    wait_phase(shared, "first", "Succeeded", daemon=daemon)
    warm(shared, "run", "--dry-run", "-o", "yaml", "--gres=gpu:1", "--", "true")

    code, out, err = ctl_as(
        NOBODY,
        shared,
        "run",
        "-J",
        "second",
        "--gres=gpu:1",
        "--cpus-per-task",
        "1",
        "--depends-on",
        "first",
        "--",
        "sh",
        "-c",
        "echo gpus=$CUDA_VISIBLE_DEVICES",
    )
    assert (code, out.strip()) == (0, "job/second created"), err
    manifest = shared / "jobs" / "second.yaml"
    assert manifest.stat().st_uid == NOBODY
    assert re.search(r"gpus: 1\n\s+cpus: 1\n", manifest.read_text()) and "job: first" in manifest.read_text()
    status = wait_phase(shared, "second", "Succeeded", daemon=daemon)
    assert len(status["devices"]) == 1
    code, out, err = ctl_as(
        NOBODY, shared, "run", "--job-name", "third", "--cpus", "2", "--dry-run", "-o", "yaml", "--", "true"
    )
    assert code == 0 and "name: third" in out and "cpus: 2" in out, err

    for flags, hint in (
        (["--dependency", "afterok:first"], "did you mean --after JOB"),
        (["--gpu", "1"], "did you mean --gpus"),
        (["--gres=tpu:1"], "only GPUs, written gpu:N"),
    ):
        code, out, err = ctl_as(NOBODY, shared, "run", *flags, "--", "true")
        assert code == 1 and len(err.splitlines()) == 1 and hint in err, (flags, err)


SWEEP = """kind: Sweep
metadata: {name: NAME}
spec:
  parallelism: 1
  matrix:
    lr: [0.1, 0.01]
    bs: [64]
  template:
    command: [sh, -c, 'echo lr={lr}']
"""


def test_a_sweeps_parameters_are_shown_to_whoever_may_read_its_manifest(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "grid.yaml", SWEEP.replace("NAME", "grid"), uid=NOBODY)
    put(shared, "secret.yaml", SWEEP.replace("NAME", "secret"), mode=0o600)  # root's, readable by root only
    for name in ("grid-0", "grid-1", "secret-0", "secret-1"):
        wait_phase(shared, name, "Succeeded", daemon=daemon)
    for verb in (["get", "jobs", "-o", "wide"], ["describe", "job", "grid-1"], ["get", "sweeps"]):
        warm(shared, *verb)

    _code, out, _err = ctl_as(NOBODY, shared, "get", "jobs", "-o", "wide")
    wide = table(out)
    params = wide["NAME"].index("PARAMS")
    assert [wide["grid-0"][params], wide["grid-0"][params + 1]] == ["lr=0.1", "bs=64"], out
    assert [wide["grid-1"][params], wide["grid-1"][params + 1]] == ["lr=0.01", "bs=64"], out
    assert wide["secret-0"][params] == "hidden" and "0.01" not in out.split("secret-1", 1)[1].splitlines()[0], out
    described = ctl_as(NOBODY, shared, "describe", "job", "grid-1")[1]
    assert re.search(r"^Parameters:\s+lr=0.01 bs=64 \(sweep/grid\)$", described, re.M), described
    hidden = ctl_as(NOBODY, shared, "describe", "job", "secret-1")[1]
    assert re.search(r"^Parameters:\s+hidden \(sweep/secret's manifest is not readable by you\)$", hidden, re.M), hidden
    sweeps = ctl_as(NOBODY, shared, "get", "sweeps")[1]
    assert table(sweeps)["grid"][1] == "nobody" and sweeps.splitlines()[1].endswith("lr=0.1,0.01 bs=64"), sweeps
    assert table(sweeps)["secret"][-1] == "hidden", sweeps
    _code, out, _ = ctl(shared, "get", "jobs", "-o", "wide")  # root may read root's manifest
    assert "lr=0.01" in out.split("secret-1", 1)[1].splitlines()[0], out
    # the dashboard reads as gflowd's user (root): a job's page goes only to its owner and root
    # (web/access.py), who may both read the Sweep manifest, so a private one is shown too
    from controller.client.read.state import job_rows
    from controller.paths import Home
    from controller.web.server import _sweep_params  # what job_detail puts in the page's "params"

    served = Home.locate(str(shared), None)
    rows = job_rows(served)
    assert _sweep_params(served, "grid-1", rows["grid-1"]) == "lr=0.01 bs=64"
    assert _sweep_params(served, "secret-1", rows["secret-1"]) == "lr=0.01 bs=64"
    assert _sweep_params(served, "mine", None) == ""


def ctl(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


def test_an_interactive_job_that_can_never_start_is_refused_at_once(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    warm(shared, "get", "jobs")
    from controller.cli import attach, edit, run  # noqa: F401  (loaded before the fork)
    from controller.client import terminal  # noqa: F401

    started = time.monotonic()
    code, out, err = ctl_as(NOBODY, shared, "run", "-it", "--name", "big", "--gpus", "9", "--", "true", alarm=120)
    assert code == 1, (code, out, err)  # the old code waited until SIGALRM
    assert "can never start" in err and "9" in err, err
    assert time.monotonic() - started < 120
    if "not submitted" in err:  # gflowd's review answered at submit (what every user gets with it)
        assert not (shared / "jobs" / "big.yaml").exists()
    else:  # checked locally: queued, then cancelled once gflowd said it never fits
        assert wait_phase(shared, "big", ("Cancelled", "Rejected"), daemon=daemon)["phase"] in ("Cancelled", "Rejected")


def test_parallelism_reason_counts_only_the_running_children(shared, gflowd, tmp_path):
    one = tmp_path / "one.yaml"
    one.write_text("gpus:\n  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n")
    daemon = gflowd("--fake-gpus", one, home=shared)
    put(shared, "busy.yaml", job("busy", gpus=1))
    wait_phase(shared, "busy", "Running", daemon=daemon)
    put(
        shared,
        "p.yaml",
        "kind: Sweep\nmetadata: {name: p}\nspec:\n  parallelism: 2\n  indices: 0-3\n"
        "  template:\n    command: [sleep, '300']\n    resources: {gpus: 1}\n",
        uid=NOBODY,
    )
    wait_phase(shared, "p-0", "Pending", reason="Resources", daemon=daemon)
    status = wait_phase(shared, "p-2", "Pending", reason="Parallelism", daemon=daemon)
    # nothing of p runs: two children wait for the GPU, the others for them
    assert status["message"] == "sweep p runs at most 2 children at once: 0 running, 2 ahead of it waiting to start", (
        status
    )


def test_reading_another_users_log_says_read(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "private.yaml", job("private", command="echo secret"))
    wait_phase(shared, "private", "Succeeded", daemon=daemon)
    log = shared / "logs" / "private.log"
    os.chmod(log, 0o600)  # root's output, kept from others
    from controller.cli import logs  # noqa: F401  (loaded before the fork)

    code, out, err = ctl_as(NOBODY, shared, "logs", "private")
    assert code == 1 and out == "", (out, err)
    assert len(err.splitlines()) == 1 and "may read it" in err and "change" not in err, err


def test_gflowd_status_into_a_closed_pipe_and_under_systemd(shared, gflowd, fake_gpus):
    from controller.daemon.service import main as service_main

    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)

    def status_into_closed_pipe() -> int:
        read_end, write_end = os.pipe()
        os.close(read_end)
        os.dup2(write_end, 1)
        sys.stdout = open(1, "w", closefd=False)
        code = service_main(["status", "--home", str(shared)])
        sys.stdout.flush()  # what the interpreter does at exit
        return code

    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it: a write raises BrokenPipeError
    code, err = run_as(NOBODY, status_into_closed_pipe)
    assert (code, err) == (0, ""), err

    def status_text() -> int:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            service_main(["status", "--home", str(shared)])
        sys.stderr.write(out.getvalue())
        return 0

    _, text = run_as(NOBODY, status_text)
    assert re.search(r"logs:\s+on the stderr of pid \d+ \(not started by gflowd up: no .*gflowd.log\)", text), text
    unit = Path("/sys/fs/cgroup/systemd/gflowd-h7test.service")
    if not Path("/sys/fs/cgroup/systemd/cgroup.procs").exists():
        pytest.skip("no name=systemd cgroup hierarchy to place gflowd in a unit")
    unit.mkdir()
    try:
        (unit / "cgroup.procs").write_text(str(daemon.pid))
        _, text = run_as(NOBODY, status_text)
        assert re.search(r"logs:\s+journalctl -u gflowd-h7test$", text, re.M), text
    finally:
        Path("/sys/fs/cgroup/systemd/cgroup.procs").write_text(str(daemon.pid))
        unit.rmdir()


def test_expected_start_comes_from_the_time_limits_ahead(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(
        shared,
        "a.yaml",
        "metadata: {name: a}\nspec:\n  command: [sleep, '300']\n  timeLimit: 1h\n  resources: {gpus: 2}\n",
    )
    started = wait_phase(shared, "a", "Running", daemon=daemon)
    put(
        shared,
        "b.yaml",
        "metadata: {name: b}\nspec:\n  command: ['true']\n  timeLimit: 30m\n  resources: {gpus: 1}\n  priority: 5\n",
        uid=NOBODY,
    )
    wait_phase(shared, "b", "Pending", reason="Resources", daemon=daemon)
    put(shared, "c.yaml", "metadata: {name: c}\nspec:\n  command: ['true']\n  resources: {gpus: 2}\n", uid=NOBODY)
    wait_for(
        lambda: (ctl(shared, "describe", "job", "c")[1].count("Queue Position") == 1) or None,
        message=lambda: f"c to be queued behind b: {ctl(shared, 'describe', 'job', 'c')[1]}",
    )
    for verb in (["describe", "job", "b"], ["get", "jobs", "-o", "wide"]):
        warm(shared, *verb)
    from controller.model.records import from_rfc3339

    a_ends_at = from_rfc3339(started["startTime"]) + 3600
    expected_b = time.strftime("%Y-%m-%d %H:%M", time.localtime(a_ends_at))
    expected_c = time.strftime("%Y-%m-%d %H:%M", time.localtime(a_ends_at + 1800))

    described = ctl_as(NOBODY, shared, "describe", "job", "b")[1]
    assert re.search(
        rf"^Expected Start:\s+{expected_b} \(in \S+\), when job/a reaches its timeLimit$", described, re.M
    ), described
    described = ctl_as(NOBODY, shared, "describe", "job", "c")[1]
    assert re.search(
        rf"^Expected Start:\s+{expected_c} \(in \S+\), when job/a, job/b reach their timeLimit$", described, re.M
    ), described
    wide = table(ctl_as(NOBODY, shared, "get", "jobs", "-o", "wide")[1])
    start = wide["NAME"].index("START")
    assert " ".join(wide["b"][start : start + 2]) == expected_b[5:] and wide["a"][start] == "-", wide


def test_get_jobs_lists_active_and_recent_jobs_unless_asked_for_all(shared, gflowd, fake_gpus):
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "old.yaml", job("old", command="true"), uid=NOBODY)
    put(shared, "new.yaml", job("new", command="true"), uid=NOBODY)
    put(shared, "live.yaml", job("live"), uid=NOBODY)
    wait_phase(shared, "old", "Succeeded", daemon=daemon)
    wait_phase(shared, "new", "Succeeded", daemon=daemon)
    wait_phase(shared, "live", "Running", daemon=daemon)
    assert daemon.terminate() == 0
    index_file = shared / "run" / "index.json"  # as a restarted gflowd would find it two days on
    index = json.loads(index_file.read_text())
    index["jobs"]["old"]["completionTime"] = time.time() - 2 * 86400
    index_file.write_text(json.dumps(index))
    table_file = str(shared / "run" / "jobs.table")  # and in the table get jobs reads (util/jobs_table.py)
    rows = jobs_table.read(table_file).rows
    ended = index["jobs"]["old"]["completionTime"]
    rows["old"] = tuple(ended if i == jobs_table.COMPLETION else v for i, v in enumerate(rows["old"]))
    Path(table_file).write_bytes(jobs_table.rewritten(sorted(rows.values())))
    warm(shared, "get", "jobs")

    code, out, err = ctl_as(NOBODY, shared, "get", "jobs")
    assert code == 0 and set(table(out)) == {"NAME", "new", "live"}, (out, err)
    assert "(1 jobs that ended more than a day ago not shown; -A lists them)" in err, err
    for every in (["-A"], ["--all"], ["old"], ["--phase", "Succeeded"]):
        assert "old" in table(ctl_as(NOBODY, shared, "get", "jobs", *every)[1]), every


def test_keys_typed_while_run_it_waits_are_not_replayed_into_the_shell(home, gflowd, fake_gpus):
    """On a pseudo-terminal as a user's shell would run it (root: the pexpect child runs this
    interpreter, which nobody may not read; the behaviour is the terminal's, not the uid's)."""
    import pexpect

    daemon = gflowd("--fake-gpus", fake_gpus)
    env = {**os.environ, "GFLOW_HOME": str(home), "XDG_STATE_HOME": str(home.parent / "state"), "TERM": "xterm"}
    put(home, "blocker.yaml", job("blocker", gpus=2))
    wait_phase(home, "blocker", "Running", daemon=daemon)
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "controller.cli.main",
            "run",
            "-it",
            "--name",
            "sess",
            "--gpus",
            "1",
            "-e",
            "PS1=gflow$ ",
            "--",
            "bash",
            "--norc",
            "--noprofile",
        ],
        env=env,
        cwd=str(home.parent),
        encoding="utf-8",
        timeout=60,
    )
    child.logfile_read = shown = io.StringIO()  # everything the terminal showed
    try:
        child.expect(r"job/sess is Pending")
        child.sendline("echo typed-$((6*7))")  # would print typed-42 if the shell got it
        assert ctl(home, "cancel", "blocker")[0] == 0
        child.expect(r"job/sess is running")
        child.expect(r"gflow\$ ")
        child.sendline("echo marker-$((1+1))")
        child.expect("marker-2")
        assert "typed-42" not in shown.getvalue(), shown.getvalue()
        child.sendline("exit 0")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_wide_util_is_the_latest_sample_as_describe_shows_it(home, gflowd, tmp_path):
    from test_gpu_usage_e2e import running_with_pid, waiting_job, write_gpus

    from controller.client.read.usage import live_summary

    fake = tmp_path / "gpus.yaml"
    write_gpus(fake, [], [])
    release = tmp_path / "release"
    daemon = gflowd("--fake-gpus", fake, "--gpu-sample-interval", "0.5s")
    (home / "jobs" / "ddp.yaml").write_text(waiting_job("ddp", 1, release))
    pid = running_with_pid(home, "ddp")["pid"]
    write_gpus(fake, [{"pid": pid, "usedMemory": "10Gi", "utilization": 60}], [])
    try:
        usage_file = home / "run" / "gpu-usage.json"

        def live() -> float | None:
            try:
                summary = live_summary(json.loads(usage_file.read_text()), "ddp", 1)
            except (OSError, ValueError):
                return None
            return summary.get("utilMean") if summary else None

        # the mean climbs toward 60% (the first samples saw no process): -o wide shows it as of now
        wait_for(
            lambda: (live() or 0) >= 20, timeout=30, message=lambda: f"live samples of 60%\n{daemon.stderr()[-2000:]}"
        )
        before = live()
        wide = table(ctl(home, "get", "jobs", "-o", "wide")[1])
        after = live()
        shown = wide["ddp"][wide["NAME"].index("UTIL")]
        assert shown.endswith("%") and round(before) <= int(shown[:-1]) <= round(after), (before, shown, after)
    finally:
        release.touch()


def test_get_o_json_shows_a_spec_only_to_whoever_may_read_its_manifest(shared, gflowd, fake_gpus, monkeypatch, request):
    """``get -o yaml|json`` prints each job's spec from its manifest, read by the caller: nobody sees
    the spec of their own and of a readable manifest, and of root's 0600 one (a token in its env)
    only the status; root sees all three."""
    daemon = gflowd("--fake-gpus", fake_gpus, home=shared)
    put(shared, "mine.yaml", job("mine", "true"), uid=NOBODY)
    put(shared, "open.yaml", job("open", "true"))
    put(
        shared, "private.yaml", job("private", "true").replace("spec:\n", "spec:\n  env: {TOKEN: s3cr3t}\n"), mode=0o600
    )
    for name in ("mine", "open", "private"):
        wait_phase(shared, name, "Succeeded", daemon=daemon)
    warm(shared, "get", "jobs", "-o", "json")
    code, out, err = ctl_as(NOBODY, shared, "get", "jobs", "-o", "json")
    assert code == 0, err
    items = {i["metadata"]["name"]: i for i in json.loads(out)["items"]}
    assert items["mine"]["spec"]["command"] == ["sh", "-c", "true"] and "spec" in items["open"]
    assert "spec" not in items["private"] and items["private"]["status"]["phase"] == "Succeeded"
    assert "s3cr3t" not in out
    _, single, _ = ctl_as(NOBODY, shared, "get", "job", "private", "-o", "yaml")
    assert "s3cr3t" not in single and "\nspec:" not in single and "phase: Succeeded" in single
    _, as_root, _ = ctl(shared, "get", "jobs", "-o", "json")
    assert json.loads(as_root)["items"][[i["metadata"]["name"] for i in json.loads(as_root)["items"]].index("private")][
        "spec"
    ]["env"] == {"TOKEN": "s3cr3t"}
    # root takes the open manifest's read access away: nobody's own caches (kept, as on a real box,
    # in a folder nobody owns) must not keep showing it
    caches = Path(tempfile.mkdtemp(prefix="gflow-nobody-cache-"))  # not under pytest's 0700 root folder
    request.addfinalizer(lambda: shutil.rmtree(caches, ignore_errors=True))
    os.chown(caches, NOBODY, NOBODY)
    monkeypatch.setenv("GFLOW_CACHE_DIR", str(caches))
    ctl_as(NOBODY, shared, "get", "jobs", "-o", "json")
    assert len(os.listdir(caches)) >= 2, os.listdir(caches)  # the specs and the texts were kept
    listed = json.loads(ctl_as(NOBODY, shared, "get", "jobs", "-o", "json")[1])["items"]
    assert "spec" in next(i for i in listed if i["metadata"]["name"] == "open")
    os.chmod(shared / "jobs" / "open.yaml", 0o600)
    code, out, err = ctl_as(NOBODY, shared, "get", "jobs", "-o", "json")
    items = {i["metadata"]["name"]: i for i in json.loads(out)["items"]}
    assert code == 0 and "spec" not in items["open"] and items["open"]["status"]["phase"] == "Succeeded", out + err
    _, single, _ = ctl_as(NOBODY, shared, "get", "job", "open", "-o", "yaml")
    assert "\nspec:" not in single and "phase: Succeeded" in single
