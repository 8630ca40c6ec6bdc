#!/usr/bin/env bash
# The H200 runs of issues 11 (clean foundations) and 12 (fa3), as three device calls of <= 10 minutes:
#     bash scripts/device/issue11_12.sh checks     # tree + commit kernels, node-by-node verify logits on
#                                                  # triton / flashinfer / fa3, sharp parity on fa3 + a triton subset
#     bash scripts/device/issue11_12.sh features   # fa3: trained-pair matrix, T > 0, everyday features;
#                                                  # accept coverage (test plugin), observability, sampling kernel
#     bash scripts/device/issue11_12.sh paired     # bench_tree, then the paired benchmark (GPU otherwise idle)
#     bash scripts/device/issue11_12.sh tree       # fa3 with DDTREE's fused tree attention switched on
#                                                  # (SGLANG_DDTREE_FA3_TREE_ATTENTION=1, worker/fa3_tree.py): the
#                                                  # kernels natively, verify logits, sharp parity, T > 0, features;
#                                                  # then its speed: SHAPE_CONFIGS=dflash+fa3,ddtree:15:8+fa3+fa3cascade,
#                                                  # ddtree:15:8+fa3+fa3tree bash scripts/device/issue14.sh shape
#     bash scripts/device/issue11_12.sh close      # the fused path as the default (switch unset): sharp parity
#                                                  # b1 / b15 / auto on fa3, auto on triton; the trained pair on fa3
# Device tool: carry [".device", ".fa3/sha.txt"] after staging the fa3 parts (../shared/device/README.md).
# Results: $OUT/parallel.json + logs.tar.gz (scripts/device/parallel.sh), or the benchmark JSONs.
set -u
cd "$(dirname "$0")/../.."
PAR=scripts/device/parallel.sh
PYT="python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider"
MODELS='python3 -c "import sys; sys.path.insert(0, \"test/worker\"); from _generated_models import generate_models; generate_models(sys.argv[1])"'
case "${1:-}" in
  checks)
    exec bash $PAR \
      "tree=$PYT test/tree/test_gpu.py test/worker/test_commit_kernel_interp.py" \
      "vl_triton=DDTREE_TEST_REPORT_DIR=\$CMD_OUT $PYT -s test/worker/test_verify_logits_gpu.py -k 'triton or corrupted'" \
      "vl_flashinfer=DDTREE_TEST_REPORT_DIR=\$CMD_OUT $PYT -s test/worker/test_verify_logits_gpu.py -k flashinfer" \
      "vl_fa3=DDTREE_TEST_REPORT_DIR=\$CMD_OUT $PYT -s test/worker/test_verify_logits_gpu.py -k fa3" \
      "parity_fa3=$MODELS /tmp/m_fa3 && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fa3 --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_b1,sharp:dd_fa3_b15,sharp:dd_fa3_b64,sharp:dd_fa3_b256,sharp:dd_fa3_b64_nograph,sharp:dd_fa3_b15_nooverlap --deadline-s 480" \
      "parity_triton=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_b64,sharp:dd_triton_b15_nooverlap,sharp:dd_triton_b64_reversed,sharp:dd_triton_b1,sharp:dd_triton_b64_nograph --deadline-s 480"
    ;;
  features)
    P=$(python3 -c "import sys; sys.path.insert(0, 'python'); from sglang_ddtree.fixtures import tiny_pair_path as t; p = t(); print(p.target, p.draft)")
    read -r TGT DRF <<< "$P"
    exec bash $PAR \
      "pair_fa3=python3 benchmark/bench_e2e.py --target $TGT --draft $DRF --attention-backend fa3 --configs plain,dflash,ddtree:1:1,ddtree:15:4,ddtree:64:8,ddtree:256:8,ddtree:64:8+nograph,ddtree:15:4+nooverlap --bs 1,4,16,48 --num-prompts 48 --max-new-tokens 64 --out \$CMD_OUT/e2e_matrix_fa3.json" \
      "sampling_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_sampling_gpu.py" \
      "features_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py" \
      "coverage=$PYT test/worker/test_accept_coverage_gpu.py" \
      "observability=$PYT test/worker/test_observability_gpu.py test/worker/test_sampling_kernel_gpu.py"
    ;;
  paired)
    OUT=${OUT:-/tmp/paired_out}
    mkdir -p "$OUT"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    read -r TGT DRF <<< "$(python3 -c "from sglang_ddtree.fixtures import tiny_pair_path as t; p = t(); print(p.target, p.draft)")"
    timeout 150 python3 benchmark/bench_tree.py --quick --heap-max-ms 30 --out "$OUT/bench_tree.json" > "$OUT/bench_tree.log" 2>&1
    echo "bench_tree rc=$?"; tail -n 25 "$OUT/bench_tree.log"
    timeout -k 10 "${PAIRED_TIMEOUT_S:-400}" python3 benchmark/bench_paired.py --log-dir "$OUT/paired_logs" --target "$TGT" --draft "$DRF" \
      --configs plain+fa3,dflash+fa3,dflash+triton,ddtree:64:8+fa3,ddtree:64:8+triton,ddtree:15:8+fa3 \
      --baselines dflash+fa3,dflash+triton,plain+fa3 --bs "${PAIRED_BS:-1,16,48}" --repeats "${PAIRED_REPEATS:-3}" \
      --num-prompts 16 --max-new-tokens 64 --out "$OUT/paired_fa3.json" 2>&1 | tail -n 60
    (cd "$OUT" && tar -czf paired_logs.tar.gz paired_logs && rm -rf paired_logs)  # <= 8 files come back
    ls -la "$OUT"
    ;;
  tree)
    export SGLANG_DDTREE_FA3_TREE_ATTENTION=1
    exec bash $PAR \
      "kernels=$PYT test/worker/test_tree_attention_interp.py" \
      "vl_fa3=DDTREE_TEST_REPORT_DIR=\$CMD_OUT $PYT -s test/worker/test_verify_logits_gpu.py -k fa3" \
      "parity_fa3=$MODELS /tmp/m_fa3 && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fa3 --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_b15,sharp:dd_fa3_b64,sharp:dd_fa3_auto_cycle,sharp:dd_fa3_b256,sharp:dd_fa3_b64_nograph,sharp:dd_fa3_b15_nooverlap --deadline-s 440" \
      "sampling_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_sampling_gpu.py" \
      "features_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py"
    ;;
  close)
    # fa3 with the fused tree attention as the default (the switch unset): sharp parity at the budgets the
    # tree run left out (1) and budget auto's own choices on fa3 and triton, and the trained pair on fa3
    # (near-ties only, float32 margins)
    unset SGLANG_DDTREE_FA3_TREE_ATTENTION
    exec bash $PAR \
      "parity_fa3=$MODELS /tmp/m_fa3 && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fa3 --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_b1,sharp:dd_fa3_auto,sharp:dd_fa3_b15,sharp:plain_triton,sharp:dd_triton_auto --deadline-s 440" \
      "pair_fa3=$PYT test/worker/test_trained_pair_gpu.py -k fa3"
    ;;
  *)
    echo "usage: $0 checks|features|paired|tree|close" >&2
    exit 2
    ;;
esac
