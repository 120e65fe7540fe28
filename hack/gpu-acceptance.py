#!/usr/bin/env python3
"""The real-GPU acceptance run: which of gflow's GPU promises hold on this machine's NVIDIA hardware.

Run on a machine with nothing but the NVIDIA driver, Python >= 3.11 and this repository:

    python3 hack/gpu-acceptance.py [--report FILE] [--only CHECK,...] [--keep]

It builds the venv (``bash hack/setup.sh``, as the README does), starts a private ``gflowd`` on
real NVML in a temp home, and runs jobs whose payload is ``hack/gpu_probe.py`` (the CUDA driver
API through ctypes, nothing to download). One line per check, ``PASS``/``FAIL``/``SKIP name —
reason``, a summary, a JSON report; exit 1 on any FAIL, 130 when interrupted, 0 otherwise.
Without a GPU (no ``nvidia-smi``, it fails, or no ``libcuda.so.1``) it says so in one line and
every check is SKIP (exit 0), so CI runs it; where ``/dev/kfd`` exists the AMD checks run all the
same (``amd-job`` with a gflowd on amdsmi). docs/gpu-acceptance.md lists each check and what
makes it fail.

It talks to gflow only as a user does: ``gflowd``/``gflowctl`` as processes, their JSON output
and files (``node.yaml`` through ``get gpus -o json``, status through ``get jobs NAME -o json``).
It never imports ``controller``: it must keep working when the controller's modules move.
A feature the installed gflowd lacks (found from ``gflowd --help`` or the status fields) is a
FAIL that says "feature missing in this build"; SKIP is only for hardware this box lacks.

Standard library only. What it reads and how it judges (parsing nvidia-smi, comparing, the report)
is pure and lives in hack/gpu_facts.py, unit-tested in tests/test_gpu_acceptance.py; this file
does the I/O. Everything it starts
(gflowd, jobs, the foreign process) and every temp file is removed at the end, on Ctrl-C too;
the cgroups its jobs ran in are checked to be gone.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

HACK = Path(__file__).resolve().parent
ROOT = HACK.parent
PROBE = HACK / "gpu_probe.py"
sys.path.insert(0, str(HACK))
from gpu_facts import (  # noqa: E402  (hack/ is not a package; the pure half of this tool)
    CHECK_NAMES,
    CHECKS,
    GIB,
    GPU_MEMORY_EXCEEDED,
    MIB,
    QUERY_APPS,
    QUERY_FREE,
    QUERY_GPU,
    ComputeApp,
    PmonRow,
    Result,
    SmiGpu,
    Verdict,
    all_skipped,
    build_report,
    cgroup_dirs,
    cgroup_mounts,
    compare_inventory,
    device_minor,
    exit_code,
    gpu_usage_entry,
    judge_amd,
    judge_amd_job,
    judge_binding,
    judge_checkpoint_timing,
    judge_distinct,
    judge_free_memory,
    judge_isolation,
    judge_mig_caps,
    judge_usage,
    metric_mean_ms,
    parse_compute_apps_csv,
    parse_free_csv,
    parse_pmon,
    parse_query_gpu_csv,
)

T = TypeVar("T")
# a job never inherits gflowd's environment (docs/multi-user.md): what the loader and a stand-in
# driver read is given to each probe job by its manifest, as a submitter would
JOB_PASSTHROUGH = ("LD_LIBRARY_PATH", "FAKE_NVML_FILE", "FAKE_CUDA_GPUS", "FAKE_CUDA_STATE")
KFD = "/dev/kfd"  # ROCm's compute node: the machine has AMD GPUs
AMD_READ = (
    "import dataclasses, json\n"
    "from controller.observe.gpus.amd import AmdInventory\n"
    "from controller.act.runtime.cgroups.devices import drm_card_minors\n"
    "inv = AmdInventory()\n"
    "gpus = inv.read()\n"
    "print(json.dumps({'available': inv.available, 'describe': inv.describe(),"
    " 'gpus': [dataclasses.asdict(g) for g in gpus],"
    " 'cards': {str(g.minor): sorted(drm_card_minors([g.minor])) for g in gpus if g.minor is not None}}))\n"
)
# the amd-job check's job (no CUDA, no ROCm needed): what it was given (ROCm's and CUDA's variables,
# None when unset) and which AMD device nodes it can open (os.open O_RDWR: "ok" or the errno name),
# written atomically to argv[1]; its cgroups too, so the cleanup checks they are gone
AMD_JOB = r"""
import errno, glob, json, os, sys
nodes = {}
for path in ["/dev/kfd", *sorted(glob.glob("/dev/dri/renderD*")), *sorted(glob.glob("/dev/dri/card*"))]:
    try:
        os.close(os.open(path, os.O_RDWR))
        nodes[path] = "ok"
    except OSError as exc:
        nodes[path] = errno.errorcode.get(exc.errno, str(exc.errno))
names = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
doc = {"env": {name: os.environ.get(name) for name in names}, "nodes": nodes,
       "cgroups": open("/proc/self/cgroup").read().splitlines()}
with open(sys.argv[1] + ".tmp", "w") as handle:
    json.dump(doc, handle)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
"""
TOKEN_VAR = "GFLOW_GPU_ACCEPTANCE_RUN"  # in gflowd's and every job's environment: finds leftovers


class StepError(Exception):
    """A check cannot pass: the message says what was seen."""


class FeatureMissing(StepError):
    def __init__(self, what: str):
        super().__init__(f"feature missing in this build: {what}")


class Skip(Exception):
    """This machine's hardware lacks what the check needs."""


def run(argv: list[str], timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        raise StepError(f"{' '.join(argv[:3])} ... did not finish within {timeout:g}s") from exc
    except OSError as exc:
        raise StepError(f"cannot run {argv[0]}: {exc}") from exc


def wait_until(fn: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Poll ``fn`` until it returns something truthy or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _pdeathsig() -> None:
    """In the child before exec: get SIGTERM if this script dies (PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Job:
    name: str
    out: Path
    release: Path
    t_apply: float


class Acceptance:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.scale = args.timeout_scale
        self.token = f"{os.getpid()}-{int(time.time())}"
        self.results: list[Result] = []
        self.gpu_info: dict[str, Any] = {"present": False, "reason": ""}
        self.gflowd_info: dict[str, Any] = {}
        self.smi: dict[int, SmiGpu] = {}
        self.run_dir = Path(tempfile.mkdtemp(prefix="gflow-gpu-acceptance-"))
        self.home = self.run_dir / "home"
        self.manifests = self.run_dir / "manifests"
        self.probe_dir = self.run_dir / "probe"
        self.report_path = Path(args.report).absolute() if args.report else self.run_dir / "report.json"
        self.venv = Path(args.venv).absolute() if args.venv else ROOT / ".venv"
        self.gflowd: subprocess.Popen[bytes] | None = None
        self.gflowd_log = self.run_dir / "gflowd.log"
        self.gflowd_help = ""
        self.metrics_port: int | None = None
        self.applied: list[str] = []  # job names, in the order applied
        self.jobs: list[Job] = []  # the jobs of the current check
        self.foreign: list[subprocess.Popen[bytes]] = []
        self.job_cgroups: set[str] = set()  # "controller:path" lines the jobs ran in
        self.base_cgroups: set[str] = set()  # this script's own, never a job's
        self.interrupted = False
        self.broken: dict[str, str] = {}  # "smi" | "venv" | "gflowd" -> why the checks needing it cannot run

    # -- top level --------------------------------------------------------------------------------

    def main(self) -> int:
        started = time.time()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)
        try:
            self.detect()
            if not self.gpu_info["present"]:
                print(f"gpu-acceptance: no NVIDIA GPU here ({self.gpu_info['reason']}): every check SKIP", flush=True)
                if os.path.exists(KFD):  # an AMD-only machine: its checks run all the same
                    self.probe_dir.mkdir()
                    self.manifests.mkdir()
                    self.base_cgroups = set(_own_cgroups())
                    self._run_step("venv", set(), self.check_venv)
                    self._run_step("amd-inventory", {"venv"}, self.check_amd)
                    self._run_step("amd-job", {"venv"}, self.check_amd_job)  # starts gflowd on amdsmi
                for result in all_skipped(f"no NVIDIA GPU: {self.gpu_info['reason']}"):
                    if result.name != "cleanup" or self.gflowd is None:  # a gflowd ran: cleanup judges it
                        self._record(result)
            else:
                self.run_checks()
        except KeyboardInterrupt:
            self.interrupted = True
            print("gpu-acceptance: interrupted; cleaning up", flush=True)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a second Ctrl-C must not stop the cleanup
                signal.signal(sig, signal.SIG_IGN)
            if self.gpu_info["present"] or self.gflowd is not None:
                try:
                    self._record(self.cleanup())
                except Exception as exc:  # still write the report
                    self._record(
                        Result(
                            "cleanup",
                            "FAIL",
                            f"error in the acceptance script's cleanup: {type(exc).__name__}: {exc}",
                            detail=traceback.format_exc(),
                        )
                    )
            done = {r.name for r in self.results}
            for name in CHECK_NAMES:
                if name not in done:
                    self._record(
                        Result(name, "SKIP", "not run: interrupted" if self.interrupted else "not selected (--only)")
                    )
            self.results.sort(key=lambda r: CHECK_NAMES.index(r.name))
            report = build_report(
                self.results,
                gpu=self.gpu_info,
                gflowd=self.gflowd_info,
                started=started,
                finished=time.time(),
                interrupted=self.interrupted,
                run_dir=str(self.run_dir),
            )
            self._write_report(report)
            counts = report["summary"]
            print(
                f"summary: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP "
                f"in {report['seconds']:.0f}s; report {self.report_path}",
                flush=True,
            )
            self._remove_run_dir()
        return exit_code(self.results, self.interrupted)

    def detect(self) -> None:
        """Is there an NVIDIA GPU with a working driver? Fills ``gpu_info`` and ``smi``."""
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.gpu_info["reason"] = "nvidia-smi is not on the PATH"
            return
        query = [smi, f"--query-gpu={','.join(QUERY_GPU)}", "--format=csv,noheader,nounits"]
        try:
            out = run(query, timeout=60)
        except StepError as exc:
            self.gpu_info["reason"] = str(exc)
            return
        if out.returncode != 0:
            first = (out.stdout.strip() or out.stderr.strip() or "no output").splitlines()[0]
            self.gpu_info["reason"] = f"nvidia-smi failed (exit {out.returncode}): {first}"
            return
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            self.gpu_info["reason"] = f"libcuda.so.1 cannot be loaded ({exc})"
            return
        try:
            gpus = parse_query_gpu_csv(out.stdout)
        except ValueError as exc:  # a GPU is there: a format we do not read is a FAIL, not a SKIP
            self.gpu_info.update(present=True, reason="", parseError=str(exc), raw=out.stdout)
            self.broken["smi"] = f"cannot read nvidia-smi's output ({exc})"
            return
        if not gpus:
            self.gpu_info["reason"] = "nvidia-smi lists no GPUs"
            return
        self.smi = {g.index: g for g in gpus}
        driver = (
            run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], timeout=60).stdout.split("\n")[0].strip()
        )
        self.gpu_info.update(present=True, driver=driver, gpus=[dataclasses.asdict(g) for g in gpus])

    def run_checks(self) -> None:
        selected = set(self.args.only or CHECK_NAMES)
        self.probe_dir.mkdir()
        self.manifests.mkdir()
        self.base_cgroups = set(_own_cgroups())
        gflow = {"smi", "gflowd"}
        steps: list[tuple[str, set[str], Callable[[], Verdict]]] = [
            ("venv", set(), self.check_venv),
            ("cuda-driver", {"smi"}, self.check_cuda_driver),
            ("gflowd-nvml", {"venv"}, self.check_gflowd),
            ("inventory", gflow, self.check_inventory),
            ("one-gpu-job", gflow, self.check_one_gpu),
            ("two-gpu-job", gflow, self.check_two_gpu),
            ("concurrent-jobs", gflow, self.check_concurrent),
            ("isolation-gpu-job", gflow, self.check_isolation_gpu),
            ("isolation-cpu-job", gflow, self.check_isolation_cpu),
            ("shared-gpu-memory", gflow, self.check_shared_memory),
            ("foreign-process", gflow, self.check_foreign),
            ("cuda-oom-reason", gflow, self.check_cuda_oom),
            ("live-free-memory", gflow, self.check_free_memory),
            ("gpu-memory-wait", gflow, self.check_memory_wait),
            ("reclaimed-leak", gflow, self.check_reclaimed_leak),
            ("gpus-unused", gflow, self.check_usage),  # records gpu-usage-figures too: one busy job serves both
            ("apply-to-first-cuda", gflow, self.check_latency),
            ("nvml-sampling-cost", {"venv"}, self.check_nvml_cost),
            ("amd-inventory", {"venv"}, self.check_amd),
            ("amd-job", gflow, self.check_amd_job),  # the same gflowd: its inventory has the AMD GPUs too
            ("checkpoint-signal", gflow, self.check_checkpoint_signal),
            ("mig-instance", gflow, self.check_mig),
            ("mig-caps-isolation", gflow, self.check_mig_caps),
        ]
        always = {"venv", "gflowd-nvml"}  # every gflow check needs them
        for name, needs, step in steps:
            if name in selected or name in always or (name == "gpus-unused" and "gpu-usage-figures" in selected):
                self._run_step(name, needs, step)

    def _run_step(self, name: str, needs: set[str], step: Callable[[], Verdict]) -> None:
        missing = [self.broken[need] for need in sorted(needs) if need in self.broken]
        if missing:
            self._record(Result(name, "FAIL", f"not run: {missing[0]}"))
        else:
            started = time.monotonic()
            detail = ""
            try:
                verdict = step()
                outcome = "PASS" if verdict.ok else "FAIL"
                reason, numbers = verdict.reason, verdict.numbers
            except Skip as exc:
                outcome, reason, numbers = "SKIP", str(exc), {}
            except FeatureMissing as exc:
                outcome, reason, numbers, detail = "FAIL", str(exc), {}, "-"
            except StepError as exc:
                outcome, reason, numbers = "FAIL", str(exc), {}
            except Exception as exc:  # a bug here must still end as a FAIL that says what happened
                outcome, reason, numbers = "FAIL", f"error in the acceptance script: {type(exc).__name__}: {exc}", {}
                detail = traceback.format_exc()
            finally:
                self._finish_jobs()
            if outcome == "FAIL" and not detail:
                detail = self._diagnostics()
            detail = "" if detail == "-" else detail
            self._record(Result(name, outcome, reason, numbers, round(time.monotonic() - started, 1), detail))
        if name == "gpus-unused":  # when the shared job never got to its figures
            first = next(r for r in self.results if r.name == name)
            self._record(
                Result(
                    "gpu-usage-figures",
                    "FAIL" if first.outcome == "FAIL" else first.outcome,
                    f"not measured: {first.reason}",
                )
            )

    def _record(self, result: Result) -> None:
        if any(r.name == result.name for r in self.results):
            return
        self.results.append(result)
        print(result.line(), flush=True)

    # -- the checks ---------------------------------------------------------------------------

    def check_venv(self) -> Verdict:
        out = run(["bash", str(ROOT / "hack" / "setup.sh")], timeout=900 * self.scale) if not self.args.venv else None
        if out is not None and out.returncode != 0:
            self.broken["venv"] = self.broken["gflowd"] = "the venv could not be built (bash hack/setup.sh failed)"
            tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-3:])
            raise StepError(f"bash hack/setup.sh exited {out.returncode}: {tail}")
        for tool in ("gflowd", "gflowctl", "python"):
            if not (self.venv / "bin" / tool).exists():
                self.broken["venv"] = self.broken["gflowd"] = f"the venv has no bin/{tool}"
                raise StepError(self.broken["venv"])
        version = run([str(self.venv / "bin" / "gflowd"), "--version"]).stdout.strip()
        self.gflowd_help = run([str(self.venv / "bin" / "gflowd"), "--help"]).stdout
        self.gflowd_info.update(version=version, features=self._features())
        how = "given with --venv, not rebuilt" if self.args.venv else "bash hack/setup.sh"
        return Verdict(True, f"{self.venv} ready ({version or 'gflowd'}; {how})")

    def _features(self) -> dict[str, bool]:
        return {
            "cgroups": "--cgroups" in self.gflowd_help,
            "unusedGpuWindow": "--unused-gpu-window" in self.gflowd_help,
        }

    def check_amd(self) -> Verdict:
        """AMD GPUs (docs/amd.md): gflowd's own reader, in the venv, on the real amdsmi."""
        if not os.path.exists(KFD):
            raise Skip(f"no AMD GPU: {KFD} does not exist")
        out = run([str(self.venv / "bin" / "python"), "-c", AMD_READ], timeout=120 * self.scale, env=self._clean_env())
        try:
            names = os.listdir("/dev/dri")
        except OSError:
            names = []
        render = {int(n[len("renderD") :]) for n in names if n.startswith("renderD") and n[len("renderD") :].isdigit()}
        return judge_amd(_last_json(out.stdout), render)

    def check_amd_job(self) -> Verdict:
        """A gpuType: amd job on a real gflowd (docs/amd.md): its program (AMD_JOB, no CUDA or ROCm)
        records ROCm's and CUDA's variables and which AMD device nodes it can open."""
        if not os.path.exists(KFD):
            raise Skip(f"no AMD GPU: {KFD} does not exist")
        if self.gflowd is None:  # an AMD-only machine: no NVML gflowd was started; this one reads amdsmi
            inventory = str(self._start_gflowd().get("inventory", ""))
            if "amdsmi" not in inventory or "no amdsmi" in inventory:
                self.broken["gflowd"] = f"gflowd does not read the AMD GPUs ({inventory})"
                raise StepError(f"gflowd's inventory is {inventory!r}, not amdsmi's")
        out = run([str(self.venv / "bin" / "python"), "-c", AMD_READ], timeout=120 * self.scale, env=self._clean_env())
        read = _last_json(out.stdout) or {}
        node = self.node() or {}
        ids = {g.get("uuid"): g.get("index") for g in node.get("gpus") or []}
        gpus = [
            {
                "id": ids.get(g.get("uuid")),
                "localIndex": g.get("local_index"),
                "render": g.get("minor"),
                "cards": (read.get("cards") or {}).get(str(g.get("minor")), []),
            }
            for g in read.get("gpus") or []
        ]
        if not gpus or any(g["id"] is None for g in gpus):
            raise StepError(
                f"gflowd's get gpus ({sorted(i for i in ids.values() if i is not None)}) does not list every GPU "
                f"amdsmi lists ({read.get('describe') or out.stderr.strip()[-200:]})"
            )
        program = self.probe_dir / "amd_job.py"
        program.write_text(AMD_JOB)
        job = self.apply_job("amd-job", gpus=1, gpu_type="amd", probe=[], command=[sys.executable, str(program)])
        status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        verdict = judge_amd_job(self.probe_doc(job), status, gpus, node.get("limits"))
        verdict.numbers.update(amdGpus=gpus, limits=node.get("limits"))
        return verdict

    def check_cuda_driver(self) -> Verdict:
        env = self._clean_env()
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        out = run([sys.executable, str(PROBE), "--use", "none"], timeout=120 * self.scale, env=env)
        doc = _last_json(out.stdout)
        if doc is None:
            raise StepError(f"the probe printed no JSON (exit {out.returncode}): {out.stderr.strip()[-300:]}")
        init = doc.get("init") or {}
        if not init.get("ok"):
            return Verdict(False, f"cuInit failed outside gflow: {init.get('error')}", {"probe": doc})
        seen = [d["pciBusId"] for d in doc["devices"]]
        want = [self.smi[i].pci_bus_id for i in sorted(self.smi)]
        if seen != want:
            return Verdict(
                False, f"CUDA (PCI_BUS_ID order) sees {seen}, nvidia-smi lists {want}", {"seen": seen, "expected": want}
            )
        return Verdict(True, f"{len(seen)} GPU(s), PCI order matches nvidia-smi", {"seen": seen})

    def check_gflowd(self) -> Verdict:
        node = self._start_gflowd()
        inventory = str(node.get("inventory", ""))
        if not inventory.startswith("NVML"):
            self.broken["gflowd"] = f"gflowd is not on NVML ({inventory})"
            return Verdict(False, f"gflowd's inventory is {inventory!r}, not NVML")
        busy = [g["index"] for g in node["gpus"] if g.get("state") != "Free"]
        if busy:  # a fresh box has nothing running; otherwise the job checks would wait forever
            return Verdict(
                False, f"GPUs {busy} are not Free before any job ran: {[g.get('state') for g in node['gpus']]}"
            )
        features = self._features_now()
        cgroups = "cgroups flag present" if features["cgroups"] else "no --cgroups flag"
        return Verdict(True, f"{inventory}, {len(node['gpus'])} GPU(s) Free; {cgroups}")

    def _start_gflowd(self) -> dict[str, Any]:
        """Start the run's private gflowd; its node (get gpus -o json) once it lists GPUs, or StepError."""
        flags = ["--home", str(self.home), "--log-level", "info", "--termination-grace-period", "5"]
        features = self.gflowd_info.get("features") or self._features()
        if features["cgroups"]:
            flags += ["--cgroups", "auto"]
        if features["unusedGpuWindow"]:
            flags += ["--unused-gpu-window", str(self.args.unused_window)]
        self.metrics_port = _free_port()
        flags += ["--metrics-port", str(self.metrics_port)]
        env = self._clean_env()
        env[TOKEN_VAR] = self.token
        self.home.mkdir(exist_ok=True)
        log = open(self.gflowd_log, "wb")
        # its own session: a Ctrl-C in the terminal reaches this script, which still needs gflowd to stop the jobs
        self.gflowd = subprocess.Popen(
            [str(self.venv / "bin" / "gflowd"), *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_pdeathsig,
            cwd=str(self.run_dir),
            start_new_session=True,
        )
        log.close()
        self.gflowd_info["argv"] = ["gflowd", *flags]
        node = wait_until(lambda: self._gflowd_alive() and (n := self.node()) and n.get("gpus") and n, 60 * self.scale)
        if not self._gflowd_alive():
            self.broken["gflowd"] = "gflowd did not start"
            raise StepError(f"gflowd exited {self.gflowd.returncode}: {_tail(self.gflowd_log, 3)}")
        if not node:
            self.broken["gflowd"] = "gflowd never listed GPUs"
            inventory = (self.node() or {}).get("inventory", "no node.yaml")
            raise StepError(f"gflowd lists no GPUs after {60 * self.scale:g}s ({inventory})")
        self.gflowd_info["inventory"] = str(node.get("inventory", ""))
        return node

    def check_inventory(self) -> Verdict:
        node = self.node() or {}
        problems = compare_inventory(list(self.smi.values()), node.get("gpus") or [])
        numbers = {"nvidiaSmi": [dataclasses.asdict(g) for g in self.smi.values()], "getGpus": node.get("gpus")}
        if problems:
            return Verdict(False, "; ".join(problems), numbers)
        names = sorted({g.name for g in self.smi.values()})
        return Verdict(
            True,
            f"{len(self.smi)} GPU(s) match ({', '.join(names)}); memory compared at node.yaml's precision",
            numbers,
        )

    def check_one_gpu(self) -> Verdict:
        job = self.apply_job("one-gpu", gpus=1, probe=["--use", "first", "--alloc-mib", "64"])
        status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        verdict = judge_binding(self.probe_doc(job), status.get("devices") or [], self.smi)
        verdict.numbers["phase"] = status.get("phase")
        if verdict.ok and status.get("phase") != "Succeeded":
            return Verdict(
                False,
                f"the probe saw the right GPU but the job ended {status.get('phase')}/{status.get('reason')}",
                verdict.numbers,
            )
        return verdict

    def check_mig(self) -> Verdict:
        """A MIG instance as a unit: gflowd lists it (``profile`` in get gpus), a job asking for
        that profile gets it as CUDA_VISIBLE_DEVICES=MIG-<uuid> and the probe sees one device."""
        units = (self.node() or {}).get("gpus") or []
        instances = [g for g in units if g.get("profile")]
        if not instances:
            smi = run(["nvidia-smi", "--query-gpu=index,mig.mode.current", "--format=csv,noheader"], timeout=60)
            if "Enabled" in smi.stdout:
                return Verdict(
                    False, f"nvidia-smi shows MIG enabled ({smi.stdout.strip()}) but gflowd lists no instance"
                )
            raise Skip("no GPU has MIG enabled (nvidia-smi -i N -mig 1, then make instances with nvidia-smi mig)")
        profile = instances[0]["profile"]
        job = self.apply_job("mig", gpus=1, gpu_type=profile, probe=["--use", "first", "--alloc-mib", "64"])
        status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        doc = self.probe_doc(job) or {}
        uuids = status.get("deviceUUIDs") or []
        seen = (doc.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
        numbers = {"profile": profile, "uuids": uuids, "seen": seen, "devices": len(doc.get("devices") or [])}
        if status.get("phase") != "Succeeded" or len(uuids) != 1 or not uuids[0].startswith("MIG-"):
            return Verdict(False, f"the {profile} job ended {status.get('phase')} on {uuids}", numbers)
        if seen != uuids[0] or numbers["devices"] != 1:
            return Verdict(False, f"the job saw CUDA_VISIBLE_DEVICES={seen} and {numbers['devices']} devices", numbers)
        return Verdict(True, f"a {profile} job ran on {uuids[0]}, seeing only it", numbers)

    def check_mig_caps(self) -> Verdict:
        """A MIG job that clears CUDA_VISIBLE_DEVICES opens only its own instance's nvidia-caps nodes."""
        if not any(g.get("profile") for g in (self.node() or {}).get("gpus") or []):
            raise Skip("no MIG instance (see mig-instance)")
        self._need_cgroups()
        folder = "/dev/nvidia-caps"
        try:
            caps = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        except OSError:
            raise Skip(f"no {folder} (nvidia-modprobe -f -c 0 makes the caps nodes)") from None
        profile = next(g["profile"] for g in self.node()["gpus"] if g.get("profile"))
        nodes = [f"--open-node={path}" for path in caps]
        job = self.apply_job("mig-caps", gpus=1, gpu_type=profile, probe=["--clear-visible", "--use", "all", *nodes])
        self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        return self._explain_isolation(judge_mig_caps(self.probe_doc(job)))

    def check_two_gpu(self) -> Verdict:
        if len(self.smi) < 2:
            raise Skip(f"needs 2 GPUs, this machine has {len(self.smi)}")
        job = self.apply_job("two-gpu", gpus=2, probe=["--use", "all", "--alloc-mib", "64"])
        status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        return judge_binding(self.probe_doc(job), status.get("devices") or [], self.smi)

    def check_concurrent(self) -> Verdict:
        count = len(self.smi)
        release = self.probe_dir / "concurrent.release"
        jobs = [
            self.apply_job(
                f"concurrent-{i}",
                gpus=1,
                release=release,
                probe=["--use", "first", "--alloc-mib", "64", "--hold", "300"],
            )
            for i in range(count + 1)
        ]

        def settled() -> dict[str, dict[str, Any]] | None:
            listed = self.statuses()
            states = {j.name: listed.get(j.name) or {} for j in jobs}
            running = [
                j
                for j in jobs
                if states[j.name].get("phase") == "Running" and (self.probe_doc(j) or {}).get("phase") == "ready"
            ]
            pending = [n for n, s in states.items() if s.get("phase") == "Pending"]
            return states if len(running) == count and len(pending) == 1 else None

        states = wait_until(settled, 120 * self.scale, 0.5)
        if not states:
            phases = {j.name: (self.status(j.name) or {}).get("phase") for j in jobs}
            raise StepError(f"expected {count} jobs Running with their probe ready and 1 Pending, got {phases}")
        bound = {
            j.name: (states[j.name].get("devices") or [], self.probe_doc(j))
            for j in jobs
            if states[j.name].get("phase") == "Running"
        }
        waiting = next(n for n, s in states.items() if s.get("phase") == "Pending")
        verdict = judge_distinct(bound, self.smi)
        verdict.numbers.update(waiting=waiting, waitingReason=states[waiting].get("reason"))
        release.touch()
        last = next(j for j in jobs if j.name == waiting)
        status = self.wait_phase(waiting, {"Succeeded", "Failed"}, 120)
        after = judge_binding(self.probe_doc(last), status.get("devices") or [], self.smi)
        if not verdict.ok:
            return verdict
        if not after.ok:
            return Verdict(False, f"the job that waited ({waiting}): {after.reason}", verdict.numbers)
        return Verdict(
            True, f"{verdict.reason}; {waiting} waited ({states[waiting].get('reason')}) and then ran", verdict.numbers
        )

    def check_isolation_gpu(self) -> Verdict:
        self._need_cgroups()
        if len(self.smi) < 2:
            raise Skip(f"needs 2 GPUs (one per job), this machine has {len(self.smi)}")
        release = self.probe_dir / "isolation.release"
        holder = self.apply_job(
            "iso-holder", gpus=1, release=release, probe=["--use", "first", "--alloc-mib", "64", "--hold", "300"]
        )
        held = self.wait_ready(holder)
        other = held["boundDevices"][0]
        nodes = [f"--open-node={path}" for path in self._device_nodes([other])]
        job = self.apply_job("iso-gpu", gpus=1, probe=["--clear-visible", "--use", "all", "--alloc-mib", "16", *nodes])
        status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        release.touch()
        verdict = self._explain_isolation(judge_isolation(self.probe_doc(job), status.get("devices") or [], self.smi))
        verdict.numbers["otherJobGpu"] = other
        return verdict

    def check_isolation_cpu(self) -> Verdict:
        self._need_cgroups()
        nodes = [f"--open-node={path}" for path in self._device_nodes(sorted(self.smi))]
        job = self.apply_job("iso-cpu", gpus=0, probe=["--clear-visible", "--use", "all", "--alloc-mib", "16", *nodes])
        self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        return self._explain_isolation(judge_isolation(self.probe_doc(job), [], self.smi))

    def _explain_isolation(self, verdict: Verdict) -> Verdict:
        """A failed isolation check says what gflowd reports about cgroups (get node), and that
        cgroups need root or a delegated subtree when this run has neither."""
        node = self.node() or {}
        verdict.numbers["node"] = {k: v for k, v in node.items() if k != "gpus"}
        if not verdict.ok:
            said = {k: v for k, v in node.items() if "cgroup" in k.lower()}
            verdict.reason += f"; gflowd says {said or 'nothing about cgroups in get node'}"
            if os.geteuid() != 0:
                verdict.reason += (
                    " (this run is not root: gflowd can use cgroups only as root or in a delegated subtree)"
                )
        return verdict

    def check_shared_memory(self) -> Verdict:
        budget, attempt = 1 * GIB, 3 * GIB
        gpu = max(self.smi.values(), key=lambda g: g.memory_mib or 0)
        if (gpu.memory_mib or 0) * MIB < attempt + GIB:
            raise Skip(
                f"needs a GPU with at least {(attempt + GIB) // GIB} GiB, the largest here has {gpu.memory_mib} MiB"
            )
        job = self.apply_job(
            "shared-over",
            gpus=1,
            sharing="Shared",
            gpu_memory="1Gi",
            probe=[
                "--use",
                "first",
                "--alloc-mib",
                str(attempt // MIB),
                "--alloc-step-mib",
                "256",
                "--step-interval",
                "0.25",
                "--hold",
                "180",
            ],
        )
        try:
            status = self.wait_phase(job.name, {"Succeeded", "Failed", "Cancelled"}, 120)
        except StepError:
            status = self.status(job.name) or {}
        doc = self.probe_doc(job) or {}
        allocated = sum(u.get("allocated", 0) for u in doc.get("used") or [])
        nvml = [a.used_mib for a in self.compute_apps() if a.pid == doc.get("pid")]
        numbers = {
            "gpuMemory": budget,
            "probeAllocatedMiB": allocated // MIB,
            "nvidiaSmiUsedMiB": nvml,
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "message": status.get("message"),
        }
        if status.get("phase") == "Running":
            return Verdict(
                False,
                f"still Running {120 * self.scale:g}s after it allocated {allocated // MIB} MiB with gpuMemory 1Gi "
                f"(nvidia-smi shows {nvml or 'no'} MiB for its pid {doc.get('pid')})",
                numbers,
            )
        if status.get("reason") != GPU_MEMORY_EXCEEDED:
            return Verdict(
                False,
                f"ended {status.get('phase')}/{status.get('reason')} ({status.get('message')}) after allocating "
                f"{allocated // MIB} MiB with gpuMemory 1Gi",
                numbers,
            )
        return Verdict(
            True,
            f"Failed/{GPU_MEMORY_EXCEEDED} after the probe allocated {allocated // MIB} MiB: {status.get('message')}",
            numbers,
        )

    def check_cuda_oom(self) -> Verdict:
        """The driver refuses an allocation of twice the GPU's memory; the job prints the CUDA error
        and exits 1, as a training script does; gflowd's status names the cause (docs/failures.md)."""
        gpu = max(self.smi.values(), key=lambda g: g.memory_mib or 0)
        if not gpu.memory_mib:
            raise Skip("nvidia-smi gives no memory size")
        probe = ["--use", "first", "--alloc-mib", str(gpu.memory_mib * 2), "--exit-on-error"]
        job = self.apply_job("cuda-oom", gpus=1, probe=probe)
        status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
        numbers = {k: status.get(k) for k in ("phase", "reason", "message", "exitCode")}
        if (status.get("phase"), status.get("reason")) != ("Failed", "CUDAOutOfMemory"):
            why = f"ended {status.get('phase')}/{status.get('reason')}: {status.get('message')}"
            return Verdict(False, why, numbers)
        return Verdict(True, f"Failed/CUDAOutOfMemory: {str(status.get('message', ''))[:120]}", numbers)

    def _foreign_probe(self, index: int, filename: str, mib: int) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        """A probe started outside gflow holding ``mib`` MiB on GPU ``index``, once it is ready (cleanup stops it)."""
        out = self.probe_dir / filename
        env = self._clean_env()
        env.update(CUDA_VISIBLE_DEVICES=str(index), CUDA_DEVICE_ORDER="PCI_BUS_ID", **{TOKEN_VAR: self.token})
        proc = subprocess.Popen(
            [sys.executable, str(PROBE), "--out", str(out), "--use", "first", "--alloc-mib", str(mib), "--hold", "600"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_pdeathsig,
        )
        self.foreign.append(proc)
        doc = wait_until(lambda: (d := _read_json(out)) and d.get("phase") in ("ready", "done") and d, 60 * self.scale)
        if not doc or doc.get("phase") != "ready":
            raise StepError(f"the foreign probe did not get ready: {doc}")
        return proc, doc

    def check_foreign(self) -> Verdict:
        index = self._free_gpus()[0]
        proc, doc = self._foreign_probe(index, "foreign.json", 1536)
        t0 = time.monotonic()

        def state() -> str | None:
            return next(
                (g.get("state") for g in (self.node() or {}).get("gpus") or [] if g.get("index") == index), None
            )

        if not wait_until(lambda: state() == "Unmanaged", 60 * self.scale):
            return Verdict(
                False,
                f"GPU {index} stayed {state()} for {60 * self.scale:g}s while a foreign process held "
                f"{doc['used'][0].get('allocated', 0) // MIB} MiB on it",
            )
        to_unmanaged = time.monotonic() - t0
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        t1 = time.monotonic()
        if not wait_until(lambda: state() == "Free", 60 * self.scale):
            return Verdict(
                False,
                f"GPU {index} became Unmanaged ({to_unmanaged:.1f}s) but is still {state()} "
                f"{60 * self.scale:g}s after the foreign process ended",
            )
        to_free = time.monotonic() - t1
        return Verdict(
            True,
            f"GPU {index}: Unmanaged {to_unmanaged:.1f}s after a foreign process took 1536 MiB, Free "
            f"{to_free:.1f}s after it ended",
            {"gpu": index, "toUnmanagedS": round(to_unmanaged, 2), "toFreeS": round(to_free, 2)},
        )

    def check_free_memory(self) -> Verdict:
        free = _smi(["--query-gpu=" + ",".join(QUERY_FREE), "--format=csv,noheader,nounits"], parse_free_csv)
        if not free:
            raise StepError("nvidia-smi --query-gpu=index,memory.free gave nothing readable")
        return judge_free_memory(free, (self.node() or {}).get("gpus") or [])

    def check_memory_wait(self) -> Verdict:
        """A foreign probe holds 768 MiB (below unmanagedMemoryThreshold, so the GPU stays usable);
        a job asking for more than is left waits with reason GPUMemory naming the probe's pid, and
        starts once the probe ends."""
        index = self._free_gpus()[0]
        total = self.smi[index].memory_mib
        if not total:
            raise Skip(f"nvidia-smi does not say GPU {index}'s memory")
        proc, _doc = self._foreign_probe(index, "holder.json", 768)
        others = [g["index"] for g in (self.node() or {}).get("gpus") or [] if g.get("index") != index]
        if others:
            raise Skip("needs exactly one GPU: with more, the job would start on another one")
        ask = f"{total - 512}Mi"  # more than the probe leaves, less than the GPU
        job = self.apply_job(
            "memory-wait", gpus=1, sharing="Shared", gpu_memory=ask, probe=["--use", "first", "--alloc-mib", "64"]
        )
        status = self.wait_phase(job.name, {"Pending", "Running", "Succeeded", "Failed"}, 60)
        waiting = wait_until(
            lambda: (s := self.status(job.name)) and s.get("reason") == "GPUMemory" and s, 30 * self.scale, 0.3
        )
        if not waiting:
            status = self.status(job.name) or status
            return Verdict(
                False, f"{status.get('phase')}/{status.get('reason')} ({status.get('message')}), not GPUMemory"
            )
        if f"pid {proc.pid}" not in str(waiting.get("message")):
            return Verdict(False, f"GPUMemory, but the message does not name pid {proc.pid}: {waiting.get('message')}")
        proc.terminate()
        proc.wait(15)
        self.wait_phase(job.name, {"Running", "Succeeded"}, 60)
        return Verdict(True, f"waited: {waiting.get('message')}; started once pid {proc.pid} ended")

    def check_reclaimed_leak(self) -> Verdict:
        """A job's child that daemonizes, leaves the job's cgroups and holds GPU memory after the job
        ended: gflowd kills it and says so (event ReclaimedGPUMemory naming its pid), and the memory
        comes back (nvidia-smi no longer lists it). Needs root: leaving a cgroup is moving into another."""
        if os.geteuid() != 0:
            raise Skip("needs root: the leaking child leaves its job's cgroups, which only root may do")
        name = "acc-leak"
        out = self.probe_dir / f"{name}.json"
        probe = [sys.executable, str(PROBE), "--out", str(out), "--use", "first", "--alloc-mib", "512", "--hold", "600"]
        spec: dict[str, Any] = {
            "command": [sys.executable, "-c", LEAKER, str(out), *probe],
            "env": {**{key: os.environ[key] for key in JOB_PASSTHROUGH if os.environ.get(key)}, TOKEN_VAR: self.token},
            "resources": {"gpus": 1},
            "timeLimit": "5m",
        }
        manifest = {"apiVersion": "gflow.dev/v1alpha1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
        path = self.manifests / f"{name}.yaml"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        self.applied.append(name)
        result = self.ctl("apply", "-f", str(path))
        if result.returncode != 0:
            raise StepError(f"gflowctl apply -f {path.name} failed: {result.stderr.strip()}")
        status = self.wait_phase(name, {"Succeeded", "Failed"}, 120)
        doc = _read_json(out) or {}
        pid = doc.get("pid")
        if status.get("phase") != "Succeeded" or not doc.get("tReady") or not isinstance(pid, int):
            raise StepError(f"the leaking job's probe never held its memory: {status.get('reason')}, {doc}")
        try:
            gone = wait_until(lambda: not _alive(pid), 120 * self.scale, 0.5)
            if not gone:
                return Verdict(False, f"pid {pid} still holds GPU memory {120 * self.scale:g}s after {name} ended")
            freed = wait_until(lambda: all(a.pid != pid for a in self.compute_apps()), 30 * self.scale, 0.5)
            if not freed:
                return Verdict(False, f"pid {pid} is gone but nvidia-smi still lists its memory")
            events = json.loads(self.ctl("get", "events", "--for", f"job/{name}", "-o", "json").stdout or "{}")
            said = [
                str(e.get("message", ""))
                for e in events.get("items") or []
                if e.get("reason") == "ReclaimedGPUMemory" and f"pid {pid}" in str(e.get("message", ""))
            ]
            # the job's supervisor, its processes' subreaper, stops such a child itself when it can
            # (it was reparented to it); gflowd's reclaim is for one the supervisor no longer reaches
            who = said[-1] if said else f"pid {pid} was stopped with its job (by its supervisor)"
            return Verdict(True, f"{who}; nvidia-smi no longer lists it", {"pid": pid, "reclaimedByGflowd": bool(said)})
        finally:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)  # never leave the leak behind, whatever the verdict

    def check_usage(self) -> Verdict:
        """gpus-unused (returned) and gpu-usage-figures (recorded here): one busy job serves both."""
        window = self.args.unused_window
        two = len(self.smi) >= 2
        busy_for = window + 40 if self._features_now()["unusedGpuWindow"] else 45
        release = self.probe_dir / "usage.release"
        job = self.apply_job(
            "usage",
            gpus=2 if two else 1,
            release=release,
            probe=["--use", "first", "--alloc-mib", "512", "--busy", str(busy_for), "--hold", "120"],
        )
        doc = self.wait_ready(job)
        devices = doc["boundDevices"]
        busy_gpu = devices[0]
        idle_gpu = devices[1] if len(devices) > 1 else None
        pid = doc["pid"]
        samples: list[int] = []
        apps: list[int] = []
        condition = None
        waits_for_condition = two and self._features_now()["unusedGpuWindow"]
        t_start = time.monotonic()
        t_end = t_start + busy_for - 5
        time.sleep(min(5.0, busy_for / 4))  # past cuInit and allocation: pmon then sees steady work
        while time.monotonic() < t_end:
            t_sample = time.monotonic()
            samples += [r.sm for r in self.pmon(busy_gpu) if r.pid == pid and r.sm is not None]
            apps += [
                a.used_mib
                for a in self.compute_apps()
                if a.pid == pid and a.gpu_uuid == self.smi[busy_gpu].uuid and a.used_mib is not None
            ]
            status = self.status(job.name) or {}
            condition = next(
                (
                    c
                    for c in status.get("conditions") or []
                    if c.get("type") == "GPUsUnused" and c.get("status") == "True"
                ),
                None,
            )
            enough = (
                len(samples) >= 5 and time.monotonic() - t_start >= 15
            )  # gflow's own sampler needs a few passes too
            if enough and (condition or not waits_for_condition):
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t_sample)))  # about one pmon sample a second
        release.touch()  # ends the busy phase
        if "gpuUsage" not in status:  # a build may write the summary only when the attempt ends
            try:
                status = self.wait_phase(job.name, {"Succeeded", "Failed"}, 60)
            except StepError:
                pass
        figures = self._usage_figures(status, busy_gpu, idle_gpu, samples, max(apps) if apps else None)
        figures.numbers.update(samples=len(samples), phase=status.get("phase"))
        missing = figures.reason.startswith("feature missing")
        self._record(
            Result(
                "gpu-usage-figures",
                "PASS" if figures.ok else "FAIL",
                figures.reason,
                figures.numbers,
                detail="" if figures.ok or missing else self._diagnostics(),
            )
        )
        if not two:
            raise Skip(f"needs 2 GPUs (one busy, one unused), this machine has {len(self.smi)}")
        if not self._features_now()["unusedGpuWindow"]:
            raise FeatureMissing("gflowd --unused-gpu-window (issue 19: per-job GPU usage, condition GPUsUnused)")
        if condition is None:
            return Verdict(
                False,
                f"no GPUsUnused condition after {busy_for:g}s with GPU {idle_gpu} untouched "
                f"(--unused-gpu-window {window:g}); conditions: {[c.get('type') for c in status.get('conditions') or []]}",
            )
        return Verdict(True, f"GPUsUnused: {condition.get('message')}", {"condition": condition})

    def _usage_figures(
        self, status: dict[str, Any], busy_gpu: int, idle_gpu: int | None, samples: list[int], app_mib: int | None
    ) -> Verdict:
        usage = status.get("gpuUsage")
        if usage is None:
            return Verdict(
                False,
                "feature missing in this build: status.gpuUsage (issue 19: per-job GPU usage)",
                {"pmonSm": samples, "computeAppsMiB": app_mib},
            )
        busy = gpu_usage_entry(usage, busy_gpu)
        idle = gpu_usage_entry(usage, idle_gpu) if idle_gpu is not None else None
        verdict = judge_usage(busy, idle, samples, app_mib, self.args.util_tolerance)
        verdict.numbers["gpuUsage"] = usage
        return verdict

    def check_latency(self) -> Verdict:
        latencies = []
        for i in range(3):
            job = self.apply_job(f"latency-{i}", gpus=1, probe=["--use", "none"])
            self.wait_phase(job.name, {"Succeeded", "Failed"}, 120)
            doc = self.probe_doc(job) or {}
            if "tFirstCudaCall" not in doc:
                raise StepError(f"{job.name}: the probe recorded no CUDA call: {doc or 'no report'}")
            latencies.append(doc["tFirstCudaCall"] - job.t_apply)
            self.delete_jobs([job.name])
        median = statistics.median(latencies)
        numbers = {
            "seconds": [round(x, 3) for x in latencies],
            "median": round(median, 3),
            "limit": self.args.max_start_latency,
        }
        text = f"median {median * 1000:.0f} ms (runs: {', '.join(f'{x * 1000:.0f}' for x in latencies)} ms; gflowctl start-up included)"
        if median > self.args.max_start_latency:
            return Verdict(False, f"{text}, over the {self.args.max_start_latency:g}s limit", numbers)
        return Verdict(True, text, numbers)

    def check_checkpoint_signal(self) -> Verdict:
        """spec.checkpoint's timing (docs/checkpoint.md): a CPU job, so any machine with gflowd shows it."""
        name = "acc-checkpoint"
        out = self.probe_dir / f"{name}.json"
        program = (
            "import json, os, signal, sys, time\n"
            "seen = {'started': time.time(), 'signalled': None}\n"
            "def on_signal(*_):\n"
            "    seen['signalled'] = time.time()\n"
            "    open(sys.argv[1], 'w').write(json.dumps(seen))\n"
            "    open(os.environ['GFLOW_CHECKPOINT_FILE'], 'w').write(sys.argv[1] + '\\n')\n"
            "signal.signal(signal.SIGUSR1, on_signal)\n"
            "open(sys.argv[1], 'w').write(json.dumps(seen))\n"
            "while True: time.sleep(0.1)\n"
        )
        spec: dict[str, Any] = {
            "command": [sys.executable, "-c", program, str(out)],
            "env": {TOKEN_VAR: self.token},
            "timeLimit": "20s",
            "checkpoint": {"signal": "USR1", "before": "10s", "grace": "5s"},
        }
        manifest = {"apiVersion": "gflow.dev/v1alpha1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
        path = self.manifests / f"{name}.yaml"
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        self.applied.append(name)
        result = self.ctl("apply", "-f", str(path))
        if result.returncode != 0:
            if "checkpoint" in result.stderr:
                raise FeatureMissing("spec.checkpoint")
            raise StepError(f"gflowctl apply -f {path.name} failed: {result.stderr.strip()}")
        status = self.wait_phase(name, {"Succeeded", "Failed"}, 120)
        return judge_checkpoint_timing(_read_json(out), status, limit=20, before=10, slack=3 * self.scale)

    def check_nvml_cost(self) -> Verdict:
        passes = 50
        out = run(
            [str(self.venv / "bin" / "python"), "-c", NVML_COST, str(passes)],
            timeout=300 * self.scale,
            env=self._clean_env(),
        )
        doc = _last_json(out.stdout)
        if out.returncode != 0 or doc is None:
            raise StepError(f"the NVML timing run failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
        gpus = doc["gpus"]
        limit = self.args.max_nvml_pass_ms * max(1.0, gpus / 8)
        numbers = dict(doc, limitMs=limit)
        text = (
            f"{doc['wallMsMedian']:.2f} ms wall, {doc['cpuMsMedian']:.2f} ms CPU per pass over {gpus} GPU(s) "
            f"(p95 {doc['wallMsP95']:.2f} ms; {passes} passes of gflowd's per-GPU NVML calls)"
        )
        metric = self._metric_sampling_ms()
        if metric is not None:
            numbers["gflowdMetricMs"] = metric
            text += f"; gflowd's own metric: {metric:.2f} ms per sample"
        if doc["wallMsMedian"] > limit:
            return Verdict(False, f"{text}: over the {limit:g} ms budget", numbers)
        return Verdict(True, text, numbers)

    # -- cleanup ------------------------------------------------------------------------------

    def cleanup(self) -> Result:
        """Stop what the run started; FAIL when gflow left a job's process or cgroup behind."""
        started = time.monotonic()
        problems, notes = [], []
        self._release_all()
        for proc in self.foreign:
            _stop(proc)
        if self.gflowd is not None and self.gflowd.poll() is None:
            try:
                gone = self.delete_jobs(self.applied, timeout=90)
                if not gone:
                    problems.append(f"jobs still listed 90s after their manifests were deleted: {self._job_names()}")
            except StepError as exc:
                problems.append(str(exc))
            _stop(self.gflowd, grace=20)
        elif self.gflowd is not None:
            notes.append(f"gflowd had exited ({self.gflowd.returncode})")
        if not wait_until(lambda: not _token_processes(self.token), 10, 0.5):
            leftovers = _token_processes(self.token)
            problems.append(f"processes left running after their jobs were deleted: {leftovers}")
            for pid in leftovers:
                _kill(pid)
        for path in self._cgroup_dirs():
            if path.exists() and not wait_until(lambda: not path.exists(), 5):
                problems.append(f"cgroup {path} left behind")
                if "gflow" in str(path) or "acc-" in str(path):  # never touch a cgroup that is not the run's
                    _remove_cgroup(path)
        own = sorted(self.job_cgroups - self.base_cgroups)
        numbers = {"jobCgroups": own, "seconds": round(time.monotonic() - started, 1)}
        if problems:
            return Result(
                "cleanup",
                "FAIL",
                "; ".join(problems) + " (removed by this script)",
                numbers,
                detail=self._diagnostics(),
            )
        dirs = self._cgroup_dirs()
        text = (
            f"no process or cgroup left ({len(dirs)} job cgroup director{'y' if len(dirs) == 1 else 'ies'} seen, all removed by gflow)"
            if dirs
            else "no process left (the jobs ran in this script's own cgroups: no per-job cgroup to check)"
        )
        return Result("cleanup", "PASS", "; ".join([text, *notes]), numbers)

    def _release_all(self) -> None:
        for job in self.jobs:
            job.release.touch()

    def _cgroup_dirs(self) -> list[Path]:
        """Directories of the cgroups the jobs ran in that are not this script's own."""
        return cgroup_dirs(self.job_cgroups - self.base_cgroups, cgroup_mounts(_read("/proc/self/mounts")))

    def _write_report(self, report: dict[str, Any]) -> None:
        self.report_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.report_path.with_name(f".{self.report_path.name}.tmp")
        tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
        os.replace(tmp, self.report_path)

    def _remove_run_dir(self) -> None:
        if self.args.keep:
            print(f"gpu-acceptance: kept {self.run_dir}", flush=True)
            return
        inside = self.report_path.parent == self.run_dir
        for entry in self.run_dir.iterdir():
            if inside and entry == self.report_path:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        if not inside:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # -- gflow, through its CLI ---------------------------------------------------------------

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run([str(self.venv / "bin" / "gflowctl"), "--home", str(self.home), *args], timeout=timeout * self.scale)

    def node(self) -> dict[str, Any] | None:
        out = self.ctl("get", "gpus", "-o", "json")
        return _last_json(out.stdout) if out.returncode == 0 else None

    def status(self, name: str) -> dict[str, Any] | None:
        out = self.ctl("get", "jobs", name, "-o", "json")
        doc = _last_json(out.stdout) if out.returncode == 0 else None
        return doc.get("status") if isinstance(doc, dict) else None

    def statuses(self) -> dict[str, dict[str, Any]]:
        """Every job's status, from one ``get jobs -o json``."""
        out = self.ctl("get", "jobs", "-o", "json")
        doc = _last_json(out.stdout) if out.returncode == 0 else None
        items = (doc or {}).get("items", [doc] if doc and "status" in doc else [])
        return {item.get("metadata", {}).get("name"): item.get("status") or {} for item in items}

    def _job_names(self) -> list[str]:
        return list(self.statuses())

    def apply_job(
        self,
        stem: str,
        *,
        gpus: int,
        probe: list[str],
        release: Path | None = None,
        sharing: str | None = None,
        gpu_memory: str | None = None,
        gpu_type: str | None = None,
        command: list[str] | None = None,
    ) -> Job:
        """A job running the probe with ``probe`` arguments, or ``command`` + its report path."""
        name = f"acc-{stem}"
        out = self.probe_dir / f"{name}.json"
        release = release or self.probe_dir / f"{name}.release"
        if command is None:
            command = [sys.executable, str(PROBE), "--out", str(out), "--release-file", str(release), *probe]
        else:
            command = [*command, str(out)]
        resources: dict[str, Any] = {"gpus": gpus}
        if gpu_memory:
            resources["gpuMemory"] = gpu_memory
        if gpu_type:
            resources["gpuType"] = gpu_type
        env = {key: os.environ[key] for key in JOB_PASSTHROUGH if os.environ.get(key)}
        spec: dict[str, Any] = {
            "command": command,
            "env": {**env, TOKEN_VAR: self.token},
            "resources": resources,
            "timeLimit": "15m",
        }
        if sharing:
            spec["sharing"] = sharing
        manifest = {"apiVersion": "gflow.dev/v1alpha1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
        path = self.manifests / f"{name}.yaml"
        path.write_text(json.dumps(manifest, indent=2) + "\n")  # JSON is YAML
        # registered before the apply: a Ctrl-C while gflowctl applies must still release and
        # delete this job (cleanup deletes only jobs gflowd lists, so one never applied is skipped)
        job = Job(name, out, release, time.time())
        self.applied.append(name)
        self.jobs.append(job)
        result = self.ctl("apply", "-f", str(path))
        if result.returncode != 0:
            raise StepError(f"gflowctl apply -f {path.name} failed: {result.stderr.strip()}")
        return job

    def wait_phase(self, name: str, phases: set[str], timeout: float) -> dict[str, Any]:
        status = wait_until(
            lambda: (s := self.status(name)) and s.get("phase") in phases and s, timeout * self.scale, 0.3
        )
        if not status:
            last = self.status(name) or {}
            raise StepError(
                f"job {name} is {last.get('phase')} ({last.get('reason')}: {last.get('message')}) after "
                f"{timeout * self.scale:g}s, waiting for {'/'.join(sorted(phases))}"
            )
        return status

    def wait_ready(self, job: Job, timeout: float = 120) -> dict[str, Any]:
        """Wait until the job's probe holds its GPUs (phase ready); returns the probe's report and
        adds the job's devices to it."""

        def ready() -> dict[str, Any] | None:
            doc = self.probe_doc(job)
            if doc and doc.get("phase") == "ready":
                return doc
            status = self.status(job.name) or {}
            if status.get("phase") in ("Succeeded", "Failed", "Cancelled"):
                raise StepError(
                    f"job {job.name} ended {status.get('phase')}/{status.get('reason')} before its probe was ready: {doc}"
                )
            return None

        doc = wait_until(ready, timeout * self.scale, 0.3)
        if not doc:
            last = self.status(job.name) or {}
            raise StepError(
                f"job {job.name}'s probe not ready after {timeout * self.scale:g}s ({last.get('phase')}/{last.get('reason')})"
            )
        init = doc.get("init") or {}
        if not init.get("ok"):
            raise StepError(f"job {job.name}: cuInit failed: {init.get('error')}")
        doc["boundDevices"] = (self.status(job.name) or {}).get("devices") or []
        return doc

    def probe_doc(self, job: Job) -> dict[str, Any] | None:
        doc = _read_json(job.out)
        if doc is not None:
            self._note_cgroups(doc)
        return doc

    def _note_cgroups(self, doc: dict[str, Any]) -> None:
        self.job_cgroups.update(line for line in doc.get("cgroups") or [] if line.count(":") >= 2)

    def delete_jobs(self, names: list[str], timeout: float = 60) -> bool:
        """Delete the manifests and wait until the jobs are gone (their processes stopped)."""
        present = [n for n in names if n in set(self._job_names())]
        if present:
            result = self.ctl("delete", "job", *present)
            if result.returncode != 0 and "not found" not in result.stderr:
                raise StepError(f"gflowctl delete job failed: {result.stderr.strip()}")
        return bool(wait_until(lambda: not (set(names) & set(self._job_names())), timeout * self.scale, 0.5))

    def _finish_jobs(self) -> None:
        """After each check: release holders and delete its jobs, so the next starts on Free GPUs."""
        self._release_all()
        names = [job.name for job in self.jobs]
        self.jobs = []
        if self.gflowd is None or self.gflowd.poll() is not None or not names:
            return
        try:
            self.delete_jobs(names)
            self._free_gpus()
        except StepError:
            pass  # the next check or cleanup() reports it

    def _free_gpus(self, timeout: float = 30) -> list[int]:
        """Wait until every GPU is Free again (a process that just ended can linger in NVML for a
        moment, and gflowd re-reads NVML every few seconds); the Free ones, or StepError."""

        def states() -> dict[int, str]:
            return {g.get("index"): g.get("state") for g in (self.node() or {}).get("gpus") or []}

        if not wait_until(
            lambda: (now := states()) and all(s == "Free" for s in now.values()), timeout * self.scale, 0.5
        ):
            now = states()
            free = [i for i, s in sorted(now.items()) if s == "Free"]
            if not free:
                raise StepError(
                    f"no GPU is Free {timeout * self.scale:g}s after the previous check's jobs ended: {now}"
                )
            return free
        return sorted(states())

    def _gflowd_alive(self) -> bool:
        return self.gflowd is not None and self.gflowd.poll() is None

    def _features_now(self) -> dict[str, bool]:
        return self.gflowd_info.get("features") or self._features()

    def _need_cgroups(self) -> None:
        if not self._features_now()["cgroups"]:
            raise FeatureMissing("gflowd --cgroups (issue 18: each job in its own cgroup, devices limited to its GPUs)")

    def _metric_sampling_ms(self) -> float | None:
        """gflowd's own figure for a GPU sample, when its metrics have one (issue 19 adds it)."""
        if self.metrics_port is None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
                text = response.read().decode(errors="replace")
        except OSError:
            return None
        return metric_mean_ms(text)

    # -- nvidia-smi, outside gflow ------------------------------------------------------------

    def pmon(self, index: int) -> list[PmonRow]:
        return _smi(["pmon", "-c", "1", "-s", "um", "-i", str(index)], parse_pmon)

    def compute_apps(self) -> list[ComputeApp]:
        return _smi(
            [f"--query-compute-apps={','.join(QUERY_APPS)}", "--format=csv,noheader,nounits"], parse_compute_apps_csv
        )

    def _device_nodes(self, indices: list[int]) -> list[str]:
        """/dev/nvidiaN of these GPUs, N = the driver's minor number (the devices cgroup's rule key)."""
        nodes = []
        for index in indices:
            minor = device_minor(self.smi[index].pci_bus_id)
            if minor is not None:
                nodes.append(f"/dev/nvidia{minor}")
        return nodes

    def _clean_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)  # the caller's shell must not narrow what gflowd and the probe see
        env.pop("GFLOW_HOME", None)
        return env

    def _diagnostics(self) -> str:
        parts = []
        if self.gflowd_log.exists():
            parts.append("gflowd.log (tail):\n" + _tail(self.gflowd_log, 25))
        for name in self.applied[-3:]:
            log = self.home / "logs" / f"{name}.log"
            if log.exists():
                parts.append(f"logs/{name}.log (tail):\n" + _tail(log, 10))
        return "\n\n".join(parts)


# the reclaimed-leak check's job: start the probe (argv[2:]) as a grandchild in its own session that
# leaves every cgroup its job put it in (a daemonized helper that escaped: what only gflowd can still
# find), wait until it holds its memory (argv[1] says "ready"), then end, leaving it behind
LEAKER = r"""
import json, os, sys, time
out, probe = sys.argv[1], sys.argv[2:]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            kind = fields[fields.index("-") + 1]
            if kind in ("cgroup", "cgroup2") and fields[3] == "/":
                try:
                    with open(os.path.join(fields[4], "cgroup.procs"), "w") as handle:
                        handle.write(str(os.getpid()))
                except OSError:
                    pass
        os.execv(probe[0], probe)
    os._exit(0)
deadline = time.time() + 120
while time.time() < deadline:
    try:
        if json.load(open(out)).get("phase") == "ready":
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.2)
"""


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an escaped child's reaper may be slow to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


NVML_COST = r"""
import json, statistics, sys, time
import pynvml as nv

passes = int(sys.argv[1])
nv.nvmlInit()
count = nv.nvmlDeviceGetCount()
MEMORY_V2 = 0x02000028

def sample():
    # The calls gflowd makes per GPU on each pass (controller/observe/gpus/nvml.py), plus the per-process
    # utilization that per-job GPU usage (issue 19) adds.
    for index in range(count):
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        nv.nvmlDeviceGetUUID(handle)
        nv.nvmlDeviceGetName(handle)
        try:
            nv.nvmlDeviceGetMemoryInfo(handle, MEMORY_V2)
        except nv.NVMLError:
            nv.nvmlDeviceGetMemoryInfo(handle)
        for call in (lambda: nv.nvmlDeviceGetUtilizationRates(handle),
                     lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle),
                     lambda: nv.nvmlDeviceGetProcessUtilization(handle, 0)):
            try:
                call()
            except nv.NVMLError:
                pass  # NOT_SUPPORTED / NOT_FOUND (no samples yet) cost the same round trip

sample()  # warm-up: first calls load symbols
wall, cpu = [], []
for _ in range(passes):
    w, c = time.perf_counter(), time.process_time()
    sample()
    wall.append((time.perf_counter() - w) * 1000)
    cpu.append((time.process_time() - c) * 1000)
wall.sort()
print(json.dumps({"gpus": count, "passes": passes, "wallMsMedian": statistics.median(wall),
                  "wallMsP95": wall[max(0, int(0.95 * len(wall)) - 1)], "cpuMsMedian": statistics.median(cpu)}))
nv.nvmlShutdown()
"""


def _smi(args: list[str], parse: Callable[[str], list[T]]) -> list[T]:
    """What nvidia-smi answers, parsed; [] when it fails or prints what we cannot read (the
    check then says it had no sample)."""
    out = run(["nvidia-smi", *args], timeout=30)
    if out.returncode != 0:
        return []
    try:
        return parse(out.stdout)
    except ValueError:
        return []


def _last_json(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
        return doc if isinstance(doc, dict) else None
    except ValueError:
        pass
    for line in reversed(text.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return _last_json(path.read_text())
    except OSError:
        return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _own_cgroups() -> list[str]:
    try:
        return [line.strip() for line in Path("/proc/self/cgroup").read_text().splitlines() if line.strip()]
    except OSError:
        return []


def _token_processes(token: str) -> list[int]:
    """Processes whose environment carries this run's token (gflowd's children and the jobs)."""
    found = []
    needle = f"{TOKEN_VAR}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                found.append(int(entry.name))
    return found


def _stop(proc: subprocess.Popen[bytes], grace: float = 10) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _remove_cgroup(path: Path) -> None:
    """Kill what is still inside (a leak) and remove the directory, children first."""
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        _remove_cgroup(child)
    try:
        for pid in (path / "cgroup.procs").read_text().split():
            _kill(int(pid))
    except OSError:
        pass
    wait_until(lambda: not _procs_in(path), 5, 0.1)
    try:
        path.rmdir()
    except OSError:
        pass


def _procs_in(path: Path) -> bool:
    try:
        return bool((path / "cgroup.procs").read_text().strip())
    except OSError:
        return False


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Check gflow's GPU promises on this machine's NVIDIA GPUs (docs/gpu-acceptance.md).",
        epilog="checks, in run order:\n" + "\n".join(f"  {name:<20} {what}" for name, what in CHECKS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--report", help="write the JSON report here (default: report.json in the run's temp folder)")
    parser.add_argument(
        "--only",
        type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
        help=f"run only these checks (comma-separated): {', '.join(CHECK_NAMES)}",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the run's temp folder (gflow home, logs, probe reports)"
    )
    parser.add_argument(
        "--venv", help="use this venv's gflowd/gflowctl/python instead of building .venv with hack/setup.sh"
    )
    parser.add_argument(
        "--unused-window", type=float, default=20.0, help="gflowd --unused-gpu-window for the run, seconds (default 20)"
    )
    parser.add_argument(
        "--util-tolerance",
        type=float,
        default=10.0,
        help="allowed difference between gflow's and pmon's mean utilization, points (default 10)",
    )
    parser.add_argument(
        "--max-start-latency",
        type=float,
        default=5.0,
        help="limit for the median apply -> first CUDA call, seconds (default 5)",
    )
    parser.add_argument(
        "--max-nvml-pass-ms",
        type=float,
        default=5.0,
        help="budget for one NVML sampling pass per 8 GPUs, ms (default 5)",
    )
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every wait by this (slow machines)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.only or [] if name not in CHECK_NAMES]
    if unknown:
        parser.error(f"--only: unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    return Acceptance(parse_args(argv)).main()


if __name__ == "__main__":
    sys.exit(main())
