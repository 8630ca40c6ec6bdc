#!/usr/bin/env bash
# The test suite on any machine: sets up .venv (scripts/setup_env.sh) and runs pytest.
# Without a GPU the tests marked `gpu` are skipped; on a GPU machine with SGLang's GPU stack, run
# `pytest -m gpu test/` in that environment (see README). Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
# Run from the repository root against the INSTALLED wheel (the entry point is what SGLang sees).
exec "${VENV:-$ROOT/.venv}/bin/python" -m pytest test -q -p no:cacheprovider "$@"
