#!/usr/bin/env bash
# Create (or reuse) a virtual environment with the pinned SGLang, its import-time dependencies and
# this repository's wheel. CPU-only; no GPU needed. Used by scripts/test.sh and scripts/demo.sh.
#   VENV=.venv (default)   PYTHON=python3 (default)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
SGLANG_SPEC=$(cd "$ROOT/python" && "$PYTHON" -c 'from sglang_ddtree.version import SUPPORTED_SGLANG_SPEC as s; print(s)')
log() { echo "[setup_env $(date +%H:%M:%S)] $*"; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
stamp="$VENV/.ddtree-deps-$(sha1sum "$ROOT/scripts/requirements-cpu.txt" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  log "installing CPU dependencies (scripts/requirements-cpu.txt)"
  "$PY" -m pip install -q --upgrade pip setuptools wheel
  "$PY" -m pip install -q -r "$ROOT/scripts/requirements-cpu.txt"
  log "installing sglang$SGLANG_SPEC (--no-deps: it pins CUDA-only packages)"
  "$PY" -m pip install -q --no-deps "sglang$SGLANG_SPEC"
  touch "$stamp"
fi
log "building and installing the sglang_ddtree wheel"
rm -rf "$ROOT/build" "$ROOT/dist"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$ROOT/dist" "$ROOT"
"$PY" -m pip install -q --no-deps --force-reinstall "$ROOT"/dist/sglang_ddtree-*.whl
rm -rf "$ROOT/build" "$ROOT"/python/*.egg-info
log "ready: $PY ($("$PY" -c 'import torch, sglang, sglang_ddtree; print("torch", torch.__version__, "sglang", sglang.__version__, "sglang_ddtree", sglang_ddtree.__version__)'))"
