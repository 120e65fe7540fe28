"""The box itself is what the lab runs: systemd as PID 1, cgroup v2 only, gflowd as the system unit."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from pathlib import Path

import pytest

USERS = ("alice", "bob", "mallory")


def test_pid_1_is_systemd_and_cgroup_v2_is_the_only_hierarchy():
    assert Path("/proc/1/comm").read_text().strip() == "systemd"
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    assert [m[1] for m in mounts if m[2] == "cgroup2"] == ["/sys/fs/cgroup"]
    assert not [m for m in mounts if m[2] == "cgroup"], "a cgroup v1 hierarchy is mounted"


def test_gflowd_runs_as_the_shipped_system_unit():
    active = subprocess.run(["systemctl", "is-active", "gflowd"], capture_output=True, text=True)
    assert active.stdout.strip() == "active", subprocess.run(
        ["systemctl", "status", "gflowd"], capture_output=True, text=True
    ).stdout
    fragment = subprocess.run(
        ["systemctl", "show", "-p", "FragmentPath", "--value", "gflowd"], capture_output=True, text=True
    )
    unit = Path(fragment.stdout.strip()).read_text()
    shipped = Path("/mnt/gflow/manifests/deploy/gflowd-system.service").read_text()
    assert unit == shipped


def test_the_users_have_a_venv_and_may_submit():
    for user in USERS:
        entry = pwd.getpwnam(user)
        assert Path(entry.pw_dir, "venv/bin/python").exists()
        assert "gflow" in subprocess.run(["id", "-nG", user], capture_output=True, text=True).stdout.split()
    assert os.stat("/var/lib/gflow/jobs").st_mode & 0o1777 == 0o1775


def test_an_ordinary_user_sees_gflowd_enforce_limits_with_cgroup_v2(run_as):
    # gflowd writes node.yaml (with its cgroup probe's line) once it is up: wait for that, generously.
    deadline = time.monotonic() + 300
    while True:
        shown = run_as("alice", "gflowctl", "get", "gpus", "-o", "json")
        node = json.loads(shown.stdout) if shown.returncode == 0 and shown.stdout.strip().startswith("{") else {}
        if node.get("limits") or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert shown.returncode == 0, shown.stderr
    assert node.get("limits", "").startswith("cgroup v2: "), node.get("limits")
    assert "memory" in node["limits"].split(";")[0], node["limits"]
    assert len(node.get("gpus") or []) == 4, node.get("gpus")


def test_run_as_drops_to_the_user_and_gives_them_a_login_path(run_as):
    shown = run_as("mallory", "sh", "-c", 'id -un; id -Gn; echo "$PATH"; echo "$GFLOW_HOME"; command -v gflowctl')
    assert shown.returncode == 0, shown.stderr
    name, groups, path, home, gflowctl = shown.stdout.splitlines()
    assert name == "mallory" and "gflow" in groups.split()
    assert "/usr/local/bin" in path.split(":") and home == "/var/lib/gflow"
    assert gflowctl == "/usr/local/bin/gflowctl"


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
BOOT_ID_BEFORE = Path("/var/lib/labbox/test_box-boot-id")


def test_the_box_is_asked_to_reboot(request_reboot):
    BOOT_ID_BEFORE.write_text(BOOT_ID.read_text())
    request_reboot("test_box: the reboot protocol itself, and gflowd after a reboot")


@pytest.mark.after_reboot
def test_after_the_reboot_the_box_booted_again_and_gflowd_is_back():
    assert BOOT_ID_BEFORE.read_text() != BOOT_ID.read_text(), "phase 2 ran in the same boot as phase 1"
    active = subprocess.run(["systemctl", "is-active", "gflowd"], capture_output=True, text=True)
    assert active.stdout.strip() == "active"
