#!/usr/bin/env bash
# Device driver for the DDTREE worker's GPU checks; run from the repo root through the `run` tool with
# carry [".device"] (.device/make_tiny_models.py = ../shared/device/make_tiny_models.py).
#   bash scripts/device/worker_gpu.sh "<variant:config,...>" [deadline_s] [block_size]
# Writes $OUT/results.jsonl, $OUT/run.log (full log), $OUT/jitcache.tar.xz.
set -uo pipefail
source .device/env.sh
OUT=${OUT:-/tmp/ddt_out}
mkdir -p "$OUT"
# Plugin discovery in every SGLang process (scheduler subprocesses too) without pip: a dist-info
# directory on PYTHONPATH that declares the entry point.
EP=/tmp/ddt_ep/sglang_ddtree-0.0.0.dev0.dist-info
mkdir -p "$EP"
printf 'Metadata-Version: 2.1\nName: sglang-ddtree\nVersion: 0.0.0.dev0\n' > "$EP/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.plugin:register\n' > "$EP/entry_points.txt"
export PYTHONPATH=/tmp/ddt_ep:$PYTHONPATH
BLOCK=${3:-8}
ROOT=/tmp/tiny_models/b$BLOCK
for VARIANT in $(echo "$1" | tr ',' '\n' | cut -d: -f1 | sort -u); do
  [ -d "$ROOT/$VARIANT" ] && continue
  # BIAS_ALPHA skips the bias variant's ~20 s bisection (0.2563 is what it finds for block 8, seed 1234)
  python3 .device/make_tiny_models.py --variant "$VARIANT" --out "$ROOT/$VARIANT" --block-size "$BLOCK" \
    --bias-alpha "${BIAS_ALPHA:-0}" \
    > "$OUT/make_models_$VARIANT.log" 2>&1 &
done
wait
tail -qn 2 "$OUT"/make_models_*.log 2>/dev/null
python3 scripts/device/ddtree_parity.py --models-root "$ROOT" --out "$OUT" --configs "$1" \
  --deadline-s "${2:-400}" > "$OUT/run.log" 2>&1
echo "parity exit $?"
grep -E "^\[parity\]" "$OUT/run.log" | cut -c1-1200
grep -E "Decode batch" "$OUT/run.log" | awk 'NR % 6 == 1' | cut -c1-300 | head -24
LAST_TB=$(grep -n "Traceback" "$OUT/run.log" | tail -1 | cut -d: -f1)
[ -n "$LAST_TB" ] && sed -n "${LAST_TB},$((LAST_TB + 45))p" "$OUT/run.log" | cut -c1-300
[ -n "${SKIP_JITCACHE:-}" ] || bash .device/save_jitcache.sh > /dev/null 2>&1
