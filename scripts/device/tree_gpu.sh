#!/usr/bin/env bash
# Issue 3 on the GPU: `pytest -m gpu test/tree` and benchmark/bench_tree.py, logs + JSON under $OUT.
#
# Run on the device machine from the repo root, with ".device" carried (for sgl_kernel):
#     bash scripts/device/tree_gpu.sh
# Files written to $OUT (6): tree_env.txt, tree_gpu_pytest.log, tree_gpu_junit.xml, bench_tree.log,
# bench_tree.json, tree_gpu_summary.json. Exit status: 0 only if the tests and the benchmark both pass.
# Budget: ~7 minutes (tests <= 200 s, benchmark <= 240 s: the round configs, then the draft head; each
# under `timeout`).
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/tree_gpu_out}"
mkdir -p "$OUT"
T0=$(date +%s)

if [ -f .device/env.sh ]; then
  # shellcheck disable=SC1091
  source .device/env.sh
else
  echo "tree_gpu.sh: .device/env.sh not found (carry \".device\"); sgl_kernel tests will skip" >&2
  export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
fi
PY=python3

{
  echo "date: $(date -u +%FT%TZ)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  $PY - <<'PYEOF' 2>&1
import importlib
for name in ("torch", "triton", "sgl_kernel", "sglang"):
    try:
        mod = importlib.import_module(name)
        print(f"{name}: {getattr(mod, '__version__', '?')}")
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: NOT IMPORTABLE: {exc!r}")
import torch
print("cuda available:", torch.cuda.is_available(), torch.version.cuda)
PYEOF
} > "$OUT/tree_env.txt"
cat "$OUT/tree_env.txt"

echo "=== pytest -m gpu test/tree ==="
timeout 200 $PY -m pytest -m gpu test/tree -q -rs --durations=10 \
  -p no:cacheprovider --junitxml="$OUT/tree_gpu_junit.xml" 2>&1 | tee "$OUT/tree_gpu_pytest.log"
TEST_RC=${PIPESTATUS[0]}
echo "pytest exit: $TEST_RC (124 = timeout)"

echo "=== benchmark/bench_tree.py ==="
timeout 240 $PY benchmark/bench_tree.py --out "$OUT/bench_tree.json" 2>&1 | tee "$OUT/bench_tree.log"
BENCH_RC=${PIPESTATUS[0]}
echo "bench exit: $BENCH_RC (124 = timeout)"

TEST_RC=$TEST_RC BENCH_RC=$BENCH_RC WALL=$(( $(date +%s) - T0 )) OUT="$OUT" $PY - <<'PYEOF'
import json, os, xml.etree.ElementTree as ET
out = os.environ["OUT"]
summary = {"pytest_rc": int(os.environ["TEST_RC"]), "bench_rc": int(os.environ["BENCH_RC"]),
           "wall_s": int(os.environ["WALL"])}
try:
    root = ET.parse(os.path.join(out, "tree_gpu_junit.xml")).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    summary["tests"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    summary["not_passed"] = [
        {"test": c.get("name"), "status": ch.tag, "message": (ch.get("message") or "")[:300]}
        for c in suite.iter("testcase") for ch in c if ch.tag in ("failure", "error", "skipped")
    ]
except Exception as exc:  # noqa: BLE001
    summary["tests"] = f"no junit xml: {exc!r}"
try:
    bench = json.load(open(os.path.join(out, "bench_tree.json")))
    summary["environment"] = bench.get("environment")
    summary["goals"] = bench.get("goals")
    summary["bench"] = [
        {k: r.get(k) for k in ("bs", "budget", "triton_round_ms", "triton_build_ms", "triton_build_bitonic_ms",
                               "triton_build_merge_ms", "triton_topology_ms", "triton_topology_no_full_mask_ms",
                               "triton_accept_commit_ms", "triton_parts_sum_ms", "triton_accept_greedy_ms",
                               "torch_round_ms", "heap_build_ms", "exact_vs_torch_path", "exact_topology",
                               "exact_accept_commit", "exact_bitonic", "exact_merge", "goal_met", "error")
         if k in r}
        for r in bench.get("results", [])
    ]
    summary["head"] = [
        {k: r.get(k) for k in ("model", "bs", "tokens", "head_ms", "sorted_log_probs", "ids_in_vocab", "error")
         if k in r}
        for r in bench.get("head_results", [])
    ]
except Exception as exc:  # noqa: BLE001
    summary["bench"] = f"no bench json: {exc!r}"
json.dump(summary, open(os.path.join(out, "tree_gpu_summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1)[:6000])
PYEOF

echo "tree_gpu.sh: done in $(( $(date +%s) - T0 )) s; files in $OUT:"
ls -la "$OUT"
[ "$TEST_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ]
