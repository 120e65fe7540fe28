"""GPU memory nobody owns, end to end (issue: what the GPU really holds, item 4): a real root gflowd
on fake GPUs (the hardware edge: which pids hold how much), a real ``useradd`` user owning the job,
real processes. A job's daemonized child that left its session and its cgroups and still holds
memory is killed after the job ends and the job's events say so; a pid that no longer exists but
is still charged is shown as held, never killed, and keeps a gpuMemory job waiting; processes
gflowd did not start (another user's, or the job owner's own hand-started one) are never killed.
The job's status keeps what was killed (condition ReclaimedGPUMemory), and a gflowd SIGKILLed while
the job ran, or after it ended, leaves a new gflowd (on the NVML stand-in) all it needs to reclaim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from helpers import ctl, job_status, wait_for, wait_phase, write_manifest
from nvml_fixtures import GiB, fake_nvml_lib, gpu, nvml_env, write_fake_nvml  # noqa: F401
from shared_box import make_box, remove_box

NOBODY = 65534


@pytest.fixture
def box():
    made = make_box()
    yield made
    remove_box(made)


@pytest.fixture
def drop(box):
    """A folder the job's user writes its leftover's pid to, and the test its go-ahead."""
    folder = Path(tempfile.mkdtemp(prefix="gflow-leak-", dir=box.root))
    os.chmod(folder, 0o777)
    return folder


def gpus_file(path: Path, processes: list[tuple[int, str]]) -> None:
    procs = ", ".join(f"{{pid: {pid}, usedMemory: {held}}}" for pid, held in processes)
    text = f"gpus:\n  - {{name: A100-SXM4-40GB, memory: 40Gi, processes: [{procs}]}}\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.rename(tmp, path)


def events(home: Path, reason: str) -> list[dict]:
    try:
        lines = (home / "events.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [e for e in map(json.loads, lines) if e["reason"] == reason]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def leave_cgroups(pid: int) -> None:
    """Move ``pid`` to the root of every cgroup v1 hierarchy it is in (root may): the escape a
    process of the job could make with help, so the supervisor's cgroup kill misses it."""
    with open(f"/proc/{pid}/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if path == "/" or controllers.startswith("name="):
                continue
            procs = Path("/sys/fs/cgroup") / (controllers or "unified") / "cgroup.procs"  # "": cgroup v2
            try:
                procs.write_text(str(pid))
            except OSError:
                pass


def job_leaving_a_child(drop: Path) -> str:
    # a double fork: the child calls setsid and drops the job's marker from its environment (what
    # gflowd's own search for a dead supervisor's processes cannot find); the job runs until stopped
    return (
        "metadata: {name: leaky}\nspec:\n  resources: {gpus: 1}\n  backoffLimit: 0\n  script: |\n"
        "    ( setsid env -u GFLOW_ATTEMPT_ID sh -c "
        f"'echo $$ > {drop}/pid.tmp && mv {drop}/pid.tmp {drop}/leak.pid; exec sleep 600' </dev/null >/dev/null 2>&1 & )\n"
        "    exec sleep 600\n"
    )


def start_leaky_job(box, drop: Path, fake: Path, others: list[tuple[int, str]] = (), charge=None) -> int:
    """The job runs; its child escapes its cgroups and holds 3.2Gi on the job's GPU, and gflowd has
    seen it there as the job's. Returns the child's pid. ``charge``: how the driver lists
    processes (default: the fake-GPU file ``fake``)."""
    uid, gid = box.user.pw_uid, box.user.pw_gid
    write_manifest(box.home / "jobs", "leaky.yaml", job_leaving_a_child(drop), owner=(uid, gid))
    pid_file = drop / "leak.pid"
    pid = int(
        wait_for(
            lambda: pid_file.exists() and pid_file.read_text().strip(),
            message=lambda: f"the child to start: {job_status(box.home, 'leaky')}",
        )
    )
    assert os.stat(f"/proc/{pid}").st_uid == uid
    leave_cgroups(pid)
    with open(f"/proc/{pid}/cgroup") as handle:
        assert all(line.rstrip().endswith(":/") for line in handle), "the child could not leave its cgroups"
    (charge or (lambda procs: gpus_file(fake, procs)))([*others, (pid, "3.2Gi")])  # 3.2Gi on the job's GPU

    def seen_as_the_jobs() -> bool:  # node.yaml lists it, not as unmanaged: a pass saw it in the job's tree
        try:
            node = yaml.safe_load((box.home / "node.yaml").read_text())
        except (OSError, yaml.YAMLError):
            return False
        procs = [p for g in node.get("gpus") or [] for p in g.get("processes") or []]
        return any(p.get("pid") == pid and not p.get("unmanaged") for p in procs)

    wait_for(seen_as_the_jobs, message="gflowd to list the child as the job's")
    return pid


def crash_supervisor(box) -> None:
    """SIGKILL the job's supervisor (as the OOM killer might): gflowd stops the job's processes it
    can find; the escaped child is not among them."""
    status = wait_phase(box.home, "leaky", "Running")
    with open(f"/proc/{status['pid']}/stat") as handle:
        supervisor = int(handle.read().rsplit(")", 1)[1].split()[1])
    os.kill(supervisor, signal.SIGKILL)
    wait_phase(box.home, "leaky", ("Failed", "Succeeded"))


def test_an_escaped_child_holding_gpu_memory_is_killed_after_its_job_ends_and_said(box, drop, gflowd):
    fake = box.root / "gpus.yaml"
    gpus_file(fake, [])
    daemon = gflowd("--fake-gpus", fake, home=box.home)
    pid = start_leaky_job(box, drop, fake)
    try:
        crash_supervisor(box)
        wait_for(lambda: not alive(pid), message=lambda: f"gflowd to kill pid {pid}\n{daemon.stderr()[-3000:]}")
        said = wait_for(lambda: events(box.home, "ReclaimedGPUMemory"), message="the ReclaimedGPUMemory event")
        assert said[0]["type"] == "Warning"
        assert said[0]["object"] == "job/leaky"
        assert said[0]["message"] == f"GPU 0: killed pid {pid} (sleep) that held 3.2Gi after leaky attempt 1 ended"
        gpus_file(fake, [])  # the driver frees its memory
        assert not events(box.home, "GPUMemoryHeld")
        says_so_in_its_status(box, pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_process_gflowd_did_not_start_is_never_killed_after_a_job_ends(box, drop, gflowd):
    fake = box.root / "gpus.yaml"
    gpus_file(fake, [])
    (box.home / "config.yaml").write_text("unmanagedMemoryThreshold: 64Gi\n")  # the GPU stays usable
    daemon = gflowd("--fake-gpus", fake, home=box.home)
    uid, gid = box.user.pw_uid, box.user.pw_gid
    # another user's server, and the job owner's own hand-started one: gflowd started neither
    other = subprocess.Popen(["sleep", "600"], user=NOBODY, group=NOBODY, start_new_session=True)
    own = subprocess.Popen(["sleep", "600"], user=uid, group=gid, start_new_session=True)
    child = None
    try:
        child = start_leaky_job(box, drop, fake, [(other.pid, "2Gi"), (own.pid, "1Gi")])
        crash_supervisor(box)
        wait_for(lambda: not alive(child), message=lambda: f"gflowd to kill pid {child}\n{daemon.stderr()[-3000:]}")
        said = wait_for(lambda: events(box.home, "ReclaimedGPUMemory"), message="the ReclaimedGPUMemory event")
        assert [f"pid {child} " in e["message"] for e in said] == [True], said
        assert other.poll() is None and own.poll() is None
    finally:
        for proc in (other, own):
            proc.kill()
            proc.wait()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


def unused_pid() -> int:
    """A pid that no longer exists: a child's, reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_memory_of_a_pid_that_no_longer_exists_is_held_not_killed_and_keeps_a_gpu_memory_job_waiting(
    home, gflowd, tmp_path
):
    fake = tmp_path / "gpus.yaml"
    gone = unused_pid()
    gpus_file(fake, [(gone, "30Gi")])
    (home / "config.yaml").write_text("unmanagedMemoryThreshold: 64Gi\n")
    daemon = gflowd("--fake-gpus", fake)
    said = wait_for(lambda: events(home, "GPUMemoryHeld"), message=lambda: daemon.stderr()[-3000:])
    assert said[0]["type"] == "Warning" and said[0]["object"] == "gpu/0"
    assert said[0]["message"].startswith(f"GPU 0: 30Gi held by pid {gone}, which no longer exists (for ")
    assert said[0]["message"].endswith("nvidia-smi --gpu-reset -i 0 when the GPU is idle, or reboot")
    write_manifest(
        home / "jobs",
        "train.yaml",
        "metadata: {name: train}\nspec:\n  resources: {gpus: 1, gpuMemory: 20Gi}\n  script: echo trained\n",
    )
    status = wait_phase(home, "train", "Pending", reason="GPUMemory", daemon=daemon)
    assert f"pid {gone} holds 30Gi" in status["message"], status
    wide = ctl(home, "get", "gpus", "-o", "wide")
    row = wide.stdout.split("\n\n")[1].splitlines()[1]
    assert row.split()[:2] == ["0", str(gone)] and "(gone: held until a GPU reset)" in row, wide.stdout
    node = yaml.safe_load((home / "node.yaml").read_text())
    assert node["gpus"][0]["processes"] == [{"pid": gone, "usedMemory": "30Gi", "unmanaged": True, "gone": True}], node
    gpus_file(fake, [])  # a GPU reset frees it
    wait_phase(home, "train", "Succeeded", daemon=daemon)
    assert len(events(home, "GPUMemoryHeld")) == 1  # said once, not every pass


def says_so_in_its_status(box, pid: int) -> None:
    """The ended job's status keeps what was killed: its file, ``describe`` and ``get -o json``,
    as the job's own user reads them."""
    text = f"killed what attempt 1 left holding GPU memory: GPU 0 pid {pid} (sleep) 3277 MiB"

    def reclaimed() -> dict | None:
        conditions = (job_status(box.home, "leaky") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "ReclaimedGPUMemory"), None)

    said = wait_for(reclaimed, message=lambda: f"the condition: {job_status(box.home, 'leaky')}")
    assert (said["status"], said["reason"], said["message"]) == ("True", "ReclaimedGPUMemory", text)
    assert job_status(box.home, "leaky")["phase"] in ("Failed", "Succeeded")
    described = box.gflowctl("describe", "job", "leaky")
    assert described.returncode == 0, described.stderr
    [line] = [row for row in described.stdout.splitlines() if "ReclaimedGPUMemory" in row and "True" in row]
    assert line.split()[:3] == ["ReclaimedGPUMemory", "True", "ReclaimedGPUMemory"] and line.endswith(text), line
    shown = box.gflowctl("get", "jobs", "leaky", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    conditions = json.loads(shown.stdout)["status"]["conditions"]
    assert [c["message"] for c in conditions if c["type"] == "ReclaimedGPUMemory"] == [text], conditions


def nvml_charge(path: Path, processes: list[tuple[int, str]]) -> None:
    """What the NVML stand-in lists on its one GPU (``3.2Gi``: bytes the driver charges)."""
    listed = [{"pid": pid, "usedMemory": int(float(held.removesuffix("Gi")) * GiB)} for pid, held in processes]
    write_fake_nvml(path, {"gpus": [gpu(0, name="NVIDIA A100-SXM4-40GB", memoryTotal=40 * GiB, processes=listed)]})


def listed(home: Path, pid: int) -> bool:
    """node.yaml lists ``pid`` on a GPU (or there is no node.yaml yet)."""
    try:
        node = yaml.safe_load((home / "node.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return True
    return any(p.get("pid") == pid for g in node.get("gpus") or [] for p in g.get("processes") or [])


def crash_the_supervisor_while_gflowd_is_down(box) -> None:
    """SIGKILL the job's supervisor with no gflowd to see it (a supervisor that ends cleanly takes
    its stray descendants with it: it is their subreaper); the next gflowd stops what it finds of
    the job, and the escaped child is not among it."""
    job_pid = job_status(box.home, "leaky")["pid"]
    with open(f"/proc/{job_pid}/stat") as handle:
        supervisor = int(handle.read().rsplit(")", 1)[1].split()[1])
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not alive(supervisor), message="the supervisor to die")


@pytest.mark.parametrize("killed", ["while the job ran", "after the end was recorded"])
def test_a_new_gflowd_reclaims_what_an_attempt_left_when_the_old_one_was_killed(box, drop, gflowd, nvml_env, killed):
    fake = Path(nvml_env["FAKE_NVML_FILE"])
    nvml_charge(fake, [])
    first = gflowd(env=nvml_env, home=box.home)
    pid = start_leaky_job(box, drop, fake, charge=lambda procs: nvml_charge(fake, procs))
    try:
        wait_phase(box.home, "leaky", "Running", daemon=first)
        if killed == "while the job ran":
            first.proc.kill()  # SIGKILL: nothing saved on the way out
            first.proc.wait()
            crash_the_supervisor_while_gflowd_is_down(box)
        else:  # the child holds no memory at the end (it takes some later): nothing to reclaim yet
            nvml_charge(fake, [])
            wait_for(lambda: not listed(box.home, pid), message="gflowd to see the GPU without the child")
            crash_supervisor(box)  # recorded Failed; the attempt's record goes
            wait_for(lambda: not list((box.home / "run" / "attempts").glob("leaky.*")), message="the record purged")
            first.proc.kill()
            first.proc.wait()
            nvml_charge(fake, [(pid, "3.2Gi")])
        assert alive(pid)
        second = gflowd(env=nvml_env, home=box.home)
        wait_for(lambda: not alive(pid), message=lambda: f"the new gflowd to kill pid {pid}\n{second.stderr()[-3000:]}")
        said = wait_for(lambda: events(box.home, "ReclaimedGPUMemory"), message="the ReclaimedGPUMemory event")
        assert [(e["object"], e["message"]) for e in said] == [
            ("job/leaky", f"GPU 0: killed pid {pid} (sleep) that held 3.2Gi after leaky attempt 1 ended")
        ]
        nvml_charge(fake, [])  # the driver frees its memory
        says_so_in_its_status(box, pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
