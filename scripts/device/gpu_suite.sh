#!/usr/bin/env bash
# GPU test files under pytest on the lent H200 (or any CUDA machine), each file in its own pytest
# process under a time limit, with logs, JUnit XML and one JSON summary under $OUT.
#
#     bash scripts/device/gpu_suite.sh test/worker/test_sampling_gpu.py test/worker/test_features_gpu.py
#
# Device tool: carry [".device"]. Without pip, the plugin's real entry point is made visible to every
# SGLang process by a dist-info on PYTHONPATH (what `pip install` of the wheel would write).
# Env: FILE_TIMEOUT (s per file, default 420), PYTEST_ARGS (extra pytest arguments), OUT.
# Files in $OUT: gpu_suite.tar (every log + junit xml), gpu_suite.json (per file: rc, seconds, counts).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_suite_out}
LOGS=/tmp/gpu_suite_logs
mkdir -p "$OUT" "$LOGS"
if [ -f .device/env.sh ]; then
  # shellcheck disable=SC1091
  source .device/env.sh
fi
EP=/tmp/ddt_ep/sglang_ddtree-0.1.0.dist-info
mkdir -p "$EP"
printf 'Metadata-Version: 2.1\nName: sglang_ddtree\nVersion: 0.1.0\n' > "$EP/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.plugin:register\n' > "$EP/entry_points.txt"
export PYTHONPATH=/tmp/ddt_ep:$PWD/python:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
{
  echo "date $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
  python3 -c "import sys, torch, triton, sglang; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'sglang', sglang.__version__)" 2>&1
} > "$LOGS/env.txt"
cat "$LOGS/env.txt"
echo "[" > "$LOGS/summary.json.part"
first=1
for f in "$@"; do
  name=$(basename "$f" .py)
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 15 "${FILE_TIMEOUT:-420}" python3 -m pytest -m gpu "$f" -v -rA --tb=short -p no:cacheprovider \
    --junitxml="$LOGS/$name.xml" ${PYTEST_ARGS:-} > "$LOGS/$name.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  counts=$(tail -n 3 "$LOGS/$name.log" | grep -E "passed|failed|error|skipped" | tail -n 1)
  echo "[gpu_suite] $f rc=$rc ${dt}s :: $counts"
  grep -E "^(FAILED|ERROR)" "$LOGS/$name.log" | head -n 20
  [ $first = 1 ] || echo "," >> "$LOGS/summary.json.part"
  first=0
  printf '{"file": "%s", "rc": %d, "seconds": %d, "result": "%s"}' "$f" "$rc" "$dt" "${counts//\"/}" >> "$LOGS/summary.json.part"
  tar -C "$LOGS" -cf "$OUT/gpu_suite.tar" .  # after every file: an outer timeout still leaves the logs
done
echo "]" >> "$LOGS/summary.json.part"
mv "$LOGS/summary.json.part" "$OUT/gpu_suite.json"
cp "$LOGS/env.txt" "$OUT/gpu_suite_env.txt"
tar -C "$LOGS" -cf "$OUT/gpu_suite.tar" .
