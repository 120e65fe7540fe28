#!/usr/bin/env python3
"""gflow controller benchmarks: real gflowd processes on temp homes, driven through files and
gflowctl the way users drive them. One line per figure, ``name: value unit (target T)``.

    .venv/bin/python hack/bench.py [--quick] [--json FILE] [--only NAME,...] [--keep]

Every gflowd runs with ``--fake-gpus`` (8 x H100 80GB) and ``--log-level warning``, default
settings otherwise (resync 10 s, debounce 20 ms). Latencies are observed by polling the status
file every 1 ms; figures are medians of several runs (fewer with ``--quick``), p99 by nearest
rank. ``--quick`` measures the big-home figures at 5k jobs instead of 10k (and names them so) and
the scaling table at 1k / 5k instead of 1k / 10k / 50k. ``--only`` takes figure names with or
without their size and percentile (``cold_start_s``, ``cold_start_10k_s``, ``apply_to_running_ms``),
or ``scaling``; ``--vs gflow`` (or ``--only gflow``) measures the shared figures both ways
beside gflow 0.4.18 (PyPI runqd, installed once in a private venv under $TMPDIR) on a private HOME.
What each figure means: docs/performance.md.

Every gflowd started here is stopped (SIGTERM, then SIGKILL) and every job process of the temp
homes is killed on exit, Ctrl-C and errors included.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HACK = Path(__file__).resolve().parent  # hack/ itself, found from this file: a copy of hack/ elsewhere works too
sys.path.insert(1, str(HACK / "bench"))  # its helpers (stdlib only), imported where used
PY = sys.executable
_GFLOWCTL = Path(PY).parent / "gflowctl"
GFLOWCTL = [str(_GFLOWCTL)] if _GFLOWCTL.exists() else [PY, "-m", "controller.cli.main"]
# gflowd as users start it: the installed script, so a regular install's package runs (``-m`` from the
# checkout would import the checkout's code whatever venv's python runs it)
_GFLOWD = Path(PY).parent / "gflowd"
GFLOWD = [str(_GFLOWD)] if _GFLOWD.exists() else [PY, "-m", "controller.daemon"]
GPU_LINE = "  - {name: NVIDIA H100 80GB HBM3, memory: 80Gi}\n"
CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL = 0.001  # status-file poll interval for latencies
PENDING_JOBS = 7000  # the waiting backlog of cold_start_pending_7k_s
CHURN_FILES = 30_000  # files created and deleted before a churned drain (the "used disk")

PHASE_RE = re.compile(rb"^  phase: \"?(\w+)", re.M)
GEN_RE = re.compile(rb"^  observedGeneration: (\d+)", re.M)
INDEX_PID_RE = re.compile(rb'"controller":\{"pid":(\d+)')
INDEX_UPDATED_RE = re.compile(rb'"updated":([0-9.e+]+)')

MODES = {
    "full": dict(
        apply_samples=200,
        cli_runs=20,
        exit_runs=20,
        drain_jobs=1000,
        drain_runs=3,
        sizes=[1000, 10_000, 50_000],
        main=10_000,
        cold_runs=5,
        cold_budget=120.0,
        inc_runs=15,
        get_runs=10,
        our_bursts=5,
        idle_s=30.0,
        sched_runs=7,
        cli_start_runs=40,
    ),
    "quick": dict(
        apply_samples=30,
        cli_runs=8,
        exit_runs=8,
        drain_jobs=300,
        drain_runs=2,
        sizes=[1000, 5000],
        main=5000,
        cold_runs=3,
        cold_budget=12.0,
        inc_runs=7,
        get_runs=5,
        our_bursts=3,
        idle_s=10.0,
        sched_runs=3,
        cli_start_runs=15,
    ),
}

# targets by figure name, or by its size-independent key (key_of); KEYS: what --only accepts
TARGETS = {
    "apply_to_running_ms_p50": ("<=", 10),  # a manifest dropped into jobs/ -> Running
    "apply_to_running_ms_p99": ("<=", 200),
    "cli_apply_to_running_ms_p50": ("<=", 40),
    "cli_run_to_running_ms_p50": ("<=", 50),
    "exit_to_status_ms_p50": ("<=", 50),
    "start_after_late_ms_p50": ("<=", 100),  # how long after its startAfter a job's process begins
    "drain_jobs_per_s_churned": (">=", 500),  # the settled figure is context, without a target
    "cold_start_s": ("<=", 5),
    "cold_start_pending_7k_s": ("<=", 2),
    "idle_cpu_pct": ("<=", 1),
    "incremental_pass_ms": ("<=", 50),
    "get_jobs_ms_1k": ("<=", 30),
    "get_jobs_ms": ("<=", 1000),
    "sched_pass_ms": ("<=", 20),
    "gflowd_rss_mb": ("<=", 120),
    "get_jobs_json_ms_2k": ("<=", 150),
    "pending_pass_ms": ("<=", 50),
    "cli_version_ms": ("<=", 18),
    "cli_help_ms": ("<=", 35),
    "gpu_sample_ms": ("<=", 5),
    # at 50k finished jobs (the scaling table's last size)
    "cold_start_50k_s": ("<=", 1.5),
    "gflowd_rss_mb_50k": ("<=", 120),
    "incremental_pass_ms_50k": ("<=", 10),
    "get_jobs_ms_50k": ("<=", 200),
    # side by side with gflow (--vs gflow): ours over theirs, as the issue asks
    "gflow_burst_25_x": (">=", 100),
    "gflow_submit_to_running_x": (">=", 20),
}
KEYS = {
    "gflow",
    "apply_to_running_ms",
    "cold_start_pending_s",
    "cli_apply_to_running_ms",
    "cli_run_to_running_ms",
    "exit_to_status_ms",
    "start_after_late_ms",
    "drain_jobs_per_s",
    "cold_start_s",
    "idle_cpu_pct",
    "incremental_pass_ms",
    "get_jobs_ms",
    "sched_pass_ms",
    "gflowd_rss_mb",
    "scaling",
    "get_jobs_json_ms",
    "pending_pass_ms",
    "cli_version_ms",
    "cli_help_ms",
    "gpu_sample_ms",
}


class BenchError(Exception):
    """A figure could not be measured (gflowd died, hung, lost a job...)."""


def key_of(name: str) -> str:
    """``cold_start_10k_s`` -> ``cold_start_s``; ``apply_to_running_ms_p99`` -> ``apply_to_running_ms``;
    ``gpu_sample_ms_50x8`` -> ``gpu_sample_ms``."""
    return re.sub(r"_(p\d+|churned|again)$", "", re.sub(r"_\d+(k|x\d+)(?=_|$)", "", name))


def size_name(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# -- figures ------------------------------------------------------------------------------------------


class Figures:
    def __init__(self):
        self.data: dict[str, dict] = {}

    def add(
        self,
        name: str,
        value: float | None,
        unit: str,
        target: tuple[str, float] | None = None,
        error: str = "",
        digits: int = 1,
    ) -> None:
        if value is not None:
            value = round(value, digits)
        ok = None
        if target is not None:
            op, bound = target
            ok = False if value is None else (value <= bound if op == "<=" else value >= bound)
        target_text = f"{target[0]} {target[1]}" if target else "-"
        entry = {"value": value, "unit": unit, "target": target_text if target else None, "ok": ok}
        if error:
            entry["error"] = error
        self.data[name] = entry
        shown = "n/a" if value is None else f"{value} {unit}"
        print(f"{name}: {shown} (target {target_text})" + (f"  # not measured: {error}" if error else ""), flush=True)

    def fail(self, names: list[str], units: list[str], targets: list, error: str) -> None:
        for name, unit, target in zip(names, units, targets):
            if name not in self.data:
                self.add(name, None, unit, target, error=error)


# -- files the way users and git write them --------------------------------------------------------------


def job_text(name: str, spec: str) -> str:
    return f"metadata: {{name: {name}}}\nspec:\n{spec}"


def write_manifest_then(jobs: Path, name: str, text: str) -> Callable[[], float]:
    """Write a hidden temp file in ``jobs``; return a function that renames it into place and
    returns the perf_counter time taken just before the rename."""
    tmp = jobs / f".{name}.yaml.tmp"
    tmp.write_text(text)

    def rename() -> float:
        t0 = time.perf_counter()
        os.rename(tmp, jobs / f"{name}.yaml")
        return t0

    return rename


def read_bytes(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def phase_of(home: Path, name: str) -> str | None:
    data = read_bytes(home / "status" / f"{name}.yaml")
    m = PHASE_RE.search(data) if data else None
    return m.group(1).decode() if m else None


def generation_of(home: Path, name: str) -> int | None:
    data = read_bytes(home / "status" / f"{name}.yaml")
    m = GEN_RE.search(data) if data else None
    return int(m.group(1)) if m else None


def status_phases(home: Path) -> Counter:
    """Phases of every status file of ``home`` (unreadable ones count as '?')."""
    counts: Counter = Counter()
    with os.scandir(home / "status") as entries:
        for entry in entries:
            if entry.name.endswith(".yaml") and not entry.name.startswith("."):
                data = read_bytes(Path(entry.path)) or b""
                m = PHASE_RE.search(data)
                counts[m.group(1).decode() if m else "?"] += 1
    return counts


def index_head(home: Path) -> bytes:
    try:
        with open(home / "run" / "index.json", "rb") as handle:
            return handle.read(512)
    except FileNotFoundError:
        return b""


def index_pid(home: Path) -> int | None:
    m = INDEX_PID_RE.search(index_head(home))
    return int(m.group(1)) if m else None


def index_updated(home: Path) -> float:
    m = INDEX_UPDATED_RE.search(index_head(home))
    return float(m.group(1)) if m else 0.0


_index_cache: dict[Path, tuple[tuple[int, int, int], Counter, float | None]] = {}


def index_phases(home: Path) -> Counter | None:
    """Jobs by phase in run/index.json (parsed again only when the file changed)."""
    path = home / "run" / "index.json"
    try:
        st = os.stat(path)
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _index_cache.get(path)
        if cached and cached[0] == key:
            return cached[1]
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    counts = Counter(row.get("phase") for row in data.get("jobs", {}).values())
    _index_cache[path] = (key, counts, data.get("updated"))
    return counts


def _landed_or(home: Path, t0_wall: float, noticed: float) -> float:
    """Seconds from ``t0_wall`` until the ready index landed; ``noticed`` (the bench's own time)
    should the mtime not be usable (a clock step)."""
    landed = parsed_index_landed(home)
    return landed - t0_wall if landed is not None and 0 < landed - t0_wall <= noticed else noticed


def parsed_index_updated(home: Path) -> float | None:
    """When gflowd wrote the run/index.json that ``index_phases`` last parsed (its ``updated``, wall
    clock): a drain ends when the index first counts every job done, not when a poll noticed."""
    cached = _index_cache.get(home / "run" / "index.json")
    return cached[2] if cached else None


def parsed_index_landed(home: Path) -> float | None:
    """When the run/index.json that ``index_phases`` last parsed landed (its mtime, wall clock): a
    start is ready when gflowd wrote the index that names it, not when the bench, after parsing
    that index (~0.25 s at 50,000 jobs), noticed. The kernel's coarse clock stamps the mtime, so it
    may read up to a tick (~4 ms) earlier than ``time.time()`` would have."""
    cached = _index_cache.get(home / "run" / "index.json")
    return cached[0][1] / 1e9 if cached else None


def _entries(directory: Path) -> int:
    try:
        return len(os.listdir(directory))
    except FileNotFoundError:
        return 0


# -- processes ---------------------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # in the child, before exec: SIGTERM it if the bench dies
    _libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def file_create_us(folder: Path, n: int = 300) -> float:
    """Kernel + user CPU to create one empty file in ``folder`` (median of batches), in us. Context
    for the drain and cold-start figures: on ext4 without a journal, creating files costs 15-20 us in
    a quiet folder and up to ~1 ms where many files were recently deleted (docs/performance.md)."""
    probe = folder / ".create-probe"  # left for the bench's own clean-up: deleting files is what slows creating
    probe.mkdir()
    costs = []
    for batch in range(3):
        t0 = time.process_time()
        for i in range(n // 3):
            os.close(os.open(probe / f"{batch}-{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        costs.append((time.process_time() - t0) / (n // 3) * 1e6)
    return statistics.median(costs)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime, all threads


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def processes_under(root: Path) -> set[int]:
    """Live processes whose environment has GFLOW_HOME inside ``root``: every gflowd, launcher,
    supervisor and job process of the bench's homes."""
    marker = b"GFLOW_HOME=" + os.fsencode(str(root)) + b"/"
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                env = handle.read().split(b"\0")
        except OSError:
            continue
        if any(item.startswith(marker) for item in env) and pid_alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def remove_cgroups_of(root: Path) -> list[str]:
    """Remove the cgroup groups gflowd made for the homes under ``root``; the ones it could not.
    gflowd leaves its home's group (and an attempt's, until reaped) for the next gflowd to adopt;
    the bench's homes go, so their groups go too. Same name as controller/act/runtime/backends/
    local/attempt_cgroups.py ``cgroup_group`` (this file imports only the standard library)."""
    homes = [root, *root.glob("*"), *root.glob("*/*")]
    names = {"gflow-" + hashlib.sha256(str(h.absolute()).encode()).hexdigest()[:10] for h in homes if h.is_dir()}
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            fields = [line.split(" - ", 1) for line in mountinfo]
    except OSError:
        return []
    mounts = [
        head.split()[4] for head, tail in (f for f in fields if len(f) == 2) if tail.split()[0] in ("cgroup", "cgroup2")
    ]
    try:  # gflowd makes its group inside its own cgroup (the bench's), in each hierarchy
        with open("/proc/self/cgroup") as own:
            inside = {line.rstrip("\n").split(":", 2)[2].lstrip("/") for line in own}
    except OSError:
        inside = {""}
    bases = {os.path.join(mount, path) for mount in mounts for path in inside | {""}}
    left = []
    for group in (os.path.join(base, name) for base in bases for name in names):
        for where, _dirs, _files in os.walk(group, topdown=False):
            try:
                os.rmdir(where)
            except OSError:
                left.append(where)
    return left


def kill_processes_under(root: Path, timeout: float = 5.0) -> set[int]:
    deadline = time.monotonic() + timeout
    left = processes_under(root)
    while left and time.monotonic() < deadline:
        for pid in left:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
        left = processes_under(root)
    return left


class Gflowd:
    """One gflowd process on one home; stderr kept in a file next to the homes."""

    running: list[Gflowd] = []
    count = 0

    def __init__(self, bench: Bench, home: Path, extra: tuple[str, ...] = ()):
        Gflowd.count += 1
        self.home = home
        self.stderr_path = bench.root / f"gflowd-{Gflowd.count}.stderr"
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env["GFLOW_HOME"] = str(home)
        argv = [
            *GFLOWD,
            "--home",
            str(home),
            "--fake-gpus",
            str(bench.gpus_file),
            "--log-level",
            "warning",
            *extra,
        ]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
                cwd=str(ROOT),
                preexec_fn=_die_with_parent,
            )
        Gflowd.running.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"gflowd (pid {self.pid}) exited with {self.proc.returncode}; stderr: {self.stderr_tail()!r}"
            )

    def wait_ready(self, timeout: float = 60) -> float:
        """Until run/index.json names this process; returns the time that took."""
        t0 = time.perf_counter()
        wait_for(lambda: index_pid(self.home) == self.pid, timeout, 0.005, "gflowd's first pass", self)
        return time.perf_counter() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                log(f"gflowd {self.pid} ignored SIGTERM for 10 s: SIGKILL")
                self.proc.kill()
                self.proc.wait(5)
        if self in Gflowd.running:
            Gflowd.running.remove(self)


def wait_for(predicate, timeout: float, interval: float, what: str, daemon: Gflowd | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if daemon is not None:
            daemon.check()
        if time.monotonic() >= deadline:
            extra = f"; gflowd stderr: {daemon.stderr_tail()!r}" if daemon is not None and daemon.stderr_tail() else ""
            raise BenchError(f"timed out after {timeout:g}s waiting for {what}{extra}")
        time.sleep(interval)


def wait_phase(home: Path, name: str, phases: tuple[str, ...], daemon: Gflowd, timeout: float = 15) -> str:
    return wait_for(
        lambda: (p := phase_of(home, name)) in phases and p,
        timeout,
        POLL,
        f"job {name} to be {'/'.join(phases)} (now {phase_of(home, name)})",
        daemon,
    )


# -- gflow, the Rust scheduler (PyPI runqd), side by side (--vs gflow) ------------------------------------

GFLOW_VERSION = "0.4.18"
GFLOW_BURST = 25  # jobs submitted at once for the burst figure


def gflow_venv() -> Path:
    """A venv with ``runqd==GFLOW_VERSION`` (gflow's binaries), made once under $TMPDIR and reused:
    installed in a temp folder and renamed into place, so an interrupted install is never reused.
    (Only its ELF binaries are run, which do not name the folder they were installed in.)"""
    cache = Path(tempfile.gettempdir()) / f"gflow-bench-runqd-{GFLOW_VERSION}"
    if (cache / "bin" / "gflowd").exists():
        return cache
    partial = Path(tempfile.mkdtemp(prefix=f"{cache.name}.partial-", dir=cache.parent))
    try:
        log(f"installing runqd=={GFLOW_VERSION} into {cache} (once)")
        for argv in (
            [sys.executable, "-m", "venv", str(partial)],
            [str(partial / "bin" / "python"), "-m", "pip", "install", "-q", f"runqd=={GFLOW_VERSION}"],
        ):
            out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise BenchError(f"{' '.join(argv[-3:])} failed: {(out.stderr or out.stdout).strip()[-300:]!r}")
        if not (partial / "bin" / "gflowd").exists():
            raise BenchError(f"runqd=={GFLOW_VERSION} installed no gflowd")
        try:
            partial.rename(cache)
        except OSError:  # another bench made it meanwhile
            pass
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return cache


def free_port() -> int:
    import socket  # lazy: only --vs gflow listens

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GflowPeer:
    """One gflow daemon (``gflowd`` in the foreground, jobs in tmux sessions) on a private HOME
    under the bench's temp folder: its own XDG folders, config (127.0.0.1, a free port) and tmux
    server, never the user's ~/.config/gflow or tmux. GFLOW_HOME in its environment points inside
    the bench's folder, so ``kill_processes_under`` ends the daemon, tmux and every job shell."""

    def __init__(self, bench: Bench, venv: Path):
        self.bench_root = bench.root
        self.home = bench.root / "gflow-peer"
        self.bin = venv / "bin"
        config = self.home / ".config" / "gflow"
        config.mkdir(parents=True)
        (self.home / "run").mkdir(mode=0o700)
        self.port = free_port()
        (config / "gflow.toml").write_text(f'[daemon]\nhost = "127.0.0.1"\nport = {self.port}\n')
        # a job runs in a tmux login shell (/etc/profile resets PATH) and ends by calling gcancel:
        # the private HOME's profile puts gflow's binaries first, as a user's own profile would
        (self.home / ".bash_profile").write_text(f'export PATH="{self.bin}:$PATH"\n')
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "XDG_"))}
        self.env.update(
            HOME=str(self.home),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_DATA_HOME=str(self.home / ".local" / "share"),
            XDG_STATE_HOME=str(self.home / ".local" / "state"),
            XDG_RUNTIME_DIR=str(self.home / "run"),
            TMUX_TMPDIR=str(self.home / "run"),
            PATH=f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",  # job shells call gcancel
            GFLOW_HOME=str(self.home / "marker"),
        )
        self.stderr_path = bench.root / "gflow-peer.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [str(self.bin / "gflowd")],  # no subcommand: the daemon itself, in the foreground
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=self.env,
                cwd=str(self.home),
                preexec_fn=_die_with_parent,
            )

    def wait_ready(self) -> None:
        wait_for(lambda: self.check() or self.run("gqueue").returncode == 0, 30, 0.02, "gflow's daemon to answer")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.stderr_path.read_text(errors="replace")[-1000:]
            raise BenchError(f"gflow's gflowd exited with {self.proc.returncode}: {tail!r}")

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            env=self.env,
            cwd=str(self.home),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def submit(self, name: str, *command: str) -> int:
        out = self.run("gbatch", "--name", name, *command)
        m = re.search(r"Submitted batch job (\d+)", out.stdout)
        if out.returncode != 0 or not m:
            raise BenchError(f"gbatch exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]!r}")
        return int(m.group(1))

    def states(self, *ids: int) -> dict[int, str]:
        """Job id -> state, from ``gqueue -a -o csv`` (only ``ids`` when given)."""
        argv = ["gqueue", "-a", "-o", "csv", *(["-j", ",".join(map(str, ids))] if ids else [])]
        out = self.run(*argv)
        if out.returncode != 0:
            raise BenchError(f"gqueue exited {out.returncode}: {out.stderr.strip()[-300:]!r}")
        rows = [line.split(",") for line in out.stdout.splitlines()[1:] if line]
        return {int(row[0]): row[2] for row in rows}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if (self.home / "run").is_dir():
            subprocess.run(["tmux", "kill-server"], env=self.env, capture_output=True, timeout=30)


# -- the bench --------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args):
        self.args = args
        self.mode = "quick" if args.quick else "full"
        self.cfg = MODES[self.mode]
        self.only = {key_of(x.strip()) for x in args.only.split(",") if x.strip()} if args.only else None
        unknown = (self.only or set()) - KEYS
        if unknown:
            raise SystemExit(
                f"bench: --only: unknown figure(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KEYS))}"
            )
        self.root = Path(tempfile.mkdtemp(prefix="gflow-bench-", dir=args.dir))
        self.gpus_file = self.root / "fake-gpus.yaml"
        self.gpus_file.write_text("gpus:\n" + GPU_LINE * 8)
        self.figures = Figures()
        self.gflow_peer: GflowPeer | None = None
        if self.only and "gflow" in self.only:  # --only gflow: the side-by-side figures alone
            args.vs = "gflow"
        self.scaling: dict[int, dict[str, float | None]] = {}
        # priority values for incremental edits: never the same twice, nor what an earlier run on the
        # same home (--home) wrote, or the edit changes nothing and no generation moves
        self.edits = int(time.time()) % 1_000_000 * 100

    def want(self, *keys: str) -> bool:
        return self.only is None or any(k in self.only for k in keys)

    def new_home(self, label: str) -> Path:
        home = self.root / label
        (home / "jobs").mkdir(parents=True)
        return home

    def env(self, home: Path) -> dict[str, str]:
        return {**os.environ, "GFLOW_HOME": str(home)}

    def stop_all(self) -> None:
        self.stop_gflow()
        for daemon in list(Gflowd.running):
            daemon.stop()
        left = kill_processes_under(self.root)
        if left:
            log(f"WARNING: processes of the bench homes survived SIGKILL: {sorted(left)}")
        stuck = remove_cgroups_of(self.root)
        if stuck:
            log(f"WARNING: cgroups of the bench homes could not be removed: {stuck}")

    def run(self) -> None:
        main = size_name(self.cfg["main"])
        groups = [
            (self.cli_start, [("cli_version_ms", "ms"), ("cli_help_ms", "ms")]),
            (self.sched_pass, [("sched_pass_ms_10k", "ms"), ("pending_pass_ms_10k", "ms")]),
            (self.gpu_sample, [("gpu_sample_ms_50x8", "ms")]),
            (
                self.idle_home,
                [
                    ("apply_to_running_ms_p50", "ms"),
                    ("apply_to_running_ms_p99", "ms"),
                    ("cli_apply_to_running_ms_p50", "ms"),
                    ("cli_run_to_running_ms_p50", "ms"),
                    ("exit_to_status_ms_p50", "ms"),
                    ("start_after_late_ms_p50", "ms"),
                ],
            ),
            (self.drain, [("drain_jobs_per_s", "jobs/s"), ("drain_jobs_per_s_churned", "jobs/s")]),
            *([(self.slurm_drain, [("slurm_drain_jobs_per_s", "jobs/s")])] if self.args.vs == "slurm" else []),
            *(
                [(self.vs_gflow, [("gflow_burst_25_x", "x"), ("gflow_submit_to_running_x", "x")])]
                if self.args.vs == "gflow"
                else []
            ),
            (self.get_json, [("get_jobs_json_ms_2k", "ms")]),
            (self.cold_start_pending, [("cold_start_pending_7k_s", "s"), ("cold_start_pending_7k_s_again", "s")]),
            (
                self.big_homes,
                [
                    (f"cold_start_{main}_s", "s"),
                    (f"idle_cpu_pct_{main}", "%"),
                    (f"incremental_pass_ms_{main}", "ms"),
                    ("get_jobs_ms_1k", "ms"),
                    (f"get_jobs_ms_{main}", "ms"),
                    (f"gflowd_rss_mb_{main}", "MiB"),
                ],
            ),
        ]
        for group, expected in groups:
            wanted = [(n, u) for n, u in expected if self.want(key_of(n)) or group in (self.slurm_drain, self.vs_gflow)]
            if not wanted and not (group == self.big_homes and self.want("scaling")):
                continue
            try:
                group()
            except Exception as exc:
                error = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
                log(f"{group.__name__}: {error}")
                if not isinstance(exc, BenchError):
                    import traceback

                    traceback.print_exc()
                self.figures.fail(
                    [n for n, _ in wanted], [u for _, u in wanted], [self._target_of(n) for n, _ in wanted], error
                )
            finally:
                self.stop_all()

    def _target_of(self, name: str):
        return TARGETS.get(name) or TARGETS.get(key_of(name))

    # -- gflowctl start-up: version and --help, as users run them ----------------------------------------

    def cli_start(self) -> None:
        """``gflowctl version`` and ``gflowctl --help`` as subprocesses, output checked: the
        interpreter, the installed script (scripts/gflowctl), any .pth files of the environment and our imports.
        Measure a regular (non-editable) install for the figure users see: an editable one adds
        its import hook (docs/performance.md)."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["GFLOW_HOME"] = str(self.root / "cli-home")
        for name, argv, expect in (
            ("cli_version_ms", ["version"], "gflowctl "),
            ("cli_help_ms", ["--help"], "usage: gflowctl"),
        ):
            if not self.want(name):
                continue
            subprocess.run([*GFLOWCTL, *argv], capture_output=True, env=env, timeout=60)  # warm the page cache
            times = []
            for _ in range(self.cfg["cli_start_runs"]):
                t0 = time.perf_counter()
                out = subprocess.run([*GFLOWCTL, *argv], capture_output=True, text=True, env=env, timeout=60)
                times.append((time.perf_counter() - t0) * 1000)
                if out.returncode != 0 or not out.stdout.startswith(expect):
                    raise BenchError(
                        f"gflowctl {' '.join(argv)} exited {out.returncode}: {out.stderr.strip()[-300:]!r}"
                    )
            log(
                f"{name}: min {min(times):.1f} ms, max {max(times):.1f} ms over {len(times)} runs; load {os.getloadavg()[0]:.2f}"
            )
            self.figures.add(name, statistics.median(times), "ms", TARGETS[name])

    # -- sched_pass.py ---------------------------------------------------------------------------------

    def sched_pass(self) -> None:
        """hack/bench/sched_pass.py as a subprocess: its sched_pass_ms_10k line is the figure; any
        other ``name: X ms`` line it prints is passed on without a target."""
        name_ = "sched_pass_ms_10k"
        argv = [
            PY,
            str(HACK / "bench" / "sched_pass.py"),
            "--jobs",
            "10000",
            "--runs",
            str(self.cfg["sched_runs"]),
        ]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=str(ROOT))
        except subprocess.TimeoutExpired:
            self.figures.fail([name_], ["ms"], [TARGETS["sched_pass_ms"]], "sched_pass.py took over 300 s")
            return
        values = re.findall(r"^(\w+): ([0-9.]+) ms", out.stdout, re.M)
        if out.returncode != 0 or name_ not in dict(values):
            error = f"sched_pass.py exited {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]!r}"
            self.figures.fail([name_], ["ms"], [TARGETS["sched_pass_ms"]], error)
            return
        for name, value in values:
            self.figures.add(name, float(value), "ms", self._target_of(name), digits=2)

    # -- gpu_sample.py ---------------------------------------------------------------------------------

    def gpu_sample(self) -> None:
        """hack/bench/gpu_sample.py as a subprocess: one GPU usage sample at 8 GPUs and 50 running
        jobs (gpu_sample_ms_50x8, target 5 ms); its parts are passed on without a target."""
        name_ = "gpu_sample_ms_50x8"
        argv = [PY, str(HACK / "bench" / "gpu_sample.py"), "--jobs", "50", "--gpus", "8"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
        values = dict(re.findall(r"^(\w+): ([0-9.]+) ms", out.stdout, re.M))
        if out.returncode != 0 or name_ not in values:
            raise BenchError(f"gpu_sample.py exited {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]!r}")
        for name, value in values.items():
            self.figures.add(name, float(value), "ms", TARGETS["gpu_sample_ms"] if name == name_ else None, digits=3)

    # -- one idle controller: apply -> Running, gflowctl apply -> Running, exit -> Succeeded -----------------

    def idle_home(self) -> None:
        home = self.new_home("idle")
        daemon = Gflowd(self, home)
        daemon.wait_ready()
        time.sleep(0.3)
        jobs = home / "jobs"
        if self.want("apply_to_running_ms"):
            names = ["apply_to_running_ms_p50", "apply_to_running_ms_p99"]
            try:
                samples = []
                for i in range(self.cfg["apply_samples"] + 1):  # sample 0 is a warm-up
                    name = f"lat-{i}"
                    rename = write_manifest_then(jobs, name, job_text(name, "  command: [sleep, '30']\n"))
                    t0 = rename()
                    wait_phase(home, name, ("Running",), daemon)
                    elapsed = (time.perf_counter() - t0) * 1000
                    if i:
                        samples.append(elapsed)
                    self._delete_and_settle(home, name, daemon)
                self.figures.add(names[0], statistics.median(samples), "ms", TARGETS[names[0]])
                self.figures.add(names[1], percentile(samples, 99), "ms", TARGETS[names[1]])
                log(f"apply_to_running: {len(samples)} samples, min {min(samples):.1f} max {max(samples):.1f} ms")
            except BenchError as exc:
                self.figures.fail(names, ["ms", "ms"], [TARGETS[n] for n in names], str(exc))
        if self.want("cli_apply_to_running_ms"):
            name_ = "cli_apply_to_running_ms_p50"
            try:
                source = self.root / "cli-manifests"
                source.mkdir(exist_ok=True)
                samples = []
                for i in range(self.cfg["cli_runs"]):
                    name = f"cli-{i}"
                    path = source / f"{name}.yaml"
                    path.write_text(job_text(name, "  command: [sleep, '30']\n"))
                    t0 = time.perf_counter()
                    out = subprocess.run(
                        [*GFLOWCTL, "apply", "-f", str(path)],
                        env=self.env(home),
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                    if out.returncode != 0:
                        raise BenchError(f"gflowctl apply exited {out.returncode}: {out.stderr.strip()!r}")
                    wait_phase(home, name, ("Running",), daemon)
                    samples.append((time.perf_counter() - t0) * 1000)
                    self._delete_and_settle(home, name, daemon)
                self.figures.add(name_, statistics.median(samples), "ms", TARGETS[name_])
            except (BenchError, subprocess.TimeoutExpired) as exc:
                self.figures.fail([name_], ["ms"], [TARGETS[name_]], str(exc))
        if self.want("cli_run_to_running_ms"):  # the one-line submit: run's checks and its environment file
            name_ = "cli_run_to_running_ms_p50"
            try:
                samples = []
                for i in range(self.cfg["cli_runs"]):
                    name = f"run-{i}"
                    t0 = time.perf_counter()
                    out = subprocess.run(
                        [*GFLOWCTL, "run", "--name", name, "--", "sleep", "30"],
                        env=self.env(home),
                        capture_output=True,
                        text=True,
                        timeout=60,
                        cwd=str(self.root),
                    )
                    if out.returncode != 0:
                        raise BenchError(f"gflowctl run exited {out.returncode}: {out.stderr.strip()!r}")
                    wait_phase(home, name, ("Running",), daemon)
                    samples.append((time.perf_counter() - t0) * 1000)
                    self._delete_and_settle(home, name, daemon)
                self.figures.add(name_, statistics.median(samples), "ms", TARGETS[name_])
                log(f"cli_run_to_running: {len(samples)} samples, min {min(samples):.1f} max {max(samples):.1f} ms")
            except (BenchError, subprocess.TimeoutExpired) as exc:
                self.figures.fail([name_], ["ms"], [TARGETS[name_]], str(exc))
        if self.want("exit_to_status_ms"):
            name_ = "exit_to_status_ms_p50"
            try:
                marks = self.root / "exit-marks"
                marks.mkdir(exist_ok=True)
                samples = []
                for i in range(self.cfg["exit_runs"]):
                    name = f"exit-{i}"
                    trigger, stamp = marks / f"go-{i}", marks / f"exited-{i}"
                    script = (
                        f"  script: |\n    while [ ! -e {trigger} ]; do sleep 0.001; done\n"
                        f"    date +%s.%N > {stamp}\n    exit 0\n"
                    )
                    write_manifest_then(jobs, name, job_text(name, script))()
                    wait_phase(home, name, ("Running",), daemon)
                    time.sleep(0.15)  # let that pass end: the controller is idle when the job exits
                    trigger.touch()
                    wait_phase(home, name, ("Succeeded",), daemon)
                    seen = time.time()
                    exited = float(stamp.read_text().strip())
                    samples.append((seen - exited) * 1000)
                    self._delete_and_settle(home, name, daemon)
                self.figures.add(name_, statistics.median(samples), "ms", TARGETS[name_])
            except (BenchError, OSError, ValueError) as exc:
                self.figures.fail([name_], ["ms"], [TARGETS[name_]], str(exc))
        if self.want("start_after_late_ms"):
            name_ = "start_after_late_ms_p50"
            try:
                marks = self.root / "start-marks"
                marks.mkdir(exist_ok=True)
                samples = []
                for i in range(self.cfg["exit_runs"]):
                    name, stamp = f"later-{i}", marks / f"began-{i}"
                    target = round(time.time() + 1.0, 3)
                    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(target)) + f".{round(target % 1 * 1000):03d}Z"
                    script = f"  startAfter: '{when}'\n  script: |\n    date +%s.%N > {stamp}\n"
                    write_manifest_then(jobs, name, job_text(name, script))()
                    wait_phase(home, name, ("Succeeded",), daemon)
                    samples.append((float(stamp.read_text().strip()) - target) * 1000)
                    self._delete_and_settle(home, name, daemon)
                if min(samples) < 0:
                    raise BenchError(f"a job began {-min(samples):.0f} ms before its startAfter")
                self.figures.add(name_, statistics.median(samples), "ms", TARGETS[name_])
                log(f"start_after_late: {len(samples)} samples, min {min(samples):.1f} max {max(samples):.1f} ms")
            except (BenchError, OSError, ValueError) as exc:
                self.figures.fail([name_], ["ms"], [TARGETS[name_]], str(exc))
        daemon.check()
        daemon.stop()

    def _delete_and_settle(self, home: Path, name: str, daemon: Gflowd) -> None:
        (home / "jobs" / f"{name}.yaml").unlink()
        wait_for(
            lambda: not (home / "status" / f"{name}.yaml").exists(),
            15,
            0.005,
            f"status/{name}.yaml to go after its manifest was deleted",
            daemon,
        )
        time.sleep(0.2)  # idle again: the pass that removed it, and the job's exit, are over

    # -- many jobs at once -------------------------------------------------------------------------------

    def drain(self) -> None:
        """``drain_jobs_per_s`` on a settled disk, then ``drain_jobs_per_s_churned`` right after
        30,000 files were created and deleted in the fresh home, before gflowd starts on it
        (hack/bench/churn_disk.py): what a user's disk looks like after a busy minute, and where the
        target applies."""
        from churn_disk import churn, create_us  # hack/bench/, stdlib only

        n = self.cfg["drain_jobs"]
        for name_, churned in (("drain_jobs_per_s", False), ("drain_jobs_per_s_churned", True)):
            if not self.want(key_of(name_)):
                continue
            rates = []
            try:
                for run in range(self.cfg["drain_runs"]):
                    label = f"drain-{'churned-' if churned else ''}{run}"
                    home = self.new_home(label)
                    if churned:  # in the home itself: its folders' inodes come from the same block group
                        took = churn(home, CHURN_FILES)
                        log(
                            f"{label}: churned {CHURN_FILES} files in {took:.1f} s; creating a file there now costs "
                            f"{create_us(home):.0f} us of CPU"
                        )
                    rates.append(self._drain_once(home, label, n))
                self.figures.add(name_, statistics.median(rates), "jobs/s", self._target_of(name_))
            except BenchError as exc:
                self.figures.fail([name_], ["jobs/s"], [self._target_of(name_)], str(exc))

    def _drain_once(self, home: Path, label: str, n: int) -> float:
        daemon = Gflowd(self, home)
        daemon.wait_ready()
        stage = home / ".stage"  # beside jobs/, outside what gflowd watches
        stage.mkdir()
        names = [f"d-{i:05d}" for i in range(n)]
        for name in names:
            (stage / f"{name}.yaml").write_text(job_text(name, "  command: ['true']\n"))
        time.sleep(0.3)
        t0 = time.time()
        for name in names:
            os.rename(stage / f"{name}.yaml", home / "jobs" / f"{name}.yaml")
        # polled slowly (parsing a 1,000-job index 50 times a second would take CPU from
        # gflowd); the end is the time the index that first counted them all was written
        self._wait_all_succeeded(home, n, daemon, interval=0.25, what=f"{n} dropped jobs", stall=60.0)
        elapsed = (parsed_index_updated(home) or time.time()) - t0
        daemon.stop()
        self._check_statuses(home, n)
        log(f"{label}: {n} jobs in {elapsed:.2f} s ({n / elapsed:.1f}/s); load {os.getloadavg()[0]:.2f}")
        # the home stays until the bench ends: deleting its ~3,000 files here would churn the disk
        # for the next settled run (docs/performance.md)
        return n / elapsed

    # -- side by side with gflow (--vs gflow) ----------------------------------------------------------------

    def vs_gflow(self) -> None:
        """The same figures for gflow (``runqd==GFLOW_VERSION``) and for us, in one run on one
        machine, each as a user meets it: submit -> Running (``gbatch`` vs ``gflowctl run``,
        alternating), a burst of GFLOW_BURST ``true`` jobs submitted in one command (``gflowctl apply -f
        DIR`` vs ``gbatch --array``) -> all finished, listing 1,000 jobs (``gqueue -a`` vs ``gflowctl get jobs``; held jobs on both sides,
        as gflow runs about one job a second), and the daemon's RSS then. Both sides are polled
        the same way: their own listing (gqueue) or status files, every 10-20 ms."""
        venv = gflow_venv()
        home = self.new_home("vs-gflow")
        daemon = Gflowd(self, home)
        daemon.wait_ready()
        self.gflow_peer = peer = GflowPeer(self, venv)  # stopped by stop_all, whatever happens next
        peer.wait_ready()
        log(f"gflow {GFLOW_VERSION} (pid {peer.pid}, port {peer.port}) and gflowd (pid {daemon.pid}) are up")
        time.sleep(0.3)
        ours, theirs = [], []
        for i in range(self.cfg["cli_runs"]):
            ours.append(self._ours_run_to_running(home, daemon, f"vs-{i}"))
            theirs.append(self._gflow_submit_to_running(peer, f"vs-{i}"))
        self._pair("submit_to_running_ms_p50", statistics.median(ours), statistics.median(theirs), "ms")

        # the burst as users submit many jobs at once: one command each (a folder of manifests
        # applied; a gflow job array), then until every job has finished. Ours is the median of a
        # few bursts (a 0.3 s figure moves by half between single runs on a shared machine), each
        # on an idle gflowd after the previous one's jobs were deleted; gflow's once (~26 s, steady)
        n = GFLOW_BURST
        bursts = []
        for r in range(self.cfg["our_bursts"]):
            if r:
                self._delete_burst(home, daemon, r - 1, n)
            bursts.append(self._our_burst(home, daemon, r, n))
        ours_burst = statistics.median(bursts)
        log(f"our bursts of {n}: {', '.join(f'{b:.3f}' for b in bursts)} s; load {os.getloadavg()[0]:.2f}")
        before = max(peer.states(), default=0)
        t0 = time.perf_counter()
        out = peer.run("gbatch", "--array", f"1-{n}", "--name", "burst", "true")
        if out.returncode != 0:
            raise BenchError(f"gbatch --array exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]!r}")
        left = set(range(before + 1, before + n + 1))

        def gflow_done() -> bool:
            peer.check()
            states = peer.states(*left)
            bad = {i: s for i, s in states.items() if s in ("Failed", "Cancelled", "Timeout")}
            if bad:
                raise BenchError(f"gflow's burst jobs ended badly: {bad}")
            left.difference_update(i for i, s in states.items() if s == "Finished")
            return not left

        wait_for(gflow_done, 600, 0.02, f"gflow's burst of {n} jobs to finish")
        theirs_burst = time.perf_counter() - t0
        self._pair(f"burst_{n}_s", ours_burst, theirs_burst, "s", digits=2)

        size = 1000
        held = "  command: ['true']\n  startAfter: '2099-01-01T00:00:00'\n"
        stage = home / ".stage"
        stage.mkdir()
        for i in range(size):
            (stage / f"held-{i:04d}.yaml").write_text(job_text(f"held-{i:04d}", held))
        for i in range(size):
            os.rename(stage / f"held-{i:04d}.yaml", home / "jobs" / f"held-{i:04d}.yaml")
        out = peer.run("gbatch", "--array", f"1-{size}", "--begin", "now+30d", "--name", "held", "true", timeout=300)
        if out.returncode != 0:
            raise BenchError(f"gbatch --array exited {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]!r}")
        total = size + n + 1  # held, burst, and each side's last submit sample (the others were deleted)
        wait_for(
            lambda: (index_phases(home) or Counter()).get("Pending", 0) >= size, 120, 0.05, "1,000 held jobs", daemon
        )
        time.sleep(1.0)  # both settled
        ours_ls, theirs_ls = [], []
        for _ in range(self.cfg["get_runs"]):
            t0 = time.perf_counter()
            got = self._gflowctl(home, "get", "jobs").stdout.count("\n") - 1
            ours_ls.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            listed = peer.run("gqueue", "-a")
            theirs_ls.append((time.perf_counter() - t0) * 1000)
            their_rows = listed.stdout.count("\n") - 1
            if got < size or their_rows < size:
                raise BenchError(f"listing: we listed {got} jobs and gqueue {their_rows}, expected about {total}")
        self._pair("list_jobs_ms_1k", statistics.median(ours_ls), statistics.median(theirs_ls), "ms")
        self._pair("daemon_rss_mb_1k", rss_mib(daemon.pid), rss_mib(peer.pid), "MiB")
        log(f"vs gflow: done; load {os.getloadavg()[0]:.2f}")

    def _our_burst(self, home: Path, daemon: Gflowd, r: int, n: int) -> float:
        burst = self.root / f"vs-gflow-burst-{r}"
        burst.mkdir()
        for i in range(n):
            (burst / f"burst{r}-{i}.yaml").write_text(job_text(f"burst{r}-{i}", "  command: ['true']\n"))
        t0 = time.perf_counter()
        self._gflowctl(home, "apply", "-f", str(burst))
        wait_for(lambda: (index_phases(home) or Counter()).get("Succeeded", 0) >= n, 120, 0.02, "our burst", daemon)
        return time.perf_counter() - t0

    def _delete_burst(self, home: Path, daemon: Gflowd, r: int, n: int) -> None:
        for i in range(n):
            (home / "jobs" / f"burst{r}-{i}.yaml").unlink()
        wait_for(
            lambda: (c := index_phases(home)) is not None and not c.get("Succeeded", 0),
            60,
            0.02,
            "a burst's jobs gone",
            daemon,
        )
        time.sleep(0.3)  # idle again

    def _pair(self, name: str, ours: float, theirs: float, unit: str, digits: int = 1) -> None:
        """Ours and gflow's figure, then gflow's over ours (how many times faster or smaller we are)."""
        self.figures.add(f"{name}_ours", ours, unit, digits=digits)
        self.figures.add(f"{name}_gflow", theirs, unit, digits=digits)
        ratio = {"submit_to_running_ms_p50": "gflow_submit_to_running_x", f"burst_{GFLOW_BURST}_s": "gflow_burst_25_x"}
        key = ratio.get(name, f"gflow_{name}_x")
        self.figures.add(key, theirs / ours if ours else None, "x", TARGETS.get(key), digits=2)

    def _gflowctl(self, home: Path, *argv: str) -> subprocess.CompletedProcess:
        out = subprocess.run(
            [*GFLOWCTL, *argv], env=self.env(home), capture_output=True, text=True, timeout=60, cwd=str(self.root)
        )
        if out.returncode != 0:
            raise BenchError(f"gflowctl {argv[0]} exited {out.returncode}: {out.stderr.strip()[-300:]!r}")
        return out

    def _ours_run_to_running(self, home: Path, daemon: Gflowd, name: str) -> float:
        t0 = time.perf_counter()
        self._gflowctl(home, "run", "--name", name, "--", "sleep", "30")
        wait_phase(home, name, ("Running",), daemon)
        took = (time.perf_counter() - t0) * 1000
        self._delete_and_settle(home, name, daemon)
        return took

    def _gflow_submit_to_running(self, peer: GflowPeer, name: str) -> float:
        t0 = time.perf_counter()
        job = peer.submit(name, "sleep", "30")
        wait_for(lambda: peer.check() or peer.states(job).get(job) == "Running", 60, 0.01, f"gflow job {job} to run")
        took = (time.perf_counter() - t0) * 1000
        peer.run("gcancel", str(job))
        wait_for(lambda: peer.states(job).get(job) != "Running", 60, 0.02, f"gflow job {job} to stop")
        time.sleep(0.2)
        return took

    def stop_gflow(self) -> None:
        peer = getattr(self, "gflow_peer", None)
        if peer is not None:
            peer.stop()
            self.gflow_peer = None

    # -- the anchor: the same burst through a local Slurm (--vs slurm) ------------------------------------

    def slurm_drain(self) -> None:
        """``drain_jobs_per_s`` through Slurm: N ``sbatch --wrap true`` (4 at a time, as fast as
        sbatch goes) -> none of them left in squeue; then the jobcomp log must list N COMPLETED.
        Uses a running hack/slurm-dev.sh cluster (SLURM_CONF, default /tmp/gflow-slurm-dev), else
        starts a private one under the bench's temp folder and stops it afterwards."""
        n, name_ = self.cfg["drain_jobs"], "slurm_drain_jobs_per_s"
        env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin"}
        env.setdefault("SLURM_CONF", "/tmp/gflow-slurm-dev/slurm.conf")
        script = HACK / "slurm-dev.sh"
        shared = (
            subprocess.run(["bash", str(script), "status"], env=env, capture_output=True, timeout=60).returncode == 0
        )
        if not shared:  # a private cluster: its own folder and ports, so the test suite's is never touched
            env["SLURM_DEV_DIR"] = str(self.root / "slurm")
            env["SLURM_DEV_PORT"] = str(17000 + os.getpid() % 2000 * 2)
            env["SLURM_CONF"] = str(self.root / "slurm" / "slurm.conf")
            up = subprocess.run(["bash", str(script), "start"], env=env, capture_output=True, text=True, timeout=120)
            if up.returncode != 0:
                raise BenchError(f"no local Slurm (hack/slurm-dev.sh start: {up.stderr.strip()[-300:]!r})")
            self.slurm_env = env
        tag = f"gflowbench-{os.getpid()}"
        comp = Path(env.get("SLURM_DEV_DIR", "/tmp/gflow-slurm-dev")) / "log" / "jobcomp.log"
        try:
            from concurrent.futures import ThreadPoolExecutor  # lazy: only --vs slurm submits in parallel

            def submit(_i: int) -> None:
                out = subprocess.run(
                    ["sbatch", "--quiet", "-J", tag, "-o", "/dev/null", "--mem=16M", "--wrap", "true"],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                if out.returncode != 0:
                    raise BenchError(f"sbatch failed: {out.stderr.strip()[-300:]!r}")

            t0 = time.perf_counter()
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(submit, range(n)))
            submitted = time.perf_counter() - t0

            def left() -> bool:
                out = subprocess.run(
                    ["squeue", "-h", "-n", tag, "-t", "PD,R,CG,CF", "-o", "%i"],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                return out.returncode == 0 and not out.stdout.strip()

            wait_for(left, 600, 0.05, f"{n} sbatch jobs to finish")
            elapsed = time.perf_counter() - t0
            done = (
                sum(
                    1
                    for line in comp.read_text(errors="replace").splitlines()
                    if f"Name={tag} " in line and "JobState=COMPLETED" in line
                )
                if comp.exists()
                else None
            )
            if done is not None and done != n:
                raise BenchError(f"Slurm: expected {n} COMPLETED jobs named {tag} in {comp}, found {done}")
            log(
                f"slurm: {n} jobs in {elapsed:.2f} s ({n / elapsed:.1f}/s; sbatch calls took {submitted:.2f} s; "
                f"{done if done is not None else 'no jobcomp log:'} COMPLETED); load {os.getloadavg()[0]:.2f}"
            )
            self.figures.add(name_, n / elapsed, "jobs/s")
            ours = (self.figures.data.get("drain_jobs_per_s") or {}).get("value")
            if ours:
                self.figures.add("drain_vs_slurm", ours / (n / elapsed), "x", digits=2)
        finally:
            subprocess.run(["scancel", "-n", tag], env=env, capture_output=True, timeout=60)

    def stop_slurm(self) -> None:
        env = getattr(self, "slurm_env", None)
        if env is not None:
            subprocess.run(["bash", str(HACK / "slurm-dev.sh"), "stop"], env=env, capture_output=True, timeout=120)
            self.slurm_env = None

    def _wait_all_succeeded(
        self,
        home: Path,
        n: int,
        daemon: Gflowd,
        interval: float,
        what: str,
        stall: float = 120.0,
        progress: bool = False,
    ) -> None:
        """Until run/index.json counts ``n`` Succeeded jobs. Fails when a job ends badly, when gflowd
        dies, or when nothing moves for ``stall`` seconds: neither the index nor the number of
        attempt records (run/attempts/) and logs (one pass may start thousands of jobs before it
        records anything)."""
        last, last_at, started, said = None, time.monotonic(), time.monotonic(), time.monotonic()
        checked = 0.0
        while True:
            daemon.check()
            counts = index_phases(home) or Counter()
            done = counts.get("Succeeded", 0)
            if done >= n:
                return
            bad = {p: c for p, c in counts.items() if p not in ("Succeeded", "Pending", "Running")}
            if bad:
                raise BenchError(f"{what}: jobs ended badly: {dict(counts)}")
            now = time.monotonic()
            if now - checked < 1.0:
                time.sleep(interval)
                continue
            checked = now
            state = (tuple(sorted(counts.items())), _entries(home / "run" / "attempts"), _entries(home / "logs"))
            if state != last:
                last, last_at = state, now
            elif now - last_at > stall:
                raise BenchError(
                    f"{what}: nothing moved for {stall:g}s (a hung pass?); index says {dict(counts)}, "
                    f"{state[1]} attempt records, {state[2]} logs"
                )
            if progress and now - said >= 10:
                log(f"  {done}/{n} Succeeded in the index, {state[2]} logs, after {now - started:.0f} s")
                said = now
            time.sleep(interval)

    def _check_statuses(self, home: Path, n: int) -> None:
        counts = status_phases(home)
        if counts != Counter({"Succeeded": n}):
            raise BenchError(f"expected exactly {n} Succeeded status files, found {dict(counts)}")

    # -- big homes: cold start, idle CPU, incremental pass, get jobs, RSS; scaling table --------------------

    def big_homes(self) -> None:
        sizes = list(self.cfg["sizes"])
        main = self.cfg["main"]
        if not self.want("scaling"):
            sizes = [s for s in sizes if s == main or (s == 1000 and self.want("get_jobs_ms"))]
        if self.args.home:  # a home made by hack/bench/make_home.py: measured at its own size, not grown
            home = Path(self.args.home).resolve()
            size = sum(1 for name in os.listdir(home / "jobs") if name.endswith(".yaml"))
            try:
                self._measure_size(home, size, size)
            except BenchError as exc:
                log(f"big home {home}: {exc}")
                self._fail_big([size], size, str(exc))
            return
        home = self.new_home("big")
        have, size = 0, sizes[0] if sizes else 0
        try:
            for size in sizes:
                self._grow(home, have, size)
                have = size
                self._measure_size(home, size, main)
        except BenchError as exc:
            log(f"big homes at {size_name(size)}: {exc}")
            self._fail_big(sizes, main, str(exc))

    def _fail_big(self, sizes: list[int], main: int, error: str) -> None:
        k = size_name(main)
        pending = []
        if self.want("cold_start_s"):
            pending.append((f"cold_start_{k}_s", "s", TARGETS["cold_start_s"]))
        if self.want("idle_cpu_pct"):
            pending.append((f"idle_cpu_pct_{k}", "%", TARGETS["idle_cpu_pct"]))
        if self.want("incremental_pass_ms"):
            pending.append((f"incremental_pass_ms_{k}", "ms", TARGETS["incremental_pass_ms"]))
        if self.want("get_jobs_ms"):
            if 1000 in sizes:
                pending.append(("get_jobs_ms_1k", "ms", TARGETS["get_jobs_ms_1k"]))
            pending.append((f"get_jobs_ms_{k}", "ms", TARGETS["get_jobs_ms"]))
            if 50_000 in sizes and self.want("scaling"):
                pending.append(("get_jobs_ms_50k", "ms", TARGETS["get_jobs_ms_50k"]))
        if self.want("gflowd_rss_mb"):
            pending.append((f"gflowd_rss_mb_{k}", "MiB", TARGETS["gflowd_rss_mb"]))
        if pending:
            self.figures.fail(*map(list, zip(*pending)), error)

    def _grow(self, home: Path, have: int, size: int) -> None:
        """Bring ``home`` to ``size`` finished `true` jobs by running the missing ones with gflowd."""
        stage = home / ".stage"
        stage.mkdir(exist_ok=True)
        names = [f"p-{i:05d}" for i in range(have, size)]
        for name in names:
            (stage / f"{name}.yaml").write_text(job_text(name, "  command: ['true']\n"))
        for name in names:
            os.rename(stage / f"{name}.yaml", home / "jobs" / f"{name}.yaml")
        log(f"preparing the {size_name(size)} home: running {len(names)} `true` jobs ({have} already finished)")
        t0 = time.perf_counter()
        daemon = Gflowd(self, home)
        self._wait_all_succeeded(home, size, daemon, interval=0.25, what=f"preparing {size} jobs", progress=True)
        elapsed = time.perf_counter() - t0
        daemon.stop()
        self._check_statuses(home, size)
        left = processes_under(home.parent)
        if left:
            raise BenchError(f"processes of the prepared home still alive after gflowd stopped: {sorted(left)}")
        log(
            f"prepared {size_name(size)} home in {elapsed:.1f} s ({len(names) / elapsed:.1f} jobs/s incl. gflowd start)"
        )

    def _measure_size(self, home: Path, size: int, main: int) -> None:
        k = size_name(size)
        is_main = size == main
        row = self.scaling.setdefault(size, {})
        in_table = self.want("scaling")
        want_cold = in_table or (is_main and self.want("cold_start_s"))
        # targets are for the main size, and for the few figures that name their size (at 50k)
        target = lambda name: TARGETS.get(name) or (TARGETS[key_of(name)] if is_main else None)

        # cold start: start gflowd -> index rewritten by the new pid and every job Succeeded in it
        daemon = None
        if want_cold:
            times = []
            spent = time.perf_counter()
            for run in range(self.cfg["cold_runs"]):
                if daemon is not None:
                    daemon.stop()
                t0, t0_wall = time.perf_counter(), time.time()
                daemon = Gflowd(self, home)

                def ready(d=daemon):
                    if index_pid(home) != d.pid:
                        return False
                    counts = index_phases(home)
                    return counts is not None and counts.get("Succeeded", 0) == size

                wait_for(ready, 120, 0.005, f"cold start of gflowd on {size} finished jobs", daemon)
                noticed = time.perf_counter() - t0
                times.append(_landed_or(home, t0_wall, noticed))
                log(f"cold start {k} run {run + 1}: {times[-1]:.2f} s (the bench noticed at {noticed:.2f} s)")
                if time.perf_counter() - spent > self.cfg["cold_budget"]:
                    break
            row["cold_start_s"] = statistics.median(times)
            self.figures.add(f"cold_start_{k}_s", row["cold_start_s"], "s", target(f"cold_start_{k}_s"), digits=2)
        else:
            daemon = Gflowd(self, home)
            daemon.wait_ready(120)
        self._check_statuses(home, size)
        time.sleep(1.0)  # whatever follows the first pass
        daemon.check()

        if is_main and self.want("idle_cpu_pct"):
            c0, w0 = cpu_seconds(daemon.pid), time.perf_counter()
            time.sleep(self.cfg["idle_s"])
            daemon.check()
            pct = (cpu_seconds(daemon.pid) - c0) / (time.perf_counter() - w0) * 100
            self.figures.add(f"idle_cpu_pct_{k}", pct, "%", TARGETS["idle_cpu_pct"])
        if in_table or (is_main and self.want("gflowd_rss_mb")):
            row["rss_mb"] = rss_mib(daemon.pid)
            self.figures.add(f"gflowd_rss_mb_{k}", row["rss_mb"], "MiB", target(f"gflowd_rss_mb_{k}"))

        if in_table or (is_main and self.want("incremental_pass_ms")):
            samples = []
            for run in range(self.cfg["inc_runs"]):
                name = f"p-{(run * 7919 + 13) % size:05d}"
                before = generation_of(home, name)
                if before is None:
                    raise BenchError(f"status/{name}.yaml has no observedGeneration")
                wall = time.time()
                self.edits += 1
                rename = write_manifest_then(
                    home / "jobs", name, job_text(name, f"  command: ['true']\n  priority: {self.edits}\n")
                )
                t0 = rename()
                wait_for(
                    lambda: (g := generation_of(home, name)) is not None and g > before,
                    15,
                    POLL,
                    f"observedGeneration of {name} to pass {before}",
                    daemon,
                )
                samples.append((time.perf_counter() - t0) * 1000)
                # let the pass finish (the index is written after the status files), then rest
                wait_for(lambda: index_updated(home) > wall, 15, 0.005, "the index after the edit", daemon)
                time.sleep(0.2)
                if phase_of(home, name) != "Succeeded":
                    raise BenchError(f"{name} is {phase_of(home, name)} after a priority edit, not Succeeded")
            row["pass_ms"] = statistics.median(samples)
            self.figures.add(f"incremental_pass_ms_{k}", row["pass_ms"], "ms", target(f"incremental_pass_ms_{k}"))

        if in_table or (self.want("get_jobs_ms") and (is_main or size == 1000)):
            times = []
            for _ in range(self.cfg["get_runs"]):
                t0 = time.perf_counter()
                out = subprocess.run([*GFLOWCTL, "get", "jobs"], env=self.env(home), capture_output=True, timeout=120)
                times.append((time.perf_counter() - t0) * 1000)
                lines = out.stdout.count(b"\n")
                if out.returncode != 0 or lines != size + 1:
                    raise BenchError(
                        f"gflowctl get jobs exited {out.returncode} with {lines} lines (expected {size + 1}): "
                        f"{out.stderr.decode(errors='replace').strip()[-300:]!r}"
                    )
            row["get_jobs_ms"] = statistics.median(times)
            self.figures.add(f"get_jobs_ms_{k}", row["get_jobs_ms"], "ms", target(f"get_jobs_ms_{k}"))
        daemon.check()
        daemon.stop()

    # -- cold start with a waiting backlog ----------------------------------------------------------------

    def cold_start_pending(self) -> None:
        """``cold_start_pending_7k_s``: gflowd restarted on a home where 7,000 one-GPU jobs wait
        (Pending/Resources) behind a running job that holds all 8 GPUs (no per-user queue limit,
        ``--max-pending-jobs-per-user 0``) -> run/index.json names the new pid and counts the 7,000
        Pending and the one re-adopted Running. The first restart after the backlog was admitted,
        then ``_again``: the median of the restarts after it (caches warm, nothing changed)."""
        size, k = PENDING_JOBS, size_name(PENDING_JOBS)
        home = self.new_home("pending")
        flags = ("--max-pending-jobs-per-user", "0")
        daemon = Gflowd(self, home, flags)
        daemon.wait_ready()
        spec = "  command: [sleep, '100000']\n  resources: {gpus: 8}\n"
        write_manifest_then(home / "jobs", "blocker", job_text("blocker", spec))()
        wait_phase(home, "blocker", ("Running",), daemon, timeout=60)
        stage = home / ".stage"
        stage.mkdir()
        names = [f"w-{i:05d}" for i in range(size)]
        for name in names:
            (stage / f"{name}.yaml").write_text(job_text(name, "  command: ['true']\n  resources: {gpus: 1}\n"))
        for name in names:
            os.rename(stage / f"{name}.yaml", home / "jobs" / f"{name}.yaml")
        log(f"pending home: {size} one-GPU jobs dropped behind a job holding every GPU")
        wait_for(
            lambda: (index_phases(home) or Counter()).get("Pending", 0) >= size,
            600,
            0.5,
            f"{size} jobs Pending in the index",
            daemon,
        )
        daemon.stop()
        times = []
        spent = time.perf_counter()
        for run in range(max(2, self.cfg["cold_runs"])):
            t0, t0_wall = time.perf_counter(), time.time()
            daemon = Gflowd(self, home, flags)

            def ready(d=daemon) -> bool:
                if index_pid(home) != d.pid:
                    return False
                counts = index_phases(home) or Counter()
                if counts.get("Succeeded") or counts.get("Failed"):
                    raise BenchError(f"the backlog started after a restart (the blocker was lost?): {dict(counts)}")
                return counts.get("Pending", 0) == size and counts.get("Running", 0) == 1

            wait_for(ready, 300, 0.005, f"cold start of gflowd on {size} waiting jobs", daemon)
            noticed = time.perf_counter() - t0
            times.append(_landed_or(home, t0_wall, noticed))
            log(
                f"cold start, {k} pending, run {run + 1}: {times[-1]:.2f} s (noticed at {noticed:.2f} s); "
                f"load {os.getloadavg()[0]:.2f}"
            )
            daemon.stop()
            if run >= 1 and time.perf_counter() - spent > self.cfg["cold_budget"]:
                break
        target = TARGETS["cold_start_pending_7k_s"]
        self.figures.add(f"cold_start_pending_{k}_s", times[0], "s", target, digits=2)
        self.figures.add(f"cold_start_pending_{k}_s_again", statistics.median(times[1:]), "s", target, digits=2)

    # -- gflowctl get jobs -o json on 2,000 finished jobs --------------------------------------------------

    def get_json(self) -> None:
        """The median of ``gflowctl get jobs -o json`` on a home of 2,000 finished jobs (gflowd
        running), every run checked to list them all."""
        size = 2000
        home = self.new_home("json")
        self._grow(home, 0, size)
        daemon = Gflowd(self, home)
        daemon.wait_ready(120)
        self._check_statuses(home, size)
        times = []
        for _ in range(self.cfg["get_runs"]):
            t0 = time.perf_counter()
            out = subprocess.run(
                [*GFLOWCTL, "get", "jobs", "-o", "json"], env=self.env(home), capture_output=True, timeout=120
            )
            times.append((time.perf_counter() - t0) * 1000)
            items = len(json.loads(out.stdout)["items"]) if out.returncode == 0 else 0
            if items != size:
                raise BenchError(
                    f"gflowctl get jobs -o json exited {out.returncode} with {items} items (expected {size}): "
                    f"{out.stderr.decode(errors='replace').strip()[-300:]!r}"
                )
        daemon.check()
        daemon.stop()
        self.figures.add("get_jobs_json_ms_2k", statistics.median(times), "ms", TARGETS["get_jobs_json_ms_2k"])

    # -- the end ------------------------------------------------------------------------------------------

    def summary(self, elapsed: float) -> str:
        lines = [f"summary ({self.mode} run, {elapsed:.0f} s wall):"]
        width = max((len(n) for n in self.figures.data), default=10)
        for name, f in self.figures.data.items():
            value = "n/a" if f["value"] is None else f"{f['value']} {f['unit']}"
            verdict = "-" if f["ok"] is None else ("ok" if f["ok"] else "SHORT")
            if f.get("error"):
                verdict += " (not measured)"
            lines.append(f"  {name:<{width}}  {value:>14}  target {f['target'] or '-':<8}  {verdict}")
        if self.want("scaling") and self.scaling:
            lines.append("")
            lines.append("scaling (finished jobs in the home):")
            lines.append(
                f"  {'jobs':>6}  {'pass ms (edit->status)':>22}  {'cold start s':>12}  {'gflowd RSS MiB':>14}"
                f"  {'get jobs ms':>11}"
            )
            for size, row in sorted(self.scaling.items()):
                cell = lambda key, fmt: fmt.format(row[key]) if row.get(key) is not None else "n/a"
                lines.append(
                    f"  {size_name(size):>6}  {cell('pass_ms', '{:.1f}'):>22}  {cell('cold_start_s', '{:.2f}'):>12}"
                    f"  {cell('rss_mb', '{:.1f}'):>14}  {cell('get_jobs_ms', '{:.0f}'):>11}"
                )
        return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller homes (5k instead of 10k)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--only", help="comma-separated figure names (with or without size/percentile) or 'scaling'")
    parser.add_argument("--keep", action="store_true", help="keep the temp homes (their path is printed)")
    parser.add_argument(
        "--dir",
        help="where the temp homes go (default: $TMPDIR or /tmp); a gflow home usually "
        "lives on the same filesystem as the users' projects",
    )
    parser.add_argument(
        "--home",
        help="measure the big-home figures (cold start, idle CPU, RSS, incremental pass, "
        "get jobs) on this home of finished jobs instead of growing one; make it with "
        "hack/bench/make_home.py (its manifests' priorities are edited)",
    )
    parser.add_argument(
        "--vs",
        choices=["slurm", "gflow"],
        help="slurm: also drain the same burst through sbatch on a local Slurm (hack/slurm-dev.sh) and print the "
        f"ratio; gflow: install gflow (runqd=={GFLOW_VERSION}) in a private venv and home and measure the shared "
        "figures both ways, side by side",
    )
    args = parser.parse_args()
    problems = [
        f"--{flag} {value}: no such folder"
        for flag, value in (("dir", args.dir), ("home", args.home))
        if value is not None and not os.path.isdir(value)
    ]
    if problems:
        parser.error("; ".join(problems))

    bench = Bench(args)
    started = time.perf_counter()

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too: `cmd &` starts with it ignored
        signal.signal(sig, on_signal)
    log(
        f"{bench.mode} run; homes under {bench.root}; {os.cpu_count()} CPUs; gflowctl: {' '.join(GFLOWCTL)}; gflowd: {' '.join(GFLOWD)}"
    )
    log(
        f"creating a file under {bench.root} costs {file_create_us(bench.root):.0f} us of CPU here "
        "(15-20 us is a quiet ext4 folder; see docs/performance.md, 'The filesystem')"
    )
    interrupted = False
    try:
        bench.run()
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping every gflowd and job process")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # cleanup must not be cut short
            signal.signal(sig, signal.SIG_IGN)
        bench.stop_all()
        bench.stop_slurm()
        if args.keep:
            log(f"kept {bench.root}")
        else:
            shutil.rmtree(bench.root, ignore_errors=True)
    print(bench.summary(time.perf_counter() - started), flush=True)
    if args.json:
        args.json.write_text(json.dumps(bench.figures.data, indent=2) + "\n")
    if interrupted:
        return 130
    return 1 if any(f.get("error") for f in bench.figures.data.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
