#!/usr/bin/env bash
# Device driver for the DDTREE worker's GPU checks; run from the repo root through the `run` tool with
# carry [".device"] (.device/make_tiny_models.py = ../shared/device/make_tiny_models.py).
#   [TREE_IMPL=stopgap] [VARIANT=sharp|bias] bash scripts/device/worker_gpu.sh "<config,...>" [deadline_s] [block_size]
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
export SGLANG_DDTREE_TREE_IMPL=${TREE_IMPL:-auto}
VARIANT=${VARIANT:-sharp}
BLOCK=${3:-8}
MODELS=/tmp/tiny_models/${VARIANT}_b$BLOCK
if [ "$VARIANT" = sharp ]; then T=target_sharp; D=draft_sharp; else T=target; D=draft_bias; fi
if [ ! -d "$MODELS/$T" ]; then
  python3 .device/make_tiny_models.py --variant "$VARIANT" --out "$MODELS" --block-size "$BLOCK" \
    > "$OUT/make_models_$VARIANT.log" 2>&1 || { tail -20 "$OUT/make_models_$VARIANT.log"; exit 1; }
fi
python3 scripts/device/ddtree_parity.py --target "$MODELS/$T" --draft "$MODELS/$D" \
  --out "$OUT" --configs "$1" --deadline-s "${2:-400}" > "$OUT/run.log" 2>&1
echo "parity exit $?"
grep -E "^\[parity\]" "$OUT/run.log" | cut -c1-1200
grep -E "Decode batch" "$OUT/run.log" | awk 'NR % 6 == 1' | cut -c1-300 | head -24
LAST_TB=$(grep -n "Traceback" "$OUT/run.log" | tail -1 | cut -d: -f1)
[ -n "$LAST_TB" ] && sed -n "${LAST_TB},$((LAST_TB + 45))p" "$OUT/run.log" | cut -c1-300
bash .device/save_jitcache.sh > /dev/null 2>&1
