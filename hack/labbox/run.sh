#!/usr/bin/env bash
# Boot the lab box on a checkout and run its acceptance suite inside; exit with the suite's rc.
#
#   bash hack/labbox/run.sh [--checkout DIR] [--tests "tests/labbox/test_x.py ..."] [--keep]
#                           [--timeout SECONDS] [--require] [--results DIR]
#
# The image (build.sh, cached) is never written: each run boots a qcow2 overlay of it under qemu
# (TCG: no nested KVM here), with the checkout shared read-only at /mnt/gflow and a results folder
# read-write at /mnt/results. guest.sh installs gflow from a wheelhouse made here, as an admin
# would, and runs the tests; see hack/labbox/README.md. Without qemu, mmdebstrap or the Debian
# mirror it says so in one line and exits 0 (skipped), or 1 with --require (CI).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHECKOUT="$(cd "$HERE/../.." && pwd)"
TESTS="tests/labbox"
KEEP=no
REQUIRE=no
TIMEOUT=2400
RESULTS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --checkout) CHECKOUT="$(cd "$2" && pwd)"; shift 2 ;;
        --tests) TESTS="$2"; shift 2 ;;
        --keep) KEEP=yes; shift ;;
        --require) REQUIRE=yes; shift ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --results) RESULTS="$2"; KEEP=yes; shift 2 ;;
        -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "labbox: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
CACHE="${LABBOX_CACHE:-/var/cache/gflow-labbox}"

skip() {
    if [ "$REQUIRE" = yes ]; then
        echo "labbox: FAILED: $*" >&2
        exit 1
    fi
    echo "labbox: skipped: $*"
    exit 0
}
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)"
command -v qemu-img >/dev/null || skip "qemu-img is not installed (apt-get install qemu-utils)"

t_start=$(date +%s)
if ! image="$(bash "$HERE/build.sh" | tail -1)"; then  # its last line is the image's folder
    skip "could not build the image (above)"
fi
[ -f "$image/disk.raw" ] || skip "build.sh printed no image folder (got: $image)"
t_built=$(date +%s)

[ -n "$RESULTS" ] || RESULTS="$(mktemp -d /tmp/labbox-results.XXXXXX)"
mkdir -p "$RESULTS"
chmod 0755 "$RESULTS"
echo "$TESTS" >"$RESULTS/tests"

# gflow and the suite's few packages as wheels for python 3.11 (bookworm's): the guest installs
# them offline, the way an admin installs a wheel they were handed. gflow's own wheel is made on
# every run (the checkout changes); its dependencies are fetched once per pyproject.toml.
wheels="$RESULTS/wheelhouse"
mkdir -p "$wheels"
PIP=(python3 -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then  # Debian's python3 comes without pip: a venv has one
    python3 -m venv "$RESULTS/pip-venv" >/dev/null 2>&1 || skip "no pip for python3 here (the wheelhouse needs it; apt-get install python3-venv)"
    PIP=("$RESULTS/pip-venv/bin/python" -m pip)
fi
SUITE_PACKAGES=(pytest pexpect cloudpickle)
deps="$CACHE/wheels-$( { cat "$CHECKOUT/pyproject.toml"; echo "${SUITE_PACKAGES[*]}"; } | sha256sum | cut -c1-16)"
if ! { "${PIP[@]}" wheel -q --no-deps -w "$wheels" "$CHECKOUT" &&
       if [ ! -f "$deps/done" ]; then
           fetched="$(mktemp -d "$CACHE/wheels.XXXXXX")" &&
           "${PIP[@]}" download -q -d "$fetched" --only-binary=:all: --python-version 3.11 \
               --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
               "$(ls "$wheels"/gflow_controller-*.whl)" "${SUITE_PACKAGES[@]}" &&
           rm -f "$fetched"/gflow_controller-*.whl && touch "$fetched/done" &&
           { rm -rf "$deps"; mv "$fetched" "$deps"; }
       fi &&
       cp "$deps"/*.whl "$wheels"/; } >"$RESULTS/wheelhouse.log" 2>&1; then
    rm -rf "${fetched:-}"
    tail -5 "$RESULTS/wheelhouse.log" >&2
    skip "could not make the wheelhouse (PyPI unreachable?)"
fi

# At most two boxes at once on this machine: each TCG guest keeps a core busy.
# Waiting for a slot is bounded by --timeout too.
exec 9>"$CACHE/slot0.lock"
if ! flock -n 9; then
    exec 9>"$CACHE/slot1.lock"
    if ! flock -n 9; then
        echo "labbox: both VM slots are busy; waiting (at most $TIMEOUT s) for slot1"
        flock -w "$TIMEOUT" 9 || { echo "labbox: FAILED: no VM slot free within $TIMEOUT s ($CACHE/slot*.lock)" >&2; exit 1; }
    fi
fi

# Whatever ends this script (the suite, --timeout, Ctrl-C, a kill) ends its VM and its overlay.
qemu=""
cleanup() {
    if [ -n "$qemu" ] && kill -0 "$qemu" 2>/dev/null; then
        kill -TERM "$qemu" 2>/dev/null  # timeout(1) passes it on to qemu
        wait "$qemu" 2>/dev/null || true
    fi
    rm -rf "$RESULTS/overlay.qcow2" "$RESULTS/pip-venv"
}
trap cleanup EXIT
trap 'echo "labbox: interrupted; the VM is stopped" >&2; exit 130' INT TERM

overlay="$RESULTS/overlay.qcow2"
qemu-img create -q -f qcow2 -F raw -b "$image/disk.raw" "$overlay"
qemu_log="$RESULTS/console.log"
t_boot=$(date +%s)
timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg -cpu max -m 2048 -smp 2 -nographic -no-user-config -nodefaults \
    -serial "file:$qemu_log" -monitor none -nic none \
    -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 quiet systemd.show_status=1 panic=-1 net.ifnames=0" \
    -drive "file=$overlay,format=qcow2,if=virtio,cache=unsafe" \
    -virtfs "local,path=$CHECKOUT,mount_tag=gflow,security_model=none,readonly=on" \
    -virtfs "local,path=$RESULTS,mount_tag=results,security_model=none" &
qemu=$!
# The boot time: qemu's start until guest.sh's first line (it writes guest-start-1).
booted=""
while kill -0 "$qemu" 2>/dev/null; do
    if [ -z "$booted" ] && [ -f "$RESULTS/guest-start-1" ]; then
        booted=$(date +%s)
        echo "labbox: booted in $(( booted - t_boot )) s; installing and running $TESTS"
    fi
    sleep 1
done
qemu_rc=0
wait "$qemu" || qemu_rc=$?
qemu=""
t_end=$(date +%s)
rm -rf "$overlay" "$RESULTS/pip-venv"

rc="$(cat "$RESULTS/rc" 2>/dev/null || echo "")"
for phase in 1 2; do
    [ -f "$RESULTS/pytest-$phase.log" ] && { echo "--- pytest, phase $phase:"; tail -25 "$RESULTS/pytest-$phase.log"; }
done
echo "labbox: $(tr '\n' ';' 2>/dev/null <"$RESULTS/versions.txt" || echo "no versions.txt")"
echo "labbox: image $(( t_built - t_start )) s (built in $(cat "$image/build-seconds") s when cold)," \
     "boot ${booted:+$(( booted - t_boot ))} s, install $(cat "$RESULTS/install-seconds" 2>/dev/null) s," \
     "suite $(cat "$RESULTS/suite-seconds-1" 2>/dev/null) s${RESULTS:+}$( [ -f "$RESULTS/suite-seconds-2" ] && echo " + $(cat "$RESULTS/suite-seconds-2") s after the reboot")," \
     "total $(( t_end - t_start )) s"
if [ -z "$rc" ]; then
    { tail -30 "$qemu_log" | tr -cd "[:print:]\t\n" >&2; } || true  # the firmware writes escape codes
    if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
        echo "labbox: FAILED: the VM did not finish within --timeout $TIMEOUT s and was killed; console: $qemu_log" >&2
    else
        echo "labbox: FAILED: the guest ended without a result (qemu rc $qemu_rc); console: $qemu_log" >&2
    fi
    exit 1
fi
# One of each for whoever reads the run as a whole (CI): both phases' tests in junit.xml, both
# boots' journals in journal.txt, both pytest outputs in pytest.log.
cat "$RESULTS"/pytest-[12].log >"$RESULTS/pytest.log" 2>/dev/null || true
cat "$RESULTS"/journal-[12].txt >"$RESULTS/journal.txt" 2>/dev/null || true
python3 - "$RESULTS" <<'MERGE' || echo "labbox: could not merge junit-*.xml into junit.xml" >&2
import sys, xml.etree.ElementTree as ET
from pathlib import Path
merged = ET.Element("testsuites")
for phase in sorted(Path(sys.argv[1]).glob("junit-[12].xml")):
    root = ET.parse(phase).getroot()
    merged.extend(list(root) if root.tag == "testsuites" else [root])
ET.ElementTree(merged).write(Path(sys.argv[1], "junit.xml"), encoding="utf-8", xml_declaration=True)
MERGE
echo "labbox: results in $RESULTS (junit.xml, pytest.log, journal.txt, console.log; per phase: junit-N.xml, ...)"
[ "$KEEP" = yes ] || [ "$rc" != 0 ] || rm -rf "$RESULTS"
exit "$rc"
