"""Limits the kernel enforces, end to end: a real gflowd, real jobs, the real cgroup hierarchy.

Each test starts gflowd on a temp home (its cgroups are ``gflow-<hash of the home>``, unique per
test) and checks what the job itself sees: the OOM killer, EPERM from the devices controller on
nodes made with mknod, its CPU affinity, EAGAIN from pids.max. Skipped with a reason where we are
not root or no cgroup mode is usable. The conftest removes whatever a failed test leaves, and its
session check fails the run if an attempt cgroup survived.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from device_harness import OPENS
from helpers import home_cgroups, job_status, read_log, wait_for, wait_phase, write_manifest

from controller.act.runtime import record
from controller.act.runtime.cgroups import probe
from controller.api.units import format_cpu_list

FOUND = probe()
MI = 1 << 20

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroup tests need root (or a delegated cgroup)"),
    pytest.mark.skipif(FOUND.mode == "none", reason=f"no usable cgroups here: {FOUND.reason}"),
]


def need(*features: str) -> None:
    for name in features:
        if not FOUND.features[name].available:
            pytest.skip(f"no {name} here: {FOUND.features[name].reason}")


def job(name: str, body: str) -> str:
    return f"apiVersion: gflow.dev/v1alpha1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n{body}"


def python_job(name: str, code: str, extra: str = "") -> str:
    # JSON's double-quoted string is YAML's too, escapes included: a repr's single quotes would keep
    # "\n" as two characters, and the job would die at once of a SyntaxError
    return job(name, f"  command: [python3, -c, {json.dumps(code)}]\n{extra}")


def attempt_dirs(home: Path, name: str) -> list[str]:
    return [
        os.path.join(group, f"{name}-1")
        for group in home_cgroups(home)
        if os.path.isdir(os.path.join(group, f"{name}-1"))
    ]


def test_a_job_over_its_memory_limit_is_oom_killed_from_the_counter_and_its_sibling_is_untouched(home, gflowd):
    need("memory")
    daemon = gflowd()
    hog = "import time; print(time.time(), flush=True); b = bytearray(200 << 20); print('survived', flush=True)"
    sibling = "import os, time\nb = bytearray(20 << 20)\nwhile not os.path.exists('release'): time.sleep(0.02)\nprint('sibling done')"
    write_manifest(
        home / "jobs", "sibling.yaml", python_job("sibling", sibling, "  workingDir: .\n  resources: {memory: 50Mi}\n")
    )
    wait_phase(home, "sibling", "Running", daemon=daemon)
    write_manifest(home / "jobs", "hog.yaml", python_job("hog", hog, "  resources: {memory: 50Mi}\n"))
    status = wait_phase(home, "hog", "Failed", timeout=30, daemon=daemon)
    assert status["reason"] == "OOMKilled", status
    assert "survived" not in read_log(home, "hog")
    # the peak is the cgroup's: at the limit, not the 200 Mi asked for
    assert 0 < status["usage"]["peakMemoryBytes"] <= 50 * MI
    allocated_at = float(read_log(home, "hog").split()[0])
    latency = (read_exit_record_time(home, "hog") or time.time()) - allocated_at
    print(f"OOM: allocation to exit record {latency * 1000:.0f} ms")
    assert latency < 10  # generous: the figure is printed; the "within a second" is measured there
    assert job_status(home, "sibling")["phase"] == "Running"
    (home / "jobs" / "release").touch()
    done = wait_phase(home, "sibling", "Succeeded", timeout=30, daemon=daemon)
    assert "sibling done" in read_log(home, "sibling")
    assert done["usage"]["peakMemoryBytes"] >= 20 * MI  # it did hold its 20 Mi
    wait_for(
        lambda: not attempt_dirs(home, "hog") and not attempt_dirs(home, "sibling"),
        timeout=10,
        message="the jobs' cgroups to be removed",
    )


def read_exit_record_time(home: Path, name: str) -> float | None:
    from helpers import read_status  # the status's completionTime is the exit record's finishedAt

    from controller.model.records import from_rfc3339

    data = read_status(home, name)
    return from_rfc3339(data["status"].get("completionTime")) if data else None


@pytest.fixture
def gpu_nodes(tmp_path):
    """A device folder with nvidia0 (c 195:0), nvidia1 (c 195:1), nvidiactl and ``other`` (c 240:0,
    no GPU), made with mknod: no driver behind them, so an allowed open fails with ENXIO and a
    denied one with EPERM."""
    folder = tmp_path / f"dev-cgroups2-{os.getpid()}"
    folder.mkdir()
    for name, major, minor in (("nvidia0", 195, 0), ("nvidia1", 195, 1), ("nvidiactl", 195, 255), ("other", 240, 0)):
        os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    return folder


def test_a_job_bound_to_gpu_1_cannot_open_gpu_0_a_cpu_job_no_gpu_and_both_any_other_device(
    home, gflowd, gpu_nodes, tmp_path
):
    need("devices")
    fake = tmp_path / "gpus.yaml"
    # GPU C (minor 7) has no node in the device folder: denied all the same, from the inventory
    fake.write_text("gpus:\n  - {name: Fake A}\n  - {name: Fake B}\n  - {name: Fake C, minor: 7}\n")
    elsewhere = tmp_path / f"elsewhere-{os.getpid()}"
    elsewhere.mkdir()
    os.mknod(elsewhere / "nvidia7", 0o666 | stat.S_IFCHR, os.makedev(195, 7))
    daemon = gflowd("--fake-gpus", fake, "--gpus", "1", "--device-dir", gpu_nodes)
    nodes = [str(gpu_nodes / n) for n in ("nvidia0", "nvidia1", "nvidiactl", "other")] + [str(elsewhere / "nvidia7")]
    command = lambda name: f"  command: [python3, -c, {OPENS!r}, {', '.join(nodes)}]\n"
    write_manifest(home / "jobs", "gpu.yaml", job("gpu", command("gpu") + "  resources: {gpus: 1}\n"))
    write_manifest(home / "jobs", "cpu.yaml", job("cpu", command("cpu")))
    assert wait_phase(home, "gpu", "Succeeded", timeout=30, daemon=daemon)["devices"] == [1]
    wait_phase(home, "cpu", "Succeeded", timeout=30, daemon=daemon)
    assert read_log(home, "gpu").split() == [
        "nvidia0",
        "EPERM",
        "nvidia1",
        "ENXIO",
        "nvidiactl",
        "ENXIO",
        "other",
        "ENXIO",
        "nvidia7",
        "EPERM",
    ]
    # only GPUs are constrained (Slurm's ConstrainDevices): the control node and any other device
    # get through to their (missing) driver
    assert read_log(home, "cpu").split() == [
        "nvidia0",
        "EPERM",
        "nvidia1",
        "EPERM",
        "nvidiactl",
        "ENXIO",
        "other",
        "ENXIO",
        "nvidia7",
        "EPERM",
    ]


AFFINITY = "import os, time\nprint(sorted(os.sched_getaffinity(0)), os.environ.get('OMP_NUM_THREADS'), flush=True)\nwhile not os.path.exists('release'): time.sleep(0.02)\n"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell them apart")
def test_cpus_pin_each_job_to_a_core_on_its_gpus_numa_node_and_a_third_waits(home, gflowd, tmp_path):
    need("cpuset")
    first, second = sorted(os.sched_getaffinity(0))[:2]
    fake = tmp_path / "gpus.yaml"  # two NUMA nodes of one core each, GPU 0 on the second one
    fake.write_text(
        f"numaNodes: {{0: '{second}', 1: '{first}'}}\ngpus:\n  - {{name: A, numaNode: 0}}\n  - {{name: B, numaNode: 1}}\n"
    )
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {first, second})  # gflowd inherits it: its machine has exactly these 2 cores
    try:
        daemon = gflowd("--fake-gpus", fake)
    finally:
        os.sched_setaffinity(0, mine)
    extra = "  workingDir: .\n  resources: {gpus: 1, cpus: 1}\n"
    write_manifest(home / "jobs", "a.yaml", python_job("a", AFFINITY, extra))
    assert wait_phase(home, "a", "Running", daemon=daemon)["devices"] == [0]
    write_manifest(home / "jobs", "b.yaml", python_job("b", AFFINITY, extra))
    assert wait_phase(home, "b", "Running", daemon=daemon)["devices"] == [1]
    wait_for(lambda: read_log(home, "a") and read_log(home, "b"), timeout=15, message="both jobs to print")
    assert read_log(home, "a").split("\n")[0] == f"[{second}] 1"  # GPU 0's node, OMP_NUM_THREADS=1
    assert read_log(home, "b").split("\n")[0] == f"[{first}] 1"
    assert job_status(home, "a")["cores"] == [second]
    write_manifest(home / "jobs", "c.yaml", python_job("c", AFFINITY, "  workingDir: .\n  resources: {cpus: 1}\n"))
    waiting = wait_phase(home, "c", "Pending", reason="Resources", daemon=daemon)
    assert waiting["message"].startswith("needs 1 CPU, 0 free"), waiting
    node = subprocess.run(
        [str(Path(sys.executable).parent / "gflowctl"), "--home", str(home), "get", "node"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    footer = node.stderr.splitlines()
    assert f"CPU cores: 0 free of 2 ({format_cpu_list({first, second})})" in footer[0] and "bound:" in footer[0], (
        node.stderr
    )
    assert footer[1].startswith("Limits: cgroup v1: memory, cpuset, pids, devices") or FOUND.mode != "v1", node.stderr
    wide = subprocess.run(
        [str(Path(sys.executable).parent / "gflowctl"), "--home", str(home), "get", "jobs", "-o", "wide"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    column = wide[0].split().index("CPUS")
    assert [line.split()[column] for line in wide[1:]] == ["1", "1", "1"]
    (home / "jobs" / "release").touch()
    wait_phase(home, "c", "Succeeded", timeout=30, daemon=daemon)
    for name in "abc":
        assert job_status(home, name)["phase"] == "Succeeded"


FORK_BOMB = (
    "import errno, os, time\n"
    "made = 0\n"
    "while True:\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as exc:\n"
    "        print('stopped after', made, 'forks:', errno.errorcode[exc.errno], flush=True)\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(120)\n"
    "        os._exit(0)\n"
    "    made += 1\n"
)


def test_a_fork_bomb_under_pids_50_is_contained_and_the_job_ends(home, gflowd):
    need("pids")
    daemon = gflowd()
    write_manifest(home / "jobs", "bomb.yaml", python_job("bomb", FORK_BOMB, "  resources: {pids: 50}\n"))
    wait_phase(home, "bomb", "Succeeded", timeout=60, daemon=daemon)
    words = read_log(home, "bomb").split()
    assert words[:2] == ["stopped", "after"] and words[-1] == "EAGAIN", words
    assert int(words[2]) < 50
    wait_for(lambda: not attempt_dirs(home, "bomb"), timeout=10, message="the bomb's cgroup to be removed")


def test_a_floods_cgroups_are_removed_once_idle_and_a_stop_removes_those_still_waiting(home, gflowd, tmp_path):
    """Supervisors leave an ended job's emptied cgroup to gflowd, which removes it once a pass
    starts nothing (no rmdir takes the cgroup lock while starts queue on it); the usage counters
    are still read first. A gflowd stopped with some waiting removes them on its way out."""
    daemon = gflowd()
    stage = tmp_path / "stage"
    stage.mkdir()
    names = [f"flood-{i:03d}" for i in range(60)]
    for name in names:
        (stage / f"{name}.yaml").write_text(job(name, "  command: ['true']\n"))
    for name in names:
        (stage / f"{name}.yaml").rename(home / "jobs" / f"{name}.yaml")
    wait_for(
        lambda: all((job_status(home, n) or {}).get("phase") == "Succeeded" for n in names),
        timeout=60,
        message="the flood to succeed",
    )
    assert all("cpuSeconds" in (job_status(home, n).get("usage") or {}) for n in names)  # read before removal
    wait_for(lambda: not any(attempt_dirs(home, n) for n in names), timeout=30, message="the flood's cgroups to go")
    # a second flood (a changed command reruns each job), stopped as soon as it is done: whatever
    # still waits goes with gflowd
    # written whole (temp file, rename), as gflowctl and most editors save: an in-place rewrite read
    # while truncated is held back for a grace (observe/manifests.py _held_back), slowing this flood
    for name in names:
        write_manifest(home / "jobs", f"{name}.yaml", job(name, "  command: [sh, -c, 'true']\n"))
    wait_for(
        lambda: all(
            (job_status(home, n) or {}).get("attempt") == 2 and job_status(home, n).get("phase") == "Succeeded"
            for n in names
        ),
        timeout=60,
        message="the reruns to succeed",
    )
    assert daemon.terminate() == 0
    assert home_cgroups(home) == []


@pytest.mark.e2e
@pytest.mark.parametrize("leave", [True, False])
def test_a_supervisor_leaves_the_emptied_cgroup_to_gflowd_only_when_the_launch_says_so(home, tmp_path, leave):
    need("memory")
    from controller.act.runtime.backends.local.runtime import SupervisorRuntime
    from controller.act.runtime.shim import MAIN_FILE as SUPERVISOR_FILE
    from controller.paths import Home

    runtime = SupervisorRuntime(Home.resolve(home))
    try:
        cgroup = runtime.cgroup_keeper.make("solo", 1, {"memoryLimit": 64 * MI})
        assert cgroup["leave"] is True  # what gflowd writes
        cgroup["leave"] = leave
        path = home / "run" / "attempts" / "solo.1"
        record.create(
            str(path),
            {
                "name": "solo",
                "attempt": 1,
                "generation": 1,
                "argv": ["true"],
                "env": {"PATH": os.environ["PATH"]},
                "cwd": str(tmp_path),
                "log": str(tmp_path / "solo.log"),
                "uid": None,
                "gid": None,
                "groups": [],
                "timeLimit": None,
                "memoryLimit": 64 * MI,
                "grace": 1.0,
                "notify": str(tmp_path / "no.sock"),
                "cgroup": cgroup,
            },
        )
        subprocess.run([sys.executable, "-I", "-S", SUPERVISOR_FILE, str(path)], check=True, timeout=30)
        ended = (record.read(str(path), ("exit",)) or {}).get("exit")
        assert ended is not None and ended["exitCode"] == 0
        assert "cpuSeconds" in ended["usage"]  # the counters are read either way
        assert ended["cgroupRemoved"] is (not leave)
        assert bool(attempt_dirs(home, "solo")) is leave
    finally:
        for directory in attempt_dirs(home, "solo"):
            os.rmdir(directory)
        runtime.close()


def test_a_restarted_gflowd_adopts_the_cgroup_its_limits_still_hold_and_it_is_removed_after(home, gflowd):
    need("memory")
    daemon = gflowd()
    code = (
        "import os, time\nwhile not os.path.exists('go'): time.sleep(0.02)\nb = bytearray(200 << 20)\nprint('survived')"
    )
    write_manifest(
        home / "jobs", "late.yaml", python_job("late", code, "  workingDir: .\n  resources: {memory: 50Mi}\n")
    )
    wait_phase(home, "late", "Running", daemon=daemon)
    assert attempt_dirs(home, "late")
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.proc.wait(10)
    again = gflowd()
    assert attempt_dirs(home, "late")  # the restart kept it: the job runs on in it
    (home / "jobs" / "go").touch()
    status = wait_phase(home, "late", "Failed", timeout=30, daemon=again)
    assert status["reason"] == "OOMKilled"
    wait_for(lambda: not attempt_dirs(home, "late"), timeout=10, message="the adopted cgroup to be removed")


def test_a_job_whose_supervisor_died_is_found_by_its_cgroup_and_stopped(home, gflowd):
    need("memory")
    daemon = gflowd()
    # setsid and a cleared environment: only the cgroup still knows this process is the job's
    code = "import os, subprocess, time\nsubprocess.Popen(['setsid', 'env', '-i', 'sleep', '300'])\ntime.sleep(300)"
    write_manifest(
        home / "jobs",
        "gone.yaml",
        python_job("gone", code, "  resources: {memory: 100Mi}\n  terminationGracePeriod: 1\n"),
    )
    wait_phase(home, "gone", "Running", daemon=daemon)
    procs = [os.path.join(d, "cgroup.procs") for d in attempt_dirs(home, "gone")]
    wait_for(lambda: len(Path(procs[0]).read_text().split()) >= 2, timeout=10, message="the job and its sleep")
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.proc.wait(10)
    supervisor = int(record.read(str(home / "run" / "attempts" / "gone.1"), ("run",))["run"]["supervisorPid"])
    os.kill(supervisor, signal.SIGKILL)
    again = gflowd()
    status = wait_phase(home, "gone", "Failed", reason="Lost", timeout=30, daemon=again)
    assert "3 process(es)" in status["message"] or "process(es) were stopped" in status["message"], status
    wait_for(lambda: not attempt_dirs(home, "gone"), timeout=10, message="the orphan's cgroup to be removed")


def test_a_directly_spawned_job_starts_in_its_cgroup_and_its_supervisor_steps_back_out(home, gflowd):
    """A job of gflowd's own user is spawned without forking the supervisor (posix_spawn): the
    supervisor enters the attempt's cgroup for the spawn and leaves it, so its own memory is never
    the job's, while the job is inside from its first instruction."""
    need("memory")
    daemon = gflowd()
    write_manifest(
        home / "jobs",
        "direct.yaml",
        python_job("direct", "import time\ntime.sleep(300)", "  resources: {memory: 100Mi}\n"),
    )
    wait_phase(home, "direct", "Running", daemon=daemon)

    def run_record_with_pid() -> dict | None:
        run = (record.read(str(home / "run" / "attempts" / "direct.1"), ("run",)) or {}).get("run") or {}
        return run if run.get("jobPid") else None

    run = wait_for(run_record_with_pid, timeout=10, message="the run record with the job's pid")

    def memory_cgroup(pid: int) -> str:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        return next(line.split(":", 2)[2] for line in lines if line.split(":")[1] == "memory")

    (job_dir,) = [d for d in attempt_dirs(home, "direct") if "/memory/" in d]
    assert memory_cgroup(run["jobPid"]).endswith("/direct-1"), memory_cgroup(run["jobPid"])
    assert str(run["jobPid"]) in Path(job_dir, "cgroup.procs").read_text().split()
    assert str(run["supervisorPid"]) not in Path(job_dir, "cgroup.procs").read_text().split()
    assert not memory_cgroup(run["supervisorPid"]).endswith("/direct-1")
    (home / "jobs" / "direct.yaml").unlink()
    wait_for(lambda: not attempt_dirs(home, "direct"), timeout=30, message="the job's cgroup to go")


def test_each_job_leads_its_own_session_while_the_supervisors_share_the_launchers(home, gflowd):
    """Where the kernel groups CPU time by session (autogroup), a session per supervisor made a
    burst of supervisors outweigh gflowd ~30 to 1; each job still leads a session of its own, on
    both ways a job starts (spawned, and forked: a pids limit of 1 leaves no room to step out)."""
    need("memory")
    need("pids")
    daemon = gflowd()
    write_manifest(
        home / "jobs",
        "spawned.yaml",
        python_job("spawned", "import time\ntime.sleep(300)", "  resources: {memory: 100Mi}\n"),
    )
    write_manifest(
        home / "jobs", "forked.yaml", python_job("forked", "import time\ntime.sleep(300)", "  resources: {pids: 1}\n")
    )
    runs = {}
    for name in ("spawned", "forked"):
        wait_phase(home, name, "Running", daemon=daemon)

        def run_record_with_pid(name=name) -> dict | None:
            run = (record.read(str(home / "run" / "attempts" / f"{name}.1"), ("run",)) or {}).get("run") or {}
            return run if run.get("jobPid") else None

        runs[name] = wait_for(run_record_with_pid, timeout=10, message=f"{name}'s run record with its pid")
    for run in runs.values():
        assert os.getsid(run["jobPid"]) == run["jobPid"]
        assert os.getsid(run["supervisorPid"]) != run["supervisorPid"]
    assert runs["spawned"]["supervisorPid"] != runs["forked"]["supervisorPid"]
    assert os.getsid(runs["spawned"]["supervisorPid"]) == os.getsid(runs["forked"]["supervisorPid"])
    for name in runs:
        (home / "jobs" / f"{name}.yaml").unlink()
    wait_for(
        lambda: not attempt_dirs(home, "spawned") and not attempt_dirs(home, "forked"),
        timeout=30,
        message="the jobs' cgroups to go",
    )


def test_the_left_behind_check_finds_an_attempt_cgroup_of_a_home_and_removes_it(home):
    from helpers import scrub_cgroups

    from controller.act.runtime.backends.local.attempt_cgroups import cgroup_group
    from controller.act.runtime.cgroups import Cgroups, Limits

    cgroups = Cgroups(FOUND, cgroup_group(home))
    cgroups.prepare()
    attempt = cgroups.create("forgotten-1", Limits(memory=64 * MI))
    found = home_cgroups(home)
    assert found and sorted(scrub_cgroups(found)) == sorted(attempt.dirs.values())
    assert home_cgroups(home) == []


ROOT = Path(__file__).resolve().parents[1]


def _as_nobody(argv: list[str], **kwargs) -> subprocess.Popen:
    """As uid 65534, a user to whom no cgroup is delegated. The test's interpreter may live where
    nobody cannot read (/root/.pyenv): the system's of the same version runs with the venv's packages."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{site}"}
    return subprocess.Popen(
        [python, *argv],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        user=65534,
        group=65534,
        extra_groups=[],
        env=env,
        **kwargs,
    )


def _gflowd_as_nobody(home: Path, *args: str) -> subprocess.Popen:
    return _as_nobody(["-m", "controller.daemon", "--home", str(home), "--resync", "1s", *args])


@pytest.fixture
def nobodys_home():
    """A home nobody owns, outside pytest's temp folder (root's, mode 0700)."""
    top = Path(tempfile.mkdtemp(prefix=f"gflow-cgroups2-nobody-{os.getpid()}-"))
    try:
        home = top / "home"
        (home / "jobs").mkdir(parents=True)
        for path in (top, home, home / "jobs"):
            path.chmod(0o755)
            os.chown(path, 65534, 65534)
        try:
            check = _as_nobody(["-c", "import controller.daemon.main"])
            _, err = check.communicate(timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"no interpreter usable by uid 65534: {exc}")
        if check.returncode != 0:
            pytest.skip(f"the project is not importable by uid 65534: {err[-300:]}")
        yield home
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.e2e
def test_without_cgroups_required_refuses_in_one_line_and_auto_falls_back_saying_so_once(nobodys_home):
    refused = _gflowd_as_nobody(nobodys_home, "--cgroups", "required")
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 1
    assert len(err.strip().splitlines()) == 1 and err.startswith("gflowd: --cgroups required, but "), err
    assert "not writable by uid 65534" in err or "not delegated" in err, err
    daemon = _gflowd_as_nobody(nobodys_home)  # auto
    try:
        wait_for(
            lambda: (nobodys_home / "node.yaml").exists(), timeout=30, message="gflowd as nobody to write node.yaml"
        )
        node = (nobodys_home / "node.yaml").read_text()
        assert "limits: " in node and "cgroups unavailable" in node and "memory polled" in node, node
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    fallback = [line for line in err.splitlines() if "cgroups unavailable" in line]
    assert len(fallback) == 1 and "polling each job's RSS every 100 ms" in fallback[0], err
