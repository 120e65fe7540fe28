"""Torture gflowd: a mixed workload on fake GPUs while the controller is kill -9'd and restarted.

    python hack/torture.py [--cycles N] [--jobs M] [--flood F] [--seed S] [--workdir DIR] [--keep]

A real ``gflowd`` (``python -m controller.daemon``) runs on fake GPUs. Jobs are CPU and GPU,
short and long, Exclusive and Shared (with ``gpuMemory``); some fail (some with retries), some are
cancelled, some suspended and resumed by editing their manifests mid-run, some submitted while the
controller is down; a flood of F short CPU jobs lands at once at the start (more than one pass
starts, so most wait as ``Queued`` and get their status files late: record/recorder.py). At seeded
random instants gflowd is SIGKILLed and started again. Every job
process appends ``start``/``end`` lines (name, attempt, CUDA_VISIBLE_DEVICES, time, pid, exit code)
to one ledger file, and a monitor samples the phases gflowd publishes. The invariants are then
checked from those records, not from the controller's own opinion:

* every job reaches exactly one terminal phase, the one its workload implies, and keeps it;
* no (job, attempt) ever starts twice, and attempts stay within what retries and suspensions allow;
* no two Exclusive jobs (nor an Exclusive and a Shared one) ever overlap on a GPU;
* the Shared jobs on a GPU never together ask for more than its memory;
* each job got as many GPUs as it asked for;
* no process of the home is left once the jobs are done and gflowd has stopped.

Prints the figures and exits 1 on any violation. ``run_torture`` is what the test suite calls
with small numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_COUNT = 4
GPU_MEMORY_GI = 16
TERMINAL = ("Succeeded", "Failed", "Cancelled")

# The job itself: writes the ledger. The TERM handler is installed before the start line, so any
# attempt that recorded a start also records its end (a stop is TERM first; KILL only after 10 s).
WORKER = r"""
import os, signal, sys, time
ledger, duration, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
name = os.environ["GFLOW_JOB_NAME"]
attempt = os.environ["GFLOW_ATTEMPT"]
devices = os.environ.get("CUDA_VISIBLE_DEVICES", "") or "-"

def line(kind, rc=""):
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{kind} {name} {attempt} {devices} {time.time():.6f} {os.getpid()} {rc}\n".encode())
    finally:
        os.close(fd)

stopping = []

def term(*_):
    if stopping:  # a stop signals the process group and each process: TERM can arrive twice
        return
    stopping.append(1)
    line("end", "143")
    os._exit(143)

signal.signal(signal.SIGTERM, term)
line("start")
time.sleep(duration)
line("end", str(code))
sys.exit(code)
"""


@dataclass
class JobPlan:
    name: str
    kind: str  # ok | fail | cancel | suspend
    gpus: int
    shared: bool
    gpu_memory_gi: int
    duration: float
    exit_code: int
    backoff: int
    submit_at: float  # seconds after the torture starts
    edit_at: float | None = None  # cancel or suspend
    resume_at: float | None = None
    edits_done: list[str] = field(default_factory=list)

    def manifest(self, worker: Path, ledger: Path) -> str:
        suspended = "suspend" in self.edits_done and "resume" not in self.edits_done
        cancelled = "cancel" in self.edits_done
        resources = f"{{gpus: {self.gpus}" + (f", gpuMemory: {self.gpu_memory_gi}Gi" if self.shared else "") + "}"
        return (
            "apiVersion: gflow.dev/v1alpha1\nkind: Job\n"
            f"metadata: {{name: {self.name}}}\n"
            "spec:\n"
            f"  command: [{sys.executable}, {worker}, {ledger}, '{self.duration:.3f}', '{self.exit_code}']\n"
            f"  resources: {resources}\n"
            f"  sharing: {'Shared' if self.shared else 'Exclusive'}\n"
            f"  backoffLimit: {self.backoff}\n"
            f"  suspend: {'true' if suspended else 'false'}\n"
            f"  cancelled: {'true' if cancelled else 'false'}\n"
        )


@dataclass
class Report:
    cycles: int = 0
    jobs: int = 0
    attempts: int = 0
    kills: int = 0
    edits: int = 0
    seconds: float = 0.0
    phases: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        phases = ", ".join(f"{p} {n}" for p, n in sorted(self.phases.items()))
        return (
            f"torture: cycles survived {self.cycles}, kill -9 {self.kills}, jobs {self.jobs} ({phases}), "
            f"attempts run {self.attempts}, manifest edits {self.edits}, {self.seconds:.1f}s, "
            f"violations {len(self.violations)}"
        )


def plan_jobs(rng: random.Random, count: int, horizon: float, flood: int = 0) -> list[JobPlan]:
    jobs = [
        JobPlan(
            name=f"f{i:03d}-ok-cpu",
            kind="ok",
            gpus=0,
            shared=False,
            gpu_memory_gi=0,
            duration=rng.uniform(0.05, 0.6),
            exit_code=0,
            backoff=0,
            submit_at=0.0,
        )
        for i in range(flood)
    ]
    for i in range(count):
        kind = rng.choices(["ok", "fail", "cancel", "suspend"], weights=[5, 2, 2, 2])[0]
        placement = rng.choices(["cpu", "exclusive", "shared"], weights=[3, 4, 3])[0]
        gpus = 0 if placement == "cpu" else (1 if placement == "shared" else rng.choice([1, 1, 2]))
        long = rng.random() < 0.4
        duration = rng.uniform(1.0, 4.0) if long else rng.uniform(0.05, 0.6)
        if kind in ("cancel", "suspend"):
            duration = rng.uniform(3.0, 8.0)  # long enough for the edit to usually find it queued or running
        job = JobPlan(
            name=f"t{i:03d}-{kind}-{placement}",
            kind=kind,
            gpus=gpus,
            shared=placement == "shared",
            gpu_memory_gi=rng.choice([3, 5, 6, 8, 10]),
            duration=duration,
            exit_code=rng.choice([1, 3]) if kind == "fail" else 0,
            backoff=rng.choice([0, 1]) if kind == "fail" else 0,
            submit_at=0.0 if i < count // 2 else rng.uniform(0.0, horizon * 0.7),
        )
        if kind in ("cancel", "suspend"):
            job.edit_at = job.submit_at + rng.uniform(0.2, 4.0)
        if kind == "suspend":
            job.resume_at = job.edit_at + rng.uniform(0.5, 3.0)
        jobs.append(job)
    return jobs


# -- the processes -----------------------------------------------------------------------------------


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def processes_of_home(home: Path) -> set[int]:
    """Live processes carrying ``GFLOW_HOME=<home>``: gflowd, its launcher, supervisors, jobs."""
    marker = b"GFLOW_HOME=" + os.fsencode(str(home))
    return {
        int(e.name)
        for e in os.scandir("/proc")
        if e.name.isdigit() and int(e.name) != os.getpid() and marker in _environ(int(e.name)) and _alive(int(e.name))
    }


class Gflowd:
    def __init__(self, home: Path, fake: Path, log_path: Path):
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update({"GFLOW_HOME": str(home), "PYTHONUNBUFFERED": "1"})
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        argv = [
            sys.executable,
            "-m",
            "controller.daemon",
            "--home",
            str(home),
            "--fake-gpus",
            str(fake),
            "--resync",
            "1s",
        ]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=str(home))

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


# -- the run -----------------------------------------------------------------------------------------


class Monitor:
    """Samples the phases gflowd publishes (``run/index.json``): a terminal phase must never change."""

    def __init__(self, home: Path):
        self.index = home / "run" / "index.json"
        self.history: dict[str, list[str]] = {}

    def sample(self) -> dict[str, dict]:
        try:
            jobs = json.loads(self.index.read_text()).get("jobs", {})
        except (OSError, ValueError, AttributeError):
            return {}
        for name, row in jobs.items():
            phase = row.get("phase") if isinstance(row, dict) else None
            seen = self.history.setdefault(name, [])
            if phase and (not seen or seen[-1] != phase):
                seen.append(phase)
        return jobs


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_torture(
    cycles: int,
    jobs: int,
    seed: int,
    workdir: Path,
    min_up: float = 0.3,
    max_up: float = 2.5,
    drain_timeout: float = 180.0,
    say=print,
    flood: int = 0,
) -> Report:
    rng = random.Random(seed)
    started = time.monotonic()
    home = workdir / "home"
    spec = home / "jobs"
    spec.mkdir(parents=True)
    fake = workdir / "gpus.yaml"
    fake.write_text(
        "gpus:\n"
        + "".join(f"  - {{name: NVIDIA Fake {GPU_MEMORY_GI}GB, memory: {GPU_MEMORY_GI}Gi}}\n" for _ in range(GPU_COUNT))
    )
    worker = workdir / "worker.py"
    worker.write_text(WORKER)
    ledger = workdir / "ledger.txt"
    ledger.touch()
    log_path = workdir / "gflowd.log"
    horizon = cycles * (min_up + max_up) / 2
    plans = plan_jobs(rng, jobs, horizon, flood)
    by_name = {p.name: p for p in plans}
    report = Report(jobs=len(plans))
    monitor = Monitor(home)
    submitted: set[str] = set()

    def due_actions(now: float) -> None:
        for p in plans:
            if p.name not in submitted and now >= p.submit_at:
                _write(spec / f"{p.name}.yaml", p.manifest(worker, ledger))
                submitted.add(p.name)
            elif p.name in submitted:
                edit = None
                if p.edit_at is not None and now >= p.edit_at and p.kind not in p.edits_done:
                    edit = p.kind
                elif (
                    p.resume_at is not None
                    and now >= p.resume_at
                    and "suspend" in p.edits_done
                    and "resume" not in p.edits_done
                ):
                    edit = "resume"
                if edit:
                    p.edits_done.append(edit)
                    _write(spec / f"{p.name}.yaml", p.manifest(worker, ledger))
                    report.edits += 1

    def idle(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            due_actions(time.monotonic() - started)
            monitor.sample()
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    daemon = None
    try:
        for cycle in range(cycles):
            daemon = Gflowd(home, fake, log_path)
            idle(rng.uniform(min_up, max_up))
            if daemon.proc.poll() is not None:
                report.violations.append(f"gflowd exited by itself (code {daemon.proc.returncode}) in cycle {cycle}")
            daemon.kill9()
            report.kills += 1
            report.cycles += 1
            idle(rng.uniform(0.0, 0.4))  # edits and submissions also land while it is down
        daemon = Gflowd(home, fake, log_path)
        # the drain: every edit applied, every job terminal
        deadline = time.monotonic() + drain_timeout
        while True:
            now = time.monotonic() - started
            due_actions(max(now, max((p.resume_at or p.edit_at or p.submit_at) for p in plans) + 0.01))
            rows = monitor.sample()
            pending_edits = [
                p
                for p in plans
                if p.name not in submitted
                or (p.edit_at is not None and p.kind not in p.edits_done)
                or (p.resume_at is not None and "resume" not in p.edits_done)
            ]
            if not pending_edits and all(rows.get(p.name, {}).get("phase") in TERMINAL for p in plans):
                break
            if daemon.proc.poll() is not None:
                report.violations.append(f"gflowd exited by itself (code {daemon.proc.returncode}) during the drain")
                daemon = Gflowd(home, fake, log_path)
            if time.monotonic() > deadline:
                stuck = {
                    p.name: rows.get(p.name, {}).get("phase")
                    for p in plans
                    if rows.get(p.name, {}).get("phase") not in TERMINAL
                }
                report.violations.append(f"not terminal after the drain timeout: {stuck}")
                break
            time.sleep(0.1)
        # every terminal phase must hold across one more restart
        daemon.kill9()
        daemon = Gflowd(home, fake, log_path)
        index_path = home / "run" / "index.json"
        wait_until(lambda: _index_pid(index_path) == daemon.proc.pid, 30)
        final = monitor.sample()
        if daemon.terminate() != 0:
            report.violations.append("gflowd did not exit 0 on SIGTERM")
        daemon = None
        left = wait_until(lambda: not processes_of_home(home), 20) or processes_of_home(home)
        if left is not True and left:
            report.violations.append(f"orphaned processes of the home left: {sorted(left)}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    finally:
        if daemon is not None:
            daemon.kill9()
    report.violations += check(plans, by_name, ledger, final, monitor.history, home)
    for p in plans:
        phase = final.get(p.name, {}).get("phase", "missing")
        report.phases[phase] = report.phases.get(phase, 0) + 1
    report.attempts = sum(1 for line in ledger.read_text().splitlines() if line.startswith("start "))
    report.seconds = time.monotonic() - started
    return report


def _index_pid(path: Path):
    try:
        return json.loads(path.read_text())["controller"]["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


# -- the invariants ---------------------------------------------------------------------------------


@dataclass
class Attempt:
    name: str
    attempt: int
    devices: tuple[int, ...]
    start: float
    end: float | None = None
    code: int | None = None


def read_ledger(ledger: Path) -> tuple[list[Attempt], list[str]]:
    attempts: dict[tuple[str, int], Attempt] = {}
    violations = []
    for number, line in enumerate(ledger.read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) < 6:
            violations.append(f"ledger line {number} is torn: {line!r}")
            continue
        kind, name, attempt, devices, when = parts[0], parts[1], int(parts[2]), parts[3], float(parts[4])
        key = (name, attempt)
        if kind == "start":
            if key in attempts:
                violations.append(f"{name} attempt {attempt} started twice")
                continue
            devs = () if devices == "-" else tuple(int(d) for d in devices.split(","))
            attempts[key] = Attempt(name, attempt, devs, when)
        elif kind == "end":
            if key not in attempts or attempts[key].end is not None:
                violations.append(f"{name} attempt {attempt}: an end without a start, or two ends")
                continue
            attempts[key].end = when
            attempts[key].code = int(parts[6]) if len(parts) > 6 else None
    return list(attempts.values()), violations


def check(
    plans: list[JobPlan], by_name: dict[str, JobPlan], ledger: Path, final: dict, history: dict, home: Path
) -> list[str]:
    runs, violations = read_ledger(ledger)
    by_job: dict[str, list[Attempt]] = {}
    for run in runs:
        by_job.setdefault(run.name, []).append(run)
        if run.name not in by_name:
            violations.append(f"unknown job {run.name} in the ledger")
        if run.end is None:
            violations.append(f"{run.name} attempt {run.attempt} has no end record (killed without TERM?)")
    for p in plans:
        mine = sorted(by_job.get(p.name, []), key=lambda r: r.attempt)
        row = final.get(p.name, {})
        phase = row.get("phase")
        if phase not in TERMINAL:
            violations.append(f"{p.name}: final phase {phase}, not terminal")
            continue
        seq = history.get(p.name, [])
        first_terminal = next((i for i, ph in enumerate(seq) if ph in TERMINAL), None)
        if first_terminal is not None and len(set(seq[first_terminal:])) > 1:
            violations.append(f"{p.name}: left its terminal phase: {' -> '.join(seq)}")
        for run in mine:
            if len(run.devices) != p.gpus:
                violations.append(f"{p.name} attempt {run.attempt}: got devices {run.devices}, asked for {p.gpus}")
        # how many attempts the workload allows
        suspensions = 1 if p.kind == "suspend" else 0
        allowed = 1 + p.backoff + suspensions
        if len(mine) > allowed:
            violations.append(f"{p.name}: ran {len(mine)} attempts, at most {allowed} allowed")
        last = mine[-1] if mine else None
        if p.kind == "ok" or p.kind == "suspend":
            if phase != "Succeeded" or last is None or last.code != 0:
                violations.append(f"{p.name}: expected Succeeded with a clean exit, got {phase} ({last})")
        elif p.kind == "fail":
            if phase != "Failed" or len(mine) != 1 + p.backoff or any(r.code != p.exit_code for r in mine):
                violations.append(
                    f"{p.name}: expected Failed after {1 + p.backoff} attempt(s) exiting "
                    f"{p.exit_code}, got {phase} after {[(r.attempt, r.code) for r in mine]}"
                )
        elif p.kind == "cancel":
            if phase == "Succeeded" and (last is None or last.code != 0):
                violations.append(f"{p.name}: Succeeded but its last attempt did not exit 0")
            elif phase == "Failed":
                violations.append(f"{p.name}: cancelled job ended Failed")
        if mine and row.get("attempt") not in (None, last.attempt):
            violations.append(f"{p.name}: status says attempt {row.get('attempt')}, the job last ran {last.attempt}")
    violations += check_gpus(runs, by_name)
    return violations


def check_gpus(runs: list[Attempt], by_name: dict[str, JobPlan]) -> list[str]:
    """Sweep each GPU's timeline: Exclusive alone; Shared together within the GPU's memory."""
    violations = []
    horizon = max((r.end or r.start for r in runs), default=0.0) + 1.0
    for gpu in range(GPU_COUNT):
        on = [r for r in runs if gpu in r.devices]
        events = []
        for r in on:
            events.append((r.start, 1, r))
            events.append((r.end if r.end is not None else horizon, 0, r))  # ends sort before starts
        active: list[Attempt] = []
        for _, is_start, r in sorted(events, key=lambda e: (e[0], e[1])):
            if not is_start:
                active.remove(r)
                continue
            plan = by_name.get(r.name)
            if plan is None:
                continue
            for other in active:
                other_plan = by_name.get(other.name)
                if not (plan.shared and other_plan is not None and other_plan.shared):
                    violations.append(
                        f"GPU {gpu}: {r.name}#{r.attempt} started while {other.name}#{other.attempt} "
                        "held it (an Exclusive job shared a GPU)"
                    )
            active.append(r)
            used = sum(by_name[a.name].gpu_memory_gi for a in active if a.name in by_name and by_name[a.name].shared)
            if used > GPU_MEMORY_GI:
                violations.append(
                    f"GPU {gpu}: Shared jobs {[a.name for a in active]} ask {used}Gi of {GPU_MEMORY_GI}Gi"
                )
    return violations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30, help="kill -9 / restart cycles (default 30)")
    parser.add_argument("--jobs", type=int, default=60, help="jobs in the workload (default 60)")
    parser.add_argument(
        "--flood", type=int, default=40, help="short CPU jobs landing at once at the start (default 40)"
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--workdir", help="where to put the home and ledger (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir for inspection")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gflow-torture-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = run_torture(args.cycles, args.jobs, args.seed, workdir, flood=args.flood)
    print(report.summary())
    for violation in report.violations:
        print(f"VIOLATION: {violation}")
    if args.keep or report.violations:
        print(f"records kept in {workdir}")
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
