#!/usr/bin/env bash
# The test suite on any machine: sets up .venv (scripts/setup_env.sh) and runs pytest.
# Without a GPU the tests marked `gpu` are skipped; on a GPU machine with SGLang's GPU stack, run
# `pytest -m gpu test/` in that environment (see README). Extra arguments go to pytest.
#
# SGLANG_SUITE_RELEASES="oldest newest" (what .ci/run sets) runs the suite once per named release of the
# support matrix (python/sglang_ddtree/version.py): .venv holds the oldest; a newer release's sglang wheel
# is installed (--no-deps) into .venv-sglang/<version>/, which PYTHONPATH puts ahead of .venv's sglang, so
# the same installed sglang_ddtree wheel runs against it. Default: the installed release only.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
PY="${VENV:-$ROOT/.venv}/bin/python"
# Run from the repository root against the INSTALLED wheel (the entry point is what SGLang sees).
if [ -z "${SGLANG_SUITE_RELEASES:-}" ]; then
  exec "$PY" -m pytest test -q -p no:cacheprovider "$@"
fi
read -r OLDEST NEWEST < <("$PY" -c 'from packaging.version import Version
from sglang_ddtree.version import SUPPORT_MATRIX as m
r = sorted(m, key=Version); print(r[0], r[-1])')
rc=0
for name in $SGLANG_SUITE_RELEASES; do
  case "$name" in
    oldest) release=$OLDEST ;; newest) release=$NEWEST ;; *) release=$name ;;
  esac
  installed=$("$PY" -c 'from importlib.metadata import version; print(version("sglang"))')
  overlay=""
  if [ "$release" != "$installed" ]; then
    overlay="$ROOT/.venv-sglang/$release"
    if [ ! -f "$overlay/.complete" ]; then
      rm -rf "$overlay"
      "$PY" -m pip install -q --no-deps --no-compile --disable-pip-version-check --target "$overlay" "sglang==$release"
      touch "$overlay/.complete"
    fi
  fi
  echo "[test.sh] the CPU suite against sglang $release${overlay:+ (from $overlay)}"
  start=$(date +%s)
  path="$overlay"
  if [ -n "${PYTHONPATH:-}" ]; then path="${path:+$path:}$PYTHONPATH"; fi
  PYTHONPATH="$path" "$PY" -m pytest test -q -p no:cacheprovider "$@" || rc=1
  echo "[test.sh] sglang $release: pytest done in $(( $(date +%s) - start )) s"
done
exit $rc
