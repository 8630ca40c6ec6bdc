#!/usr/bin/env bash
# Bisect of the everyday-features test's DDTREE phase on fa3 (session 11: a crash after the radix scenario), one
# device call of ~3 minutes (fa3 staged): the phase three times at once, as it is, with the draft-KV graphs on and
# with the fused fa3 tree attention off; each phase's whole log comes back under $OUT.
#     source .device/env.sh; bash scripts/device/repro_features_fa3.sh
# Device tool: carry [".device", ".fa3/sha.txt"] after staging the fa3 parts (../shared/device/README.md).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/repro_out}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source scripts/device/plugin_env.sh >/dev/null 2>&1
export DDTREE_TEST_BACKEND=fa3
run() {
  local name=$1; shift
  ( env "$@" timeout -k 5 "${PHASE_TIMEOUT_S:-150}" python3 test/worker/_features_helpers.py --phase ddtree \
      --out "/tmp/rp_$name" > "$OUT/$name.log" 2>&1; echo "rc $?" >> "$OUT/$name.log" ) &
}
run as_is X=1
sleep 3; run kvgraph SGLANG_DDTREE_DRAFT_KV_GRAPH=1
sleep 3; run kvgraph_nofused SGLANG_DDTREE_DRAFT_KV_GRAPH=1 SGLANG_DDTREE_FA3_TREE_ATTENTION=0
wait
for f in "$OUT"/*.log; do
  echo "== $f"
  grep -E "^\[features\]|Error|error|Fatal|^rc " "$f" | head -20
done
