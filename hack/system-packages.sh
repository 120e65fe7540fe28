#!/usr/bin/env bash
# The Debian packages some tests use, installed once with apt when this runs as root on a machine
# that has apt (skipped at once when they are present; GFLOW_NO_APT=1 skips it). hack/test.sh runs
# it, so the README's test command sets up a fresh machine by itself; .ci/run adds --labbox.
# - chromium + chromium-driver: the dashboard's browser test (never a browser download);
# - slurmctld, slurmd, slurm-client, munge: the Slurm backend's tests against a real local
#   Slurm (hack/slurm-dev.sh); they skip, saying why, where Slurm cannot be installed;
# - prometheus (server and promtool): the metrics tests check a real scrape with promtool and
#   have a real Prometheus scrape gflowd; they skip where it cannot be installed;
# - tmux: gflowctl top is checked in a real terminal (tmux capture-pane); skipped without it;
# - zsh, fish: shell completion is checked in each under tmux (skipped without them);
# - with --labbox: mmdebstrap, qemu-system-x86, qemu-utils, e2fsprogs: the lab box (hack/labbox),
#   a Debian VM with systemd and cgroup v2 where tests/labbox run as ordinary users.
# Each group is installed on its own, so one that cannot be had does not take the others down.
set -euo pipefail

[ "${GFLOW_NO_APT:-}" = 1 ] && exit 0
{ [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; } || exit 0
groups=()
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || groups+=("chromium chromium-driver")
{ command -v slurmctld || [ -x /usr/sbin/slurmctld ]; } >/dev/null 2>&1 || groups+=("slurmctld slurmd slurm-client munge")
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || groups+=("prometheus")
command -v tmux >/dev/null 2>&1 || groups+=("tmux")
{ command -v zsh && command -v fish; } >/dev/null 2>&1 || groups+=("zsh fish")
if [ "${1-}" = "--labbox" ]; then
    { command -v mmdebstrap && command -v qemu-system-x86_64 && command -v qemu-img && command -v mkfs.ext4; } >/dev/null 2>&1 \
        || groups+=("mmdebstrap qemu-system-x86 qemu-utils e2fsprogs")
fi
[ ${#groups[@]} -gt 0 ] || exit 0
echo "installing ${groups[*]} (apt) for the dashboard, Slurm, Prometheus and terminal tests"
APT_LOG="$(mktemp)"
apt-get update -q >"$APT_LOG" 2>&1 || tail -20 "$APT_LOG" >&2
for group in "${groups[@]}"; do
    # shellcheck disable=SC2086  # a group is several package names
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q $group >"$APT_LOG" 2>&1; then
        tail -20 "$APT_LOG" >&2
        echo "warning: could not install $group; the browser test fails without chromium, the Slurm and Prometheus tests skip" >&2
    fi
done
rm -f "$APT_LOG"
