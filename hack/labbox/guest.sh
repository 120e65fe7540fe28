#!/usr/bin/env bash
# Runs inside the lab box at every boot (gflow-labbox.service), as root, from the host's checkout
# shared read-only at /mnt/gflow. Results go to /mnt/results (shared read-write).
#
# Phase 1 (first boot): install gflow the way docs/multi-user.md tells an admin to (the shipped
# system unit, /opt/gflow, group gflow, /var/lib/gflow), fake GPUs with real /dev/nvidiaN nodes,
# users alice, bob and mallory with a venv each; then the suite, except tests marked after_reboot.
# A test that needs a reboot writes /var/lib/labbox/reboot-requested; then the box reboots and
# phase 2 runs the tests marked after_reboot. Then it powers off (qemu exits).
set -uo pipefail

SRC=/mnt/gflow
OUT=/mnt/results
STATE=/var/lib/labbox
mkdir -p "$STATE"
phase="$(cat "$STATE/phase" 2>/dev/null || echo 1)"
date +%s >"$OUT/guest-start-$phase"
log() { echo "labbox[$phase]: $*"; }

finish() {
    journalctl -b --no-pager -o short-precise >"$OUT/journal-$phase.txt" 2>&1
    sync
    systemctl poweroff
    exit 0
}

install_gflow() {  # docs/multi-user.md, "Install", step by step
    python3 -m venv /opt/gflow
    /opt/gflow/bin/pip install -q --no-index --find-links "$OUT/wheelhouse" gflow-controller || return 1
    ln -sf /opt/gflow/bin/gflowd /opt/gflow/bin/gflowctl /usr/local/bin/
    groupadd --system gflow
    install -d -m 0755 /var/lib/gflow
    install -d -m 1775 -g gflow /var/lib/gflow/jobs
    echo 'export GFLOW_HOME=/var/lib/gflow' >/etc/profile.d/gflow.sh
    # Fake GPUs at the hardware edge only: the inventory reads this file instead of NVML, and the
    # device nodes are real character devices (major 195) with no driver behind them (ENXIO).
    install -d /etc/gflow
    cp "$SRC/manifests/examples/fake-gpus.yaml" /etc/gflow/fake-gpus.yaml
    echo "fakeGpus: /etc/gflow/fake-gpus.yaml" >/var/lib/gflow/config.yaml
    {
        for minor in 0 1 2 3; do echo "c! /dev/nvidia$minor 0666 root root - 195:$minor"; done
        echo "c! /dev/nvidiactl 0666 root root - 195:255"
    } >/etc/tmpfiles.d/labbox-nvidia.conf
    systemd-tmpfiles --create /etc/tmpfiles.d/labbox-nvidia.conf
    cp "$SRC/manifests/deploy/gflowd-system.service" /etc/systemd/system/gflowd.service
    systemctl daemon-reload
    systemctl enable --now gflowd
}

make_users() {
    for user in alice bob mallory; do
        useradd -m -s /bin/bash -G gflow "$user" || return 1
        runuser -u "$user" -- python3 -m venv --without-pip "/home/$user/venv" || return 1
    done
}

run_suite() {  # $1: the pytest -m expression
    local tests
    tests="$(cat "$OUT/tests" 2>/dev/null || echo tests/labbox)"
    cd "$SRC" || return 1
    # shellcheck disable=SC2086  # the list of test paths
    PYTHONDONTWRITEBYTECODE=1 /opt/labtest/bin/python -m pytest -p no:cacheprovider \
        --confcutdir="$SRC/tests/labbox" -o addopts="" -ra -v -m "$1" \
        --junitxml="$OUT/junit-$phase.xml" $tests >"$OUT/pytest-$phase.log" 2>&1
}

if [ "$phase" = 1 ]; then
    {
        echo "systemd: $(systemctl --version | head -1)"
        echo "kernel: $(uname -r)"
        echo "python: $(python3 -V 2>&1)"
        echo "cgroup: $(stat -fc %T /sys/fs/cgroup)"
    } >"$OUT/versions.txt"
    t0=$(date +%s)
    if ! install_gflow >"$OUT/install.log" 2>&1 || ! make_users >>"$OUT/install.log" 2>&1; then
        log "install failed: $OUT/install.log"
        echo 3 >"$OUT/rc"
        finish
    fi
    # The suite's own venv, apart from the admin's: made without pip (ensurepip costs a minute
    # under TCG) and filled by /opt/gflow's pip.
    python3 -m venv --without-pip /opt/labtest >>"$OUT/install.log" 2>&1
    /opt/gflow/bin/pip --python /opt/labtest/bin/python install -q --no-compile --no-index --find-links "$OUT/wheelhouse" pytest pexpect cloudpickle >>"$OUT/install.log" 2>&1
    echo "$(( $(date +%s) - t0 ))" >"$OUT/install-seconds"
    log "installed in $(cat "$OUT/install-seconds") s; running the suite"
    t0=$(date +%s)
    run_suite "not after_reboot"
    rc=$?
    echo "$(( $(date +%s) - t0 ))" >"$OUT/suite-seconds-1"
    echo "$rc" >"$OUT/rc-1"
    if [ -f "$STATE/reboot-requested" ]; then
        log "a test asked for a reboot: $(cat "$STATE/reboot-requested"); rebooting for phase 2"
        echo 2 >"$STATE/phase"
        journalctl -b --no-pager -o short-precise >"$OUT/journal-1.txt" 2>&1
        sync
        systemctl reboot
        exit 0
    fi
    echo "$rc" >"$OUT/rc"
    finish
fi

if [ "$phase" != 2 ]; then  # a reboot nobody asked for
    log "phase $phase: nothing left to run"
    finish
fi
# Phase 2: after the reboot a test asked for.
t0=$(date +%s)
run_suite "after_reboot"
rc=$?
echo "$(( $(date +%s) - t0 ))" >"$OUT/suite-seconds-2"
echo "$rc" >"$OUT/rc-2"
first="$(cat "$OUT/rc-1")"
echo $(( first > rc ? first : rc )) >"$OUT/rc"
echo 3 >"$STATE/phase"
finish
