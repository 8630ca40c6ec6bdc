#!/usr/bin/env bash
# The H200 runs of DDTREE's EXPERIMENTAL hybrid (Mamba/GDN) tree verify (issue 15 item 1), one device call of
# <= 10 minutes each (several engines share the GPU through parallel.sh):
#     bash scripts/device/hybrid.sh kernels   # upstream's conv + GDN tree kernels natively, fed with DDTree links,
#                                             # vs the float64 root-path reference, both faults caught; the
#                                             # argument rules (test_hybrid_verify_interp.py, test_hybrid_args.py)
#     bash scripts/device/hybrid.sh parity    # sharp fixture, greedy, exact vs no speculation: bs 1 / 8 / 32,
#                                             # budgets 15 / 64 / 1, graphs on / off, overlap on / off, radix
#                                             # cache on (shared 300-token prefixes) / off / extra_buffer
#     bash scripts/device/hybrid.sh faults    # plain-weights fixture: DDTREE vs DFLASH divergence counts; and,
#                                             # under the test plugin's replay oracle (rounds accept nodes off the
#                                             # first chain), the two deliberate state faults diverge clearly more
#     bash scripts/device/hybrid.sh sampling  # T > 0 on the plain-weights fixture: DDTREE vs plain, chi-square
#     bash scripts/device/hybrid.sh rest      # nograph + nooverlap parity, faults, T > 0 and the paged runs at once
#                                             # (seven at once: too many for one call, session 13)
#     bash scripts/device/hybrid.sh left      # what session 20 left: the faults (replay oracle) and auto's three
#                                             # groups, at once (its T > 0 and paged triton / flashinfer passed)
#     bash scripts/device/hybrid.sh auto      # budget auto on the sharp fixture: a cycle through every bucket,
#                                             # graphs / overlap on and off (three groups at once), exact vs plain
#     bash scripts/device/hybrid.sh shape     # the Qwen3.5-9B shape (dummy weights, bench_shape.py): AR, DFLASH and
#                                             # DDTREE b15 / b7 ms per round at c 1 / 8 / 16, paired (fa3 staged).
#                                             # Four engines at once on one H200, estimated: ~21 GiB plain, ~36 each for
#                                             # DFLASH and b15 (16 requests x 16 rows of 49 MiB per-step states),
#                                             # ~30 GiB b7; c 32 or budget auto (64 rows a request) do not fit beside
#     bash scripts/device/hybrid.sh paged_hybrid  # issue 15 item 3 on the hybrid fixture: page 16 / 64 == page 1
#     bash scripts/device/hybrid.sh paged     # issue 15 item 3 (dense targets): --page-size 16 / 64 greedy output
#                                             # == page size 1 on triton, flashinfer and (when staged) fa3
#     bash scripts/device/hybrid.sh paged_pair  # the same on the trained pair, divergences only float32 near-ties
#                                             # (triton + flashinfer; PAGED_PAIR_BACKENDS=fa3 with fa3 staged)
# Env (shape): SHAPE_CONFIGS, SHAPE_CONCURRENCY, SHAPE_REPEATS, SHAPE_TIMEOUT_S, SHAPE_DRAFT_WEIGHTS (normal: the drafter
# loads a written N(0, 0.02) checkpoint, bench_shape.py --draft-weights).
# Device tool: carry [".device"] (see ../shared/device/README.md). DDTREE engines on triton at tp 1 run without
# SGLANG_DDTREE_EXPERIMENTAL_HYBRID (the GPU-verified hybrid configuration); the scripts and tests set it themselves
# where they go beyond (tp 2, fa3 in the shape benchmark). Each command's results.jsonl /
# sampling.json comes back through SGLANG_DDTREE_KEEP_REPORTS (parallel.sh sets it to $OUT/<name>).
set -u
cd "$(dirname "$0")/../.."
PAR=scripts/device/parallel.sh
PYT="python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider"
case "${1:-}" in
  kernels)
    exec bash $PAR \
      "kernels=$PYT test/worker/test_hybrid_verify_interp.py" \
      "args=python3 -m pytest -v -rA --tb=short -p no:cacheprovider test/plugin/test_hybrid_args.py"
    ;;
  parity)
    exec bash $PAR \
      "graphs_overlap=$PYT test/worker/test_hybrid_gpu.py -k graphs_overlap" \
      "nograph=$PYT test/worker/test_hybrid_gpu.py -k 'parity and nograph'" \
      "nooverlap=$PYT test/worker/test_hybrid_gpu.py -k 'parity and nooverlap'" \
      "radix=$PYT test/worker/test_hybrid_gpu.py -k radix"
    ;;
  faults)
    exec bash $PAR \
      "dflash_like=$PYT test/worker/test_hybrid_gpu.py::test_plain_hybrid_diverges_like_dflash" \
      "faults=$PYT test/worker/test_hybrid_gpu.py::test_plain_hybrid_state_faults_are_caught"
    ;;
  rest)
    # what sessions 11-12 left unrun, in one call: parity with graphs / overlap off, the state faults, T > 0, and
    # the dense paged parity (fa3's only when staged)
    exec bash $PAR \
      "nograph=$PYT test/worker/test_hybrid_gpu.py -k 'parity and nograph'" \
      "nooverlap=$PYT test/worker/test_hybrid_gpu.py -k 'parity and nooverlap'" \
      "dflash_like=$PYT test/worker/test_hybrid_gpu.py::test_plain_hybrid_diverges_like_dflash" \
      "faults=$PYT test/worker/test_hybrid_gpu.py::test_plain_hybrid_state_faults_are_caught" \
      "sampling=$PYT test/worker/test_hybrid_gpu.py -k sampling" \
      "paged_triton=$PYT test/worker/test_worker_gpu.py -k 'paged and triton'" \
      "paged_flashinfer=$PYT test/worker/test_worker_gpu.py -k 'paged and flashinfer'" \
      "paged_fa3=$PYT test/worker/test_worker_gpu.py -k 'paged and fa3'"
    ;;
  sampling)
    exec bash $PAR "sampling=$PYT test/worker/test_hybrid_gpu.py -k sampling"
    ;;
  auto)
    exec bash $PAR \
      "auto=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto]" \
      "auto_eager=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto_eager]" \
      "auto_sync=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto_sync]"
    ;;
  left)
    # what session 20 left: the state faults under the replay oracle (with the DFLASH yardstick) and budget auto's
    # three groups, five commands at once (session 20's `left`, four at once, took 485 s; its T > 0 and paged
    # triton / flashinfer runs passed)
    exec bash $PAR \
      "dflash_like=$PYT test/worker/test_hybrid_gpu.py::test_plain_hybrid_diverges_like_dflash" \
      "faults=$PYT test/worker/test_hybrid_gpu.py::test_plain_hybrid_state_faults_are_caught" \
      "auto=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto]" \
      "auto_eager=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto_eager]" \
      "auto_sync=$PYT test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[auto_sync]"
    ;;
  shape)
    OUT=${OUT:-/tmp/hybrid_shape_out}
    mkdir -p "$OUT"
    # shellcheck disable=SC1091
    source scripts/device/plugin_env.sh
    timeout -k 10 "${SHAPE_TIMEOUT_S:-540}" python3 benchmark/bench_shape.py ${SHAPE_DRAFT_WEIGHTS:+--draft-weights "$SHAPE_DRAFT_WEIGHTS"} --shapes qwen3.5-9b \
      --configs "${SHAPE_CONFIGS:-plain+fa3,dflash+fa3,ddtree:15:8+fa3,ddtree:7:8+fa3}" \
      --baselines dflash+fa3,plain+fa3 --concurrency "${SHAPE_CONCURRENCY:-1,8,16}" --repeats "${SHAPE_REPEATS:-2}" \
      --new-tokens 48 --base-tokens 16 --max-total-tokens 24000 --log-dir "$OUT/logs" --out "$OUT/shape_hybrid.json" \
      2>&1 | tail -n 60
    (cd "$OUT" && tar -czf logs.tar.gz logs && rm -rf logs)
    ;;
  paged_hybrid)
    # issue 15 item 3 on the hybrid fixture: --page-size 16 / 64 greedy output == page 1 (sharp: exact), DDTREE
    # with graphs / overlap on and off and through the radix cache (two groups at once, ~5 minutes)
    exec bash $PAR \
      "hybrid_paged=$PYT 'test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[paged]'" \
      "hybrid_paged_modes=$PYT 'test/worker/test_hybrid_gpu.py::test_sharp_hybrid_greedy_parity[paged_modes]'"
    ;;
  paged)
    exec bash $PAR \
      "paged_triton=$PYT test/worker/test_worker_gpu.py -k 'paged and triton'" \
      "paged_flashinfer=$PYT test/worker/test_worker_gpu.py -k 'paged and flashinfer'" \
      "paged_fa3=$PYT test/worker/test_worker_gpu.py -k 'paged and fa3'"
    ;;
  paged_pair)
    # the trained pair at page 16 / 64 vs page 1, divergences analysed in float32 (test_paged_pair_gpu.py): two
    # backends at once (each engine takes 0.45 of the GPU); PAGED_PAIR_BACKENDS=fa3 for the third (fa3 staged)
    set --
    for b in $(echo "${PAGED_PAIR_BACKENDS:-triton,flashinfer}" | tr , ' '); do
      set -- "$@" "pair_$b=$PYT test/worker/test_paged_pair_gpu.py -k $b"
    done
    exec bash $PAR "$@"
    ;;
  *)
    echo "usage: $0 kernels|parity|faults|sampling|rest|left|auto|shape|paged|paged_pair|paged_hybrid" >&2
    exit 2
    ;;
esac
