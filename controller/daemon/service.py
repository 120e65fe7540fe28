"""``gflowd up | down | status``: the controller started for yourself in one command that returns.

``up`` starts ``gflowd`` in its own session (no terminal, stdin from /dev/null, output appended
to ``$GFLOW_HOME/gflowd.log``) and returns once its first pass is recorded: the home's lock is
held and ``run/index.json`` names the new process. ``down`` sends SIGTERM and waits until the lock
is released and the process has ended (as ``systemctl stop``); the jobs keep running and the next gflowd re-adopts them. ``status`` answers from the
state files (exit 3 when no gflowd runs, as ``systemctl status``). The one-gflowd-per-home lock is
the same as a foreground gflowd's, so ``up`` and a systemd unit never run two controllers."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from controller.client.read.state import is_running, read_index
from controller.paths import Home

VERBS = ("up", "down", "status")
NOT_RUNNING = 3  # systemctl's exit code for an inactive unit


def log_path(home: Home) -> Path:
    return home.root / "gflowd.log"


def _holder_pid(home: Home) -> int | None:
    """The pid the running gflowd wrote into its lock file."""
    try:
        return int(home.lock_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _last_error(text: str) -> str:
    """The last line of ``text`` (gflowd's log) that reports a failure (gflowd's one-line errors,
    a traceback's exception), else its last line: what ``up`` quotes when gflowd does not come up."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("gflowd:") or " ERROR " in line or " CRITICAL " in line or "Error" in line.split(":")[0]:
            return line
    return lines[-1] if lines else ""


def _start_ticks(pid: int) -> bytes | None:
    """The process's start time (``/proc/PID/stat`` field 22), or None once it has ended: a zombie
    has ended too, it only awaits reaping by whoever inherited it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return None if fields[0] in (b"Z", b"X") else fields[19]


def _wait(condition, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def up(home: Home, passthrough: list[str], timeout: float) -> int:
    if is_running(home):
        print(f"gflowd is already running for {home.root} (pid {_holder_pid(home) or '?'}); logs: {log_path(home)}")
        return 0
    try:
        home.root.mkdir(parents=True, exist_ok=True)
        log = open(log_path(home), "ab")
    except OSError as exc:
        sys.stderr.write(f"gflowd: cannot write {log_path(home)}: {exc.strerror}\n")
        return 1
    start = log.tell()
    argv = [sys.executable, "-m", "controller.daemon", "--home", str(home.root), *passthrough]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log:
        # a session of its own (setsid): no controlling terminal, so closing this shell's
        # terminal sends it no SIGHUP; it is reparented to init once this command returns
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)

    def ready() -> bool:
        index = read_index(home)
        return bool(index and (index.get("controller") or {}).get("pid") == proc.pid)

    came_up = _wait(lambda: proc.poll() is not None or ready(), timeout) and proc.poll() is None
    if not came_up:
        if proc.poll() is None:  # alive but silent: stop it rather than leave a half-started daemon
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        why = _last_error_since(log_path(home), start) or f"no first pass within {timeout:g}s"
        sys.stderr.write(f"gflowd: did not start ({why}); see {log_path(home)}\n")
        return 1
    print(f"gflowd is running for {home.root} (pid {proc.pid})")
    print(f"  logs:   {log_path(home)}   (tail -f {log_path(home)})")
    print("  status: gflowd status   stop: gflowd down   jobs: gflowctl get jobs -w")
    return 0


def _last_error_since(path: Path, offset: int) -> str:
    """``_last_error`` of what this start appended to the log."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return _last_error(handle.read().decode(errors="replace"))
    except OSError:
        return ""


def down(home: Home, timeout: float) -> int:
    if not is_running(home):
        print(f"gflowd is not running for {home.root}")
        return 0
    pid = _holder_pid(home)
    if pid is None:
        sys.stderr.write(f"gflowd: a gflowd holds {home.lock_file} but its pid is not in it; stop it by hand\n")
        return 1
    started = _start_ticks(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it ended meanwhile; the lock goes with it
    except PermissionError:
        sys.stderr.write(f"gflowd: not allowed to stop gflowd (pid {pid}); it runs as another user\n")
        return 1

    def stopped() -> bool:
        # gflowd drops its lock before the interpreter exits: wait for the process as well, so
        # that what follows `down` (an upgrade, `up`) never meets the old one; the start time
        # tells a reused pid from it
        return not is_running(home) and (started is None or _start_ticks(pid) != started)

    if not _wait(stopped, timeout):
        sys.stderr.write(
            f"gflowd: gflowd (pid {pid}) did not stop within {timeout:g}s; see {log_path(home)} (kill -9 {pid} is safe: jobs are re-adopted)\n"
        )
        return 1
    print(f"gflowd stopped (pid {pid}); its jobs keep running and are re-adopted by the next gflowd")
    return 0


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] * bool(days) + [f"{hours}h"] * bool(hours) + [f"{minutes}m"] * bool(minutes)
    return "".join(parts + [f"{secs}s"]) if not days else "".join(parts)


def _read_gpus(home: Home) -> list[dict]:
    from controller.util.yamlio import YAMLSyntaxError, load_one  # lazy: only status reads node.yaml

    try:
        data = load_one(home.node_file.read_text()) or {}
    except (OSError, YAMLSyntaxError):
        return []
    return [gpu for gpu in (data.get("gpus") or []) if isinstance(gpu, dict)] if isinstance(data, dict) else []


def _logs_of(home: Home, pid: int | None) -> str:
    """Where this gflowd's log is: its systemd unit's journal, else the file ``gflowd up`` writes."""
    try:
        with open(f"/proc/{int(pid or 0)}/cgroup") as handle:  # world-readable, unlike its environment
            for line in handle:  # systemd's own hierarchy: v1 name=systemd, or the v2 line
                _, controllers, path = line.rstrip("\n").split(":", 2)
                unit = path.rpartition("/")[2]
                if controllers in ("name=systemd", "") and unit.endswith(".service"):
                    return f"journalctl -u {unit.removesuffix('.service')}"
    except (OSError, ValueError):
        pass
    log_file = log_path(home)
    return (
        str(log_file) if log_file.exists() else f"on the stderr of pid {pid} (not started by gflowd up: no {log_file})"
    )


def status(home: Home) -> int:
    if not is_running(home):
        print(f"gflowd is not running for {home.root}")
        print(f"  start it: gflowd up   (logs: {log_path(home)})")
        return NOT_RUNNING
    index = read_index(home) or {}
    info = index.get("controller") or {}
    pid = _holder_pid(home) or info.get("pid")
    facts = [f"pid {pid}"]
    if info.get("pid") == pid and info.get("version"):
        facts.append(f"version {info['version']}")
    if info.get("pid") == pid and info.get("started"):
        facts.append(f"up {_duration(time.time() - info['started'])}")
    print(f"gflowd is running for {home.root} ({', '.join(facts)})")
    print(f"  spec dir: {info.get('specDir') or home.spec_dir}")
    print(f"  logs:     {_logs_of(home, pid)}")
    phases = Counter(str(row.get("phase")) for row in (index.get("jobs") or {}).values())
    order = ["Running", "Pending", "Succeeded", "Failed", "Cancelled", "Rejected"]
    counted = sorted(phases, key=lambda p: (order.index(p) if p in order else len(order), p))
    print(f"  jobs:     {', '.join(f'{phases[p]} {p}' for p in counted) or 'none'}")
    gpus = _read_gpus(home)
    busy = sum(1 for gpu in gpus if gpu.get("jobs"))
    names = Counter(str(gpu.get("name")) for gpu in gpus)
    kinds = ", ".join(f"{n}x {name}" for name, n in names.items())
    print(f"  GPUs:     {len(gpus)} ({kinds}), {busy} in use" if gpus else "  GPUs:     none found")
    return 0


def main(argv: list[str]) -> int:
    """``argv`` starts with the verb; ``up`` passes every flag it does not know on to gflowd."""
    verb, rest = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog=f"gflowd {verb}", add_help=True)
    parser.add_argument("--home", help="state directory (default $GFLOW_HOME or ~/.local/share/gflow)")
    if verb in ("up", "down"):
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")
    if verb == "up":
        args, passthrough = parser.parse_known_args(rest)
    else:
        args, unknown = parser.parse_known_args(rest)
        if unknown:
            sys.stderr.write(f"gflowd {verb}: unknown argument {unknown[0]}\n")
            return 1
        passthrough = []
    home = Home.resolve(args.home, None)
    if verb == "up":
        return up(home, passthrough, args.timeout)
    if verb == "down":
        return down(home, args.timeout)
    try:
        code = status(home)
        sys.stdout.flush()
    except BrokenPipeError:  # `gflowd status | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    return code
