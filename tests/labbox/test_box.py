"""The box itself is what the lab runs: systemd as PID 1, cgroup v2 only, gflowd as the system unit."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path


def test_pid_1_is_systemd_and_cgroup_v2_is_the_only_hierarchy():
    assert Path("/proc/1/comm").read_text().strip() == "systemd"
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    assert [m[1] for m in mounts if m[2] == "cgroup2"] == ["/sys/fs/cgroup"]
    assert not [m for m in mounts if m[2] == "cgroup"], "a cgroup v1 hierarchy is mounted"


def test_gflowd_runs_as_the_shipped_system_unit():
    active = subprocess.run(["systemctl", "is-active", "gflowd"], capture_output=True, text=True)
    assert active.stdout.strip() == "active", subprocess.run(["systemctl", "status", "gflowd"], capture_output=True, text=True).stdout
    fragment = subprocess.run(["systemctl", "show", "-p", "FragmentPath", "--value", "gflowd"], capture_output=True, text=True)
    unit = Path(fragment.stdout.strip()).read_text()
    shipped = Path("/mnt/gflow/manifests/deploy/gflowd-system.service").read_text()
    assert unit == shipped


def test_the_users_have_a_venv_and_may_submit():
    for user in ("alice", "bob", "mallory"):
        entry = pwd.getpwnam(user)
        assert Path(entry.pw_dir, "venv/bin/python").exists()
        assert "gflow" in subprocess.run(["id", "-nG", user], capture_output=True, text=True).stdout.split()
    assert os.stat("/var/lib/gflow/jobs").st_mode & 0o1777 == 0o1775
