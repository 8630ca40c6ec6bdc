#!/usr/bin/env bash
# Named shell commands at once on one GPU machine (engine-level GPU tests mostly wait on engine starts, so
# several share one H200), each with its own log, exit code and time limit; one JSON summary and one tar
# of every log (and of whatever each command leaves under $OUT/<name>/) under $OUT.
#
#     bash scripts/device/parallel.sh "tree=python3 -m pytest -m gpu test/tree/test_gpu.py" "parity=python3 ..."
#
# Device tool: carry [".device"] (+ ".fa3/sha.txt" after staging the fa3 parts, see ../shared/device/README.md).
# Each command runs from the repo root after `source .device/env.sh`, with the plugin's entry point visible
# to every SGLang process (a dist-info on PYTHONPATH, what `pip install` of the wheel writes), with
# CMD_OUT=$OUT/<name> (created) and SGLANG_DDTREE_KEEP_REPORTS=$OUT/<name>. Env: CMD_TIMEOUT_S (from the first start; default
# 560), STAGGER_S (default 5: engine ports are picked at start). parallel.json has each command's exit code, pytest
# result, failures and passed tests, and for a ddtree_parity.py command (--out $CMD_OUT) each config's verdict
# ("exact 1:32/32 ...", "DIVERGED ...", "error: ...", "skipped at the deadline"). Files in $OUT afterwards: parallel.json and
# logs.tar.gz (logs/, env.txt and every <name>/ folder; the folders themselves are removed so that the device
# tool's 8-file limit holds).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/parallel_out}
LOGS=$OUT/logs
mkdir -p "$LOGS"
names=()
pids=()
starts=()
finish() {  # the JSON summary and one tar of every log (also when the call is stopped: TERM / INT)
  python3 - "$LOGS" "${names[@]}" > "$OUT/parallel.json" <<'PY'
import json, os, re, sys
logs, names = sys.argv[1], sys.argv[2:]
env = os.path.join(logs, "env.txt")  # absent when the call was stopped during the set-up
out = {"env": open(env).read().splitlines() if os.path.exists(env) else [], "commands": {}}
for n in names:
    text = open(os.path.join(logs, n + ".log"), errors="replace").read() if os.path.exists(os.path.join(logs, n + ".log")) else ""
    rc = open(os.path.join(logs, n + ".rc")).read().strip() if os.path.exists(os.path.join(logs, n + ".rc")) else None
    counts = [l for l in text.splitlines() if re.search(r"\d+ (passed|failed|error)", l)]
    out["commands"][n] = {"rc": rc, "result": counts[-1] if counts else None,
                          "failures": [l for l in text.splitlines() if l.startswith(("FAILED", "ERROR"))][:30],
                          "passed": [l.split()[1] for l in text.splitlines() if l.startswith("PASSED ")][:200]}
    # a ddtree_parity.py run (--out $CMD_OUT): each config's verdict from its results.jsonl, and the configs its
    # deadline skipped (pytest's PASSED / FAILED lines above say nothing about it)
    jsonl = os.path.join(os.path.dirname(logs), n, "results.jsonl")
    if os.path.exists(jsonl):
        verdicts = {}
        for line in open(jsonl, errors="replace"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            got = rec.get("parity", rec.get("self_parity"))
            if "error" in rec:
                verdicts[rec["config"]] = "error: " + rec["error"][:200]
            elif isinstance(got, dict):
                cells = " ".join(f"{bs}:{c['equal']}/{c['total']}" for bs, c in got.items())
                exact = all(c["equal"] == c["total"] for c in got.values())
                verdicts[rec["config"]] = ("exact " if exact else "DIVERGED ") + cells
            else:
                verdicts[rec["config"]] = str(got)
        for m in re.finditer(r"deadline reached, skipping (\S+)", text):
            verdicts[m.group(1)] = "skipped at the deadline"
        out["commands"][n]["parity"] = verdicts
print(json.dumps(out, indent=1))
PY
  cat "$OUT/parallel.json"
  tar -C "$OUT" -czf /tmp/parallel_logs.tar.gz logs "${names[@]}" && mv /tmp/parallel_logs.tar.gz "$OUT/logs.tar.gz" \
    && (cd "$OUT" && rm -rf logs "${names[@]}")
  ls -la "$OUT"
}
killtree() { local c; for c in $(pgrep -P "$1"); do killtree "$c"; done; kill -TERM "$1" 2>/dev/null; }
# Set before the set-up below (bundle unpack, torch / sglang imports: seconds): a stop at any point summarises.
trap 'echo "[parallel] stopped: summarising what finished" >&2; for p in "${pids[@]}"; do killtree "$p"; done
      finish; exit 143' TERM INT
# shellcheck disable=SC1091
source scripts/device/plugin_env.sh
{
  echo "date $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo unknown) dirty $(git status --porcelain 2>/dev/null | grep -vc '^??')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
  python3 -c "import sys, torch, triton, sglang; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'sglang', sglang.__version__)" 2>&1
  python3 -c "from sgl_kernel import flash_ops; print('fa3 flash_ops importable')" 2>&1 | tail -1
} > "$LOGS/env.txt"
cat "$LOGS/env.txt"
# Every command ends by CMD_TIMEOUT_S after the first one started (the stagger does not push the last one later):
# a device call's own limit must exceed CMD_TIMEOUT_S + the set-up above (~10-40 s) + ~15 s to summarise.
t_first=$(date +%s)
for spec in "$@"; do
  name=${spec%%=*}
  cmd=${spec#*=}
  mkdir -p "$OUT/$name"
  names+=("$name")
  starts+=("$(date +%s)")
  (export CMD_OUT=$OUT/$name SGLANG_DDTREE_KEEP_REPORTS=$OUT/$name
   left=$(( ${CMD_TIMEOUT_S:-560} - ($(date +%s) - t_first) ))
   timeout -k 10 "$(( left > 10 ? left : 10 ))" bash -c "$cmd" > "$LOGS/$name.log" 2>&1
   echo $? > "$LOGS/$name.rc") &
  pids+=($!)
  sleep "${STAGGER_S:-5}"
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  rc=$(cat "$LOGS/${names[$i]}.rc" 2>/dev/null || echo 255)
  echo "[parallel] ${names[$i]} rc=$rc $(( $(date +%s) - ${starts[$i]} ))s :: $(grep -E 'passed|failed|error' "$LOGS/${names[$i]}.log" | tail -n 1)"
done
trap - TERM INT
finish
