#!/usr/bin/env bash
# The GPU suite on another supported SGLang release than 0.5.16 (issue 16 item 5), in two device calls of <= 10
# minutes (session 13 ran all seven commands in one call: on one GPU they shared 16 cores and three of the
# engine-level ones did not finish in 430 s): the tree kernels, the node-by-node verify logits and sharp greedy
# parity vs plain (triton, and fa3 when staged) in `parity`; everyday features, T > 0, accept coverage and
# observability in `features`. Several engines at once per call (parallel.sh).
#
#     bash scripts/device/build_release_bundle.sh 0.5.17                          # CPU, once -> .device-0.5.17/
#     DDTREE_DEVICE_RELEASE=0.5.17 bash scripts/device/release_gpu.sh parity       # device: carry [".device-0.5.17"]
#     DDTREE_DEVICE_RELEASE=0.5.17 bash scripts/device/release_gpu.sh features     # (+ ".fa3/sha.txt" after staging
#                                                                                 # fa3; stage.sh for the JIT cache)
# Results: $OUT/parallel.json (per command rc and pytest counts, the release in its env lines) and logs.tar.gz.
set -u
cd "$(dirname "$0")/../.."
: "${DDTREE_DEVICE_RELEASE:?set DDTREE_DEVICE_RELEASE to the release whose bundle is carried (e.g. 0.5.17)}"
PYT="python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider"
FA3=""
[ -f /tmp/fa3p/part_00 ] && FA3=1
case "${1:-}" in
  parity) cmds=(
    "tree=$PYT test/tree/test_gpu.py test/worker/test_sampling_kernel_gpu.py"
    "verify_logits=$PYT test/worker/test_verify_logits_gpu.py -k 'not flashinfer'"
    "parity_triton=$PYT test/worker/test_worker_gpu.py -k 'sharp_models_token_identical and triton and not tp2'"
    ${FA3:+"parity_fa3=$PYT test/worker/test_worker_gpu.py -k 'sharp_models_token_identical and fa3 and not tp2'"}) ;;
  features) cmds=(
    "features=$PYT test/worker/test_features_gpu.py"
    "sampling=$PYT test/worker/test_sampling_gpu.py"
    "coverage_obs=$PYT test/worker/test_accept_coverage_gpu.py test/worker/test_observability_gpu.py"
    ${FA3:+"features_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py"}) ;;
  *) echo "usage: DDTREE_DEVICE_RELEASE=VERSION $0 parity|features" >&2; exit 2 ;;
esac
exec bash scripts/device/parallel.sh "${cmds[@]}"
