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
if ! image="$(bash "$HERE/build.sh")"; then
    skip "could not build the image (above)"
fi
t_built=$(date +%s)

[ -n "$RESULTS" ] || RESULTS="$(mktemp -d /tmp/labbox-results.XXXXXX)"
mkdir -p "$RESULTS"
chmod 0755 "$RESULTS"
echo "$TESTS" >"$RESULTS/tests"

# gflow and the suite's few packages as wheels for python 3.11 (bookworm's): the guest installs
# them offline, the way an admin installs a wheel they were handed.
wheels="$RESULTS/wheelhouse"
mkdir -p "$wheels"
PIP=(python3 -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then  # Debian's python3 comes without pip: a venv has one
    python3 -m venv "$RESULTS/pip-venv" >/dev/null 2>&1 || skip "no pip for python3 here (the wheelhouse needs it; apt-get install python3-venv)"
    PIP=("$RESULTS/pip-venv/bin/python" -m pip)
fi
if ! { "${PIP[@]}" wheel -q --no-deps -w "$wheels" "$CHECKOUT" &&
       "${PIP[@]}" download -q -d "$wheels" --only-binary=:all: --python-version 3.11 \
           --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
           "$(ls "$wheels"/gflow_controller-*.whl)" pytest pexpect cloudpickle; } >"$RESULTS/wheelhouse.log" 2>&1; then
    tail -5 "$RESULTS/wheelhouse.log" >&2
    skip "could not make the wheelhouse (PyPI unreachable?)"
fi

# At most two boxes at once on this machine: each TCG guest keeps a core busy.
exec 9>"$CACHE/slot0.lock"
if ! flock -n 9; then
    exec 9>"$CACHE/slot1.lock"
    flock 9
fi

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
t_end=$(date +%s)
rm -rf "$overlay" "$RESULTS/pip-venv"

rc="$(cat "$RESULTS/rc" 2>/dev/null || echo "")"
for phase in 1 2; do
    [ -f "$RESULTS/pytest-$phase.log" ] && { echo "--- pytest, phase $phase:"; tail -25 "$RESULTS/pytest-$phase.log"; }
done
echo "labbox: $(tr '\n' ';' <"$RESULTS/versions.txt" 2>/dev/null)"
echo "labbox: image $(( t_built - t_start )) s (built in $(cat "$image/build-seconds") s when cold)," \
     "boot ${booted:+$(( booted - t_boot ))} s, install $(cat "$RESULTS/install-seconds" 2>/dev/null) s," \
     "suite $(cat "$RESULTS/suite-seconds-1" 2>/dev/null) s${RESULTS:+}$( [ -f "$RESULTS/suite-seconds-2" ] && echo " + $(cat "$RESULTS/suite-seconds-2") s after the reboot")," \
     "total $(( t_end - t_start )) s"
if [ -z "$rc" ]; then
    tail -30 "$qemu_log" >&2
    echo "labbox: FAILED: the guest ended without a result (qemu rc $qemu_rc${qemu_rc:+; 124 is the --timeout}); console: $qemu_log" >&2
    exit 1
fi
echo "labbox: results in $RESULTS (junit-*.xml, pytest-*.log, journal-*.txt, console.log)"
[ "$KEEP" = yes ] || [ "$rc" != 0 ] || rm -rf "$RESULTS"
exit "$rc"
