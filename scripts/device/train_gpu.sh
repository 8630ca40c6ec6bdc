#!/usr/bin/env bash
# Train the tiny Qwen3 target + DFlash drafter pair (sglang_ddtree.fixtures) on the lent H200.
# Device tool, from the repo root: carry [".device"], command `bash scripts/device/train_gpu.sh`
# (extra arguments go to scripts/train_tiny_pair.py; CPU smoke test: DEVICE=cpu ... --quick).
# About 5.5 minutes: the target trains <= 120 s (less if its validation loss plateaus), the drafter until
# TIME_BUDGET (330 s) minus 50 s for the evaluation; TRAIN_TIMEOUT (400 s) kills an overrun so that the
# logs still come back.
# Writes into $OUT (what the device tool brings back):
#   tiny_pair.tar     target/ draft/ summary.json: untar into python/sglang_ddtree/fixtures/tiny_pair/
#   summary.json      corpus, sizes, steps, times, validation losses, measured accept lengths
#   train_log.jsonl   every logged loss / eval (one JSON object a line)
#   train.log         stdout + stderr of the training (progress bars included)
#   env.txt           Python, torch, CUDA device, transformers, tokenizers
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tiny_pair_out}
WORK=${WORK:-/tmp/tiny_pair_work}
mkdir -p "$OUT"
if [ -f .device/env.sh ]; then
  source .device/env.sh  # the bundle's transformers 5.12.1 / tokenizers 0.22.2 (what SGLang 0.5.16 loads with)
else
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
fi
{
  python3 - <<'PY'
import sys, torch, transformers, tokenizers, safetensors
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO CUDA")
print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__,
      "safetensors", safetensors.__version__)
PY
  echo "cpus $(nproc)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
t0=$(date +%s)
timeout -k 10 "${TRAIN_TIMEOUT:-400}" python3 scripts/train_tiny_pair.py --device "${DEVICE:-cuda}" --work "$WORK" \
  --out "$WORK/pair" --time-budget "${TIME_BUDGET:-330}" "$@" > "$OUT/train.log" 2>&1
rc=$?
echo "train_tiny_pair exit $rc after $(( $(date +%s) - t0 )) s"
cp "$WORK/train_log.jsonl" "$OUT/" 2>/dev/null
if [ "$rc" = 0 ] && [ -f "$WORK/pair/summary.json" ]; then
  cp "$WORK/pair/summary.json" "$OUT/"
  tar -C "$WORK/pair" -cf "$OUT/tiny_pair.tar" target draft summary.json
  ls -l "$OUT"
fi
grep -v "it/s" "$OUT/train.log" | tail -n 40
exit $rc
