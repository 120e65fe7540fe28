#!/usr/bin/env bash
# Demo: run gflowd in the foreground on a copy of manifests/examples.
#
#   bash hack/run-example.sh                  # Ctrl-C stops gflowd (running jobs keep running)
#   GFLOW_HOME=/tmp/demo bash hack/run-example.sh --resync 2s
#   DEMO_PACE=1 bash hack/run-example.sh      # the jobs at test speed (a few seconds in all)
#
# The example jobs' simulated work is stretched by DEMO_PACE (default here 16, so the whole demo
# takes ~30-60 s: a queue forms on the 4 GPUs and you can watch Pending -> Running -> Succeeded
# from a second terminal). Only what running needs is installed (no test or plot extras).
#
# GFLOW_HOME defaults to ./.gflow-demo in the repo. The example manifests are copied into
# $GFLOW_HOME/jobs, so the demo never edits the repo: edit the copies to play with the jobs.
# Without a working nvidia-smi, gflowd uses the 4 fake GPUs of manifests/examples/fake-gpus.yaml.
# Extra arguments go to gflowd.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GFLOW_EXTRAS="" bash "$ROOT/hack/setup.sh"
DEMO_PACE="${DEMO_PACE:-16}"  # given to each copied job in its env: jobs never see gflowd's environment

GFLOW_HOME="${GFLOW_HOME:-$ROOT/.gflow-demo}"
case "$GFLOW_HOME" in
    /*) ;;
    *) GFLOW_HOME="$PWD/$GFLOW_HOME" ;;
esac
export GFLOW_HOME
SPEC_DIR="$GFLOW_HOME/jobs"
EXAMPLES="$ROOT/manifests/examples"
FAKE_GPUS="$EXAMPLES/fake-gpus.yaml"

paced() {  # the manifest $1 with DEMO_PACE in its job's env (a Sweep's template), comments kept
    "$ROOT/.venv/bin/python" - "$1" "$DEMO_PACE" <<'PY'
import sys
from ruamel.yaml import YAML
yaml = YAML()
yaml.preserve_quotes = True
yaml.indent(mapping=2, sequence=4, offset=2)  # the examples' own style
with open(sys.argv[1]) as handle:
    doc = yaml.load(handle)
spec = doc["spec"]
job = spec["template"] if doc.get("kind") == "Sweep" else spec
job.setdefault("env", {})["DEMO_PACE"] = sys.argv[2]
yaml.dump(doc, sys.stdout)
PY
}

mkdir -p "$SPEC_DIR"
(cd "$EXAMPLES" && find . -name '*.yaml' ! -name fake-gpus.yaml) | while read -r rel; do
    # an unchanged copy is an unchanged spec: finished jobs do not run again
    mkdir -p "$SPEC_DIR/$(dirname "$rel")"
    paced "$EXAMPLES/$rel" > "$SPEC_DIR/.copy.tmp"
    if cmp -s "$SPEC_DIR/.copy.tmp" "$SPEC_DIR/$rel"; then rm "$SPEC_DIR/.copy.tmp"; else mv "$SPEC_DIR/.copy.tmp" "$SPEC_DIR/$rel"; fi
done

args=(--home "$GFLOW_HOME" --spec-dir "$SPEC_DIR")
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    gpus="real GPUs (NVML)"
else
    args+=(--fake-gpus "$FAKE_GPUS")
    gpus="fake GPUs from ${FAKE_GPUS#"$ROOT"/}"
fi

CTL="GFLOW_HOME=$GFLOW_HOME $ROOT/.venv/bin/gflowctl"
cat <<EOF
gflowd on $gpus, jobs in $SPEC_DIR (Ctrl-C stops gflowd; running jobs keep running).
In a second terminal, watch the queue drain (~30-60 s):
  $CTL get jobs -w               # Pending -> Running -> Succeeded, live
  $CTL get gpus                  # which job holds which GPU
  $CTL describe job train-1gpu   # why a job waits, its events
  $CTL logs -f train-1gpu        # follow a job's output
EOF
exec "$ROOT/.venv/bin/gflowd" "${args[@]}" "$@"
