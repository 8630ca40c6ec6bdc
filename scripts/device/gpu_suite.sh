#!/usr/bin/env bash
# GPU test files under pytest on the lent H200 (or any CUDA machine), each file in its own pytest
# process under a time limit, with logs, JUnit XML and one JSON summary under $OUT.
#
#     bash scripts/device/gpu_suite.sh test/worker/test_sampling_gpu.py test/worker/test_trained_pair_gpu.py@triton
#
# Device tool: carry [".device"]. Without pip, the plugin's real entry point is made visible to every
# SGLang process by a dist-info on PYTHONPATH (what `pip install` of the wheel would write).
# Env: FILE_TIMEOUT (s per file, default 420), PYTEST_ARGS (extra pytest arguments), OUT, SUITE (a name:
# several suites can run at once, e.g. one per GPU with CUDA_VISIBLE_DEVICES; default "gpu_suite").
# File in $OUT: $SUITE.tar (env.txt, summary.json: per file rc / seconds / counts, every log + junit xml),
# rewritten after every file so that an outer timeout still leaves the finished ones.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_suite_out}
SUITE=${SUITE:-gpu_suite}
LOGS=/tmp/$SUITE.logs
mkdir -p "$OUT" "$LOGS"
# shellcheck disable=SC1091
source scripts/device/plugin_env.sh
{
  echo "date $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
  python3 -c "import sys, torch, triton, sglang; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'sglang', sglang.__version__)" 2>&1
} > "$LOGS/env.txt"
cat "$LOGS/env.txt"
echo "[" > "$LOGS/summary.json.part"
first=1
export SGLANG_DDTREE_KEEP_REPORTS=$LOGS/reports  # tests that write raw reports put them here
for spec in "$@"; do
  f=${spec%%@*}  # FILE or FILE@K: pytest -k K (one backend of a parametrised file, say)
  kexpr=""; [ "$f" != "$spec" ] && kexpr=${spec#*@}
  name=$(basename "$f" .py)${kexpr:+_$kexpr}
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 15 "${FILE_TIMEOUT:-420}" python3 -m pytest -m gpu "$f" ${kexpr:+-k "$kexpr"} -v -rA --tb=short \
    -p no:cacheprovider --junitxml="$LOGS/$name.xml" ${PYTEST_ARGS:-} > "$LOGS/$name.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  counts=$(tail -n 3 "$LOGS/$name.log" | grep -E "passed|failed|error|skipped" | tail -n 1)
  echo "[$SUITE] $spec rc=$rc ${dt}s :: $counts"
  grep -E "^(FAILED|ERROR)" "$LOGS/$name.log" | head -n 20
  [ $first = 1 ] || echo "," >> "$LOGS/summary.json.part"
  first=0
  printf '{"file": "%s", "rc": %d, "seconds": %d, "result": "%s"}' "$spec" "$rc" "$dt" "${counts//\"/}" >> "$LOGS/summary.json.part"
  cp "$LOGS/summary.json.part" "$LOGS/summary.json" && echo "]" >> "$LOGS/summary.json"
  tar -C "$LOGS" -cf "$OUT/$SUITE.tar" .  # after every file: an outer timeout still leaves the logs
done
rm -f "$LOGS/summary.json.part"
