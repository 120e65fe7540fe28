"""Issue 34 items 5 and 6: the shared-box path as the box's ordinary users, against the real system
gflowd under systemd (not a test gflowd on a temp home, not root).

- alice submits from her project with her venv active: the job runs her venv's python, as her, there.
- `gflowctl run -it` on a real pseudo-terminal (python's pty module), `exec` into a running job.
- the Python client from the admin's install (/opt/gflow/bin/python, docs/multi-user.md).
- a reservation of alice's fences a GPU from bob's job; mallory's decade-long one is Forbidden.
- mallory against alice's job (tests/test_secrets.py, test_interactive_security.py, test_web_access.py
  did the same against a test gflowd): no file under the home, no gflowctl verb and no /proc entry
  shows her alice's env or log; she cannot connect to alice's control socket, exec into, cancel or
  delete alice's job.
- hack/gpu-acceptance.py without a GPU (no nvidia-smi): every check SKIP, exit 0.
"""

from __future__ import annotations

import errno
import json
import os
import pty
import pwd
import select
import subprocess
import sys
import time
from pathlib import Path

from users import (  # noqa: F401
    HOME,
    apply,
    as_user,
    gflowctl,
    in_box,
    jobs,
    log_file,
    login_env,
    logs,
    manifest,
    ok,
    run_as,
    status,
    status_file,
    unique,
    wait_for,
    wait_phase,
)

pytestmark = in_box
ROOT = Path(__file__).resolve().parents[2]


def project(user: str) -> Path:
    """The user's project folder, made by them."""
    folder = Path(pwd.getpwnam(user).pw_dir) / "proj"
    ok(run_as(user, "mkdir", "-p", str(folder)))
    return folder


def test_a_job_submitted_with_a_venv_active_runs_that_venvs_python_as_its_user_in_the_project(jobs):
    home, proj, name = pwd.getpwnam("alice").pw_dir, project("alice"), unique("venv")
    probe = (
        "import os, pwd, sys; print(json.dumps({'prefix': sys.prefix, 'venv': os.environ.get('VIRTUAL_ENV'), "
        "'user': pwd.getpwuid(os.getuid()).pw_name, 'cwd': os.getcwd(), 'home': os.environ['HOME']}))"
    )
    out = gflowctl("alice", "run", "--name", name, "--", "python", "-c", "import json; " + probe, cwd=proj, venv=True)
    jobs.append(("alice", name))
    assert f"job/{name} created" in ok(out)
    assert wait_phase("alice", name, "Succeeded", "Failed")["phase"] == "Succeeded", logs("alice", name)
    seen = json.loads(logs("alice", name))
    assert seen == {"prefix": f"{home}/venv", "venv": f"{home}/venv", "user": "alice", "cwd": str(proj), "home": home}


def read_until(fd: int, wanted: bytes, timeout: float, seen: bytearray) -> bytes:
    """Read the pty's master until WANTED appears (or it closes); everything read so far."""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {wanted!r} on the terminal; got {bytes(seen)!r}")
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError as exc:  # EIO: the other side closed
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                raise AssertionError(f"the terminal closed before {wanted!r}; got {bytes(seen)!r}")
            seen += chunk
    return bytes(seen)


def on_a_terminal(user: str, *argv: str, cwd: Path) -> tuple[subprocess.Popen, int]:
    """ARGV as USER with a real pseudo-terminal as its controlling terminal; the master's fd."""
    master, slave = pty.openpty()

    def take_terminal() -> None:  # runs after setsid and the drop to the user
        import fcntl
        import termios

        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        list(argv),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=login_env(user, venv=True),
        cwd=str(cwd),
        start_new_session=True,
        preexec_fn=take_terminal,
        **as_user(user),
    )
    os.close(slave)
    return proc, master


def test_run_it_gives_an_interactive_shell_on_a_terminal_of_its_own(jobs):
    name = unique("shell")
    proc, master = on_a_terminal(
        "alice", "gflowctl", "run", "-it", "--name", name, "--", "/bin/sh", cwd=project("alice")
    )
    jobs.append(("alice", name))
    seen = bytearray()
    try:
        read_until(master, b"$ ", 600, seen)  # dash's prompt: the job runs, and we are attached
        os.write(master, b"echo answer-$((6*7)) $(id -un); tty; exit 3\n")
        read_until(master, b"answer-42 alice", 300, seen)
        text = read_until(master, b"/dev/pts/", 300, seen).decode(errors="replace")
        assert proc.wait(timeout=300) == 3, text  # the shell's exit status is gflowctl's
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    done = wait_phase("alice", name, "Succeeded", "Failed")
    assert done.get("exitCode") == 3, done


def test_exec_runs_in_alices_running_job_as_her_and_is_refused_to_mallory(jobs):
    name = unique("sleeper")
    ok(
        gflowctl(
            "alice", "run", "--name", name, "--env", "STAGE=exec-check", "--", "sleep", "600", cwd=project("alice")
        )
    )
    jobs.append(("alice", name))
    wait_phase("alice", name, "Running")
    out = ok(gflowctl("alice", "exec", name, "--", "sh", "-c", "id -un; echo $STAGE $GFLOW_JOB_NAME; pwd"))
    assert out.split() == ["alice", "exec-check", name, str(project("alice"))]
    refused = gflowctl("mallory", "exec", name, "--", "sh", "-c", "echo got in; echo $STAGE")
    assert refused.returncode != 0 and "got in" not in refused.stdout and "exec-check" not in refused.stdout
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert status_file(name)["phase"] == "Running"


def test_the_python_client_of_the_admins_install_submits_waits_and_reads_logs_as_the_user(jobs):
    name = unique("client")
    code = (
        "from controller.client import Client\n"
        "c = Client()\n"
        f"job = c.submit(['python3', '-c', 'import os; print(\"from the client\", os.getuid())'], name={name!r})\n"
        f"done = c.wait({name!r}, 'Succeeded', timeout=500)\n"
        f"print(done.phase, c.logs({name!r}).strip())\n"
    )
    out = run_as("bob", "/opt/gflow/bin/python", "-c", code, cwd=project("bob"), timeout=600)
    jobs.append(("bob", name))
    assert ok(out).split() == ["Succeeded", "from", "the", "client", str(pwd.getpwnam("bob").pw_uid)]
    assert json.loads(ok(gflowctl("bob", "get", "jobs", name, "-o", "json")))["metadata"]["user"] == "bob"


def reservation(name: str, **spec) -> str:
    return json.dumps(
        {"apiVersion": "gflow.dev/v1alpha1", "kind": "Reservation", "metadata": {"name": name}, "spec": spec}
    )


def reservation_status(user: str, name: str) -> dict | None:
    out = gflowctl(user, "get", "reservations", name, "-o", "json")
    return json.loads(out.stdout).get("status") if out.returncode == 0 and out.stdout.strip() else None


def test_alices_reservation_fences_a_gpu_from_bobs_job_and_mallorys_decade_is_forbidden(jobs):
    mine, decade, big = unique("alice-res"), unique("mallory-res"), unique("all-gpus")
    gpus = len(json.loads(ok(gflowctl("bob", "get", "gpus", "-o", "json")))["gpus"])
    apply("alice", reservation(mine, users=["alice"], devices=[gpus - 1], start="+0s", duration="1h"))
    try:
        active = wait_for(
            lambda: (reservation_status("alice", mine) or {}).get("phase") == "Active",
            300,
            "alice's reservation to be Active",
            interval=2,
        )
        assert active
        apply("bob", manifest(big, ["true"], resources={"gpus": gpus}))
        jobs.append(("bob", big))
        waiting = wait_for(
            lambda: (s := status_file(big)) and s.get("reason") == "Reserved" and s,
            300,
            "bob's job to wait for the reservation",
        )
        assert waiting["phase"] == "Pending", waiting

        out = gflowctl(
            "mallory",
            "apply",
            "-f",
            "-",
            input=reservation(decade, users=["mallory"], gpus=2, start="+3650d", duration="36500d"),
        )
        rejected = wait_for(
            lambda: out.returncode != 0 or (reservation_status("mallory", decade) or {}).get("phase") == "Rejected",
            300,
            "mallory's reservation to be refused",
            interval=2,
        )
        assert rejected
        said = out.stderr + json.dumps(reservation_status("mallory", decade) or {})
        assert "Forbidden" in said or "may" in said, said
        assert status("bob", big)["reason"] == "Reserved"  # her window fenced nothing more
    finally:
        gflowctl("mallory", "delete", "reservation", decade)
        ok(gflowctl("alice", "delete", "reservation", mine))
    assert wait_phase("bob", big, "Succeeded", "Failed")["phase"] == "Succeeded"


SECRET = "s3cr3t-" + os.urandom(8).hex()


def readable_files_of(user: str, top: Path) -> str:
    """Every file under TOP that USER can open, concatenated (what she can read of it, as herself)."""
    code = (
        "import os, sys\nfor d, _, files in os.walk(sys.argv[1]):\n    for f in files:\n        p = os.path.join(d, f)\n"
        "        try:\n            with open(p, 'rb') as fh: sys.stdout.write(p + '\\n' + fh.read(1 << 20).decode('latin-1') + '\\n')\n"
        "        except OSError:\n            pass\n"
    )
    return run_as(user, "python3", "-c", code, str(top), timeout=300).stdout


def test_mallory_gets_nothing_of_alices_job_secrets_logs_socket_or_control(jobs):
    name = unique("private")
    proc = project("alice")
    script = "echo token=$TOKEN carried=$CARRIED; sleep 600"
    ok(
        gflowctl(
            "alice",
            "run",
            "--name",
            name,
            "-e",
            f"TOKEN={SECRET}",
            "--",
            "sh",
            "-c",
            script,
            cwd=proc,
            env=login_env("alice", venv=True, CARRIED=SECRET + "-env"),
        )
    )
    jobs.append(("alice", name))
    running = wait_phase("alice", name, "Running")
    wait_for(lambda: SECRET in log_file(name), 300, "alice's job to print its token to her log")
    assert f"carried={SECRET}-env" in logs("alice", name)

    # every file under the home mallory can open, and what every read-only verb shows her
    assert SECRET not in readable_files_of("mallory", HOME)
    for verb in (
        ["get", "jobs", name, "-o", "json"],
        ["get", "jobs", name, "-o", "yaml"],
        ["describe", "job", name],
        ["get", "events"],
        ["get", "jobs", "-A", "-o", "wide"],
    ):
        out = gflowctl("mallory", *verb)
        assert SECRET not in out.stdout + out.stderr, verb
    refused = gflowctl("mallory", "logs", name)
    assert refused.returncode != 0 and SECRET not in refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "alice" in refused.stderr, refused.stderr
    # the job's own process: its environment and memory are alice's alone
    pid = running["pid"]
    peek = run_as(
        "mallory",
        "python3",
        "-c",
        "import sys\ntry:\n    open(f'/proc/{sys.argv[1]}/environ', 'rb').read()\n"
        "    print('read')\nexcept OSError as exc:\n    print(type(exc).__name__)",
        str(pid),
    )
    assert peek.stdout.strip() == "PermissionError", peek

    # alice's control socket: mallory cannot connect (folder gflowd's 0711, socket alice's 0600)
    sockets = [p for p in (HOME / "run" / "control" / str(pwd.getpwnam("alice").pw_uid)).iterdir() if p.is_socket()]
    assert sockets, "alice's running job has a control socket"
    code = (
        "import socket, sys\nfor path in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n    try:\n"
        "        s.connect(path); print('connected')\n    except OSError as exc:\n        print(type(exc).__name__)\n"
    )
    tried = run_as("mallory", "python3", "-c", code, *map(str, sockets)).stdout.split()
    assert tried == ["PermissionError"] * len(sockets), tried

    # nor can she stop it
    for verb in (["cancel", name], ["delete", "job", name], ["suspend", name]):
        out = gflowctl("mallory", *verb)
        assert out.returncode != 0 and "Traceback" not in out.stderr, (verb, out.stdout, out.stderr)
    manifest_file = HOME / "jobs" / f"{name}.yaml"
    assert manifest_file.stat().st_uid == pwd.getpwnam("alice").pw_uid
    assert SECRET not in run_as("mallory", "cat", str(manifest_file)).stdout
    now = status("alice", name)
    assert now["phase"] == "Running" and now["pid"] == pid, now


def test_gpu_acceptance_without_a_gpu_skips_every_check_and_passes(tmp_path):
    script = ROOT / "hack" / "gpu-acceptance.py"
    report = tmp_path / "report.json"
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()
    )
    out = subprocess.run(
        [sys.executable, str(script), "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PATH=path, TMPDIR=str(tmp_path)),
    )
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        out.stdout.splitlines()[0]
        == "gpu-acceptance: no NVIDIA GPU here (nvidia-smi is not on the PATH): every check SKIP"
    )
    doc = json.loads(report.read_text())
    assert (
        doc["exitCode"] == 0
        and doc["summary"]["FAIL"] == 0
        and doc["summary"]["PASS"] == 0
        and doc["summary"]["SKIP"] > 0
    )
