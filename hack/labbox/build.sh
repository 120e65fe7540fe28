#!/usr/bin/env bash
# Build the lab box's disk image (once per inputs) and print the directory holding it.
#
#   bash hack/labbox/build.sh            # prints e.g. /var/cache/gflow-labbox/3f2a.../
#
# A Debian bookworm system made only from Debian packages (mmdebstrap, the machine's own apt
# mirror): systemd as PID 1, cgroup v2 only (bookworm's default), the distribution kernel and its
# initrd, python3 and python3-venv. The host boots it with qemu (run.sh). Nothing of gflow is in
# the image: each run installs the checkout it is given (guest.sh), so the image changes only when
# this file does. The cache key is this file's hash plus the mirror.
#
# Environment: LABBOX_CACHE (default /var/cache/gflow-labbox), LABBOX_MIRROR (default: the first
# deb.debian.org-style URI of this machine's apt sources, else http://deb.debian.org/debian).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${LABBOX_CACHE:-/var/cache/gflow-labbox}"
mirror_of_host() {
    local uri
    uri="$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
        | awk '{print $2}' | grep -E '/debian/?$' | head -1)" || true
    echo "${uri:-http://deb.debian.org/debian}"
}
MIRROR="${LABBOX_MIRROR:-$(mirror_of_host)}"
SUITE=bookworm
PACKAGES=systemd,systemd-sysv,libpam-systemd,udev,dbus,linux-image-amd64,python3,python3-venv,kmod,procps

key="$( { cat "$HERE/build.sh"; echo "$MIRROR"; } | sha256sum | cut -c1-16)"
out="$CACHE/$key"
if [ -f "$out/done" ]; then
    echo "$out"
    exit 0
fi
for tool in mmdebstrap mkfs.ext4; do
    command -v "$tool" >/dev/null || { echo "labbox: $tool is not installed (apt-get install mmdebstrap e2fsprogs)" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "labbox: building the image needs root (mknod, chroot)" >&2; exit 3; }

mkdir -p "$CACHE"
work="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

# What the guest needs beyond the packages: the marker tests look for, the 9p shares, the unit
# that runs guest.sh from the host's checkout, a console, fast boots. (A script: mmdebstrap runs
# its hooks with sh.)
cat >"$work/customize.sh" <<'CUSTOMIZE'
set -eu
root="$1"
echo "gflow lab box: tests/labbox run here (hack/labbox/run.sh)" >"$root/etc/gflow-labbox"
echo labbox >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 labbox\n' >"$root/etc/hosts"
cat >"$root/etc/fstab" <<'FSTAB'
/dev/vda / ext4 rw,noatime 0 1
gflow /mnt/gflow 9p trans=virtio,version=9p2000.L,msize=262144,ro,nofail 0 0
results /mnt/results 9p trans=virtio,version=9p2000.L,msize=262144,rw,nofail 0 0
FSTAB
mkdir -p "$root/mnt/gflow" "$root/mnt/results" "$root/var/lib/labbox"
printf '9p\n9pnet_virtio\n' >"$root/etc/modules-load.d/labbox-9p.conf"
cat >"$root/etc/systemd/system/gflow-labbox.service" <<'UNIT'
[Unit]
Description=gflow lab box: install the shared checkout, run its acceptance suite, power off
Wants=mnt-gflow.mount mnt-results.mount
After=multi-user.target mnt-gflow.mount mnt-results.mount

[Service]
Type=oneshot
ExecStart=/bin/bash /mnt/gflow/hack/labbox/guest.sh
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/gflow-labbox.service "$root/etc/systemd/system/multi-user.target.wants/gflow-labbox.service"
chroot "$root" passwd -d root >/dev/null  # a console login for whoever debugs a run by hand
# Nothing here needs them, and under TCG every unit costs seconds of boot.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
CUSTOMIZE


mmdebstrap --variant=minbase --include="$PACKAGES" \
    --aptopt='Apt::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook="bash $work/customize.sh \"\$1\"" \
    "$SUITE" "$work/root" "$MIRROR" >"$work/mmdebstrap.log" 2>&1 || {
    tail -20 "$work/mmdebstrap.log" >&2
    echo "labbox: mmdebstrap of $SUITE from $MIRROR failed (log above)" >&2
    exit 4
}
kernel="$(ls "$work/root/boot"/vmlinuz-* | sort -V | tail -1)"
initrd="$(ls "$work/root/boot"/initrd.img-* | sort -V | tail -1)"
mkdir -p "$work/out"
cp "$kernel" "$work/out/vmlinuz"
cp "$initrd" "$work/out/initrd.img"
chroot "$work/root" dpkg-query -W -f='${Package} ${Version}\n' systemd linux-image-amd64 python3 >"$work/out/packages.txt"
# Room for the users' venvs, the jobs and their logs: the image is sparse, so 4 GiB costs what is used.
# mkfs.ext4 -d says "Creating regular file ..." on stdout even with -q: keep stdout for the path
mkfs.ext4 -q -F -L labroot -d "$work/root" "$work/out/disk.raw" 4G >"$work/mkfs.log" 2>&1 || {
    tail -5 "$work/mkfs.log" >&2
    echo "labbox: mkfs.ext4 of the image failed (above)" >&2
    exit 4
}
rm -rf "$work/root"
echo "$(( $(date +%s) - started ))" >"$work/out/build-seconds"
touch "$work/out/done"
rm -rf "$out"
mv "$work/out" "$out"
echo "labbox: image built in $(cat "$out/build-seconds") s: $out" >&2
echo "$out"
