#!/usr/bin/env bash
# One device call for the trained tiny pair: optionally retrain it (RETRAIN=1, extra args to
# scripts/train_tiny_pair.py in TRAIN_ARGS), then benchmark/bench_e2e.py on it: autoregressive vs
# DFLASH vs DDTREE, greedy, token equality against autoregressive, accept lengths, tokens/s.
# Device tool: carry [".device"], command `bash scripts/device/final_gpu.sh`. Files in $OUT (<= 8):
#   e2e.json, e2e.log, [tiny_pair.tar, train.tar], run.log
set -uo pipefail
cd "$(dirname "$0")/../.."
source .device/env.sh
OUT=${OUT:-/tmp/final_out}
mkdir -p "$OUT"
T0=$(date +%s)
# The plugin's real entry point in every SGLang process, without pip: a dist-info on PYTHONPATH.
EP=/tmp/ddt_ep/sglang_ddtree-0.1.0.dist-info
mkdir -p "$EP"
printf 'Metadata-Version: 2.1\nName: sglang_ddtree\nVersion: 0.1.0\n' > "$EP/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.plugin:register\n' > "$EP/entry_points.txt"
export PYTHONPATH=/tmp/ddt_ep:$PYTHONPATH
PAIR=${PAIR:-python/sglang_ddtree/fixtures/tiny_pair}
if [ -n "${RETRAIN:-}" ]; then
  mkdir -p /tmp/train_out
  # shellcheck disable=SC2086
  OUT=/tmp/train_out TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-300} bash scripts/device/train_gpu.sh ${TRAIN_ARGS:-} \
    > /tmp/train_out/driver.log 2>&1
  echo "train rc $? after $(( $(date +%s) - T0 )) s"
  tail -n 12 /tmp/train_out/driver.log
  if [ -f /tmp/train_out/tiny_pair.tar ]; then
    mv /tmp/train_out/tiny_pair.tar "$OUT/"
    mkdir -p /tmp/newpair && tar -xf "$OUT/tiny_pair.tar" -C /tmp/newpair && PAIR=/tmp/newpair
  fi
  tar -C /tmp/train_out -cf "$OUT/train.tar" .
fi
echo "pair: $PAIR"
python3 -m sglang_ddtree doctor > "$OUT/doctor.txt" 2>&1; echo "doctor rc $?"; cat "$OUT/doctor.txt"
LEFT=$(( ${BUDGET_S:-540} - ($(date +%s) - T0) ))
echo "bench_e2e with ${LEFT} s left"
timeout -k 10 "$LEFT" python3 benchmark/bench_e2e.py --target "$PAIR/target" --draft "$PAIR/draft" \
  --configs "${CONFIGS:-plain,dflash,ddtree:64:8,ddtree:16:4}" --bs "${BS:-1,16}" \
  --max-new-tokens "${MAX_NEW:-128}" --deadline-s $(( LEFT - 60 )) --out "$OUT/e2e.json" > "$OUT/e2e.log" 2>&1
echo "bench_e2e rc $? after $(( $(date +%s) - T0 )) s"
grep -E "^\[bench_e2e\]" "$OUT/e2e.log"
LAST_TB=$(grep -n "Traceback" "$OUT/e2e.log" | tail -1 | cut -d: -f1)
[ -n "$LAST_TB" ] && sed -n "${LAST_TB},$((LAST_TB + 40))p" "$OUT/e2e.log" | cut -c1-300
exit 0
