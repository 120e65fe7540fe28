"""Interactive jobs end to end: ``gflowctl run -it``, ``attach`` and ``exec`` on real pseudo-terminals
(pexpect drives gflowctl the way a person at a terminal would), a real gflowd on fake GPUs, real
supervisors holding the jobs' ptys. Every wait polls with a deadline.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pexpect
import pytest
from helpers import job_status, kill_jobs_of_home, pid_alive, read_log, run_as, wait_for, wait_phase, write_manifest

PROMPT = r"gflow\$ "
SHELL = ["--", "bash", "--norc", "--noprofile"]  # no rc file: the prompt is the test's own


def env_for(home: Path) -> dict[str, str]:
    return {**os.environ, "GFLOW_HOME": str(home), "XDG_STATE_HOME": str(Path(home).parent / "state"), "TERM": "xterm"}


def ctl(home: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env_for(home),
        timeout=timeout,
        cwd=Path(home).parent,
    )


def spawn(home: Path, *argv: str, size: tuple[int, int] = (24, 80)) -> pexpect.spawn:
    """gflowctl on a pseudo-terminal of its own, as if typed at one."""
    child = pexpect.spawn(
        sys.executable,
        ["-m", "controller.cli.main", *argv],
        env=env_for(home),
        cwd=str(Path(home).parent),
        encoding="utf-8",
        timeout=60,
        dimensions=size,
        # as typed at a shell's prompt: a worker that ignores SIGINT (inherited) would make Ctrl-C do nothing
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    child.logfile_read = _Transcript()
    return child


class _Transcript:
    """What the terminal showed, kept for failure messages."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, data: str) -> None:
        self.text += data

    def flush(self) -> None:
        pass


def in_foreground(argv: list[str]) -> bool:
    """A process running ``argv`` leads its terminal's foreground process group (a Ctrl-C reaches it)."""
    wanted = "\0".join(argv) + "\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline") as handle:
                if handle.read() != wanted:
                    continue
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[5]) == int(entry):  # tpgid, the terminal's foreground group: this process's own
            return True
    return False


def ended(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    return child.exitstatus if child.exitstatus is not None else 128 + (child.signalstatus or 0)


@pytest.fixture
def gpus(tmp_path: Path) -> Path:
    fake = tmp_path / "gpus.yaml"
    fake.write_text("gpus:\n" + "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n" * 2)
    return fake


def tty_job(home: Path, daemon, name: str, command: str, extra: str = "") -> None:
    """A ``tty: true`` manifest in the spec dir (``extra``: more spec lines), once it runs."""
    write_manifest(
        home / "jobs", f"{name}.yaml", f"metadata: {{name: {name}}}\nspec:\n  tty: true\n  command: {command}\n{extra}"
    )
    wait_phase(home, name, "Running", daemon=daemon)


def start_session(home: Path, name: str, *flags: str) -> pexpect.spawn:
    child = spawn(home, "run", "-it", "--name", name, "-e", "PS1=gflow$ ", *flags, *SHELL)
    child.expect(PROMPT)
    return child


def test_run_it_waits_in_the_queue_then_gives_a_shell_on_the_bound_gpu(home, gflowd, gpus):
    daemon = gflowd("--fake-gpus", gpus)
    assert ctl(home, "run", "--name", "tty-blocker", "--gpus", "2", "--", "sleep", "600").returncode == 0
    wait_phase(home, "tty-blocker", "Running", daemon=daemon)

    child = spawn(home, "run", "-it", "--name", "tty-one", "--gpus", "1", "-e", "PS1=gflow$ ", *SHELL)
    child.expect("job/tty-one created")
    # it queues like any job: the terminal says why it waits and where it stands
    child.expect(r"job/tty-one is Pending: Resources: needs 1 GPU.*\(queue position 1\)")
    assert job_status(home, "tty-one")["phase"] == "Pending"
    assert ctl(home, "cancel", "tty-blocker").returncode == 0

    child.expect(r"job/tty-one is running \(GPUs (\d)\); Ctrl-\] detaches")
    assert "\r\x1b[Kjob/tty-one is Pending" in child.logfile_read.text  # the waiting line is rewritten in place
    shown_gpu = child.match.group(1)
    child.expect(PROMPT)
    status = job_status(home, "tty-one")
    assert status["phase"] == "Running" and status["devices"] == [int(shown_gpu)]
    child.sendline("echo gpu=$CUDA_VISIBLE_DEVICES tty=$(tty)")
    child.expect(r"gpu=(\d) tty=/dev/pts/\d+")
    assert child.match.group(1) == shown_gpu
    child.expect(PROMPT)

    # a resize of the local terminal reaches the job's pty (SIGWINCH; stty asks the kernel)
    child.setwinsize(37, 111)
    child.sendline("stty size")
    child.expect("37 111")
    child.expect(PROMPT)

    # Ctrl-C goes to the job (it interrupts the job's sleep; the session lives on). Sent once the
    # sleep is the terminal's foreground: a ^C that reaches the shell while it forks is the shell's
    seconds = str(3600 + os.getpid() % 997)  # this test's own sleep among the workers'
    child.sendline(f"sleep {seconds}; echo not-interrupted")
    wait_for(lambda: in_foreground(["sleep", seconds]), message="the sleep in the foreground of the job's terminal")
    child.sendintr()
    child.expect(PROMPT)
    child.sendline("echo after-interrupt")
    child.expect("after-interrupt")
    child.expect(PROMPT)
    assert "not-interrupted" not in child.before

    child.sendline("exit 3")
    assert ended(child) == 3, child.logfile_read.text
    status = wait_phase(home, "tty-one", "Failed", daemon=daemon)
    assert status["exitCode"] == 3
    assert "gpu=" in read_log(home, "tty-one") and "37 111" in read_log(home, "tty-one")  # the session is in its log


def test_ctrl_c_while_it_waits_cancels_the_request(home, gflowd, gpus):
    daemon = gflowd("--fake-gpus", gpus)
    assert ctl(home, "run", "--name", "tty-hog", "--gpus", "2", "--", "sleep", "600").returncode == 0
    wait_phase(home, "tty-hog", "Running", daemon=daemon)
    child = spawn(home, "run", "-it", "--name", "tty-impatient", "--gpus", "1", *SHELL)
    child.expect(r"job/tty-impatient is Pending: Resources")
    child.sendintr()
    child.expect("job/tty-impatient cancelled")
    assert ended(child) == 130
    assert wait_phase(home, "tty-impatient", "Cancelled", daemon=daemon)["reason"] == "UserCancelled"


def test_detach_attach_exec_and_exit_code(home, gflowd, gpus):
    daemon = gflowd("--fake-gpus", gpus)
    child = start_session(home, "tty-two", "--gpus", "1")
    child.sendline("export MARK=first-terminal; echo $MARK")
    child.expect("first-terminal")
    child.expect(PROMPT)
    child.send("\x1d")  # Ctrl-]
    assert ended(child) == 0
    assert "detached from job/tty-two" in child.logfile_read.text
    status = job_status(home, "tty-two")
    assert status["phase"] == "Running" and pid_alive(status["pid"])
    assert "TTY:" in ctl(home, "describe", "job", "tty-two").stdout

    # exec runs beside the job, in its allocation: its GPU, its working directory, its user
    shown = ctl(home, "exec", "tty-two", "--", "sh", "-c", "echo cvd=$CUDA_VISIBLE_DEVICES job=$GFLOW_JOB_NAME; exit 7")
    assert shown.returncode == 7, shown.stderr
    assert shown.stdout == f"cvd={status['devices'][0]} job=tty-two\n"
    # ...and its cgroups: the exec'd command is where the job's process is, in every hierarchy
    groups = ctl(home, "exec", "tty-two", "--", "cat", "/proc/self/cgroup")
    assert groups.returncode == 0, groups.stderr
    assert sorted(groups.stdout.splitlines()) == sorted(Path(f"/proc/{status['pid']}/cgroup").read_text().splitlines())
    missing = ctl(home, "exec", "tty-two", "--", "no-such-command-xyz")
    assert missing.returncode == 127 and "no-such-command-xyz: command not found" in missing.stderr

    # attach from another terminal: the same session (the shell's variable is still set)
    again = spawn(home, "attach", "tty-two")
    again.expect("attached to job/tty-two")
    again.sendline("echo mark=$MARK")
    again.expect("mark=first-terminal")
    again.expect(PROMPT)

    # a second viewer watches; the most recent attacher types
    viewer = spawn(home, "attach", "tty-two", "--read-only")
    viewer.expect(r"attached to job/tty-two \(read-only\)")
    viewer.send("echo from-the-viewer\r")
    viewer.expect("read-only: another terminal types")
    again.sendline("echo seen-by-both")
    viewer.expect("seen-by-both")
    again.expect("seen-by-both")
    again.expect(PROMPT)
    assert "from-the-viewer" not in read_log(home, "tty-two")

    again.sendline("exit 5")
    assert ended(again) == 5
    assert ended(viewer) == 5  # every viewer learns the end
    assert wait_phase(home, "tty-two", "Failed", daemon=daemon)["exitCode"] == 5


def test_attach_needs_a_running_tty_job_and_exec_works_on_batch_jobs_too(home, gflowd):
    daemon = gflowd()
    assert ctl(home, "run", "--name", "tty-batch", "--", "sleep", "600").returncode == 0
    wait_phase(home, "tty-batch", "Running", daemon=daemon)
    batch = ctl(home, "attach", "tty-batch")
    assert batch.returncode == 1
    assert batch.stderr.strip() == (
        "error: job/tty-batch has no terminal (spec.tty is false): gflowctl logs -f tty-batch "
        "follows its output; gflowctl exec tty-batch -- CMD runs a command beside it"
    )
    # exec works on batch jobs too
    beside = ctl(home, "exec", "tty-batch", "--", "sh", "-c", "echo in=$GFLOW_JOB_NAME")
    assert (beside.returncode, beside.stdout) == (0, "in=tty-batch\n"), beside.stderr
    gone = ctl(home, "attach", "no-such-job")
    assert (gone.returncode, gone.stderr.strip()) == (1, f"error: job/no-such-job not found on {home}")
    assert ctl(home, "cancel", "tty-batch").returncode == 0
    wait_phase(home, "tty-batch", "Cancelled", daemon=daemon)
    over = ctl(home, "attach", "tty-batch")
    assert over.returncode == 1 and over.stderr.strip().startswith("error: job/tty-batch is Cancelled"), over.stderr


def test_cancel_hangs_up_a_session_without_waiting_for_the_grace_period(home, gflowd):
    daemon = gflowd()
    tty_job(home, daemon, "tty-hup", "[bash, --norc, --noprofile, -i]", "  terminationGracePeriod: 5m\n")
    wait_for(lambda: "$" in read_log(home, "tty-hup") or "#" in read_log(home, "tty-hup"), message="the shell's prompt")
    assert ctl(home, "cancel", "tty-hup").returncode == 0
    # an interactive bash ignores TERM; the hangup ends it long before the 5 minutes' KILL
    status = wait_phase(home, "tty-hup", "Cancelled", timeout=30, daemon=daemon)
    assert status["reason"] == "UserCancelled"


def test_an_idle_session_is_warned_on_its_terminal_then_stopped_and_typing_defers_it(home, gflowd):
    import time

    daemon = gflowd()
    tty_job(home, daemon, "tty-idle", "[bash, --norc, --noprofile]", "  idleTimeout: 8s\n  env: {PS1: 'gflow$ '}\n")
    child = spawn(home, "attach", "tty-idle")
    child.expect("attached to job/tty-idle")
    # someone types about once a second for 1.5 idleTimeouts: every key is input (last_input), so it runs on
    typing_until = time.monotonic() + 12
    typed = 0
    while time.monotonic() < typing_until:
        child.sendline(f"echo busy-{typed}")
        child.expect(f"busy-{typed}")
        child.expect(PROMPT)
        child.expect(pexpect.TIMEOUT, timeout=1)  # the typist's pause
        typed += 1
    assert job_status(home, "tty-idle")["phase"] == "Running"
    assert "has been idle" not in child.logfile_read.text
    # then nobody types: the warning reaches this terminal, then the stop
    child.expect(r"gflow: job tty-idle has been idle for .* \(no terminal input\)", timeout=30)
    code = ended(child)
    status = wait_phase(home, "tty-idle", "Failed", daemon=daemon)
    assert status["reason"] == "IdleTimeout" and code == status["exitCode"], (code, status)
    assert "has been idle" in read_log(home, "tty-idle")


def test_gflowd_killed_during_a_session_leaves_it_usable_and_a_restart_readopts(home, gflowd, gpus):
    daemon = gflowd("--fake-gpus", gpus)
    child = start_session(home, "tty-crash", "--gpus", "1")
    before = job_status(home, "tty-crash")
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.proc.wait(10)
    # the supervisor holds the pty: typing still works with no gflowd at all
    child.sendline("echo still-here")
    child.expect("still-here")
    child.expect(PROMPT)

    restarted = gflowd("--fake-gpus", gpus)
    restarted.wait_pass()
    after = job_status(home, "tty-crash")
    assert after["phase"] == "Running" and after["pid"] == before["pid"] and after["attempt"] == before["attempt"]
    child.send("\x1d")
    assert ended(child) == 0
    again = spawn(home, "attach", "tty-crash")
    again.expect("attached to job/tty-crash")
    again.sendline("echo readopted")
    again.expect("readopted")
    again.sendline("exit 0")
    assert ended(again) == 0
    status = wait_phase(home, "tty-crash", "Succeeded", daemon=restarted)
    assert status["attempt"] == before["attempt"]  # nothing ran twice


# -- another user ------------------------------------------------------------------------------------

NOBODY = 65534


def as_nobody(work) -> tuple[int, str]:
    return run_as(NOBODY, work)


@pytest.fixture
def open_home():
    """A home another user can reach (pytest's tmp folders are root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="gflow-tty-"))
    os.chmod(root, 0o755)
    (root / "jobs").mkdir()
    yield root
    kill_jobs_of_home(root)

    def removed() -> bool:  # a supervisor killed a moment ago may still be writing its last record
        shutil.rmtree(root, ignore_errors=True)
        return not root.exists()

    wait_for(removed, timeout=10, message=f"{root} to be removed")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_users_attach_and_exec_are_refused(open_home, gflowd):
    import controller.cli.attach  # noqa: F401  loaded before the fork: nobody may not read this interpreter's files
    from controller.cli.main import main
    from controller.client.terminal import connect, frame
    from controller.paths import Home

    home = open_home
    daemon = gflowd(home=home)
    tty_job(home, daemon, "tty-root", "[sleep, '600']")  # root's manifest: the job runs as root
    sock_path = Home.resolve(home).control_socket(0, "tty-root")
    wait_for(sock_path.exists, message="the job's control socket")
    assert (oct(sock_path.parent.stat().st_mode & 0o777), sock_path.parent.stat().st_uid) == ("0o711", 0)
    assert (oct(sock_path.stat().st_mode & 0o777), sock_path.stat().st_uid) == ("0o600", 0)
    for verb in (["attach", "tty-root"], ["exec", "tty-root", "--", "id"]):
        code, err = as_nobody(lambda verb=verb: main(["--home", str(home), *verb]))
        assert code == 1, err
        assert err.strip() == f"error: job/tty-root runs as root: only its owner or root may {verb[0]} it", err

    def knock() -> int:
        """Straight to the socket, past gflowctl: its mode is the kernel's gate, SO_PEERCRED the supervisor's."""
        try:
            connect(sock_path)
        except Exception as exc:
            sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
            return 3
        return 0

    code, err = as_nobody(knock)
    assert code == 3 and "NoSession: Permission denied" in err, err

    os.chmod(sock_path, 0o666)  # a socket someone opened up: the supervisor still refuses
    try:

        def sneak() -> int:
            sock = connect(sock_path)
            sock.settimeout(10)  # an attach let through would never end by itself
            sock.sendall(frame(b"H", {"mode": "attach"}))
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
            sys.stderr.write(data[5:].decode())
            return 4 if data[:1] == b"E" else 0

        code, err = as_nobody(sneak)
        assert code == 4, err
        assert err == "permission denied: job/tty-root runs as uid 0; only its owner or root may attach or exec"
    finally:
        os.chmod(sock_path, 0o600)
    assert job_status(home, "tty-root")["phase"] == "Running"

    # the other way round: root may exec in nobody's job, and the command runs as nobody
    hidden = home / "jobs" / ".tty-nobody.yaml.tmp"  # owned by nobody before gflowd can see it
    hidden.write_text("metadata: {name: tty-nobody}\nspec:\n  tty: true\n  workingDir: /tmp\n  command: [sh]\n")
    os.chown(hidden, NOBODY, NOBODY)
    os.rename(hidden, home / "jobs" / "tty-nobody.yaml")
    wait_phase(home, "tty-nobody", "Running", daemon=daemon)
    wait_for(Home.resolve(home).control_socket(NOBODY, "tty-nobody").exists, message="nobody's job's control socket")
    assert oct(Home.resolve(home).control_dir(NOBODY).stat().st_mode & 0o777) == "0o711"
    assert Home.resolve(home).control_dir(NOBODY).stat().st_uid == 0  # gflowd's: nobody cannot replace the socket
    assert Home.resolve(home).control_socket(NOBODY, "tty-nobody").stat().st_uid == NOBODY
    whoami = ctl(home, "exec", "tty-nobody", "--", "sh", "-c", "id -u; pwd")
    assert (whoami.returncode, whoami.stdout) == (0, f"{NOBODY}\n/tmp\n"), whoami.stderr
    # and the session itself runs as nobody, on a terminal handed to nobody
    session = spawn(home, "attach", "tty-nobody")
    session.expect("attached to job/tty-nobody")
    session.sendline("echo uid=$(id -u) owner=$(stat -c %u $(tty))")
    session.expect(f"uid={NOBODY} owner={NOBODY}")
    session.sendline("exit 4")
    assert ended(session) == 4


def test_run_it_writes_a_tty_job_running_the_login_shell_and_refuses_what_does_not_combine(home):
    import pwd

    from controller.util.yamlio import load_one

    shown = ctl(home, "run", "-it", "--gpus", "1", "--dry-run", "-o", "yaml")
    assert shown.returncode == 0, shown.stderr
    spec = load_one(shown.stdout)["spec"]
    shell = pwd.getpwuid(os.getuid()).pw_shell
    assert spec["tty"] is True and spec["command"] == [shell] and spec["env"] == {"TERM": "xterm"}
    for spelling in ("-ti", "-i", "--interactive"):
        same = ctl(home, "run", spelling, "--name", "same", "--dry-run", "-o", "yaml", "--", "python3")
        assert load_one(same.stdout)["spec"]["tty"] is True, (spelling, same.stderr)
    for flags, message in (
        (["--wait"], "error: -it attaches to the job already: drop --wait/--follow"),
        (["--array", "0-3"], "error: -it attaches to one job: drop --param/--array (or submit the sweep without -it)"),
    ):
        refused = ctl(home, "run", "-it", *flags, "--", "bash")
        assert (refused.returncode, refused.stderr.strip()) == (1, message)
    exec_nothing = ctl(home, "exec", "somejob")
    assert (exec_nothing.returncode, exec_nothing.stderr.strip()) == (
        1,
        "error: exec needs a command: gflowctl exec somejob -- CMD [ARGS...]",
    )
