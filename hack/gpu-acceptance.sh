#!/usr/bin/env bash
# The real-GPU acceptance run (docs/gpu-acceptance.md): which of gflow's GPU promises hold on this
# machine's NVIDIA GPUs. Same options as hack/gpu-acceptance.py; PYTHON picks the interpreter.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${PYTHON:-python3}" "$ROOT/hack/gpu-acceptance.py" "$@"
