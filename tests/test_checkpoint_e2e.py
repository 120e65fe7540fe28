"""spec.checkpoint against a real root gflowd, real supervisors and real jobs (docs/checkpoint.md):
the signal before a stop gflowd causes, the job's confirmation (``gflowctl checkpoint done`` or
the file), the stop waiting for it up to the grace, Pending and a resume afterwards; the signal
``before`` the time limit; a gflowd killed mid-handshake; another user who cannot confirm."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import job_status, run_as, wait_for, wait_phase, write_manifest

# loaded before run_as forks: nobody cannot read root's venv to import them then
import controller.cli.checkpoint
import controller.client.control_peer
import controller.client.terminal  # noqa: F401
from controller.cli.main import main

NOBODY = 65534
GFLOWCTL = str(Path(sys.executable).parent / "gflowctl")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run gflowd as root and gflowctl as nobody")


@pytest.fixture
def shared():
    root = Path(tempfile.mkdtemp(prefix="gflow-ckpt-e2e-"))
    os.chmod(root, 0o755)
    home = root / "home"
    (home / "jobs").mkdir(parents=True)
    os.chmod(home, 0o755)
    yield home
    shutil.rmtree(root, ignore_errors=True)


def ctl(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


OUT_DIR = Path(tempfile.gettempdir())  # replaced per test (the ``out`` fixture)


def read_log(home: Path, name: str) -> str:
    """Every attempt's output of job ``name`` (the job appends to one file)."""
    try:
        return (OUT_DIR / name).read_text()
    except FileNotFoundError:
        return ""


@pytest.fixture(autouse=True)
def out(tmp_path, monkeypatch):
    folder = tmp_path / "out"
    folder.mkdir()
    monkeypatch.setattr(sys.modules[__name__], "OUT_DIR", folder)
    return folder


def events(home: Path, reason: str) -> list[dict]:
    try:
        lines = (home / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [e for e in map(json.loads, lines) if e["reason"] == reason]


def job(name: str, confirm: str, checkpoint: str = "{signal: USR1, grace: 60s}", extra: str = "") -> str:
    """A job that logs its start (attempt, resume, restarts), and on USR1 logs it and runs ``confirm``."""
    script = (
        f"exec >>{OUT_DIR / name} 2>&1  # every attempt's output, in one file\n"
        f"trap 'echo got-signal; {confirm}' USR1\n"
        'echo "start attempt=$GFLOW_ATTEMPT resume=${GFLOW_RESUME:-0} restarts=$GFLOW_RESTART_COUNT"\n'
        "while true; do sleep 0.1; done\n"
    )
    indented = "".join(f"    {line}\n" for line in script.splitlines())
    return (
        f"metadata: {{name: {name}}}\nspec:\n  resources: {{gpus: 1}}\n  checkpoint: {checkpoint}\n{extra}"
        f"  script: |\n{indented}"
    )


@pytest.fixture
def daemon(shared, gflowd, tmp_path):
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: H100, memory: 80Gi}\n  - {name: H100, memory: 80Gi}\n")
    return gflowd("--fake-gpus", fake, home=shared)


def test_a_drained_job_confirms_with_gflowctl_returns_to_pending_and_resumes(shared, daemon):
    home = shared
    confirm = f"{GFLOWCTL} checkpoint done --path /ckpt/step-7"
    write_manifest(home / "jobs", "a.yaml", job("a", confirm))
    status = wait_phase(home, "a", "Running", daemon=daemon)
    wait_for(lambda: "start attempt=1" in read_log(home, "a"), message=lambda: read_log(home, "a"))
    code, out, err = ctl(home, "drain", "gpu", str(status["devices"][0]))  # a stop gflowd causes: Preempted
    assert code == 0, err
    status = wait_phase(home, "a", ("Pending", "Running"), daemon=daemon)
    wait_for(lambda: "start attempt=2" in read_log(home, "a"), message=lambda: read_log(home, "a"))
    log = read_log(home, "a")
    assert "start attempt=1 resume=0 restarts=0" in log, log
    assert log.index("got-signal") < log.index("start attempt=2"), log
    assert "start attempt=2 resume=1 restarts=1" in log, log
    status = job_status(home, "a")
    found = [c for c in status["conditions"] if c["type"] == "Checkpointed"]
    assert found and "attempt 1 confirmed a checkpoint at /ckpt/step-7" in found[0]["message"], status
    assert [e["type"] for e in events(home, "Checkpointed")] == ["Normal"]
    assert not events(home, "CheckpointTimeout")
    code, out, err = ctl(home, "describe", "job", "a")
    assert "/ckpt/step-7" in out, out


def test_a_suspended_job_confirms_by_the_file(shared, daemon):
    home = shared
    write_manifest(home / "jobs", "b.yaml", job("b", 'echo /ckpt/file > "$GFLOW_CHECKPOINT_FILE"'))
    wait_phase(home, "b", "Running", daemon=daemon)
    wait_for(lambda: "start attempt=1" in read_log(home, "b"), message=lambda: read_log(home, "b"))
    assert ctl(home, "suspend", "b")[0] == 0
    wait_phase(home, "b", "Pending", reason="Suspended", daemon=daemon)
    wait_for(lambda: events(home, "Checkpointed"), message=daemon.stderr)
    assert "at /ckpt/file" in events(home, "Checkpointed")[0]["message"]
    assert not events(home, "CheckpointTimeout")
    assert ctl(home, "resume", "b")[0] == 0
    wait_for(lambda: "start attempt=2 resume=1 restarts=1" in read_log(home, "b"), message=lambda: read_log(home, "b"))


def test_a_job_that_never_confirms_is_stopped_after_the_grace_with_a_warning(shared, daemon):
    home = shared
    write_manifest(home / "jobs", "c.yaml", job("c", "true", checkpoint="{signal: USR1, grace: 2s}"))
    wait_phase(home, "c", "Running", daemon=daemon)
    wait_for(lambda: "start attempt=1" in read_log(home, "c"), message=lambda: read_log(home, "c"))
    assert ctl(home, "suspend", "c")[0] == 0
    wait_phase(home, "c", "Pending", reason="Suspended", daemon=daemon)
    warned = events(home, "CheckpointTimeout")
    assert [e["type"] for e in warned] == ["Warning"] and "SIGUSR1 sent (Suspended)" in warned[0]["message"], warned
    assert "got-signal" in read_log(home, "c")
    assert not [c for c in job_status(home, "c")["conditions"] if c["type"] == "Checkpointed"]


def test_the_time_limit_sends_the_signal_before_and_a_confirmed_requeue_resumes(shared, daemon):
    home = shared
    confirm = f"echo signalled-at=$SECONDS; {GFLOWCTL} checkpoint done"
    extra = "  timeLimit: 8s\n"
    text = job("d", confirm, checkpoint="{signal: USR1, before: 5s, requeue: true}", extra=extra)
    write_manifest(home / "jobs", "d.yaml", text)
    wait_for(
        lambda: "start attempt=2" in read_log(home, "d"),
        timeout=60,
        message=lambda: f"{read_log(home, 'd')} {job_status(home, 'd')}",
    )
    log = read_log(home, "d")
    first = log[: log.index("start attempt=2")]
    assert "got-signal" in first, log
    seconds = int(first.split("signalled-at=")[1].split()[0])
    assert seconds <= 7, log  # the signal came before the limit (8s), not at it
    assert "resume=1 restarts=1" in log
    assert any("attempt 1 confirmed" in e["message"] for e in events(home, "Checkpointed"))


def test_gflowd_killed_between_the_signal_and_the_confirmation(shared, gflowd, daemon, tmp_path):
    home = shared
    go = tmp_path / "go"
    confirm = f"while [ ! -e {go} ]; do sleep 0.05; done; {GFLOWCTL} checkpoint done --path /ckpt/late"
    write_manifest(home / "jobs", "e.yaml", job("e", confirm))
    wait_phase(home, "e", "Running", daemon=daemon)
    wait_for(lambda: "start attempt=1" in read_log(home, "e"), message=lambda: read_log(home, "e"))
    assert ctl(home, "suspend", "e")[0] == 0
    wait_for(lambda: "got-signal" in read_log(home, "e"), message=lambda: read_log(home, "e"))
    os.kill(daemon.pid, signal.SIGKILL)  # mid-handshake: the supervisor keeps the time
    wait_for(lambda: not os.path.exists(f"/proc/{daemon.pid}") or _zombie(daemon.pid))
    status = job_status(home, "e")
    assert status["phase"] == "Running", status  # nobody killed it early
    go.touch()
    later = gflowd("--fake-gpus", tmp_path / "gpus.yaml", home=home)
    wait_phase(home, "e", "Pending", reason="Suspended", daemon=later)
    wait_for(lambda: events(home, "Checkpointed"), message=later.stderr)
    assert "/ckpt/late" in events(home, "Checkpointed")[0]["message"]
    assert not events(home, "CheckpointTimeout")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def test_another_user_cannot_confirm_a_jobs_checkpoint(shared, daemon):
    home = shared
    write_manifest(home / "jobs", "f.yaml", job("f", "true", checkpoint="{signal: USR1, grace: 3s}"))
    wait_phase(home, "f", "Running", daemon=daemon)
    sock_path = home / "run" / "control" / "0" / "f.sock"
    wait_for(lambda: sock_path.exists())
    confirm_file = sock_path.with_suffix(".checkpoint")
    assert confirm_file.exists()

    def attack() -> int:
        failures = 0
        try:
            with open(confirm_file, "w") as handle:
                handle.write("/forged\n")
        except PermissionError:
            failures += 1
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(sock_path))
                sock.sendall(b"H" + len(b'{"mode": "checkpoint"}').to_bytes(4, "big") + b'{"mode": "checkpoint"}')
                sock.recv(100)
        except PermissionError:
            failures += 1
        code = main(["--home", str(home), "checkpoint", "done", "--job", "f", "--path", "/forged"])
        return failures * 10 + (1 if code != 0 else 0)

    code, err = run_as(NOBODY, attack)
    assert code == 21, (code, err)
    assert ctl(home, "suspend", "f")[0] == 0
    wait_phase(home, "f", "Pending", reason="Suspended", daemon=daemon)
    assert events(home, "CheckpointTimeout"), "a forged confirmation was taken"
    assert not events(home, "Checkpointed")


def test_priority_preemption_waits_for_the_checkpoint_then_the_job_resumes(shared, gflowd, tmp_path):
    home = shared
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: H100, memory: 80Gi}\n")
    daemon = gflowd("--fake-gpus", fake, "--preemption-threshold", "5", home=home)
    # the checkpoint takes a while: the preemptor must not start before it is confirmed
    confirm = f"sleep 1; echo saved; {GFLOWCTL} checkpoint done --path /ckpt/low"
    write_manifest(home / "jobs", "low.yaml", job("low", confirm))
    wait_for(lambda: "start attempt=1" in read_log(home, "low"), message=lambda: read_log(home, "low"))
    release = tmp_path / "release"
    high = (
        "metadata: {name: high}\nspec:\n  priority: 5\n  resources: {gpus: 1}\n"
        f"  command: [sh, -c, 'echo high-start >> {OUT_DIR / 'low'}; while [ ! -e {release} ]; do sleep 0.05; done']\n"
    )
    write_manifest(home / "jobs", "high.yaml", high)
    wait_for(lambda: "high-start" in read_log(home, "low"), message=lambda: read_log(home, "low"))
    status = wait_phase(home, "low", "Pending", reason="Preempted", daemon=daemon)
    log = read_log(home, "low")
    assert log.index("got-signal") < log.index("saved") < log.index("high-start"), log
    assert any("/ckpt/low" in c["message"] for c in status["conditions"] if c["type"] == "Checkpointed"), status
    release.touch()
    wait_for(
        lambda: "start attempt=2 resume=1 restarts=1" in read_log(home, "low"), message=lambda: read_log(home, "low")
    )


def checkpointed(status: dict | None) -> dict | None:
    return next((c for c in (status or {}).get("conditions") or [] if c["type"] == "Checkpointed"), None)


def test_a_confirmed_checkpoint_shows_while_the_job_runs_and_after_a_restart(shared, gflowd, daemon, tmp_path):
    """No stop asked for it: the job confirms on its own (say each epoch), and describe shows it
    while the attempt runs, within a pass; a confirmation made while gflowd is down shows once it is back."""
    home = shared
    epoch = tmp_path / "epoch"
    script = (
        f"exec >>{OUT_DIR / 'g'} 2>&1\n"
        "echo started\n"
        # at its first instant: a checkpointing job's control socket is there before the job starts
        f"{GFLOWCTL} checkpoint done --path /ckpt/epoch-1 && echo confirmed-1\n"
        f"while [ ! -e {epoch} ]; do sleep 0.05; done\n"
        'echo /ckpt/epoch-2 > "$GFLOW_CHECKPOINT_FILE"; echo confirmed-2\n'
        "while true; do sleep 0.1; done\n"
    )
    indented = "".join(f"    {line}\n" for line in script.splitlines())
    text = (
        f"metadata: {{name: g}}\nspec:\n  resources: {{gpus: 1}}\n  checkpoint: {{grace: 5s}}\n  script: |\n{indented}"
    )
    write_manifest(home / "jobs", "g.yaml", text)
    wait_for(lambda: "confirmed-1" in read_log(home, "g"), message=lambda: read_log(home, "g"))
    status = wait_for(
        lambda: (s := job_status(home, "g")) and checkpointed(s) and s,
        message=lambda: f"no Checkpointed condition while running: {job_status(home, 'g')} {daemon.stderr()}",
    )
    assert status["phase"] == "Running", status
    assert "attempt 1 confirmed a checkpoint at /ckpt/epoch-1" in checkpointed(status)["message"], status
    code, out, err = ctl(home, "describe", "job", "g")
    assert code == 0 and "attempt 1 confirmed a checkpoint at /ckpt/epoch-1" in out, out + err
    assert [e["type"] for e in events(home, "Checkpointed")] == ["Normal"]

    os.kill(daemon.pid, signal.SIGKILL)  # the next confirmation comes while gflowd is down
    wait_for(lambda: not os.path.exists(f"/proc/{daemon.pid}") or _zombie(daemon.pid))
    epoch.touch()
    wait_for(lambda: "confirmed-2" in read_log(home, "g"), message=lambda: read_log(home, "g"))
    later = gflowd("--fake-gpus", tmp_path / "gpus.yaml", home=home)
    status = wait_for(
        lambda: (s := job_status(home, "g")) and "/ckpt/epoch-2" in (checkpointed(s) or {}).get("message", "") and s,
        message=lambda: f"the confirmation made while gflowd was down: {job_status(home, 'g')} {later.stderr()}",
    )
    assert status["phase"] == "Running" and status["attempt"] == 1, status
    assert "got-signal" not in read_log(home, "g")  # nothing asked for a checkpoint: no signal went out

    assert ctl(home, "suspend", "g")[0] == 0  # its end does not announce the same confirmation again
    wait_phase(home, "g", "Pending", reason="Suspended", daemon=later)
    messages = [e["message"] for e in events(home, "Checkpointed")]
    assert len(messages) == 2 and "/ckpt/epoch-2" in messages[1], messages


def test_a_confirmation_wakes_gflowd_which_does_not_wait_for_its_resync(shared, gflowd, tmp_path):
    """The supervisor's datagram starts a pass: with a resync an hour away, nothing else would."""
    home = shared
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n  - {name: H100, memory: 80Gi}\n")
    daemon = gflowd("--fake-gpus", fake, "--resync", "1h", home=home)
    go = tmp_path / "go"
    script = f'while [ ! -e {go} ]; do sleep 0.05; done\necho /ckpt/woken > "$GFLOW_CHECKPOINT_FILE"\nexec sleep 600\n'
    indented = "".join(f"    {line}\n" for line in script.splitlines())
    text = (
        f"metadata: {{name: h}}\nspec:\n  resources: {{gpus: 1}}\n  checkpoint: {{grace: 5s}}\n  script: |\n{indented}"
    )
    write_manifest(home / "jobs", "h.yaml", text)
    wait_phase(home, "h", "Running", daemon=daemon)
    go.touch()
    status = wait_for(
        lambda: (s := job_status(home, "h")) and checkpointed(s) and s,
        timeout=30,  # far less than the resync: only the datagram can have started the pass
        message=lambda: f"no pass after the confirmation: {job_status(home, 'h')} {daemon.stderr()}",
    )
    assert status["phase"] == "Running" and "/ckpt/woken" in checkpointed(status)["message"], status
