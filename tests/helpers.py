"""Helpers for end-to-end tests that drive a real ``gflowd`` through real files.

Everything here observes the way a user would: status files, logs, the index, ``/proc``.
Waiting is always poll-with-deadline (:func:`wait_for`), never a fixed sleep. The deadlines are
generous (60 s by default): a condition met costs no more, and a machine running four workers
beside other work can take 15 s to start a gflowd.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

T = TypeVar("T")
_yaml = YAML(typ="safe")


# -- waiting ------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 60,
    interval: float = 0.02,
    message: str | Callable[[], str] = "",
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; fail after ``timeout``.

    ``message`` (text, or a callable evaluated on failure) explains what was awaited.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout}s waiting for {text or predicate!r}; last value: {value!r}")
        time.sleep(interval)


# -- running gflowctl ---------------------------------------------------------------------------


def ctl(
    home: Path,
    *argv: str,
    stdin: str | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run this checkout's ``gflowctl ARGV`` on ``home`` as a user would: a process of its own, text
    output captured. ``stdin`` is its input (none: ``/dev/null``, never the test's terminal); ``env``
    adds to the test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "controller.cli.main", *argv],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "GFLOW_HOME": str(home), **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )


# -- reading what the controller wrote ----------------------------------------------------------


def read_status(home: Path, name: str) -> dict[str, Any] | None:
    """The whole document of ``status/<name>.yaml``; None when missing, partial or unparseable."""
    try:
        text = (Path(home) / "status" / f"{name}.yaml").read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = _yaml.load(text)
    except YAMLError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("status"), dict):
        return None
    return data


def job_status(home: Path, name: str) -> dict[str, Any] | None:
    """Just the ``status:`` mapping of ``status/<name>.yaml`` (None when there is none)."""
    data = read_status(home, name)
    return data["status"] if data else None


def read_index(home: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(home) / "run" / "index.json").read_text())
    except (OSError, ValueError):
        return None


def read_log(home: Path, name: str) -> str:
    try:
        return (Path(home) / "logs" / f"{name}.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wait_phase(
    home: Path,
    name: str,
    phase: str | tuple[str, ...],
    timeout: float = 60,
    reason: str | None = None,
    daemon: Any = None,
) -> dict[str, Any]:
    """Wait until job ``name`` shows ``phase`` (and ``reason``, if given); return its status."""
    phases = (phase,) if isinstance(phase, str) else phase

    def check():
        status = job_status(home, name)
        if status and status.get("phase") in phases and (reason is None or status.get("reason") == reason):
            return status
        return None

    def explain():
        text = f"job {name} to be {'/'.join(phases)}{'/' + reason if reason else ''}; status now: {job_status(home, name)!r}"
        if daemon is not None:
            text += f"\n--- gflowd stderr (tail) ---\n{daemon.stderr()[-3000:]}"
        return text

    return wait_for(check, timeout=timeout, message=explain)


# -- writing manifests the way users and git do ----------------------------------------------------


def write_manifest(spec_dir: Path, filename: str, text: str, owner: tuple[int, int] | None = None) -> Path:
    """Write ``text`` to a hidden temp name in ``spec_dir`` and rename it into place (atomic);
    ``owner`` (uid, gid): chowned before the rename, as gflowd may read the file at once."""
    spec_dir = Path(spec_dir)
    target = spec_dir / filename
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp"
    tmp.write_text(text)
    if owner is not None:
        os.chown(tmp, *owner)
    os.rename(tmp, target)
    return target


def line_number(text: str, needle: str, start: int = 1) -> int:
    """1-based number of the first line at or after ``start`` that contains ``needle``."""
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= start and needle in line:
            return number
    raise ValueError(f"{needle!r} not in text")


# -- fake GPUs -------------------------------------------------------------------------------------

H100 = "{name: NVIDIA H100 80GB HBM3, memory: 80Gi}"


def fake_gpus_file(path: Path, count: int = 2, gpu: str = H100) -> Path:
    """Write a ``--fake-gpus`` file of ``count`` identical GPUs (``gpu``: one YAML flow mapping)."""
    path = Path(path)
    path.write_text("gpus:\n" + f"  - {gpu}\n" * count)
    return path


# -- filesystems ----------------------------------------------------------------------------------


def fill_filesystem(directory: Path) -> None:
    """Write until the filesystem under ``directory`` says ENOSPC, in big then small pieces (to the
    last block). The files are ``filler`` and ``filler2``: delete them to give the space back."""
    for name, piece in (("filler", 65536), ("filler2", 512)):
        fd = os.open(Path(directory) / name, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * piece)
        except OSError:
            pass
        finally:
            os.close(fd)


# -- processes ------------------------------------------------------------------------------------


def pid_alive(pid: int | None) -> bool:
    """True while ``pid`` is a live process (a zombie is not alive: it only awaits reaping)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    state = data[data.rindex(b")") + 2 :].split()[0]
    return state not in (b"Z", b"X")


def process_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat`` (R, S, T for stopped, Z...); None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def processes_of_home(home: Path) -> set[int]:
    """Live processes (other than this one) whose environment says ``GFLOW_HOME=<home>``:
    every gflowd of that home and every job process it started, children included."""
    marker = b"GFLOW_HOME=" + os.fsencode(str(home))
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        if marker in _environ(pid) and pid_alive(pid):
            found.add(pid)
    return found


def recorded_job_pids(home: Path) -> set[int]:
    """Job pids the controller recorded: status files and runtime records under run/."""
    pids: set[int] = set()
    status_dir = Path(home) / "status"
    if status_dir.is_dir():
        for path in status_dir.glob("*.yaml"):
            status = job_status(home, path.stem)
            if status and isinstance(status.get("pid"), int):
                pids.add(status["pid"])
    run_dir = Path(home) / "run"
    if run_dir.is_dir():
        for path in run_dir.rglob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and isinstance(record.get("pid"), int):
                pids.add(record["pid"])
    return pids


def kill_jobs_of_home(home: Path, timeout: float = 5) -> set[int]:
    """SIGKILL every job process of ``home`` (and its process group). Returns what still lives.

    A recorded pid is only signalled when the process still carries this home in its
    environment, so a recycled pid belonging to someone else is never touched.
    """
    home = Path(home)
    ours = processes_of_home(home)
    targets = ours | {pid for pid in recorded_job_pids(home) if pid in ours}
    for pid in targets:
        for kill in (os.killpg, os.kill):  # jobs lead their own process group
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in targets if pid_alive(pid)} | processes_of_home(home)
        if not left:
            break
        time.sleep(0.02)
    scrub_cgroups(home_cgroups(home))  # their supervisors died too: nobody else removes them
    return left


# -- other users ----------------------------------------------------------------------------------


def run_as(uid: int, work: Callable[[], int]) -> tuple[int, str]:
    """Run ``work()`` in a forked child that dropped to ``uid`` (its group: the same number):
    (its return value as the exit code, what it wrote to stderr). Needs root. Load what ``work``
    imports before calling: the child may not be able to read this interpreter's files."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # never return into pytest
        code = 99
        try:
            os.close(read_fd)
            os.dup2(write_fd, 2)
            sys.stderr = open(2, "w", closefd=False)  # pytest has replaced sys.stderr: write to the pipe
            sys.stdout = open(os.devnull, "w")
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            code = work()
        except BaseException:
            import traceback  # lazy: only a failing child

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 97)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        err = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err


# -- the daemon -----------------------------------------------------------------------------------


class Daemon:
    """A ``gflowd`` subprocess on one home, with its stderr in a file."""

    def __init__(self, home: Path, args: list[str], log_dir: Path, number: int, env: dict[str, str] | None = None):
        self.home = Path(home)
        self.argv = [sys.executable, "-m", "controller.daemon", "--home", str(self.home), "--resync", "1s", *args]
        self.stderr_path = Path(log_dir) / f"gflowd-{number}.stderr"
        self.stdout_path = Path(log_dir) / f"gflowd-{number}.stdout"
        full_env = dict(os.environ)
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        full_env.update({"GFLOW_HOME": str(self.home), "PYTHONUNBUFFERED": "1"})
        full_env.update(env or {})
        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=full_env, cwd=str(log_dir)
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, timeout: float = 60) -> Daemon:
        """Until the first pass is recorded (run/index.json names this process)."""

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"gflowd exited with {self.proc.returncode}:\n{self.stderr()}")
            index = read_index(self.home)
            return bool(index and index.get("controller", {}).get("pid") == self.proc.pid)

        wait_for(ready, timeout=timeout, message=lambda: f"gflowd to start\n{self.stderr()}")
        return self

    def wait_pass(self, timeout: float = 60) -> None:
        """Until a whole reconcile pass has begun and ended after this call (two index writes)."""
        seen = [(read_index(self.home) or {}).get("updated", 0)]

        def two_more():
            if self.proc.poll() is not None:
                raise AssertionError(f"gflowd exited with {self.proc.returncode}:\n{self.stderr()}")
            updated = (read_index(self.home) or {}).get("updated", 0)
            if updated > seen[-1]:
                seen.append(updated)
            return len(seen) >= 3

        wait_for(two_more, timeout=timeout, message="two more reconcile passes")

    def terminate(self, timeout: float = 10) -> int:
        """SIGTERM, then wait; SIGKILL if it does not stop in time. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


# -- cgroups ----------------------------------------------------------------------------------------


def home_cgroups(home: Path) -> list[str]:
    """The cgroup directories gflowd made for ``home`` (its group, in every hierarchy), that exist."""
    from controller.act.runtime.backends.local.attempt_cgroups import cgroup_group  # lazy: as above
    from controller.act.runtime.cgroups import probe  # lazy: only tests of cgroups need the probe

    found = probe()
    group = cgroup_group(Path(home) / "")
    return [os.path.join(base, group) for base in found.dirs.values() if os.path.isdir(os.path.join(base, group))]


def scrub_cgroups(paths: list[str]) -> list[str]:
    """Remove these cgroups without the code under test: SIGKILL their members, rmdir bottom-up.
    Returns the attempt cgroups that were found inside (what a test left behind)."""
    attempts = []
    for path in paths:
        for root, _dirs, files in os.walk(path, topdown=False):
            if root != path:
                attempts.append(root)
            if "cgroup.procs" in files:
                try:
                    members = [int(p) for p in Path(root, "cgroup.procs").read_text().split()]
                except OSError:
                    members = []
                for pid in members:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + 5
            while True:
                try:
                    os.rmdir(root)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
    return attempts


# gflowctl in a fresh interpreter: the modules it imported beyond what the interpreter had (an editable
# install's import hook loads pathlib, say); the answer is stderr's last line, stdout stays the verb's
_IMPORT_PROBE = (
    "import sys\n"
    "heavy = sys.argv[1].split(',')\n"
    "before = set(sys.modules)\n"
    "from controller.cli.main import main\n"
    "code = main(sys.argv[2:])\n"
    "print(code, *sorted(m for m in heavy if m in sys.modules and m not in before), file=sys.stderr)\n"
)


def gflowctl_imports(
    argv: list[str], heavy: tuple[str, ...], env: dict[str, str], cwd: Path | None = None, site: bool = True
) -> tuple[list[str], subprocess.CompletedProcess]:
    """``gflowctl ARGV``'s exit code (as text), then which of ``heavy`` it imported; and the run.
    ``site=False``: without ``site`` (``-S``, the checkout on PYTHONPATH), whose editable-install
    finder loads pathlib before gflowctl starts; only the standard library then."""
    if not site:
        env = {**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    probe = subprocess.run(
        [sys.executable, *([] if site else ["-S"]), "-c", _IMPORT_PROBE, ",".join(heavy), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    *_, last = probe.stderr.splitlines() or [""]
    return last.split(), probe
