#!/usr/bin/env bash
# The H200 run of the roll-out tools (issue "Rolling DDTREE out safely"), one device call of <= 10 minutes:
# three launch_server processes on the packaged tiny pair (DFLASH on fa3 when staged, else triton, on port 30000;
# DDTREE on 30001; the plain target on 30002), each awaited with `python -m sglang_ddtree wait-healthy`; then
# bench_serving over DFLASH and DDTREE (c 1/4/16, 2 repetitions, plots) and shadow_compare (greedy identity, c 1
# and 8, each divergence classified by the plain server's log-probs: --reference); then wait-healthy against a
# server made to fail at start (an unknown drafter architecture), which must exit 1 within seconds with the cause.
#     bash scripts/device/rollout.sh
# Device tool: carry [".device"] (+ ".fa3/sha.txt" after staging the fa3 parts). Results under $OUT:
# serving.json + PNGs (serving_plots.tar.gz), shadow_c1.json, shadow_c8.json, rollout.log (with wait-healthy's
# exit codes and times).
# Faults under load (test/worker/test_faults_gpu.py), each its own device call of <= 600 s, through gpu_suite.sh
# (logs, JUnit XML and the tests' JSON records in $OUT/<suite>.tar):
#     bash scripts/device/rollout.sh faults   # KV pool too small (retraction) + server restart under load, ~7 min
#     bash scripts/device/rollout.sh soak     # mixed soak at concurrency 64, DDTREE_SOAK_S=300 (default here), ~8 min
#     bash scripts/device/rollout.sh fail     # only the failing server's wait-healthy check (~1-2 min with the start)
#     bash scripts/device/rollout.sh admit    # the admission window's serving A/B (session 42, experimental): plain,
#                                             # DDTREE budget 63, DDTREE budget 63 with SGLANG_DDTREE_ADMIT_WAIT=4
#                                             # (ADMIT_WAIT overrides), bench_serving at c 16 / 48 (ADMIT_CONCURRENCY),
#                                             # one output length, 3 repetitions: tok/s and what the window costs in
#                                             # TTFT, ~6 min (fa3 staged)
#     bash scripts/device/rollout.sh restart_soak   # the restart (DDTREE_RESTART_LOAD_S=120) then a shorter soak
#                                             # (DDTREE_SOAK_S=200), one after the other (the soak samples the whole
#                                             # GPU's memory: no other server may start beside it), ~8 min
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/rollout_out}
# A server that dies at start: wait-healthy must say so within seconds (exit 1), with the cause.
failing_server() {
  local bad pb t0 rc
  bad=$(mktemp -d)
  cp -r "$DRF"/. "$bad"/
  python3 - "$bad/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["architectures"] = ["NoSuchDraftModel"]; c.pop("dflash_config", None)
json.dump(c, open(sys.argv[1], "w"))
PY
  python3 -m sglang.launch_server $COMMON --port 30003 --speculative-algorithm DFLASH \
    --speculative-draft-model-path "$bad" > "$OUT/logs/bad.log" 2>&1 &
  pb=$!
  t0=$(date +%s)
  python3 -m sglang_ddtree wait-healthy --url http://127.0.0.1:30003 --pid "$pb" --log "$OUT/logs/bad.log" --timeout 240
  rc=$?
  echo "[rollout] wait-healthy on a failing server rc=$rc after $(( $(date +%s) - t0 )) s (want 1)"
  # when the server process ended (its log's mtime) vs when wait-healthy returned: the issue's "within 10 s"
  echo "[rollout] server log last written $(( $(date +%s) - $(stat -c %Y "$OUT/logs/bad.log") )) s before wait-healthy's verdict was printed"
  kill "$pb" 2>/dev/null
}
# await_servers "PORT PID NAME" ...: wait-healthy on each (its log under $OUT/logs/NAME.log), the verdict printed
await_servers() {
  local spec port pid name t0
  for spec in "$@"; do
    read -r port pid name <<< "$spec"
    t0=$(date +%s)
    python3 -m sglang_ddtree wait-healthy --url "http://127.0.0.1:$port" --pid "$pid" --log "$OUT/logs/$name.log" \
      --timeout 300 --progress-every 30
    echo "[rollout] wait-healthy $name rc=$? after $(( $(date +%s) - t0 )) s"
  done
}
case "${1:-}" in
  faults)
    SUITE=faults FILE_TIMEOUT=570 exec bash scripts/device/gpu_suite.sh \
      "test/worker/test_faults_gpu.py@kv_pool or restart" ;;
  soak)
    DDTREE_SOAK_S=${DDTREE_SOAK_S:-300} SUITE=soak FILE_TIMEOUT=570 exec bash scripts/device/gpu_suite.sh \
      "test/worker/test_faults_gpu.py@soak" ;;
  restart_soak)
    DDTREE_RESTART_LOAD_S=${DDTREE_RESTART_LOAD_S:-120} DDTREE_SOAK_S=${DDTREE_SOAK_S:-200} SUITE=restart_soak \
      FILE_TIMEOUT=${FILE_TIMEOUT:-330} exec bash scripts/device/gpu_suite.sh \
      "test/worker/test_faults_gpu.py@restart" "test/worker/test_faults_gpu.py@soak" ;;
  ""|fail|admit) ;;
  *) echo "usage: bash scripts/device/rollout.sh [faults|soak|restart_soak|fail|admit]" >&2; exit 2 ;;
esac
mkdir -p "$OUT/plots" "$OUT/logs"
# shellcheck disable=SC1091
source scripts/device/plugin_env.sh
read -r TGT DRF <<< "$(python3 -c "from sglang_ddtree.fixtures import tiny_pair_path as t; p = t(); print(p.target, p.draft)")"
BACKEND=triton
python3 -c "from sgl_kernel import flash_ops" 2>/dev/null && BACKEND=fa3
COMMON="--model-path $TGT --dtype bfloat16 --mem-fraction-static 0.3 --context-length 2048 --max-total-tokens 65536 --cuda-graph-max-bs-decode 16 --log-level warning"
if [ "${1:-}" = admit ]; then
  # the tiny pair at up to 64 requests (graphs to 64), every server alive at once, the log at INFO for the window's
  # start-up line and the prefill batches (grep -c 'Prefill batch' logs/*.log)
  COMMON="--model-path $TGT --dtype bfloat16 --mem-fraction-static 0.2 --context-length 2048 --max-total-tokens 65536 --cuda-graph-max-bs-decode 64 --max-running-requests 64 --log-level info"
  python3 -m sglang.launch_server $COMMON --port 30002 > "$OUT/logs/plain.log" 2>&1 &
  P2=$!
  python3 -m sglang.launch_server $COMMON --port 30001 --speculative-algorithm DDTREE \
    --speculative-draft-model-path "$DRF" --speculative-ddtree-budget 63 > "$OUT/logs/ddtree.log" 2>&1 &
  P1=$!
  SGLANG_DDTREE_ADMIT_WAIT=${ADMIT_WAIT:-4} python3 -m sglang.launch_server $COMMON --port 30003 \
    --speculative-algorithm DDTREE --speculative-draft-model-path "$DRF" --speculative-ddtree-budget 63 \
    > "$OUT/logs/ddtree_admit.log" 2>&1 &
  P3=$!
  await_servers "30002 $P2 plain" "30001 $P1 ddtree" "30003 $P3 ddtree_admit"
  timeout 330 python3 benchmark/bench_serving.py --endpoint plain=http://127.0.0.1:30002 \
    --endpoint ddtree_b63=http://127.0.0.1:30001 --endpoint "ddtree_b63_admit${ADMIT_WAIT:-4}=http://127.0.0.1:30003" \
    --concurrency "${ADMIT_CONCURRENCY:-16,48}" --requests-per-level 128 --max-new-tokens 128 --repeats 3 \
    --out "$OUT/serving_admit.json"
  echo "[rollout] bench_serving rc=$?"
  kill "$P1" "$P2" "$P3" 2>/dev/null
  wait 2>/dev/null
  grep -c 'Prefill batch' "$OUT"/logs/*.log
  grep -h 'admission window' "$OUT"/logs/*.log | head -2
  (cd "$OUT" && tar -czf logs.tar.gz logs && rm -rf plots logs)
  exit 0
fi
if [ "${1:-}" = fail ]; then
  failing_server
  (cd "$OUT" && tar -czf logs.tar.gz logs && rm -rf plots logs)
  exit 0
fi
python3 -m sglang.launch_server $COMMON --port 30000 --attention-backend "$BACKEND" \
  --speculative-algorithm DFLASH --speculative-draft-model-path "$DRF" > "$OUT/logs/dflash.log" 2>&1 &
P0=$!
sleep 5
python3 -m sglang.launch_server $COMMON --port 30001 --speculative-algorithm DDTREE \
  --speculative-draft-model-path "$DRF" --speculative-ddtree-budget 63 > "$OUT/logs/ddtree.log" 2>&1 &
P1=$!
# the plain target: shadow_compare's --reference, which classifies each divergence by its log-probs
python3 -m sglang.launch_server $COMMON --mem-fraction-static 0.15 --port 30002 > "$OUT/logs/plain.log" 2>&1 &
P2=$!
await_servers "30000 $P0 dflash" "30001 $P1 ddtree" "30002 $P2 plain"
timeout 300 python3 benchmark/bench_serving.py --endpoint "dflash_$BACKEND=http://127.0.0.1:30000" \
  --endpoint ddtree=http://127.0.0.1:30001 --concurrency 1,4,16 --max-new-tokens 128 --repeats 2 \
  --out "$OUT/serving.json" --plot-dir "$OUT/plots"
echo "[rollout] bench_serving rc=$?"
for c in 1 8; do
  timeout 120 python3 benchmark/shadow_compare.py --baseline http://127.0.0.1:30000 --candidate http://127.0.0.1:30001 \
    --reference http://127.0.0.1:30002 --concurrency "$c" --max-new-tokens 64 --out "$OUT/shadow_c$c.json"
  echo "[rollout] shadow_compare c=$c rc=$?"
done
kill "$P0" "$P1" "$P2" 2>/dev/null
wait 2>/dev/null
failing_server
(cd "$OUT" && tar -czf serving_plots.tar.gz plots && tar -czf logs.tar.gz logs && rm -rf plots logs)
ls -la "$OUT"
