#!/usr/bin/env bash
# Issue 18 in one device call on two GPUs (kind nvidia-h200-x2; carry [".device"]): tensor parallelism 2 on the
# current code, several engines at once (parallel.sh; each tp-2 engine spans both GPUs):
#   parity    sharp greedy parity vs plain tp 2, triton, budgets 15, 64 and auto (its own widths, which the ranks
#             agree on, and the fixed bucket cycle; SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP=1 set by the parity script),
#             overlap on and off, bs 1 / 4 / 16 / 48 (test_worker_gpu.py::test_sharp_models_token_identical_tp2)
#   sampling  the T > 0 distribution test at tp 2 (DDTREE_TEST_TP=2)
#   features  the everyday-features test at tp 2 (DDTREE_TEST_TP=2)
#   hybrid    hybrid (GDN) sharp greedy parity at tp 2 (test_hybrid_gpu.py, group tp2)
#
#     CMD_TIMEOUT_S=540 bash scripts/device/tp2.sh
# T > 0 with budget auto's bucket cycle at tp 2, in a call of its own:
#     SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP=1 DDTREE_TEST_SAMPLING_AUTO=1 DDTREE_TEST_TP=2 \
#       python3 -m pytest -m gpu -v test/worker/test_sampling_gpu.py
set -u
cd "$(dirname "$0")/../.."
PYT="python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider"
exec bash scripts/device/parallel.sh \
  "parity=$PYT test/worker/test_worker_gpu.py -k tp2" \
  "sampling=DDTREE_TEST_TP=2 $PYT test/worker/test_sampling_gpu.py" \
  "features=DDTREE_TEST_TP=2 $PYT test/worker/test_features_gpu.py" \
  "hybrid=$PYT test/worker/test_hybrid_gpu.py -k tp2"
