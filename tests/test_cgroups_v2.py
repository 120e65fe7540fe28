"""The cgroup layer's pure parts (discovery, devices, limits) and its cgroup v2 paths on a fake
cgroup2 tree (``cgroupfs_fake``): this machine's cgroup v2 has no controllers, so memory.max and
friends can only be exercised against a tree laid out like cgroup2. Real processes throughout.

The real hierarchy (cgroup v1 + a controller-less cgroup v2) is tested in ``test_cgroups.py``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cgroupfs_fake import FakeCgroup2

from controller.act.runtime.cgroups import (
    CgroupError,
    Cgroupfs,
    Cgroups,
    DeviceRule,
    Limits,
    Probe,
    check_name,
    format_cpus,
    gpu_deny_rules,
    gpu_minors_in,
    parse_cpus,
    probe,
    probe_v2,
    resolve,
    setup,
)
from controller.act.runtime.cgroups.discover import locate, parse_mountinfo, parse_proc_cgroup

ROOT = Path(__file__).resolve().parents[1]

# -- discovery: /proc/self/mountinfo + /proc/self/cgroup -> our directories -------------------------

HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/
8:pids:/
5:devices:/
4:memory:/process_api/78db
3:cpuset:/
1:cpu,cpuacct:/
0::/
"""


def test_hybrid_layout_is_found_from_proc_text_alone():
    found = locate(parse_mountinfo(HYBRID_MOUNTINFO), parse_proc_cgroup(HYBRID_CGROUP))
    assert found["memory"].path == "/sys/fs/cgroup/memory/process_api/78db"
    assert found["cpuacct"].path == "/sys/fs/cgroup/cpu,cpuacct"  # comounted with cpu
    assert found["pids"].path == "/sys/fs/cgroup/pids"
    assert found["unified"].path == "/sys/fs/cgroup/unified"
    assert found["freezer"].path is None and "freezer controller is not mounted" in found["freezer"].reason


def test_pure_v2_under_systemd_and_a_container_that_sees_only_its_subtree():
    systemd = "25 22 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    found = locate(parse_mountinfo(systemd), parse_proc_cgroup("0::/system.slice/gflowd.service\n"))
    assert found["unified"].path == "/sys/fs/cgroup/system.slice/gflowd.service"
    assert all(found[c].path is None for c in ("memory", "cpuset", "pids", "devices"))
    # a container: the mount shows /docker/abc as its root, and our path lies below it
    container = "600 590 0:22 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n"
    found = locate(parse_mountinfo(container), parse_proc_cgroup("0::/docker/abc/job\n"))
    assert found["unified"].path == "/sys/fs/cgroup/job"
    assert found["unified"].mount.read_only
    # our cgroup outside what is mounted: no guessing
    found = locate(parse_mountinfo(container), parse_proc_cgroup("0::/other\n"))
    assert found["unified"].path is None and "outside every mount" in found["unified"].reason


def test_mountinfo_escapes_are_decoded():
    text = r"41 31 0:38 / /mnt/cg\040two rw - cgroup2 cgroup2 rw" + "\n"
    assert parse_mountinfo(text)[0].point == "/mnt/cg two"


def test_probe_finds_a_delegated_v2_tree_from_fake_proc_files(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg2")
    kernel.write(str(kernel.root / "cgroup.subtree_control"), "+memory +pids +cpuset")
    kernel.make("gflowd.service")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(f"41 31 0:38 / {tmp_path}/cg2 rw,relatime - cgroup2 cgroup2 rw\n")
    (proc / "cgroup").write_text("0::/gflowd.service\n")
    found = probe(str(proc), kernel)
    assert found.mode == "v2"
    assert found.dirs == {"unified": f"{tmp_path}/cg2/gflowd.service"}
    assert found.available() == ["memory", "cpuset", "pids", "cputime", "freezer", "kill"]


# -- probing a v2 tree ------------------------------------------------------------------------------


@pytest.fixture
def kernel(tmp_path):
    return FakeCgroup2(tmp_path / "cgroup")


def test_v2_with_memory_pids_cpuset_is_usable_and_devices_say_why_not(kernel):
    found = probe_v2(str(kernel.root), kernel)
    assert found.mode == "v2" and found.usable
    assert found.available() == ["memory", "cpuset", "pids", "cputime", "freezer", "kill"]
    assert "BPF device program" in found.features["devices"].reason
    line = found.summary()
    assert "\n" not in line and line.startswith("cgroup v2: memory, cpuset, pids") and "no devices:" in line


def test_v2_without_memory_is_mode_none_and_required_refuses_in_one_line(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg", controllers="hugetlb")
    found = probe_v2(str(kernel.root), kernel)
    assert found.mode == "none" and not found.usable
    assert "offers no memory controller (cgroup.controllers: hugetlb)" in found.reason
    with pytest.raises(CgroupError) as raised:
        resolve("required", found)
    assert str(raised.value).startswith("--cgroups required, but cgroup v2 at ") and "\n" not in str(raised.value)
    assert resolve("auto", found) is found
    assert resolve("off").reason == "cgroups are off (--cgroups off)"
    with pytest.raises(CgroupError, match="--cgroups must be one of auto, required, off, not 'yes'"):
        resolve("yes")


def test_auto_falls_back_with_the_reason_and_required_raises_it(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg", controllers="cpu io")
    cgroups, found = setup("auto", found=probe_v2(str(kernel.root), kernel), fs=kernel)
    assert cgroups is None and "offers no memory controller" in found.summary()
    with pytest.raises(CgroupError, match="offers no memory controller"):
        setup("required", found=probe_v2(str(kernel.root), kernel), fs=kernel)


def test_a_missing_controller_is_reported_and_every_unenforceable_limit_named_at_once(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg", controllers="memory")
    found = probe_v2(str(kernel.root), kernel)
    assert found.usable and not found.features["pids"].available
    cgroups = Cgroups(found, "gflow", kernel)
    cgroups.prepare()
    with pytest.raises(CgroupError) as raised:
        cgroups.create("a", Limits(memory=1 << 30, pids=10, deny_devices=[]))
    message = str(raised.value)
    assert message.startswith("cannot enforce for a: pids: cgroup v2 at ")
    assert "; devices: device isolation is unavailable on cgroup v2" in message
    assert cgroups.names() == []  # nothing was made


def _run_as_nobody(code: str) -> str | None:
    """Run ``code`` as uid 65534 with the cgroups package importable on its own (as the stdlib-only
    supervisor will load it) and return its stdout; None when no interpreter is usable by nobody."""
    for python in (
        sys.executable,
        shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/local/bin:/usr/bin:/bin"),
    ):
        if not python:
            continue
        try:
            result = subprocess.run(
                [
                    python,
                    "-I",
                    "-c",
                    f"import sys; sys.path.insert(0, {str(ROOT / 'controller' / 'act' / 'runtime')!r})\n{code}",
                ],
                cwd="/",
                capture_output=True,
                text=True,
                timeout=60,
                user=65534,
                group=65534,
                extra_groups=[],
            )
        except PermissionError:
            continue
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()
    return None


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a probe as another user")
def test_not_root_and_not_delegated_then_delegated_by_chown():
    top = tempfile.mkdtemp(prefix=f"gflow-test-{os.getpid()}-")
    try:
        os.chmod(top, 0o755)
        kernel = FakeCgroup2(Path(top) / "cg")
        code = f"from cgroups import probe_v2\nfound = probe_v2({str(kernel.root)!r})\nprint(found.mode, '|', found.reason)"
        output = _run_as_nobody(code)
        if output is None:
            pytest.skip("no Python that uid 65534 can run")
        mode, reason = output.split(" | ")
        assert mode == "none"
        assert (
            reason
            == f"cgroup v2: {kernel.root} is not writable by uid 65534 (not root, and not delegated to this user)"
        )
        write = (
            "from cgroups import Cgroupfs, CgroupError\n"
            f"try:\n    Cgroupfs().write({str(kernel.root / 'cgroup.procs')!r}, '0')\n"
            "except CgroupError as exc:\n    print(exc)"
        )
        assert (
            _run_as_nobody(write)
            == f"cannot write '0' to {kernel.root}/cgroup.procs: EACCES (not root and not delegated to uid 65534)"
        )
        for path in (kernel.root, kernel.root / "cgroup.procs", kernel.root / "cgroup.subtree_control"):
            os.chown(path, 65534, 65534)  # what systemd's Delegate=yes does for the service's user
        assert _run_as_nobody(code).split("|")[0].strip() == "v2"
    finally:
        shutil.rmtree(top)


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a read-only tmpfs")
def test_a_read_only_mount_is_reported(tmp_path):
    point = tmp_path / f"gflow-test-{os.getpid()}-ro"
    FakeCgroup2(point)
    subprocess.run(["mount", "--bind", str(point), str(point)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(point)], check=True)
        found = probe_v2(str(point))
        assert found.mode == "none" and found.reason == f"cgroup v2: {point} is on a read-only mount"
        with pytest.raises(CgroupError) as raised:
            Cgroupfs().mkdir(str(point / "attempt"))
        assert str(raised.value) == f"cannot create cgroup {point}/attempt: EROFS (cgroupfs is mounted read-only)"
    finally:
        subprocess.run(["umount", str(point)], check=True)


# -- the group ---------------------------------------------------------------------------------------


def test_prepare_hands_controllers_down_to_the_group_idempotently(kernel):
    cgroups = Cgroups(probe_v2(str(kernel.root), kernel), "gflow", kernel)
    cgroups.prepare()
    assert kernel.text("cgroup.subtree_control").split() == ["cpuset", "memory", "pids"]
    assert kernel.text("gflow/cgroup.subtree_control").split() == ["cpuset", "memory", "pids"]
    writes = len(kernel.writes)
    cgroups.prepare()
    assert len(kernel.writes) == writes  # nothing to do the second time


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"])


def test_prepare_moves_only_ourselves_out_of_a_base_with_processes(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg")
    kernel.write(str(kernel.root / "cgroup.subtree_control"), "+memory +pids +cpuset")
    base = kernel.make("gflowd.service")
    kernel.write(str(base / "cgroup.procs"), "0")  # we run in the service's cgroup, like gflowd under systemd
    cgroups = Cgroups(probe_v2(str(base), kernel), "gflow", kernel)
    cgroups.prepare()
    assert kernel.text("gflowd.service/gflowd/cgroup.procs").split() == [str(os.getpid())]
    assert kernel.text("gflowd.service/cgroup.procs") == ""
    assert kernel.text("gflowd.service/cgroup.subtree_control").split() == ["cpuset", "memory", "pids"]
    assert kernel.text("gflowd.service/gflow/cgroup.subtree_control").split() == ["cpuset", "memory", "pids"]


@pytest.mark.e2e
def test_prepare_refuses_to_move_other_processes_in_one_line(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg")
    kernel.write(str(kernel.root / "cgroup.subtree_control"), "+memory +pids +cpuset")
    base = kernel.make("gflowd.service")
    other = _sleeper()
    try:
        kernel.write(str(base / "cgroup.procs"), str(other.pid))
        cgroups = Cgroups(probe_v2(str(base), kernel), "gflow", kernel)
        with pytest.raises(CgroupError) as raised:
            cgroups.prepare()
        message = str(raised.value)
        assert "hands controllers down only from a cgroup without processes" in message
        assert f"has 1 (pids {other.pid})" in message and "\n" not in message
        cgroups2, found = setup("auto", "gflow", probe_v2(str(base), kernel), kernel)
        assert cgroups2 is None and "without processes" in found.reason
    finally:
        other.kill()
        other.wait()


# -- attempts on v2 ------------------------------------------------------------------------------------


@pytest.fixture
def v2(kernel):
    cgroups = Cgroups(probe_v2(str(kernel.root), kernel), "gflow", kernel)
    cgroups.prepare()
    return cgroups


def test_create_writes_every_limit_and_makes_swap_no_way_out(v2, kernel):
    v2.create("train-1", Limits(memory=50 << 20, cpus={0, 1, 3}, pids=64))
    assert kernel.text("gflow/train-1/memory.max") == f"{50 << 20}\n"
    assert kernel.text("gflow/train-1/memory.swap.max") == "0\n"
    assert kernel.text("gflow/train-1/memory.oom.group") == "1\n"  # an OOM kill takes the whole job
    assert kernel.text("gflow/train-1/pids.max") == "64\n"
    assert kernel.text("gflow/train-1/cpuset.cpus") == "0-1,3\n"


def test_limits_not_asked_for_are_left_alone(v2, kernel):
    v2.create("cpu-only", Limits())
    assert kernel.text("gflow/cpu-only/memory.max") == "max\n"
    assert kernel.text("gflow/cpu-only/pids.max") == "max\n"
    assert kernel.written("memory.swap.max") == []


def test_a_write_the_kernel_refuses_says_which_file_and_why_and_undoes_the_mkdir(v2, kernel):
    kernel.set("gflow/cgroup.subtree_control", "memory pids\n")  # cpuset no longer handed down
    with pytest.raises(CgroupError) as raised:
        v2.create("pinned", Limits(cpus={1}))
    assert str(raised.value) == (
        f"cannot write '1' to {kernel.root}/gflow/pinned/cpuset.cpus: "
        "ENOENT (missing: the controller is not enabled here, or the cgroup is gone)"
    )
    assert v2.names() == []


@pytest.mark.e2e
def test_join_moves_a_process_in_and_pids_lists_exactly_the_members(v2, kernel):
    attempt = v2.create("a", Limits(memory=1 << 30))
    job, outsider = _sleeper(), _sleeper()
    try:
        attempt.join(job.pid)
        assert attempt.pids() == [job.pid]
        assert str(job.pid) not in kernel.text("cgroup.procs")
    finally:
        for process in (job, outsider):
            process.kill()
            process.wait()
    assert attempt.pids() == []


def test_stats_read_the_v2_counters(v2, kernel):
    attempt = v2.create("a", Limits(memory=1 << 30, pids=10))
    kernel.set("gflow/a/memory.peak", "73400320\n")
    kernel.set("gflow/a/memory.current", "1048576\n")
    kernel.set("gflow/a/memory.events", "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\noom_group_kill 1\n")
    kernel.set("gflow/a/cpu.stat", "usage_usec 250000\nuser_usec 200000\nsystem_usec 50000\n")
    kernel.set("gflow/a/pids.current", "3\n")
    kernel.set("gflow/a/pids.events", "max 4\n")
    assert attempt.stats().to_dict() == {
        "memory_peak": 73400320,
        "memory_current": 1048576,
        "oom_kills": 1,
        "cpu_usec": 250000,
        "pids_current": 3,
        "pids_limit_hits": 4,
    }


def test_stats_without_memory_peak_on_an_older_kernel(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg", peak_file=False)
    cgroups = Cgroups(probe_v2(str(kernel.root), kernel), "gflow", kernel)
    cgroups.prepare()
    stats = cgroups.create("a", Limits(memory=1 << 30)).stats()
    assert stats.memory_peak is None and stats.oom_kills == 0


@pytest.mark.e2e
def test_kill_all_uses_cgroup_kill(v2, kernel):
    attempt = v2.create("a", Limits())
    job = _sleeper()
    attempt.join(job.pid)
    attempt.kill_all(timeout=10)
    assert job.wait(timeout=10) == -9
    assert kernel.written("cgroup.kill") == [("gflow/a/cgroup.kill", "1")]
    assert kernel.written("cgroup.freeze") == []


@pytest.mark.e2e
def test_kill_all_without_cgroup_kill_freezes_kills_and_thaws(tmp_path):
    kernel = FakeCgroup2(tmp_path / "cg", kill_file=False)
    cgroups = Cgroups(probe_v2(str(kernel.root), kernel), "gflow", kernel)
    cgroups.prepare()
    attempt = cgroups.create("a", Limits())
    job = _sleeper()
    attempt.join(job.pid)
    attempt.kill_all(timeout=10)
    assert job.wait(timeout=10) == -9
    assert kernel.written("cgroup.freeze") == [("gflow/a/cgroup.freeze", "1"), ("gflow/a/cgroup.freeze", "0")]


def test_kill_all_refuses_to_kill_its_caller(v2):
    attempt = v2.create("a", Limits())
    attempt.join(0)
    try:
        with pytest.raises(CgroupError, match=rf"refusing to kill cgroup a: this process \({os.getpid()}\) is in it"):
            attempt.kill_all()
    finally:
        v2.fs.write(str(v2.fs.root / "cgroup.procs"), "0")
    attempt.remove()


@pytest.mark.e2e
def test_remove_waits_for_members_then_names_them_and_is_idempotent(v2, kernel):
    attempt = v2.create("a", Limits())
    job = _sleeper()
    attempt.join(job.pid)
    with pytest.raises(CgroupError) as raised:
        attempt.remove(timeout=0.2)
    assert "EBUSY" in str(raised.value) and f"processes still in it: [{job.pid}]" in str(raised.value)
    job.kill()
    job.wait()
    attempt.remove()
    assert not kernel.cgroup("gflow/a").exists()
    attempt.remove()  # gone already: fine


@pytest.mark.e2e
def test_adopt_after_a_restart_and_complete_a_half_made_cgroup(v2, kernel):
    attempt = v2.create("a", Limits(memory=1 << 30))
    job = _sleeper()
    try:
        attempt.join(job.pid)
        restarted = Cgroups(Probe.from_dict(v2.probe.to_dict()), "gflow", kernel)  # a new gflowd
        adopted = restarted.adopt("a")
        assert adopted is not None and adopted.complete and adopted.pids() == [job.pid]
        assert restarted.adopt("never-made") is None
    finally:
        job.kill()
        job.wait()
    kernel.make("gflow/b")  # a create killed after its mkdir: no limits yet
    assert restarted.names() == ["a", "b"]
    restarted.create("b", Limits(memory=1 << 29))
    assert kernel.text("gflow/b/memory.max") == f"{1 << 29}\n"
    for name in restarted.names():
        restarted.adopt(name).remove()
    restarted.remove_group()
    assert not kernel.cgroup("gflow").exists()


def test_remove_group_refuses_while_attempts_are_left(v2):
    v2.create("left", Limits())
    with pytest.raises(CgroupError, match="attempts left in it: left"):
        v2.remove_group()


# -- names, limits, cpus --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".hidden", "..", "a/b", "cgroup.procs", "x" * 201, "tab\there"])
def test_bad_names_are_refused(name):
    with pytest.raises(CgroupError, match="bad cgroup name"):
        check_name(name)


def test_good_names_pass():
    for name in ("train-resnet-3", "a", "job.7", "A_b-9"):
        check_name(name)


def test_limits_report_every_problem_at_once():
    with pytest.raises(ValueError) as raised:
        Limits(memory=-1, cpus=set(), pids=0, deny_devices=["c 1:3 rwm"])
    text = str(raised.value)
    assert text.count(";") == 3 and "memory must be" in text and "cpus must be" in text and "pids must be" in text


@pytest.mark.parametrize(
    "cpus,text", [({0}, "0"), ({0, 1, 2, 5}, "0-2,5"), ({3, 1}, "1,3"), ({7, 8, 9, 10, 12}, "7-10,12")]
)
def test_cpu_lists_round_trip(cpus, text):
    assert format_cpus(cpus) == text
    assert parse_cpus(text + "\n") == frozenset(cpus)


def test_probe_round_trips_through_a_dict(v2):
    again = Probe.from_dict(v2.probe.to_dict())
    assert again.mode == "v2" and again.dirs == v2.probe.dirs and again.summary() == v2.probe.summary()


# -- device deny-lists ----------------------------------------------------------------------------------


@pytest.fixture
def device_folder(tmp_path):
    """nvidia0, nvidia2 (GPUs, 195:N), nvidiactl (195:255), nvidia-uvm (237:0), a regular file
    named nvidia7 and a char node nvidia9 of another major: only the first two are GPUs."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mknod")
    for name, major, minor in (
        ("nvidia0", 195, 0),
        ("nvidia2", 195, 2),
        ("nvidiactl", 195, 255),
        ("nvidia-uvm", 237, 0),
        ("nvidia9", 240, 9),
    ):
        os.mknod(tmp_path / name, 0o600 | stat.S_IFCHR, os.makedev(major, minor))
    (tmp_path / "nvidia7").write_text("")
    return tmp_path


def test_gpu_minors_are_the_nvidia_n_char_nodes_of_major_195(device_folder, tmp_path):
    assert gpu_minors_in(str(device_folder)) == {0, 2}
    assert gpu_minors_in(str(tmp_path / "absent")) == set()


def test_gpu_nodes_added_or_removed_after_a_listing_are_seen(device_folder):
    """The folder's listing is kept between launches while the folder is unchanged; a GPU node
    made or removed later changes the folder, and the next look reads it again."""
    settled = time.time() - 60
    os.utime(device_folder, (settled, settled))  # a settled /dev: its listing may be kept
    assert gpu_minors_in(str(device_folder)) == {0, 2}
    assert gpu_minors_in(str(device_folder)) == {0, 2}  # the kept listing
    os.mknod(device_folder / "nvidia5", 0o600 | stat.S_IFCHR, os.makedev(195, 5))
    assert gpu_minors_in(str(device_folder)) == {0, 2, 5}
    assert [str(r) for r in gpu_deny_rules([2], dev_dir=str(device_folder))] == ["c 195:0 rwm", "c 195:5 rwm"]
    os.utime(device_folder, (settled + 1, settled + 1))
    assert gpu_minors_in(str(device_folder)) == {0, 2, 5}
    (device_folder / "nvidia0").unlink()
    os.rename(device_folder / "nvidia5", device_folder / "nvidia6")  # a new name for the same node
    assert gpu_minors_in(str(device_folder)) == {2, 5}


def test_deny_rules_cover_every_gpu_but_the_bound_ones_from_the_folder_and_the_inventory(device_folder):
    # GPU 5 has no node here (another device folder, or not made yet) but gflowd knows it
    rules = gpu_deny_rules([2], known=[0, 2, 5], dev_dir=str(device_folder))
    assert [str(r) for r in rules] == ["c 195:0 rwm", "c 195:5 rwm"]
    # GPU 0 has a node but gflowd does not manage it (say --gpus excluded it): still denied
    assert [str(r) for r in gpu_deny_rules([2], known=[2], dev_dir=str(device_folder))] == ["c 195:0 rwm"]


def test_a_cpu_job_is_denied_every_gpu_and_no_control_node(device_folder):
    rules = gpu_deny_rules([], known=[1], dev_dir=str(device_folder))
    assert [str(r) for r in rules] == ["c 195:0 rwm", "c 195:1 rwm", "c 195:2 rwm"]
    assert gpu_deny_rules([0, 2], dev_dir=str(device_folder)) == []  # bound to all: nothing denied


def test_device_rules_parse_and_print():
    assert str(DeviceRule.parse("c 136:* rwm")) == "c 136:* rwm"
    assert DeviceRule.parse("c 195:1 rw") == DeviceRule("c", 195, 1, "rw")
    for bad in ("c 195 rwm", "x 1:3 rwm", "c 1:3 rwx", "c a:3 rwm"):
        with pytest.raises(ValueError):
            DeviceRule.parse(bad)


def test_setup_auto_prepares_the_cgroups_when_usable(kernel):
    cgroups, found = setup("auto", "gflow", probe_v2(str(kernel.root), kernel), kernel)
    assert cgroups is not None and found.mode == "v2"
    assert kernel.text("gflow/cgroup.subtree_control").split() == ["cpuset", "memory", "pids"]
    assert setup("off", "gflow", probe_v2(str(kernel.root), kernel), kernel)[0] is None
