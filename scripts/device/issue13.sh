#!/usr/bin/env bash
# The H200 runs of the budget-auto issue (13), one device call of <= 10 minutes each:
#     bash scripts/device/issue13.sh auto     # correctness of --speculative-ddtree-budget auto on triton: sharp greedy
#                                             # parity (the policy's own choice, and the test plugin's fixed bucket
#                                             # cycle with graphs, without graphs, without overlap), T > 0 with the
#                                             # cycle, and a quick unpaired tiny-pair run whose engine log shows the
#                                             # start-up calibration and policy
#     bash scripts/device/issue13.sh paired   # tiny pair, paired: AR, DFLASH, budgets 15 / 63, auto (its log at INFO:
#                                             # cost table and budget mix), all fa3, batch 1 / 4 / 16 / 48 / 64, one
#                                             # warm-up + 2 repetitions; five engines (session 27 ran six, and every
#                                             # config was slower than in session 25's four-engine run: AR at bs 48
#                                             # 11828 vs 20481 tok/s; the cause was not isolated)
#                                             # (fa3 staged; PAIRED_CONFIGS / _BS / _REPEATS / _PROMPTS (64 a batch
#                                             # size and repetition) / _SCHEDULE / _NEW_TOKENS (64) /
#                                             # _LENGTH_SPREAD (0: one length for every request) / _BASES
#                                             # (dflash+fa3,plain+fa3: name them as in PAIRED_CONFIGS, e.g. with
#                                             # +loginfo, whose INFO log counts prefill batches) override;
#                                             # PAIRED_PHASES=1 sums the +phases / +split configs' phase times)
#     bash scripts/device/issue13.sh profile  # tiny pair at PROFILE_BS (default 16): AR, auto pinned to width 0, budgets
#                                             # 15 / 63, auto timed and profiled, each trace analysed (where a round's
#                                             # host time goes; a width-0 round against AR's step)
#     bash scripts/device/issue13.sh phases   # tiny pair at PHASES_BS (default 16): AR, auto pinned to width 0,
#                                             # DFLASH, budget 63, unprofiled, with the test plugin's perf_counter
#                                             # timers per decode iteration (+phases), side by side (fa3 staged)
#     bash scripts/device/issue13.sh warmup   # the start-up warm-up of the round's kernels (worker/warmup.py, off by
#                                             # default until this passes): its GPU unit test, sharp parity of auto's
#                                             # bucket cycle and b15 with it on and the compile watch (no round may
#                                             # compile), the control without it (its rounds do compile), and an auto
#                                             # engine on the tiny pair with and without it (bench_e2e, unpaired; the
#                                             # INFO log has the warm-up line and the new cost model's choices)
#                                             # (triton; fa3 not needed)
#     bash scripts/device/issue13.sh merge    # the fa3 tree merge's launch rule: bench_tree_attention (its `verify`
#                                             # entry), then sharp parity on fa3 with it (fa3 staged)
#     bash scripts/device/issue13.sh chain    # budget auto's chain bucket on fa3: sharp parity pinned to it and in the
#                                             # bucket cycle, then the 8B shape with and without it (fa3 staged)
#                                             # (its five 8B engines need ~102 GiB: on an 80 GB H100 pass
#                                             # SHAPE_CONFIGS=plain+fa3,dflash+fa3,ddtree:auto:8+fa3; bench_shape
#                                             # refuses what cannot fit before any engine starts)
#     bash scripts/device/issue13.sh lean     # session 31's chain-shaped rounds (width 0 and the chain take constant
#                                             # structure, no KV move; width 0 causal beside the chain on fa3): the
#                                             # warm-up's GPU test, sharp parity on fa3 (width 0 and the chain pinned,
#                                             # graphs / no graphs / no overlap, the bucket cycle with the compile
#                                             # watch) and on triton (width 0 pinned, the cycle), LEAN_SAMPLING=1 adds
#                                             # T > 0 on fa3 with the cycle, LEAN_HYBRID=1 the hybrid target's sharp
#                                             # parity with auto (hybrid.sh auto's first group), LEAN_FEATURES=1 the
#                                             # everyday-features test on fa3 with the defaults (fa3 staged)
#     bash scripts/device/issue13.sh below    # fixed budgets below the drafter's L - 1 positions with the head graphs
#                                             # (session 42's crash): the head GPU test and sharp fa3 parity of b3 / b7
#     bash scripts/device/issue13.sh prefill  # worker.prefill (SGLANG_DDTREE_PREFILL_ASYNC=1, session 44): sharp
#                                             # parity with it on fa3 / triton; PREFILL_PAIRED=1: the one-length A/B
#                                             # of auto with and without it, AR beside (fa3 staged)
#     bash scripts/device/issue13.sh pregraph # prefill graphs from 1 token (+pregraph1) and worker.prefill
#                                             # (+prefillasync) against auto as is, one length, AR beside, then
#                                             # sharp parity of both (triton: no fa3 staging; session 46)
#     bash scripts/device/issue13.sh window   # session 49, fa3 staged: the admission window (on by default since
#                                             # session 49) against none (+noadmit), AR and DFLASH beside, one output
#                                             # length at bs 16 / 48 / 64 (256 x 128 tokens, continuous, 3 repetitions);
#                                             # WINDOW_SPREAD=1: lengths spread (0.5) at bs 16 / 48 instead
#                                             # (128 prompts); then sharp parity of auto's bucket cycle on fa3 with a
#                                             # pass at 16 in flight that the window holds (WINDOW_PARITY=0 skips it;
#                                             # WINDOW_AB=0 runs only that parity: a call of its own when device
#                                             # time is short, session 50 lost a whole call to a machine taken back
#                                             # mid-run; ~100 s on a warm machine, up to ~250 s on a fresh one, so
#                                             # PARITY_TIMEOUT_S defaults to 300: session 51's first call cut it off
#                                             # at 150 s in the second engine's capture). WINDOW_SPREAD=1 ran bs 1 / 4
#                                             # / 8 too until session 51, where their untimed warm-up alone took 137 s
#                                             # of the call; below 12 running requests the window's floor keeps it
#                                             # away, so those cells are the "no window" engine (PAIRED_BS=1,4,8 still
#                                             # runs them)
#     bash scripts/device/issue13.sh onelength # the one-length tiny-pair case (#13's ">= 0.9x AR" cell): AR, DFLASH,
#                                             # auto, auto +admitwait4 timed by phase (+split), 5 repetitions at bs 16,
#                                             # then sharp parity with 1-token prefills (ONELENGTH_BACKEND=fa3: all on
#                                             # fa3, fa3 staged; default triton: no staging)
#     bash scripts/device/issue13.sh features # budget auto through the everyday-features test (it had only run fixed
#                                             # budgets; auto as the default waits on it): fa3 and triton side by
#                                             # side, DDTREE_TEST_BUDGET=auto (FEATURES_BUDGET overrides; fa3 staged)
#     bash scripts/device/issue13.sh defaultstart  # what budget auto as the default would cost a server at start: one
#                                             # launch_server at a time at the Qwen3-8B shape (dummy weights) with
#                                             # SGLang's own memory fraction and graph sizes, budget auto then 64
#                                             # (DEFAULTSTART_BUDGETS; "default" gives no budget flag at all):
#                                             # start-up time, memory, one request served; DEFAULTSTART_STRESS
#                                             # adds concurrent long prompts (defaultstress.py)
#     bash scripts/device/issue13.sh head     # the tree head as CUDA graphs (worker/head_graph.py, session 40, fa3;
#                                             # on by default since session 41, +headeager turns it off):
#                                             # its GPU unit test (captured == eager), sharp parity on fa3 with it (the
#                                             # bucket cycle with the compile watch, b64, b15 without overlap, the cycle
#                                             # without graphs as the control; HEAD_SAMPLING=1 adds T > 0 on fa3 with
#                                             # auto's cycle, heads off and on), then HEAD_PAIRED=1 adds a paired tiny-pair
#                                             # A/B (auto and b63 with the heads against +headeager, lengths spread,
#                                             # bs 1 / 16 / 48) (fa3 staged)
#     bash scripts/device/issue13.sh gc       # the scheduler's garbage collections per engine (+gclog), auto vs
#                                             # budget 63 vs plain on the tiny pair, paired (fa3 staged)
#     bash scripts/device/issue13.sh shape    # bench_shape at the Qwen3-8B shape (dummy weights), paired + rotated:
#                                             # AR and DFLASH on fa3, DDTREE b15 on fa3 (fused tree attention, the
#                                             # default) and on triton, auto on fa3, 2 repetitions; auto decides from
#                                             # the paper's accept table (the one the projection uses) and its verified
#                                             # budgets per window come back in the JSON; its engine log (INFO) holds
#                                             # the start-up cost table (fa3 staged). Plots: bench_shape.py --plot.
#                                             # Concurrency 1,2,4,8 by default: SHAPE_CONCURRENCY=16,32,64 in a second
#                                             # call (session 9: 5 engines x 4 levels x 2 reps took 404 s).
# Device tool: carry [".device"] (+ ".fa3/sha.txt" after staging the fa3 parts for `paired` / `shape`).
# Env (shape): SHAPE_CONFIGS, SHAPE_BASELINES, SHAPE_CONCURRENCY, SHAPE_REPEATS, SHAPE_ACCEPT_TABLE, SHAPE_TIMEOUT_S,
# SHAPE_DRAFT_WEIGHTS (normal: the drafter loads a written N(0, 0.02) checkpoint, bench_shape.py --draft-weights).
set -u
cd "$(dirname "$0")/../.."
PAR=scripts/device/parallel.sh
PYT="python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider"
MODELS='python3 -c "import sys; sys.path.insert(0, \"test/worker\"); from _generated_models import generate_models; generate_models(sys.argv[1])"'
PAIR='$(python3 -c "from sglang_ddtree.fixtures import tiny_pair_path as t; p = t(); print(\"--target\", p.target, \"--draft\", p.draft)")'
case "${1:-}" in
  auto)
    exec bash $PAR \
      "parity_auto=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_auto_cycle,sharp:dd_triton_auto,sharp:dd_triton_auto_cycle_nograph,sharp:dd_triton_auto_cycle_nooverlap --deadline-s 430" \
      "sampling_auto=DDTREE_TEST_SAMPLING_AUTO=1 $PYT test/worker/test_sampling_gpu.py" \
      "pair_auto=python3 benchmark/bench_e2e.py $PAIR --configs plain,dflash,ddtree:63:8,ddtree:auto:8 --bs 1,16,48 --num-prompts 48 --max-new-tokens 64 --out \$CMD_OUT/e2e_auto.json"
    ;;
  warmup)
    exec bash $PAR \
      "unit=$PYT test/worker/test_warmup_gpu.py" \
      "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_auto_cycle_compiles,sharp:dd_triton_b15_compiles,sharp:dd_triton_auto_cycle_nowarmup_compiles --deadline-s 400" \
      "pair_auto=python3 benchmark/bench_e2e.py $PAIR --configs ddtree:auto:8+loginfo,ddtree:auto:8+warmup+loginfo --bs 1,16 --num-prompts 32 --max-new-tokens 64 --out \$CMD_OUT/e2e_warmup.json"
    ;;
  merge)
    # the fa3 verify's merge launch rule and the draft head's 2048 x 4 threshold pass (session 29): the top-K kernel
    # tests natively and the merge's benchmark first (the GPU to itself, its `verify` entry is the rule's launch),
    # then sharp parity on fa3 with both: plain, budgets
    # 15 / 64, budget 15 without overlap, auto's bucket cycle with the compile watch (the warm-up on by default)
    # (fa3 staged; carry [".device"])
    OUT=${OUT:-/tmp/merge_out}
    mkdir -p "$OUT"
    ( export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
      $PYT test/benchmark/test_bench_tree_attention.py test/worker/test_topk_lse_interp.py 2>&1 | tail -n 6
      timeout -k 5 120 python3 benchmark/bench_tree_attention.py --out "$OUT/tree_attention.json" 2>&1 | tail -n 12 )
    CMD_TIMEOUT_S=${CMD_TIMEOUT_S:-330} OUT=$OUT/checks exec bash $PAR \
      "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs ${MERGE_PARITY:-sharp:plain_fa3,sharp:dd_fa3_b15,sharp:dd_fa3_b64,sharp:dd_fa3_b15_nooverlap,sharp:dd_fa3_auto_cycle_compiles} --deadline-s $(( ${CMD_TIMEOUT_S:-330} - 30 ))"
    ;;
  chain)
    # budget auto's chain bucket on fa3 (session 30): sharp greedy parity of plain fa3 against auto pinned to the
    # chain (graphs, no overlap, no graphs) and auto's bucket cycle through it with the compile watch; then the
    # 8B shape at CHAIN_CONCURRENCY (default 8,16) with auto with and without the chain beside DFLASH, b15 and AR
    # (fa3 staged; carry [".device/env.sh", ".fa3/sha.txt"] on a machine the bundle was unpacked on)
    OUT=${OUT:-/tmp/chain_out}
    mkdir -p "$OUT"
    if [ -z "${CHAIN_SKIP_PARITY:-}" ]; then
      # CHAIN_SAMPLING=1 adds the T > 0 distribution test on fa3 with auto's bucket cycle (auto:4: buckets 0, 1,
      # 3, chain4, 4), beside the parity
      CMD_TIMEOUT_S=${CHAIN_PARITY_S:-260} OUT=$OUT/parity bash $PAR \
        "parity=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs ${CHAIN_PARITY:-sharp:plain_fa3,sharp:dd_fa3_auto_chain,sharp:dd_fa3_auto_cycle_compiles,sharp:dd_fa3_auto_chain_nooverlap} --deadline-s $(( ${CHAIN_PARITY_S:-260} - 20 ))" \
        ${CHAIN_SAMPLING:+"sampling_chain=DDTREE_TEST_BACKEND=fa3 DDTREE_TEST_SAMPLING_AUTO=1 $PYT test/worker/test_sampling_gpu.py"}
    fi
    [ -n "${CHAIN_SKIP_SHAPE:-}" ] && exit 0
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    timeout -k 10 "${SHAPE_TIMEOUT_S:-300}" python3 benchmark/bench_shape.py --draft-weights normal --shapes qwen3-8b \
      --configs "${SHAPE_CONFIGS:-plain+fa3,dflash+fa3,ddtree:15:8+fa3,ddtree:auto:8+fa3,ddtree:auto:8+fa3+nochain}" \
      --baselines dflash+fa3,plain+fa3 --concurrency "${CHAIN_CONCURRENCY:-8,16}" \
      --repeats "${SHAPE_REPEATS:-2}" --new-tokens 48 --base-tokens 16 --max-total-tokens 24000 \
      --log-dir "$OUT/logs" --out "$OUT/shape_chain.json" 2>&1 | tail -n 60
    python3 benchmark/auto_log_rounds.py "$OUT"/logs/*.log --json "$OUT/auto_rounds.json" 2>&1 | cut -c1-240 | tail -n 30
    (cd "$OUT" && tar -czf logs.tar.gz logs && rm -rf logs)
    ls -la "$OUT"
    ;;
  lean)
    # session 31 (chain-shaped rounds): every parity config the change touches, fa3 and triton in parallel engines
    # (fa3 staged; carry [".device/env.sh", ".fa3/sha.txt"] on a machine the bundle was unpacked on)
    LIM=${CMD_TIMEOUT_S:-540}
    CMD_TIMEOUT_S=$LIM exec bash $PAR \
      "unit=$PYT test/worker/test_warmup_gpu.py test/tree/test_gpu.py test/worker/test_draft_kv_graph.py" \
      "parity_fa3=$MODELS /tmp/m_fa && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fa --out \$CMD_OUT --configs ${LEAN_FA3:-sharp:plain_fa3,sharp:dd_fa3_auto_w0,sharp:dd_fa3_auto_cycle_compiles,sharp:dd_fa3_auto_chain} --deadline-s $(( LIM - 30 ))" \
      "parity_fa3_more=$MODELS /tmp/m_fb && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fb --out \$CMD_OUT --configs ${LEAN_FA3_MORE:-sharp:plain_fa3,sharp:dd_fa3_auto_w0_nograph,sharp:dd_fa3_auto_w0_nooverlap,sharp:dd_fa3_auto_chain_nooverlap} --deadline-s $(( LIM - 30 ))" \
      "parity_triton=$MODELS /tmp/m_tr && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_tr --out \$CMD_OUT --configs ${LEAN_TRITON:-sharp:plain_triton,sharp:dd_triton_auto_w0,sharp:dd_triton_auto_cycle_compiles,sharp:dd_triton_b15} --deadline-s $(( LIM - 30 ))" \
      ${LEAN_SAMPLING:+"sampling=DDTREE_TEST_BACKEND=fa3 DDTREE_TEST_SAMPLING_AUTO=1 $PYT test/worker/test_sampling_gpu.py"} \
      ${LEAN_HYBRID:+"hybrid_auto=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto]"} \
      ${LEAN_FEATURES:+"features=DDTREE_TEST_BACKEND=fa3 $PYT test/worker/test_features_gpu.py"}
    ;;
  below)
    # session 42: fixed budgets below the drafter's L - 1 positions with the head graphs (they crashed before
    # ccd00a2): the head GPU test (budget 7 beside 15 / 63) and sharp parity of b3 / b7 on fa3 (fa3 staged)
    LIM=${CMD_TIMEOUT_S:-300}
    CMD_TIMEOUT_S=$LIM exec bash $PAR \
      "unit=$PYT test/worker/test_head_graph_gpu.py" \
      "parity_fa3=$MODELS /tmp/m_fa && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fa --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_b3,sharp:dd_fa3_b7 --deadline-s $(( LIM - 30 ))"
    ;;
  prefill)
    # session 44: DDTREE's own prefill without upstream's host wait (worker.prefill, SGLANG_DDTREE_PREFILL_ASYNC=1,
    # off by default): sharp greedy parity with it (fa3 b64, fa3 b15 without overlap, auto's bucket cycle on triton)
    # beside the prefill's GPU-free unit tests; then PREFILL_PAIRED=1: a paired one-length A/B, auto with and
    # without it, AR beside, cells of 256 x 128 tokens at bs 16 (fa3 staged)
    LIM=${CMD_TIMEOUT_S:-300}
    if [ -z "${PREFILL_PAIRED:-}" ]; then
      CMD_TIMEOUT_S=$LIM exec bash $PAR \
        "unit=python3 -m pytest -q -p no:cacheprovider test/worker/test_prefill.py" \
        "parity_fa3=$MODELS /tmp/m_pa && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_pa --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_b64_prefillasync,sharp:dd_fa3_b15_nooverlap_prefillasync --deadline-s $(( LIM - 30 ))" \
        "parity_triton=$MODELS /tmp/m_pb && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_pb --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_auto_cycle_prefillasync --deadline-s $(( LIM - 30 ))"
    fi
    PAIRED_SCHEDULE=continuous PAIRED_LENGTH_SPREAD=0 PAIRED_NEW_TOKENS=128 PAIRED_PROMPTS=${PAIRED_PROMPTS:-256} \
      PAIRED_BS=${PAIRED_BS:-16} PAIRED_REPEATS=${PAIRED_REPEATS:-3} \
      PAIRED_CONFIGS=${PAIRED_CONFIGS:-plain+fa3+loginfo,ddtree:auto:8+fa3+loginfo,ddtree:auto:8+fa3+prefillasync+loginfo} \
      PAIRED_BASES=${PAIRED_BASES:-ddtree:auto:8+fa3+loginfo,plain+fa3+loginfo} exec bash "$0" paired
    ;;
  window)
    # session 49 (fa3 staged): the admission window's A/B. Session 48's other two candidates for the prefill
    # iteration are gone: upstream's full prefill graphs failed every engine's first prefill (validation refuses them
    # now) and DDTREE's own prefill read 1.002 / 0.983x at bs 48 / 64 (benchmark/results/session49/notes.md)
    F=ddtree:auto:8+fa3
    OUT=${OUT:-/tmp/window_out}
    if [ -n "${WINDOW_SPREAD:-}" ]; then
      SP=0.5 BSD=16,48 PR=128
    else
      SP=0 BSD=16,48,64 PR=256
    fi
    mkdir -p "$OUT"
    case "${WINDOW_AB:-1}:${WINDOW_PARITY:-1}" in
      0:0) echo "issue13.sh window: WINDOW_AB=0 and WINDOW_PARITY=0 leave nothing to run" >&2; exit 2 ;;
      [01]:[01]) ;;
      *) echo "issue13.sh window: WINDOW_AB / WINDOW_PARITY take 0 or 1 (got '${WINDOW_AB:-}' / '${WINDOW_PARITY:-}')" >&2; exit 2 ;;
    esac
    if [ "${WINDOW_AB:-1}" != 0 ]; then
      OUT=$OUT/ab PAIRED_SCHEDULE=continuous PAIRED_LENGTH_SPREAD=$SP PAIRED_NEW_TOKENS=128 \
        PAIRED_PROMPTS=${PAIRED_PROMPTS:-$PR} PAIRED_BS=${PAIRED_BS:-$BSD} PAIRED_REPEATS=${PAIRED_REPEATS:-3} \
        PAIRED_TIMEOUT_S=${PAIRED_TIMEOUT_S:-420} \
        PAIRED_CONFIGS=${PAIRED_CONFIGS:-plain+fa3+loginfo,dflash+fa3+loginfo,$F+loginfo,$F+noadmit+loginfo} \
        PAIRED_BASES=${PAIRED_BASES:-$F+noadmit+loginfo,plain+fa3+loginfo,dflash+fa3+loginfo} bash "$0" paired
    fi
    # then the window under the parity test (WINDOW_PARITY=0 skips it): auto's bucket cycle with every prompt again at
    # 16 in flight ("16c" pass: the successors arrive while 15 decode, so the window holds them)
    if [ "${WINDOW_PARITY:-1}" != 0 ]; then
      CMD_TIMEOUT_S=${PARITY_TIMEOUT_S:-300} OUT=$OUT/parity bash $PAR \
        "parity=$MODELS /tmp/m_win && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_win --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_auto_cycle_window --deadline-s $(( ${PARITY_TIMEOUT_S:-300} - 20 ))"
    fi
    ;;
  pregraph)
    # session 46: one call on triton (no fa3 staging): the one-length A/B of session 45's two candidates for a
    # speculative engine's prefill cost, auto as is against auto with the target's prefill graphs from 1 token
    # (+pregraph1: upstream's --cuda-graph-bs-prefill with 1 and 2 in front) and with DDTREE's own prefill
    # (+prefillasync), AR beside (prefill_gaps.txt: each engine's eager prefills and rest per prefill); then sharp
    # greedy parity of both on triton (its prompts return at bs 4 / 16 / 48 together, prefills of 4+ tokens;
    # sharp:dd_triton_auto_cycle_pregraph1_cached sends each alone again: every prefill 1 token)
    OUT=${OUT:-/tmp/pregraph_out}
    mkdir -p "$OUT"
    PAIRED_CONFIGS=${PAIRED_CONFIGS:-plain+loginfo,ddtree:auto:8+loginfo,ddtree:auto:8+pregraph1+loginfo,ddtree:auto:8+prefillasync+loginfo} \
      PAIRED_BASES=${PAIRED_BASES:-ddtree:auto:8+loginfo,plain+loginfo} PAIRED_REPEATS=${PAIRED_REPEATS:-2} \
      PAIRED_TIMEOUT_S=${PAIRED_TIMEOUT_S:-270} PREFILL_PAIRED=1 OUT=$OUT bash "$0" prefill
    CMD_TIMEOUT_S=${PARITY_TIMEOUT_S:-270} exec bash $PAR \
      "parity=$MODELS /tmp/m_pg && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_pg --out \$CMD_OUT --configs sharp:plain_triton,sharp:dd_triton_b64_pregraph1,sharp:dd_triton_auto_cycle_pregraph1,sharp:dd_triton_b15_nooverlap_pregraph1,sharp:dd_triton_b64_prefillasync,sharp:dd_triton_b15_nooverlap_prefillasync --deadline-s $(( ${PARITY_TIMEOUT_S:-270} - 30 ))"
    ;;
  onelength)
    # session 47: where the tiny pair's one-length case stands against #13's ">= 0.9x AR" and "auto >= DFLASH", and
    # where a speculative engine's prefill iteration spends its ~5 ms: AR, DFLASH, auto (prefill graphs from 1 token
    # are its default on triton) and auto with the admission window (+admitwait4; session 43 read 1.13x auto at bs 16
    # over 3 noisy repetitions), every engine timed by phase (+split: perf_counter only) and logged at INFO
    # (prefill_gaps), 256 x 128 tokens at bs 16, continuous, 5 repetitions; then sharp greedy parity of auto's bucket
    # cycle with every prompt alone again (_cached: each prefill the radix cache's 1-token remainder, the path the
    # 1-token prefill graphs replay). ONELENGTH_BACKEND=fa3 (fa3 staged): every engine and the parity on fa3, auto
    # with the 1-token graphs named (+pregraph1; fa3 is not yet in validation.SMALL_PREFILL_GRAPH_BACKENDS)
    B=${ONELENGTH_BACKEND:-triton}
    if [ "$B" = fa3 ]; then F=+fa3; G=+pregraph1; else F=; G=; fi
    M=+split+loginfo
    OUT=${OUT:-/tmp/onelength_out}
    mkdir -p "$OUT"
    OUT=$OUT/ab PAIRED_PHASES=1 PAIRED_SCHEDULE=continuous PAIRED_PROMPTS=256 PAIRED_NEW_TOKENS=128 PAIRED_LENGTH_SPREAD=0 \
      PAIRED_CONFIGS=${PAIRED_CONFIGS:-plain$F$M,dflash$F$M,ddtree:auto:8$F$G$M,ddtree:auto:8$F$G+admitwait4$M} \
      PAIRED_BASES=${PAIRED_BASES:-ddtree:auto:8$F$G$M,plain$F$M,dflash$F$M} PAIRED_BS=${PAIRED_BS:-16} \
      PAIRED_REPEATS=${PAIRED_REPEATS:-5} PAIRED_TIMEOUT_S=${PAIRED_TIMEOUT_S:-340} bash "$0" paired 2>&1 | tail -n 150
    CMD_TIMEOUT_S=${PARITY_TIMEOUT_S:-150} OUT=$OUT/parity bash $PAR \
      "parity=$MODELS /tmp/m_ol && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_ol --out \$CMD_OUT --configs sharp:plain_$B,sharp:dd_${B}_auto_cycle_pregraph1_cached --deadline-s $(( ${PARITY_TIMEOUT_S:-150} - 20 ))"
    head -c 4000 "$OUT/parity/parallel.json"; echo
    # the device tool brings back at most 8 files: the summaries stay out, everything else goes into one tar
    (cd "$OUT" && for f in ab/paired_auto.json ab/prefill_gaps.txt ab/phase_times.txt parity/parallel.json; do
       [ -f "$f" ] && mv "$f" "${f//\//_}"; done; tar -czf onelength_rest.tar.gz ab parity && rm -rf ab parity)
    ls -la "$OUT"
    ;;
  features)
    # session 43: the everyday features (batching, radix cache, chunked prefill, stops, aborts, long prompts, the
    # HTTP server and /metrics) with budget auto, on both backends auto runs on; each engine takes 0.4 of the GPU
    LIM=${CMD_TIMEOUT_S:-570}
    CMD_TIMEOUT_S=$LIM exec bash $PAR \
      "features_fa3=DDTREE_TEST_BACKEND=fa3 DDTREE_TEST_BUDGET=${FEATURES_BUDGET:-auto} $PYT test/worker/test_features_gpu.py" \
      "features_triton=DDTREE_TEST_BACKEND=triton DDTREE_TEST_BUDGET=${FEATURES_BUDGET:-auto} $PYT test/worker/test_features_gpu.py"
    ;;
  defaultstart)
    # session 43: auto's graphs per bucket count against the memory SGLang leaves outside --mem-fraction-static; a
    # default must start where a fixed budget starts. DDTREE's own backend choice (fa3 where staged, else triton)
    # unless DEFAULTSTART_BACKEND.
    OUT=${OUT:-/tmp/defaultstart_out}
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh  # the plugin's entry point (session 44: without it, "Unknown speculative algorithm")
    mkdir -p "$OUT/logs"
    read -r T D < <(python3 -c "import sys; sys.path.insert(0, 'benchmark'); from bench_shape import write_shape; print(*write_shape(sys.argv[1], 'qwen3-8b'))" /tmp/ds_models)
    for b in ${DEFAULTSTART_BUDGETS:-auto 64}; do
      log="$OUT/logs/budget_$b.log"
      t0=$(date +%s)
      # shellcheck disable=SC2086
      setsid python3 -m sglang.launch_server --model-path "$T" --load-format dummy --skip-tokenizer-init \
        --port 30010 --speculative-algorithm DDTREE --speculative-draft-model-path "$D" \
        $( [ "$b" = default ] || echo --speculative-ddtree-budget "$b" ) \
        ${DEFAULTSTART_BACKEND:+--attention-backend $DEFAULTSTART_BACKEND} \
        --log-level info > "$log" 2>&1 &
      pid=$!
      # wait-healthy's probe sends text, and a dummy shape has no tokenizer (--skip-tokenizer-init): poll by ids
      served=""
      while [ $(( $(date +%s) - t0 )) -lt 420 ] && kill -0 "$pid" 2>/dev/null; do
        served=$(curl -s -m 60 http://127.0.0.1:30010/generate -H 'Content-Type: application/json' \
          -d '{"input_ids": [1000, 2000, 3000, 4000], "sampling_params": {"max_new_tokens": 32, "temperature": 0}}' \
          | grep -o '"output_ids": *\[[^]]*\]' | head -c 200) && [ -n "$served" ] && break
        sleep 5
      done
      up=$(( $(date +%s) - t0 ))
      # DEFAULTSTART_STRESS="48x6000x64 4x30000x32": then N concurrent requests of P random prompt tokens, M new
      # tokens each (scripts/device/defaultstress.py): prefill activations beside auto's graphs (session 44)
      for s in ${DEFAULTSTART_STRESS:-}; do
        [ -n "$served" ] && IFS=x read -r n p m <<< "$s" && timeout 200 python3 scripts/device/defaultstress.py 30010 "$n" "$p" "$m"
      done
      echo "[defaultstart] budget $b: $( [ -n "$served" ] && echo "served 32 tokens" || echo "NOT serving (process alive: $(kill -0 "$pid" 2>/dev/null && echo yes || echo no))" ) after $up s: $served"
      grep -E "DDTREE: no |mem_fraction_static=|KV Cache is allocated|Capture .*end|DDTREE auto: (verify width|buckets)|Memory pool end|max_running_requests|Traceback|out of memory|OutOfMemory" \
        "$log" | sed 's/server_args=.*mem_fraction_static=\([0-9.]*\).*max_running_requests=\([0-9None]*\).*/server_args: mem_fraction_static=\1 max_running_requests=\2/' \
        | cut -c1-220 | tail -n 30
      kill -TERM -- "-$pid" 2>/dev/null
      sleep 15
      kill -KILL -- "-$pid" 2>/dev/null
    done
    (cd "$OUT" && tar -czf logs.tar.gz logs && rm -rf logs)
    ls -la "$OUT"
    ;;
  head)
    LIM=${CMD_TIMEOUT_S:-540}
    if [ -z "${HEAD_PAIRED:-}" ]; then
      CMD_TIMEOUT_S=$LIM exec bash $PAR \
        "unit=$PYT test/worker/test_head_graph_gpu.py test/worker/test_warmup_gpu.py" \
        "parity_fa3=$MODELS /tmp/m_fa && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fa --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_auto_cycle_headgraph_compiles,sharp:dd_fa3_b64_headgraph --deadline-s $(( LIM - 30 ))" \
        "parity_fa3_more=$MODELS /tmp/m_fb && python3 scripts/device/ddtree_parity.py --models-root /tmp/m_fb --out \$CMD_OUT --configs sharp:plain_fa3,sharp:dd_fa3_b15_nooverlap_headgraph,sharp:dd_fa3_auto_cycle_headgraph_nograph,sharp:dd_fa3_b64_headeager --deadline-s $(( LIM - 30 ))" \
        ${HEAD_SAMPLING:+"sampling=SGLANG_DDTREE_HEAD_GRAPH=0 DDTREE_TEST_BACKEND=fa3 DDTREE_TEST_SAMPLING_AUTO=1 $PYT test/worker/test_sampling_gpu.py"} \
        ${HEAD_SAMPLING:+"sampling_head=SGLANG_DDTREE_HEAD_GRAPH=1 DDTREE_TEST_BACKEND=fa3 DDTREE_TEST_SAMPLING_AUTO=1 $PYT test/worker/test_sampling_gpu.py"}
    fi
    PAIRED_SCHEDULE=${PAIRED_SCHEDULE:-continuous} PAIRED_LENGTH_SPREAD=${PAIRED_LENGTH_SPREAD:-0.5} \
      PAIRED_NEW_TOKENS=${PAIRED_NEW_TOKENS:-128} PAIRED_PROMPTS=${PAIRED_PROMPTS:-128} PAIRED_BS=${PAIRED_BS:-1,16,48} \
      PAIRED_REPEATS=${PAIRED_REPEATS:-3} \
      PAIRED_CONFIGS=${PAIRED_CONFIGS:-plain+fa3,ddtree:63:8+fa3+headeager,ddtree:63:8+fa3,ddtree:auto:8+fa3+headeager+loginfo,ddtree:auto:8+fa3+loginfo} \
      PAIRED_BASES=${PAIRED_BASES:-ddtree:63:8+fa3+headeager,ddtree:auto:8+fa3+headeager+loginfo,plain+fa3} exec bash "$0" paired
    ;;
  paired|gc)
    # paired: the tiny pair's paired run. gc: how much of a round the scheduler's garbage collector takes, budget
    # auto vs budget 63 vs plain (fa3, paired), every collection logged with its duration (+gclog) and totalled
    # per engine log. PAIRED_SCHEDULE=continuous: bs requests kept in flight instead of waves of bs (bench_paired's
    # --schedule; session 36: in waves a speculative batch runs down to its slowest request).
    OUT=${OUT:-/tmp/${1}_out}
    mkdir -p "$OUT"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    eval "P=\"$PAIR\""
    if [ "$1" = gc ]; then
      CONFIGS=plain+fa3+gclog,ddtree:63:8+fa3+gclog,ddtree:auto:8+fa3+gclog,ddtree:auto:8+fa3+gcfreeze+gclog
      BASES=plain+fa3+gclog BS=${PAIRED_BS:-1,16} REPS=${PAIRED_REPEATS:-3} PROMPTS=32 TIMEOUT=${PAIRED_TIMEOUT_S:-400}
      NAME=paired_gc.json
    else
      # +loginfo: the auto engine's log keeps its start-up cost table and its budget mix (one line per 40 rounds)
      CONFIGS=${PAIRED_CONFIGS:-plain+fa3,dflash+fa3,ddtree:15:8+fa3,ddtree:63:8+fa3,ddtree:auto:8+fa3+loginfo}
      BASES=${PAIRED_BASES:-dflash+fa3,plain+fa3} BS=${PAIRED_BS:-1,4,16,48,64} REPS=${PAIRED_REPEATS:-2} PROMPTS=${PAIRED_PROMPTS:-64} TIMEOUT=${PAIRED_TIMEOUT_S:-570}
      NAME=paired_auto.json
    fi
    # PAIRED_PHASES=1: configs with +phases / +split write their scheduler's phase times under $OUT/phases, summed up
    # side by side after the run (over each engine's whole life, every batch size: give one PAIRED_BS); its
    # non-decode rows are the prefill iterations, where one output length costs a speculative engine (session 43)
    [ -n "${PAIRED_PHASES:-}" ] && export DDTREE_BENCH_PHASES_DIR="$OUT/phases"
    # shellcheck disable=SC2086
    timeout -k 10 "$TIMEOUT" python3 benchmark/bench_paired.py --log-dir "$OUT/paired_logs" $P --configs "$CONFIGS" \
      --baselines "$BASES" --bs "$BS" --repeats "$REPS" --num-prompts "$PROMPTS" --max-new-tokens "${PAIRED_NEW_TOKENS:-64}" \
      --length-spread "${PAIRED_LENGTH_SPREAD:-0}" \
      --schedule "${PAIRED_SCHEDULE:-waves}" --out "$OUT/$NAME" 2>&1 | grep -v "GC start\|GC end" | tail -n 60
    [ "$1" = gc ] && python3 benchmark/gc_log_summary.py "$OUT"/paired_logs/engine_*.log --json "$OUT/gc_summary.json"
    # engines at INFO (+loginfo): each 40-round interval's time outside the rounds, per prefill batch (session 44;
    # engine_i.log is the i-th config of PAIRED_CONFIGS)
    if grep -qs "Decode batch" "$OUT"/paired_logs/engine_*.log; then
      echo "[prefill_gaps] engines in order: $CONFIGS"
      # shellcheck disable=SC2046
      python3 benchmark/prefill_gaps.py $(ls "$OUT"/paired_logs/engine_*.log | sort -V) --json "$OUT/prefill_gaps.json" \
        > "$OUT/prefill_gaps.txt" 2>&1
      sed 's|.*/paired_logs/||' "$OUT/prefill_gaps.txt" | tail -n 30
    fi
    if [ -n "${PAIRED_PHASES:-}" ]; then
      python3 benchmark/phase_times_summary.py "$OUT/phases" --json "$OUT/phase_times.json" > "$OUT/phase_times.txt" 2>&1
      tail -n 80 "$OUT/phase_times.txt"
      (cd "$OUT" && tar -czf phases.tar.gz phases && rm -rf phases)
    fi
    (cd "$OUT" && tar -czf paired_logs.tar.gz paired_logs && rm -rf paired_logs)  # <= 8 files come back
    ls -la "$OUT"
    ;;
  profile)
    # where the tiny pair's rounds spend their host time at one batch size (benchmark/results/session27/
    # width0_round.md): AR, auto pinned to width 0 every round (+pin0, the test plugin: a width-0 round against
    # AR's step), budgets 15 / 63 and auto (+loginfo: its start-up cost table and budget mix in the log),
    # each timed at PROFILE_BS, then one torch-profiler trace per config of 2 generate calls of PROFILE_BS prompts,
    # analysed (analyze_trace.py; plain decoding's round is its target step). fa3 staged; ~5 engines x ~1 minute
    OUT=${OUT:-/tmp/profile_out}
    mkdir -p "$OUT"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    eval "P=\"$PAIR\""
    BS=${PROFILE_BS:-16}
    # shellcheck disable=SC2086
    timeout -k 10 "${PROFILE_TIMEOUT_S:-480}" python3 benchmark/bench_e2e.py $P \
      --configs "${PROFILE_CONFIGS:-plain+fa3,ddtree:auto:8+fa3+pin0,ddtree:15:8+fa3,ddtree:63:8+fa3,ddtree:auto:8+fa3+loginfo}" \
      --bs "$BS" --num-prompts 32 --max-new-tokens 64 --profile-dir /tmp/prof_tiny --profile-bs "$BS" --deadline-s 360 \
      --out "$OUT/e2e_profile.json" > "$OUT/e2e_profile.log" 2>&1
    grep "\[bench_e2e\]\|DDTREE auto\|auto budget\|  bs " "$OUT/e2e_profile.log" | tail -n 60
    for d in /tmp/prof_tiny/*/; do
      t=$(ls -t "$d"*.trace.json* 2>/dev/null | head -n 1)
      # whole output to a file first: cut by `head`, the script died of a broken pipe before writing its JSON
      # (session 30)
      [ -n "$t" ] && python3 benchmark/analyze_trace.py "$t" --json "$OUT/$(basename "$d").analysis.json" \
        > "$OUT/$(basename "$d").analysis.txt" 2>&1; head -n 6 "$OUT/$(basename "$d").analysis.txt"
    done
    gzip -f "$OUT/e2e_profile.log"
    ls -la "$OUT"
    ;;
  phases)
    # where the tiny pair's decode iterations spend their wall time, unprofiled (+phases: the test plugin's
    # perf_counter timers, ddtree_test_hooks/phase_times.py): AR, auto pinned to width 0, DFLASH, budget 63, each
    # at PHASES_BS (default 16), 64 prompts x 64 tokens, one engine after another (a breakdown, not a speed
    # claim); the summary puts the configs side by side (session 33: the torch profiler's Python-stack overhead
    # hid why a width-0 round ran at 0.55x plain decoding's speed). fa3 staged; ~4 engines x ~1 minute.
    # PHASES_CONFIGS with +syncwatch instead of +phases: only the loop's steps and host waits timed, and every
    # synchronizing CUDA call counted by call site (the summary lists the sites); configs without either run clean.
    # ddtree:auto:8+fa3+floor+syncwatch: every round the least a width-0 round can do (test plugin's floor_round),
    # against AR and the real width-0 round (+pin0): how much of the gap is the round's own cost.
    # +split (instead of +phases): the loop, the waits and the once-an-iteration parts only (phase_times.SPLIT_LABELS),
    # e.g. PHASES_CONFIGS=plain+fa3+split,ddtree:auto:8+fa3+floor+split: where the floor's iteration exceeds AR's.
    OUT=${OUT:-/tmp/phases_out}
    mkdir -p "$OUT/phases"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    eval "P=\"$PAIR\""
    # shellcheck disable=SC2086
    DDTREE_BENCH_PHASES_DIR="$OUT/phases" timeout -k 10 "${PHASES_TIMEOUT_S:-400}" python3 benchmark/bench_e2e.py $P \
      --configs "${PHASES_CONFIGS:-plain+fa3+phases,ddtree:auto:8+fa3+pin0+phases,dflash+fa3+phases,ddtree:63:8+fa3+phases}" \
      --bs "${PHASES_BS:-16}" --num-prompts 64 --max-new-tokens 64 --deadline-s "${PHASES_DEADLINE_S:-330}" \
      --out "$OUT/e2e_phases.json" > "$OUT/e2e_phases.log" 2>&1
    grep "\[bench_e2e\]" "$OUT/e2e_phases.log" | tail -n 20
    python3 benchmark/phase_times_summary.py "$OUT/phases" --json "$OUT/phase_times.json"
    gzip -f "$OUT/e2e_phases.log"
    (cd "$OUT" && tar -czf phases.tar.gz phases && rm -rf phases)
    ls -la "$OUT"
    ;;
  shape)
    # Budget: session 7's 4-engine 8B-shape call (c 1 / 32, 2 reps, profiles) took 484 s of which the first
    # engine's start on a fresh machine was 146 s; five engines here (auto adds its per-bucket verify graphs),
    # no profiles. The JSON is rewritten after every repetition, so a timeout keeps the repetitions done.
    # The paper's table starts at budget 16: auto's buckets 1 / 3 / 7 / 15 get 8.61 in the policy and the
    # projection (bench_shape warns); SHAPE_ACCEPT_TABLE=FILE.json (a tracked file) states small budgets instead.
    OUT=${OUT:-/tmp/shape_out}
    mkdir -p "$OUT"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    timeout -k 10 "${SHAPE_TIMEOUT_S:-550}" python3 benchmark/bench_shape.py ${SHAPE_DRAFT_WEIGHTS:+--draft-weights "$SHAPE_DRAFT_WEIGHTS"} --shapes qwen3-8b \
      --configs "${SHAPE_CONFIGS:-plain+fa3,dflash+fa3,ddtree:15:8+fa3,ddtree:15:8+triton,ddtree:auto:8+fa3}" \
      --baselines "${SHAPE_BASELINES:-dflash+fa3,plain+fa3}" --concurrency "${SHAPE_CONCURRENCY:-1,2,4,8}" \
      --repeats "${SHAPE_REPEATS:-2}" --new-tokens 48 --base-tokens 16 --max-total-tokens 24000 \
      ${SHAPE_ACCEPT_TABLE:+--accept-table "$SHAPE_ACCEPT_TABLE"} \
      --log-dir "$OUT/logs" --out "$OUT/shape_auto.json" 2>&1 | tail -n 90
    # the auto engine's rounds, read from its decode log (interval 1): buckets in order, periods and the cost
    # model's estimates per key (the other engines' logs say they have none)
    python3 benchmark/auto_log_rounds.py "$OUT"/logs/*.log --json "$OUT/auto_rounds.json" 2>&1 | cut -c1-240 | tail -n 40
    (cd "$OUT" && tar -czf logs.tar.gz logs && rm -rf logs)
    python3 benchmark/bench_shape.py --plot "$OUT/shape_auto.json" --plot-dir "$OUT/plots" 2>&1 | tail -n 5
    ls -la "$OUT" "$OUT/plots"
    ;;
  *)
    echo "usage: $0 auto|warmup|merge|chain|lean|below|prefill|window|pregraph|onelength|features|defaultstart|head|paired|gc|profile|phases|shape" >&2
    exit 2
    ;;
esac
