#!/usr/bin/env bash
# The main job on a machine without a GPU: the reference DDTree round loop on CPU, checked token for
# token against the target's own greedy output. Extra arguments go to `python -m sglang_ddtree demo`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup_env.sh"
exec "${VENV:-$ROOT/.venv}/bin/python" -m sglang_ddtree demo "$@"
