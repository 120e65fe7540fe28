"""Issue 34 items 1 and 2, on the machine the product is for: cgroup v2 under systemd as PID 1, the
shipped system unit, jobs submitted by ordinary users (alice, bob) with gflowctl.

- memory: a job over `memory: 50Mi` is Failed/OOMKilled with a peak (the status gflowctl shows) at
  the limit; a sibling running beside it is untouched.
- cpus: `cpus: 1` pins the job to one core: its affinity and its cgroup's cpuset.cpus.effective.
- pids: a fork bomb under `pids: 50` gets EAGAIN, the job ends, gflowd and the next job are fine.
- devices: the BPF device program (controller/act/runtime/cgroups/bpf_devices.py): a job bound to a
  GPU gets EPERM on the others' /dev/nvidiaN and ENXIO (allowed; no driver behind the mknod'd node)
  on its own; a CPU job EPERM on every GPU; every other device opens as it does for the same user
  outside gflow.

Every wait is a condition with a generous timeout (the VM runs under TCG on a shared machine).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest
from users import MI, apply, in_box, jobs, log_file, logs, manifest, run_as, status_file, unique, wait_for, wait_phase  # noqa: F401

pytestmark = in_box


def release_file(user: str, name: str) -> Path:
    """A file the test creates to let a waiting job finish: in the user's home (the unit may give
    gflowd and its jobs a private /tmp)."""
    return Path(pwd.getpwnam(user).pw_dir) / f"{name}.release"


AFFINITY = (
    "import json, os\n"
    "path = open('/proc/self/cgroup').read().split('::', 1)[1].strip()\n"
    "effective = open('/sys/fs/cgroup' + path + '/cpuset.cpus.effective').read().strip()\n"
    "print(json.dumps([sorted(os.sched_getaffinity(0)), effective, os.environ.get('OMP_NUM_THREADS')]), flush=True)\n"
)


def cpu_list(text: str) -> set[int]:
    cores: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell pinned from not")
def test_cpus_1_pins_the_job_to_one_core_and_a_job_without_it_keeps_them_all(jobs):
    pinned, free = unique("pinned"), unique("unpinned")
    apply("alice", manifest(pinned, ["python3", "-c", AFFINITY], resources={"cpus": 1}))
    apply("alice", manifest(free, ["python3", "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]))
    jobs += [("alice", pinned), ("alice", free)]
    assert wait_phase("alice", pinned, "Succeeded", "Failed")["phase"] == "Succeeded", logs("alice", pinned)
    cores, effective, threads = json.loads(logs("alice", pinned))
    assert len(cores) == 1 and cpu_list(effective) == set(cores), logs("alice", pinned)
    assert threads == "1"
    wait_phase("alice", free, "Succeeded")
    assert len(json.loads(logs("alice", free))) >= 2  # without `cpus` nothing is pinned


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
    "        time.sleep(600)\n"
    "        os._exit(0)\n"
    "    made += 1\n"
)


def processes_of_job(name: str) -> list[int]:
    """Processes started by job NAME (every one carries GFLOW_JOB_NAME in its environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"GFLOW_JOB_NAME={name}".encode() in (entry / "environ").read_bytes().split(
                b"\0"
            ):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_a_fork_bomb_under_pids_50_is_contained_the_job_ends_and_the_box_stays_fine(jobs):
    bomb, after = unique("bomb"), unique("after-bomb")
    apply("mallory", manifest(bomb, ["python3", "-c", FORK_BOMB], resources={"pids": 50}))
    jobs.append(("mallory", bomb))
    done = wait_phase("mallory", bomb, "Succeeded", "Failed")
    words = logs("mallory", bomb).split()
    assert words[:2] == ["stopped", "after"] and words[-1] == "EAGAIN", words
    assert int(words[2]) < 50
    assert done["phase"] == "Succeeded", done
    # its sleeping children went with it
    wait_for(lambda: not processes_of_job(bomb), 300, "the bomb's children to be gone")
    assert (
        subprocess.run(["systemctl", "is-active", "gflowd"], capture_output=True, text=True).stdout.strip() == "active"
    )
    apply("alice", manifest(after, ["python3", "-c", "print('fine')"]))
    jobs.append(("alice", after))
    assert wait_phase("alice", after, "Succeeded", "Failed")["phase"] == "Succeeded"
    assert logs("alice", after).strip() == "fine"


OPENS = (
    "import errno, os, sys\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        os.close(os.open(path, os.O_RDWR | os.O_NOCTTY))\n"
    "        print(path, 'OK')\n"
    "    except OSError as exc:\n"
    "        print(path, errno.errorcode[exc.errno])\n"
)
OTHER_DEVICES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/full", "/dev/ptmx", "/dev/tty", "/dev/nvidiactl"]


@pytest.fixture
def gpu_nodes():
    """/dev/nvidia0..3 and nvidiactl as the NVIDIA driver makes them (char 195:N, 0666), with no
    driver behind them: made here with mknod where the box has none yet, removed after."""
    made = []
    for name, minor in [(f"nvidia{i}", i) for i in range(4)] + [("nvidiactl", 255)]:
        path = Path("/dev") / name
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
            made.append(path)
        st = os.stat(path)
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == minor, path
        os.chmod(path, 0o666)
    yield [f"/dev/nvidia{i}" for i in range(4)]
    for path in made:
        path.unlink()


def opened(text: str) -> dict[str, str]:
    return dict(line.split() for line in text.splitlines() if line.strip())


def test_a_gpu_job_opens_only_its_gpu_a_cpu_job_none_and_other_devices_are_as_outside(jobs, gpu_nodes):
    outside = opened(run_as("alice", "python3", "-c", OPENS, *gpu_nodes, *OTHER_DEVICES).stdout)
    assert {outside[n] for n in gpu_nodes} == {"ENXIO"}, outside  # no driver: the open gets that far
    gpu, cpu = unique("dev-gpu"), unique("dev-cpu")
    command = ["python3", "-c", OPENS, *gpu_nodes, *OTHER_DEVICES]
    apply("alice", manifest(gpu, command, resources={"gpus": 1}))
    apply("bob", manifest(cpu, command))
    jobs += [("alice", gpu), ("bob", cpu)]
    bound = wait_phase("alice", gpu, "Succeeded", "Failed")
    wait_phase("bob", cpu, "Succeeded", "Failed")
    gpu_saw, cpu_saw = opened(logs("alice", gpu)), opened(logs("bob", cpu))
    (own,) = bound["devices"]
    print(f"bound to GPU {own}: {gpu_saw}\nCPU job: {cpu_saw}")
    assert {n: gpu_saw[n] for n in gpu_nodes} == {
        n: ("ENXIO" if n == f"/dev/nvidia{own}" else "EPERM") for n in gpu_nodes
    }
    assert {n: cpu_saw[n] for n in gpu_nodes} == {n: "EPERM" for n in gpu_nodes}
    # only GPUs are constrained: the rest opens (or not) as it does for alice outside gflow
    others = {n: outside[n] for n in OTHER_DEVICES}
    assert {n: gpu_saw[n] for n in OTHER_DEVICES} == others
    assert {n: cpu_saw[n] for n in OTHER_DEVICES} == others


# Last: under a unit whose OOMPolicy is systemd's default (stop), the kernel's OOM kill inside a job
# makes systemd kill gflowd and fail the unit, which would take every later test with it.
def test_a_job_over_50mi_is_oom_killed_at_its_limit_and_a_sibling_beside_it_is_untouched(jobs):
    sibling, hog = unique("sibling"), unique("hog")
    release = release_file("bob", sibling)
    holder = (
        f"import os, time\nb = bytearray(20 << 20)\nprint('holding', flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.05)\nprint('sibling done', len(b) >> 20, flush=True)\n"
    )
    apply("bob", manifest(sibling, ["python3", "-c", holder], resources={"memory": "50Mi"}))
    jobs.append(("bob", sibling))
    wait_phase("bob", sibling, "Running")
    wait_for(lambda: "holding" in log_file(sibling), 300, "the sibling to hold its 20 Mi")

    grab = (
        "chunks = []\nfor i in range(300):\n    chunks.append(bytearray(1 << 20))\n"
        "    if i % 50 == 0: print('allocated', i, 'Mi', flush=True)\nprint('survived', flush=True)\n"
    )
    apply("alice", manifest(hog, ["python3", "-c", grab], resources={"memory": "50Mi"}))
    jobs.append(("alice", hog))
    done = wait_phase("alice", hog, "Failed", "Succeeded")
    assert (done["phase"], done["reason"]) == ("Failed", "OOMKilled"), done
    assert "survived" not in logs("alice", hog)
    peak = done["usage"]["peakMemoryBytes"]
    print(f"OOM job peak: {peak / MI:.1f} MiB (limit 50 MiB)")
    assert 0 < peak <= 50 * MI, done["usage"]

    assert status_file(sibling)["phase"] == "Running"  # the OOM kill stayed inside the hog's cgroup
    release.touch()
    try:
        ended = wait_phase("bob", sibling, "Succeeded", "Failed")
    finally:
        release.unlink()
    assert ended["phase"] == "Succeeded", ended
    assert "sibling done 20" in logs("bob", sibling)
    assert ended["usage"]["peakMemoryBytes"] >= 20 * MI
