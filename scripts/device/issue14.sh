#!/usr/bin/env bash
# The H200 runs of the round-overhead issue (14), one device call of <= 10 minutes each:
#     bash scripts/device/issue14.sh shape      # bench_shape at the Qwen3-8B shape (dummy weights): AR and DFLASH
#                                               # on fa3, DDTREE budgets 16 / 64 on triton and fa3, paired, with
#                                               # torch-profiler breakdowns (analyze_trace) at concurrency 1 and 32
#     bash scripts/device/issue14.sh close [pair|shape]  # what the issue's done-when still lacks (fa3 staged):
#                                               # `shape`: the breakdown (time outside the CUDA graphs) at the 8B shape,
#                                               # c 1 / 32, profiled, DDTREE b15 on fa3, triton and flashinfer next to
#                                               # DFLASH on fa3; `pair`: the tiny pair at bs 1, paired (AR, DFLASH on
#                                               # fa3, DDTREE's budgets); no argument: both (one call only with the JIT
#                                               # cache staged: cold, session 13's engines took 163 s to start and the
#                                               # call ended with neither done; give each its own call). Device call:
#                                               # timeout_s 600 (bench_shape stops at 470 s, then the analyses, logs
#                                               # and, on a cold machine, the JIT cache are packed: session 16's call
#                                               # at 560 s lost the cache); each profile is saved as it is taken
#     bash scripts/device/issue14.sh verify     # the rest of a round change's checks (fa3 staged): T > 0 on fa3 and
#                                               # triton, everyday features on fa3, the trained pair on fa3 and triton
#                                               # (near-ties only), sharp parity without overlap / graphs against a
#                                               # plain reference
#     bash scripts/device/issue14.sh kvgraph    # the draft-KV graphs (SGLANG_DDTREE_DRAFT_KV_GRAPH=1, fa3 staged): unit, features
#                                               # on fa3 and triton, T > 0 on fa3, sharp parity on triton and fa3;
#                                               # and features on fa3 as configured by default
#     bash scripts/device/issue14.sh fiplan [unit|shape]  # DDTREE's host-sync-free flashinfer plan: its GPU checks,
#                                               # its host time and parity (one call; `unit`: without parity), then
#                                               # the 8B-shape breakdown with it (fa3 staged)
#     bash scripts/device/issue14.sh fioverlap  # DDTREE's flashinfer rounds without the scheduler's wait for the last
#                                               # round: the sync-free plan's checks, sharp flashinfer parity (upstream's
#                                               # plan and DDTREE's, overlap on / off), the tree kernels
#     bash scripts/device/issue14.sh fidefault [more]  # before the sync-free flashinfer plan can be the default,
#                                               # on flashinfer with it on (JIT cache staged): its GPU checks, the
#                                               # everyday features, the verify logits; `more`: T > 0, the trained
#                                               # pair's parity
#     bash scripts/device/issue14.sh topk       # the draft head's top-K + logsumexp kernel per launch configuration
#                                               # (benchmark/bench_topk_lse.py, checked exact), ~1 minute; torch +
#                                               # triton only: can share a staging call (no .device carried)
#     bash scripts/device/issue14.sh treeattn   # the fa3 verify's tree merge kernel per launch configuration
#                                               # (benchmark/bench_tree_attention.py, checked against PyTorch) at the
#                                               # Qwen3-8B head shape, bs 1-64, budgets 15 / 63, timed as CUDA-graph
#                                               # replays of 36 launches (--timer graph), ~1-2 minutes; torch +
#                                               # triton only: can share a staging call (no .device carried)
#     bash scripts/device/issue14.sh power      # the c 32 clock question: one GEMM at the verify shape with distinct
#                                               # rows vs repeated drafts vs identical rows, clock and power sampled
#                                               # (benchmark/bench_gemm_power.py), ~1 minute, torch only
#     bash scripts/device/issue14.sh quick      # triton only, no fa3 staging: a round change's fast checks (the draft-KV
#                                               # graph, tree, commit, KV-move and top-K kernels, sharp greedy parity b15 / b64 / auto cycle /
#                                               # no overlap; QUICK_PAIRED=0 stops there), then the tiny pair paired (AR, DDTREE b63 with the
#                                               # draft-KV graphs, +kvgraph, and with the eager append) at bs 1 / 16
#     bash scripts/device/issue14.sh round      # what a change to the round re-runs: kernels, T > 0 (exact
#                                               # logits + end to end), sharp greedy parity, accept coverage,
#                                               # everyday features, the trained pair (accept lengths; divergences
#                                               # to analyse with benchmark/analyze_divergence.py)
# Device tool: carry [".device", ".fa3/sha.txt"] after staging the fa3 parts (../shared/device/README.md).
# Env: SHAPE_CONFIGS, SHAPE_BASELINES, SHAPE_CONCURRENCY, SHAPE_REPEATS override the shape run's lists;
# SHAPE_PROFILE_C (e.g. 1,32) also records and analyses profiler traces at those concurrencies.
# SHAPE_DRAFT_WEIGHTS=normal: the drafter loads a written N(0, 0.02) checkpoint (bench_shape.py --draft-weights; DFLASH
# then drafts varied tokens as a real drafter does instead of one repeated token, whose GEMMs run faster at the cap).
set -u
cd "$(dirname "$0")/../.."
PAR=scripts/device/parallel.sh
PYT="python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider"
UNIT_FI="unit_fi=$PYT test/worker/test_flashinfer_plan_gpu.py test/worker/test_flashinfer_plan_interp.py test/benchmark/test_bench_flashinfer_plan.py && python3 benchmark/bench_flashinfer_plan.py --bs 1,8,32 --out \$CMD_OUT/plan_host_us.json"
MODELS='python3 -c "import sys; sys.path.insert(0, \"test/worker\"); from _generated_models import generate_models; generate_models(sys.argv[1])"'
case "${1:-}" in
  shape)
    OUT=${OUT:-/tmp/shape_out}
    mkdir -p "$OUT/prof"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    timeout -k 10 "${SHAPE_TIMEOUT_S:-540}" python3 benchmark/bench_shape.py ${SHAPE_DRAFT_WEIGHTS:+--draft-weights "$SHAPE_DRAFT_WEIGHTS"} --shapes qwen3-8b \
      --configs "${SHAPE_CONFIGS:-plain+fa3,dflash+fa3,ddtree:16:8+triton,ddtree:16:8+fa3,ddtree:64:8+triton}" \
      --baselines "${SHAPE_BASELINES:-dflash+fa3,plain+fa3}" --concurrency "${SHAPE_CONCURRENCY:-1,8,32}" \
      --repeats "${SHAPE_REPEATS:-2}" --new-tokens 48 --base-tokens 16 --max-total-tokens 24000 \
      ${SHAPE_PROFILE_C:+--profile-dir "$OUT/prof" --profile-concurrency "$SHAPE_PROFILE_C"} \
      --log-dir "$OUT/logs" --out "$OUT/shape.json" 2>&1 | tail -n 80
    # the analyses come back, and the traces when they fit one returned file (16 MiB)
    (cd "$OUT" && find prof -name '*.analysis.json' | tar -czf analyses.tar.gz -T - && tar -czf logs.tar.gz logs \
      && find prof -name '*.trace.json*' | tar -cf traces.tar -T - && rm -rf prof logs)
    [ "$(stat -c %s "$OUT/traces.tar" 2>/dev/null || echo 0)" -lt 16000000 ] || rm -f "$OUT/traces.tar"
    ls -la "$OUT"
    ;;
  close)
    OUT=${OUT:-/tmp/close_out}
    mkdir -p "$OUT/prof"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    part=${2:-all}
    case "$part" in all|pair|shape) ;; *) echo "usage: $0 close [pair|shape]" >&2; exit 2 ;; esac
    read -r TGT DRF <<< "$(python3 -c "from sglang_ddtree.fixtures import tiny_pair_path as t; p = t(); print(p.target, p.draft)")"
    [ "$part" = shape ] || timeout -k 10 "${PAIRED_TIMEOUT_S:-$([ "$part" = pair ] && echo 500 || echo 200)}" \
      python3 benchmark/bench_paired.py --log-dir "$OUT/paired_logs" --target "$TGT" --draft "$DRF" \
      --configs plain+fa3,plain+triton,dflash+fa3,ddtree:15:8+triton,ddtree:63:8+triton,ddtree:64:8+triton \
      --baselines plain+fa3,dflash+fa3 --bs 1 --repeats "${PAIRED_REPEATS:-5}" --num-prompts 16 \
      --max-new-tokens 64 --deadline-s "${PAIRED_DEADLINE_S:-$([ "$part" = pair ] && echo 380 || echo 150)}" \
      --out "$OUT/paired_bs1.json" 2>&1 | tail -n 30
    [ "$part" = shape ] || (cd "$OUT" && tar -czf paired_logs.tar.gz paired_logs && rm -rf paired_logs)  # <= 8 files
    [ "$part" = pair ] || timeout -k 10 "${SHAPE_TIMEOUT_S:-$([ "$part" = shape ] && echo 470 || echo 330)}" \
      python3 benchmark/bench_shape.py ${SHAPE_DRAFT_WEIGHTS:+--draft-weights "$SHAPE_DRAFT_WEIGHTS"} --shapes qwen3-8b \
      --configs dflash+fa3,ddtree:15:8+fa3,ddtree:15:8+triton,ddtree:15:8+flashinfer --baselines dflash+fa3 \
      --concurrency 1,32 --repeats 1 --new-tokens 48 --base-tokens 16 --max-total-tokens 24000 \
      --profile-dir "$OUT/prof" --profile-concurrency 1,32 --log-dir "$OUT/logs" --out "$OUT/shape_breakdown.json" \
      2>&1 | tail -n 30
    [ "$part" = pair ] || (cd "$OUT" && find prof -name '*.analysis.json' | tar -czf analyses.tar.gz -T - \
      && tar -czf logs.tar.gz logs && rm -rf prof logs)
    # a cold machine compiled its kernels for these engines (session 16: the first CUDA-graph captures of
    # dflash+fa3 and flashinfer took 65 s and 53 s, the four engines 453 s to start): bring the JIT cache back for
    # the next call (stage.sh .jit/jitcache.tar.xz), unless it was staged already
    if [ ! -f /tmp/jitcache/.restored ] && [ -f .device/save_jitcache.sh ]; then
      bash .device/save_jitcache.sh
    fi
    ls -la "$OUT"
    ;;
  fiplan)
    # DDTREE's host-sync-free flashinfer plan (worker.flashinfer_plan, SGLANG_DDTREE_FLASHINFER_PLAN=1):
    # `fiplan` its checks: the plan against upstream's plan() on FlashInfer (eager and in a CUDA graph, the mask
    # packing natively), the host time of one plan piece by piece (bench_flashinfer_plan.py, GPU idle and busy),
    # and sharp greedy parity with it on (b15 / b64 / no overlap) against plain flashinfer;
    # `fiplan shape`: the 8B-shape breakdown with it, paired with AR and DFLASH on fa3 and DDTREE on fa3 and on
    # upstream's flashinfer plan, in one run (fa3 and the JIT cache staged; c 1 / 32, 2 repetitions, profiles with
    # a 6-level call tree, the flashinfer traces returned)
    if [ "${2:-}" = shape ]; then
      OUT=${OUT:-/tmp/fiplan_out}
      mkdir -p "$OUT/prof"
      # shellcheck disable=SC1091
      source scripts/device/plugin_env.sh
      # five 8B engines at most on one H200 (session 18: a sixth ran out of memory in its warm-up); session 18
      # measured fa3 / triton / flashinfer+fiplan here, so the default pairs the plan with upstream's flashinfer
      timeout -k 10 "${SHAPE_TIMEOUT_S:-470}" python3 benchmark/bench_shape.py ${SHAPE_DRAFT_WEIGHTS:+--draft-weights "$SHAPE_DRAFT_WEIGHTS"} --shapes qwen3-8b \
        --configs "${SHAPE_CONFIGS:-plain+fa3,dflash+fa3,ddtree:15:8+fa3,ddtree:15:8+flashinfer,ddtree:15:8+flashinfer+fiplan}" \
        --baselines dflash+fa3,plain+fa3 --concurrency 1,32 --repeats "${SHAPE_REPEATS:-2}" --new-tokens 48 \
        --base-tokens 16 --max-total-tokens 24000 --profile-dir "$OUT/prof" --profile-concurrency 1,32 \
        --profile-depth "${SHAPE_PROFILE_DEPTH:-6}" --log-dir "$OUT/logs" --out "$OUT/shape_fiplan.json" 2>&1 | tail -n 40
      # the analyses, and the flashinfer configs' traces where they fit one returned file (16 MiB): session 18's
      # analyses (3 levels) could not say where the plan's CPU time went
      (cd "$OUT" && find prof -name '*.analysis.json' | tar -czf analyses.tar.gz -T - && tar -czf logs.tar.gz logs \
        && find prof -path '*flashinfer*' -name '*.trace.json*' ! -name '*.analysis.json' | tar -cf traces.tar -T - \
        && rm -rf prof logs)
      [ "$(stat -c %s "$OUT/traces.tar" 2>/dev/null || echo 0)" -lt 16000000 ] || rm -f "$OUT/traces.tar"
      ls -la "$OUT"
      exit 0
    fi
    UNIT=$UNIT_FI
    # `fiplan unit`: only the GPU tests and the host timing (~1 minute; parity passed in session 18 and the
    # plan has not changed since)
    [ "${2:-}" = unit ] && exec bash $PAR "$UNIT"
    exec bash $PAR "$UNIT" \
      "parity=$MODELS /tmp/m_fi && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fi --out \$CMD_OUT --configs sharp:plain_flashinfer,sharp:dd_flashinfer_b15_fiplan,sharp:dd_flashinfer_b64_fiplan,sharp:dd_flashinfer_b15_nooverlap_fiplan --deadline-s 420"
    ;;
  fioverlap)
    # DDTREE's future map without the scheduler's wait before each round (algorithm._scheduler_host_lens_needed)
    # and the sync-free plan's pinned ring, in one call (JIT cache staged first: flashinfer engines start cold in
    # ~150 s): the plan's GPU checks and host time; sharp greedy parity on flashinfer with upstream's plan and with
    # DDTREE's (b15 / b64, overlap on: the path that changed; b15 without overlap; prepare_for_decode, changed in
    # session 19, runs on every backend); the tree and draft-KV graph kernels
    exec bash $PAR "$UNIT_FI" \
      "parity_fi=$MODELS /tmp/m_fi && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fi --out \$CMD_OUT --configs sharp:plain_flashinfer,sharp:dd_flashinfer_b15,sharp:dd_flashinfer_b15_fiplan,sharp:dd_flashinfer_b64_fiplan,sharp:dd_flashinfer_b15_nooverlap_fiplan --deadline-s 420" \
      "unit_tr=$PYT test/worker/test_draft_kv_graph.py test/tree/test_gpu.py"
    ;;
  fidefault)
    # what making DDTREE's sync-free flashinfer plan the default still needs, on flashinfer with it on. Session 22:
    # T > 0 passed but the everyday features failed (a bound one KV chunk past the true key count; fixed since by
    # the work-list rewrite). Attention-sensitive checks only: the sharp fixture's successor map hides attention
    # errors (ddtree_parity.py says so), and that is all the plan's parity had run on.
    # `fidefault`: its GPU checks, the everyday features (trained pair, engine memory 0.4) and every tree node's
    # verify logits against the float32 reference (0.3); `fidefault more`: T > 0 and the trained pair's greedy
    # parity matrix (0.45 each; the two calls keep the engines within the GPU's memory). Stage the JIT cache first:
    # on a fresh machine flashinfer compiles cold and the features test ran past 370 s (session 22, call 7)
    if [ "${2:-}" = more ]; then
      exec bash $PAR \
        "sampling=SGLANG_DDTREE_FLASHINFER_PLAN=1 DDTREE_TEST_BACKEND=flashinfer $PYT test/worker/test_sampling_gpu.py" \
        "pair=SGLANG_DDTREE_FLASHINFER_PLAN=1 $PYT test/worker/test_trained_pair_gpu.py -k flashinfer"
    fi
    exec bash $PAR "$UNIT_FI" \
      "features=SGLANG_DDTREE_FLASHINFER_PLAN=1 DDTREE_TEST_BACKEND=flashinfer $PYT test/worker/test_features_gpu.py" \
      "logits=SGLANG_DDTREE_FLASHINFER_PLAN=1 $PYT test/worker/test_verify_logits_gpu.py -k flashinfer"
    ;;
  topk)
    # the draft head's top-K + logsumexp per launch configuration (bench_topk_lse.py), each checked against
    # PyTorch; its GPU tests first (~1 minute). Needs only torch + triton (no SGLang bundle): it can share a
    # staging call, e.g. `bash scripts/device/stage.sh .fa3/part_00 && bash scripts/device/issue14.sh topk`
    # with carry [".fa3/part_00"] only
    OUT=${OUT:-/tmp/topk_out}
    mkdir -p "$OUT"
    export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
    $PYT test/benchmark/test_bench_topk_lse.py 2>&1 | tail -n 6  # the kernel's own tests: `quick` / `round`
    timeout -k 5 "${TOPK_TIMEOUT_S:-240}" python3 benchmark/bench_topk_lse.py --rows 15,30,60,90,105,120,180,240,256 \
      --out "$OUT/topk_lse.json" 2>&1 | tail -n 12
    ;;
  treeattn)
    # the merge kernel's launch configurations (bench_tree_attention.py; session 26's reading: 230 us a round at
    # c 16, the one verify kernel DFLASH has not), its kernel tests natively first; e.g. with a staging call:
    # `bash scripts/device/stage.sh .fa3/part_00 && bash scripts/device/issue14.sh treeattn`, carry [".fa3/part_00"]
    OUT=${OUT:-/tmp/treeattn_out}
    mkdir -p "$OUT"
    export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
    # the benchmark's own GPU test only: the merge kernel's tests (test_tree_attention_interp.py, 200+ cases) took
    # 261 s natively in session 27, most of a staging call; `round` runs them
    $PYT test/benchmark/test_bench_tree_attention.py 2>&1 | tail -n 6
    timeout -k 5 "${TREEATTN_TIMEOUT_S:-300}" python3 benchmark/bench_tree_attention.py \
      --out "$OUT/tree_attention.json" 2>&1 | tail -n 14
    ;;
  power)
    # does a GEMM's input data move the clock at the power cap? (bench_gemm_power.py: Qwen3-8B's gate_up at c 32 x
    # 16 rows, distinct rows vs DFLASH-like repeated drafts vs all rows alike, paired, with clock / power samples;
    # ~1 minute, torch only: it can share a staging call like `topk`)
    OUT=${OUT:-/tmp/power_out}
    mkdir -p "$OUT"
    $PYT test/benchmark/test_bench_gemm_power.py 2>&1 | tail -n 6
    timeout -k 5 "${POWER_TIMEOUT_S:-150}" python3 benchmark/bench_gemm_power.py --seconds 5 --repeats 3 \
      --out "$OUT/gemm_power.json" 2>&1 | tail -n 14
    ;;
  quick)
    OUT=${OUT:-/tmp/quick_out}
    CMD_TIMEOUT_S=${CMD_TIMEOUT_S:-300} OUT=$OUT/checks bash $PAR \
      "unit=$PYT test/worker/test_draft_kv_graph.py test/tree/test_gpu.py test/worker/test_commit_kernel_interp.py test/worker/test_kv_move_interp.py test/worker/test_topk_lse_interp.py test/benchmark/test_bench_topk_lse.py" \
      "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_b15,sharp:dd_triton_b64,sharp:dd_triton_auto_cycle,sharp:dd_triton_b15_nooverlap --deadline-s 270"
    # QUICK_PAIRED=0: the checks alone (they can follow another short run in the same call)
    [ "${QUICK_PAIRED:-1}" = 0 ] && { ls -la "$OUT/checks"; exit 0; }
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    read -r TGT DRF <<< "$(python3 -c "from sglang_ddtree.fixtures import tiny_pair_path as t; p = t(); print(p.target, p.draft)")"
    timeout -k 10 "${PAIRED_TIMEOUT_S:-220}" python3 benchmark/bench_paired.py --log-dir "$OUT/paired_logs" --target "$TGT" \
      --draft "$DRF" --configs plain+triton,ddtree:63:8+triton+kvgraph,ddtree:63:8+triton+kveager --baselines plain+triton \
      --bs 1,16 --repeats "${PAIRED_REPEATS:-3}" --num-prompts 16 --max-new-tokens 64 --out "$OUT/paired_kvgraph.json" \
      2>&1 | tail -n 30
    (cd "$OUT" && tar -czf paired_logs.tar.gz paired_logs && rm -rf paired_logs)
    ls -la "$OUT" "$OUT/checks"
    ;;
  kvgraph)
    # what turning the draft-KV graphs on by default needs (fa3 staged): their GPU test, the engine-level features
    # on fa3 and triton (the regrow crash of session 11 was there), T > 0 and sharp parity with them on
    exec bash $PAR \
      "unit=$PYT test/worker/test_draft_kv_graph.py" \
      "features_fa3=SGLANG_DDTREE_DRAFT_KV_GRAPH=1 DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py" \
      "features_fa3_default=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py" \
      "features_triton=SGLANG_DDTREE_DRAFT_KV_GRAPH=1 $PYT test/worker/test_features_gpu.py" \
      "sampling_fa3=SGLANG_DDTREE_DRAFT_KV_GRAPH=1 DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_sampling_gpu.py" \
      "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_b15_kvgraph,sharp:dd_triton_auto_cycle_kvgraph,sharp:plain_fa3,sharp:dd_fa3_b15_kvgraph,sharp:dd_fa3_b15_nooverlap_kvgraph --deadline-s 420"
    ;;
  verify)
    exec bash $PAR \
      "sampling_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_sampling_gpu.py" \
      "sampling_triton=$PYT test/worker/test_sampling_gpu.py" \
      "features_fa3=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py" \
      "pair=$PYT test/worker/test_trained_pair_gpu.py -k \"not flashinfer\"" \
      "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_b15_nooverlap,sharp:dd_triton_b64_nograph,sharp:plain_fa3,sharp:dd_fa3_b15_nooverlap,sharp:dd_fa3_b64 --deadline-s 480"
    ;;
  round)
    exec bash $PAR \
      "kernels=$PYT test/tree/test_gpu.py test/worker/test_commit_kernel_interp.py test/worker/test_draw_kernel_interp.py test/worker/test_kv_move_interp.py test/worker/test_topk_lse_interp.py test/worker/test_sampling_kernel_gpu.py" \
      "sampling=$PYT test/worker/test_sampling_gpu.py" \
      "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_b64,sharp:dd_triton_b15_nooverlap,sharp:dd_triton_b1,sharp:dd_triton_b64_nograph --deadline-s 300" \
      "coverage=$PYT test/worker/test_accept_coverage_gpu.py" \
      "features=$PYT test/worker/test_features_gpu.py" \
      "pair=python3 benchmark/bench_e2e.py --target \$(python3 -c 'from sglang_ddtree.fixtures import tiny_pair_path as t; print(t().target)') --draft \$(python3 -c 'from sglang_ddtree.fixtures import tiny_pair_path as t; print(t().draft)') --configs plain,dflash,ddtree:15:8,ddtree:63:8,ddtree:64:8 --bs 1,16 --num-prompts 32 --max-new-tokens 64 --out \$CMD_OUT/e2e_pair.json"
    ;;
  *)
    echo "usage: $0 shape|close|fiplan [unit|shape]|fioverlap|fidefault [more]|topk|treeattn|power|quick|kvgraph|verify|round" >&2
    exit 2
    ;;
esac
