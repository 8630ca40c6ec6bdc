#!/usr/bin/env bash
# Create (or reuse) a virtual environment with the pinned SGLang, its import-time dependencies and
# this repository's wheel. CPU-only; no GPU needed. Used by scripts/test.sh and scripts/demo.sh.
#   VENV=.venv (default)   PYTHON=python3 (default)
# torch: a CPU build of torch 2.13.0 where `pip install torch==2.13.0` finds one (this image keeps a
# +cpu wheel for Python 3.11 in pip's find-links; PyPI's x86_64 wheels are CUDA builds), with
# torchvision 0.28.0 and triton 3.7.1 (torch 2.13.0's pairing) and scripts/torchvision_cpu_shim.py;
# otherwise, said in the log, PyPI's CUDA build torch 2.14.1 with torchvision 0.29.1 (about 6 GB in the
# venv, CUDA libraries the CPU suite never loads). README "Set-up" has the sizes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
# The oldest supported release (python/sglang_ddtree/version.py; the one the GPU suite runs on) unless
# SGLANG_VERSION names another release of the support matrix.
SGLANG_VERSION=${SGLANG_VERSION:-$(cd "$ROOT/python" && "$PYTHON" -c 'from sglang_ddtree.version import SUPPORTED_SGLANG_MIN as s; print(s)')}
TORCH_CPU="torch==2.13.0 torchvision==0.28.0 triton==3.7.1"
TORCH_CUDA="torch==2.14.1 torchvision==0.29.1"
SHIM=_sglang_ddtree_torchvision_cpu_shim
log() { echo "[setup_env $(date +%H:%M:%S)] $*"; }

# "cpu URL" when the torch==2.13.0 wheel pip would install needs no CUDA package, else "cuda URL".
pick_torch() {
  local report
  report=$(mktemp)
  if ! "$PY" -m pip install -q --dry-run --no-deps --ignore-installed --report "$report" torch==2.13.0 \
      >/dev/null 2>&1; then
    rm -f "$report"
    echo "cuda (pip finds no torch==2.13.0 for $("$PY" --version))"
    return
  fi
  "$PY" - "$report" <<'EOF'
import json, sys
[item] = json.load(open(sys.argv[1]))["install"]
needs_cuda = any(r.lower().startswith("nvidia-") for r in item["metadata"].get("requires_dist") or [])
print("cuda" if needs_cuda else "cpu", item["download_info"]["url"])
EOF
  rm -f "$report"
}

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
deps_hash=$(cat "$ROOT/scripts/requirements-cpu.txt" "$ROOT/scripts/torchvision_cpu_shim.py" <(echo "$TORCH_CPU $TORCH_CUDA") \
  | sha1sum | cut -c1-12)
stamp="$VENV/.ddtree-deps-$deps_hash"
if [ ! -f "$stamp" ]; then
  "$PY" -m pip install -q --upgrade pip setuptools wheel
  SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  read -r build where < <(pick_torch)
  [ "$build" = cpu ] || build=cuda
  if [ "$build" = cpu ]; then
    torch_set=$TORCH_CPU
    log "torch: the CPU build ($where); installing $torch_set and scripts/requirements-cpu.txt"
  else
    torch_set=$TORCH_CUDA
    log "torch: no CPU build of torch 2.13.0 found (pip would take $where); installing PyPI's CUDA build" \
        "$torch_set (about 3 GB of wheels, 6 GB in the venv; the CPU suite loads none of its CUDA libraries)" \
        "and scripts/requirements-cpu.txt"
  fi
  # One resolution, so no other requirement can pull in a different torch.
  # shellcheck disable=SC2086
  "$PY" -m pip install -q $torch_set -r "$ROOT/scripts/requirements-cpu.txt"
  if [ "$build" = cpu ]; then
    # PyPI's torchvision links CUDA torch; the shim lets it import beside the CPU build (its docstring says how).
    cp "$ROOT/scripts/torchvision_cpu_shim.py" "$SITE/$SHIM.py"
    echo "import $SHIM" > "$SITE/$SHIM.pth"
    log "installed scripts/torchvision_cpu_shim.py as $SITE/$SHIM.py (+ .pth): torchvision imports, its C++ ops do not"
    if [ -d "$SITE/nvidia" ]; then
      log "note: $VENV still holds the CUDA libraries of an earlier torch ($(du -sh "$SITE/nvidia" | cut -f1));" \
          "remove $VENV and run this again to drop them"
    fi
  else
    rm -f "$SITE/$SHIM.py" "$SITE/$SHIM.pth"
  fi
  rm -f "$VENV"/.ddtree-deps-*
  touch "$stamp"
fi
if [ "$("$PY" -c 'from importlib.metadata import version; print(version("sglang"))' 2>/dev/null)" != "$SGLANG_VERSION" ]; then
  log "installing sglang==$SGLANG_VERSION (--no-deps: it pins CUDA-only packages)"
  "$PY" -m pip install -q --no-deps "sglang==$SGLANG_VERSION"
fi
log "building and installing the sglang_ddtree wheel"
rm -rf "$ROOT/build" "$ROOT/dist"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$ROOT/dist" "$ROOT"
"$PY" -m pip install -q --no-deps --force-reinstall "$ROOT"/dist/sglang_ddtree-*.whl
rm -rf "$ROOT/build" "$ROOT"/python/*.egg-info
log "ready: $PY ($("$PY" -c 'import torch, torchvision, triton, sglang, sglang_ddtree; print("torch", torch.__version__, "torchvision", torchvision.__version__, "triton", triton.__version__, "sglang", sglang.__version__, "sglang_ddtree", sglang_ddtree.__version__)')), $(du -sh "$VENV" | cut -f1)"
