#!/usr/bin/env python3
"""GPU check of the DDTREE worker: greedy DDTREE output == plain target output, token for token.

One ``sglang.Engine`` per configuration, run one after another in this process. Every configuration
decodes the same 48 prompts at batch sizes 1 (first 32 prompts), 4, 16 and 48 (requests submitted together); DDTREE outputs are
compared with the plain (no speculation) engine of the same attention backend, per prompt. Results go
to ``--out/results.jsonl`` (one line per configuration: pass counts, mismatches, mean accept length).

    python3 scripts/device/ddtree_parity.py --models-root DIR --out DIR \
        --configs sharp:plain_triton,sharp:dd_triton_b15,bias:plain_triton_fp32 [--deadline-s 400]
Model variants are make_tiny_models.py's: "sharp" (bf16-safe margins; attention barely matters, so it
cannot catch a wrong tree mask) and "bias" (random layers: attention matters, but bf16 near-ties make
even plain batched vs single runs differ; compare DDTREE's divergence with upstream DFLASH's: put a
dflash_* config before the dd_* ones and each dd_* record gets "vs_dflash").
SGLang 0.5.16's CUDA kernels (sgl_kernel rmsnorm) do not run float32 models.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COMMON = dict(dtype="bfloat16", mem_fraction_static=0.45, context_length=2048, max_total_tokens=65536,
              sampling_backend="pytorch", cuda_graph_max_bs_decode=48, log_level="info",
              decode_log_interval=20)


sys.path.insert(0, os.path.join(ROOT, "python"))
from sglang_ddtree.config import ChainBucket  # noqa: E402
from sglang_ddtree.validation import AUTO_TP_ENV, PAGED_VERIFIED_BACKENDS  # noqa: E402
from sglang_ddtree.worker.draft_kv_graph import ENV as KV_GRAPH_ENV  # noqa: E402

from sglang_ddtree.worker.flashinfer_plan import ENV as FI_PLAN_ENV  # noqa: E402
from sglang_ddtree.worker.head_graph import ENV as HEAD_GRAPH_ENV  # noqa: E402
from sglang_ddtree.worker.warmup import ENV as WARMUP_ENV  # noqa: E402

KV_GRAPH, KV_EAGER = {KV_GRAPH_ENV: "1"}, {KV_GRAPH_ENV: "0"}
FI_PLAN, FI_UPSTREAM = {FI_PLAN_ENV: "1"}, {FI_PLAN_ENV: "0"}
AUTO_TP = {AUTO_TP_ENV: "1"}  # budget auto at tp > 1 (experimental until tp2.sh has run it)
WARMUP = {WARMUP_ENV: "1"}  # the round's kernels compiled at start-up (the default since session 29; stated)
NO_WARMUP = {WARMUP_ENV: "0"}  # each compiled at its first round
HEAD_GRAPH = {HEAD_GRAPH_ENV: "1"}  # a tree round's slots, build and topology as one CUDA-graph replay (head_graph;
#                                     the default since session 41, stated)
HEAD_EAGER = {HEAD_GRAPH_ENV: "0"}  # the eager tree head
PREFILL_ASYNC = {"SGLANG_DDTREE_PREFILL_ASYNC": "1"}  # worker.prefill (experimental, session 44)
# the target's prefill CUDA graphs from 1 token, given as upstream's own --cuda-graph-bs-prefill (bench_e2e's
# +pregraph1: 1, 2, then upstream 0.5.16's list to the 2048-token context of COMMON)
sys.path.insert(0, os.path.join(ROOT, "benchmark"))
from bench_e2e import _MODIFIERS, decode_continuous  # noqa: E402

PREGRAPH1 = _MODIFIERS["pregraph1"]


def ddtree(budget, topk, backend="triton", **kw):
    return dict(speculative_algorithm="DDTREE", speculative_ddtree_budget=budget,
                speculative_ddtree_topk=topk, attention_backend=backend, **kw)


CONFIGS = {
    "plain_triton": dict(attention_backend="triton"),
    "plain_flashinfer": dict(attention_backend="flashinfer"),
    "dflash_triton": dict(attention_backend="triton", speculative_algorithm="DFLASH"),
    "dd_triton_b15": ddtree(15, 4),
    "dd_triton_b64": ddtree(64, 8),
    "dd_triton_b1": ddtree(1, 1),
    "dd_triton_b15_nograph": ddtree(15, 4, disable_cuda_graph=True),
    "dd_triton_b15_nooverlap": ddtree(15, 4, disable_overlap_schedule=True),
    # the drafter's top-K order reversed by the TEST-ONLY plugin (test/_test_plugin, DDTREE_TEST_REVERSE_RANKS)
    "dd_triton_b64_reversed": ddtree(64, 8, _test_hooks=dict(reverse_ranks=True)),
    "dd_triton_b3": ddtree(3, 2),
    # --speculative-ddtree-budget auto: the policy's own choice, and a fixed cycle of every bucket (test plugin:
    # the width changes every round, including width 0 = no drafting)
    "dd_triton_auto": ddtree("auto", 8),
    "dd_triton_auto_cycle": ddtree("auto", 8, _test_hooks=dict(cycle_budgets=True)),
    # the same with the compile watch: every round's eager kernels compiled at start-up (worker.warmup), none after
    "dd_triton_auto_cycle_compiles": ddtree("auto", 8, _env=WARMUP,
                                            _test_hooks=dict(cycle_budgets=True, compile_watch=True)),
    "dd_fa3_auto_cycle_compiles": ddtree("auto", 8, backend="fa3", _env=WARMUP,
                                         _test_hooks=dict(cycle_budgets=True, compile_watch=True)),
    "dd_triton_b15_compiles": ddtree(15, 4, _env=WARMUP, _test_hooks=dict(compile_watch=True)),
    # the compile watch without the warm-up (the control: it must log compiles)
    "dd_triton_auto_cycle_nowarmup_compiles": ddtree("auto", 8, _env=NO_WARMUP,
                                                     _test_hooks=dict(cycle_budgets=True, compile_watch=True)),
    "dd_triton_auto_cycle_nograph": ddtree("auto", 8, disable_cuda_graph=True, _test_hooks=dict(cycle_budgets=True)),
    "dd_triton_auto_cycle_nooverlap": ddtree("auto", 8, disable_overlap_schedule=True,
                                             _test_hooks=dict(cycle_budgets=True)),
    "dd_triton_b256": ddtree(256, 8),
    "dd_triton_b64_nograph": ddtree(64, 8, disable_cuda_graph=True),
    "dd_flashinfer_b64": ddtree(64, 8, backend="flashinfer"),
    "dd_flashinfer_b256": ddtree(256, 8, backend="flashinfer"),
    "dd_flashinfer_b15_nooverlap": ddtree(15, 4, backend="flashinfer", disable_overlap_schedule=True),
    "dd_flashinfer_b15": ddtree(15, 4, backend="flashinfer"),
    "dd_flashinfer_b64_nograph": ddtree(64, 8, backend="flashinfer", disable_cuda_graph=True),
    "dd_flashinfer_b1": ddtree(1, 1, backend="flashinfer"),
    # DDTREE's host-sync-free plan of flashinfer's graph replays (worker.flashinfer_plan)
    "dd_flashinfer_b15_fiplan": ddtree(15, 4, backend="flashinfer", _env=FI_PLAN),
    "dd_flashinfer_b64_fiplan": ddtree(64, 8, backend="flashinfer", _env=FI_PLAN),
    "dd_flashinfer_b15_nooverlap_fiplan": ddtree(15, 4, backend="flashinfer", disable_overlap_schedule=True,
                                                 _env=FI_PLAN),
    # upstream's plan(): the default before session 23, still the default with another FlashInfer than 0.6.14
    "dd_flashinfer_b15_fiupstream": ddtree(15, 4, backend="flashinfer", _env=FI_UPSTREAM),
    # fa3 (SGLang's Hopper default): its topk > 1 verify is cascade attention over the FULL_MASK rows
    "plain_fa3": dict(attention_backend="fa3"),
    "dd_fa3_b1": ddtree(1, 1, backend="fa3"),
    "dd_fa3_b15": ddtree(15, 4, backend="fa3"),
    # budgets below the block's 15 positions (session 42: the head graphs sized their inputs by the budget and b7
    # crashed its first round); topk 8 as a server passes it (clamped to 7 with a warning)
    "dd_fa3_b7": ddtree(7, 8, backend="fa3"),
    "dd_fa3_b3": ddtree(3, 2, backend="fa3"),
    "dd_fa3_b64": ddtree(64, 8, backend="fa3"),
    "dd_fa3_b256": ddtree(256, 8, backend="fa3"),
    "dd_fa3_b64_nograph": ddtree(64, 8, backend="fa3", disable_cuda_graph=True),
    "dd_fa3_b15_nooverlap": ddtree(15, 4, backend="fa3", disable_overlap_schedule=True),
    # --page-size > 1, compared with the page-1 plain engine of the same backend, on each backend validation takes
    # it on (no switch)
    **{f"plain_{b}_p{p}": dict(attention_backend=b, page_size=p) for b in PAGED_VERIFIED_BACKENDS for p in (16, 64)},
    **{f"dd_{b}_b15_p16": ddtree(15, 4, backend=b, page_size=16) for b in PAGED_VERIFIED_BACKENDS},
    **{f"dd_{b}_b64_p64": ddtree(64, 8, backend=b, page_size=64) for b in PAGED_VERIFIED_BACKENDS},
    **{f"dd_{b}_b15_p64_nooverlap": ddtree(15, 4, backend=b, page_size=64, disable_overlap_schedule=True)
       for b in PAGED_VERIFIED_BACKENDS},
    **{f"dd_{b}_b64_p16_nograph": ddtree(64, 8, backend=b, page_size=16, disable_cuda_graph=True)
       for b in PAGED_VERIFIED_BACKENDS},
    # the draft-KV append from CUDA graphs (worker.draft_kv_graph; on by default since session 12: these force it,
    # _kveager keeps upstream's eager call)
    "dd_triton_b15_kveager": ddtree(15, 4, _env=KV_EAGER),
    "dd_triton_b15_kvgraph": ddtree(15, 4, _env=KV_GRAPH),
    "dd_triton_b64_kvgraph": ddtree(64, 8, _env=KV_GRAPH),
    "dd_triton_auto_cycle_kvgraph": ddtree("auto", 8, _env=KV_GRAPH, _test_hooks=dict(cycle_budgets=True)),
    "dd_fa3_b15_kvgraph": ddtree(15, 4, backend="fa3", _env=KV_GRAPH),
    "dd_fa3_b15_nooverlap_kvgraph": ddtree(15, 4, backend="fa3", disable_overlap_schedule=True, _env=KV_GRAPH),
    "dd_fa3_auto_cycle": ddtree("auto", 8, backend="fa3", _test_hooks=dict(cycle_budgets=True)),
    # the tree head as CUDA graphs (session 40, worker.head_graph; fa3 with the fused tree attention only): every
    # tree bucket in turn with the compile watch (the heads compile at start-up), a fixed budget outside the buckets,
    # without overlap, and without graphs (the switch then leaves the eager head: the control); on by default since
    # session 41, so the eager head on fa3 has a config of its own
    "dd_fa3_auto_cycle_headgraph_compiles": ddtree("auto", 8, backend="fa3", _env={**WARMUP, **HEAD_GRAPH},
                                                   _test_hooks=dict(cycle_budgets=True, compile_watch=True)),
    "dd_fa3_b64_headgraph": ddtree(64, 8, backend="fa3", _env=HEAD_GRAPH),
    "dd_fa3_b15_nooverlap_headgraph": ddtree(15, 4, backend="fa3", disable_overlap_schedule=True, _env=HEAD_GRAPH),
    "dd_fa3_auto_cycle_headgraph_nograph": ddtree("auto", 8, backend="fa3", disable_cuda_graph=True, _env=HEAD_GRAPH,
                                                  _test_hooks=dict(cycle_budgets=True)),
    "dd_fa3_b64_headeager": ddtree(64, 8, backend="fa3", _env=HEAD_EAGER),
    # DDTREE's own prefill without upstream's host wait (worker.prefill, 0.5.16 family, off by default): the prompts
    # of every batch size go through it, with and without overlap, and budget auto's bucket cycle on triton
    "dd_fa3_b64_prefillasync": ddtree(64, 8, backend="fa3", _env=PREFILL_ASYNC),
    "dd_fa3_b15_nooverlap_prefillasync": ddtree(15, 4, backend="fa3", disable_overlap_schedule=True,
                                                _env=PREFILL_ASYNC),
    "dd_triton_auto_cycle_prefillasync": ddtree("auto", 8, _env=PREFILL_ASYNC,
                                                _test_hooks=dict(cycle_budgets=True)),
    # the same on triton alone (session 45: a call with no time to stage fa3)
    "dd_triton_b64_prefillasync": ddtree(64, 8, _env=PREFILL_ASYNC),
    "dd_triton_b15_nooverlap_prefillasync": ddtree(15, 4, disable_overlap_schedule=True, _env=PREFILL_ASYNC),
    # prefill graphs from 1 token (PREGRAPH1; session 46; a DDTREE triton server's default since then, given here for
    # the record). The prompts come back at bs 4 / 16 / 48 together (prefills of 4+ tokens); _cached_bs1 sends
    # each alone again, so every prefill is the radix cache's 1-token remainder, replayed from the 1-token graph
    "plain_triton_pregraph1": dict(attention_backend="triton", **PREGRAPH1),
    "dd_triton_b64_pregraph1": ddtree(64, 8, **PREGRAPH1),
    "dd_triton_auto_cycle_pregraph1_cached": ddtree("auto", 8, _test_hooks=dict(cycle_budgets=True), _cached_bs1=True,
                                                    **PREGRAPH1),
    "dd_triton_b15_nooverlap_pregraph1": ddtree(15, 4, disable_overlap_schedule=True, **PREGRAPH1),
    "dd_triton_auto_cycle_pregraph1": ddtree("auto", 8, _test_hooks=dict(cycle_budgets=True), **PREGRAPH1),
    # the same on fa3 (before fa3 joins validation.SMALL_PREFILL_GRAPH_BACKENDS; PREGRAPH1 names the sizes there)
    "dd_fa3_b64_pregraph1": ddtree(64, 8, backend="fa3", **PREGRAPH1),
    "dd_fa3_auto_cycle_pregraph1_cached": ddtree("auto", 8, backend="fa3", _test_hooks=dict(cycle_budgets=True),
                                                 _cached_bs1=True, **PREGRAPH1),
    "dd_fa3_b15_nooverlap_pregraph1": ddtree(15, 4, backend="fa3", disable_overlap_schedule=True, **PREGRAPH1),
    # session 48: DDTREE's own prefill (no host wait) with the 1-token prefill graphs, fa3
    "dd_fa3_auto_cycle_pregraph1_cached_prefillasync": ddtree("auto", 8, backend="fa3", _env=PREFILL_ASYNC,
                                                              _test_hooks=dict(cycle_budgets=True), _cached_bs1=True,
                                                              **PREGRAPH1),
    "dd_fa3_b15_nooverlap_pregraph1_prefillasync": ddtree(15, 4, backend="fa3", disable_overlap_schedule=True,
                                                          _env=PREFILL_ASYNC, **PREGRAPH1),
    # (session 48's +prefull configs, upstream's full prefill graphs, are gone: validation refuses that backend, it
    # drops the target's captured hidden states, session 49)
    # session 49: the admission window (on by default) under the parity test: auto's bucket cycle with every prompt
    # again at 16 in flight ("16c"), the successors held while >= 12 decode; fa3 and triton
    "dd_fa3_auto_cycle_window": ddtree("auto", 8, backend="fa3", _test_hooks=dict(cycle_budgets=True),
                                       _continuous=True),
    "dd_triton_auto_cycle_window": ddtree("auto", 8, _test_hooks=dict(cycle_budgets=True), _continuous=True),
    # budget auto's chain bucket (fa3 only: config.ChainBucket, worker.widths.with_chain) every round, with and
    # without overlap; the fa3 cycles above pass through it every 8th round. The sharp / trained models' drafters
    # have block 8: the chain of 7 drafts
    "dd_fa3_auto_chain": ddtree("auto", 8, backend="fa3", _test_hooks=dict(pin_budget=ChainBucket(7))),
    "dd_fa3_auto_chain_nooverlap": ddtree("auto", 8, backend="fa3", disable_overlap_schedule=True,
                                          _test_hooks=dict(pin_budget=ChainBucket(7))),
    "dd_fa3_auto_chain_nograph": ddtree("auto", 8, backend="fa3", disable_cuda_graph=True,
                                        _test_hooks=dict(pin_budget=ChainBucket(7))),
    "dd_fa3_auto": ddtree("auto", 8, backend="fa3"),
    # budget auto pinned to width 0 every round (session 31's chain-shaped rounds: no build, no topology, no KV move):
    # on fa3 beside the chain it verifies causally at top-K 1 (no mask, no bits), on triton through its all-True mask
    "dd_fa3_auto_w0": ddtree("auto", 8, backend="fa3", _test_hooks=dict(pin_budget=0)),
    "dd_fa3_auto_w0_nograph": ddtree("auto", 8, backend="fa3", disable_cuda_graph=True,
                                     _test_hooks=dict(pin_budget=0)),
    "dd_fa3_auto_w0_nooverlap": ddtree("auto", 8, backend="fa3", disable_overlap_schedule=True,
                                       _test_hooks=dict(pin_budget=0)),
    "dd_triton_auto_w0": ddtree("auto", 8, _test_hooks=dict(pin_budget=0)),
    # tensor parallelism (2 GPUs): the draft top-K head merges per-rank vocab shards (draft_head.py)
    "plain_triton_tp2": dict(attention_backend="triton", tp_size=2),
    "dd_triton_b15_tp2": ddtree(15, 4, tp_size=2),
    "dd_triton_b64_tp2": ddtree(64, 8, tp_size=2),
    "dd_triton_b15_tp2_nooverlap": ddtree(15, 4, tp_size=2, disable_overlap_schedule=True),
    "dd_triton_b64_tp2_nooverlap": ddtree(64, 8, tp_size=2, disable_overlap_schedule=True),
    # budget auto at tp 2: the policy's own widths (every rank must pick the same one every round, or their graphs'
    # collectives pair up wrongly), and the fixed cycle through every bucket
    "dd_triton_auto_tp2": ddtree("auto", 8, tp_size=2, _env=AUTO_TP),
    "dd_triton_auto_tp2_nooverlap": ddtree("auto", 8, tp_size=2, disable_overlap_schedule=True, _env=AUTO_TP),
    "dd_triton_auto_cycle_tp2": ddtree("auto", 8, tp_size=2, _env=AUTO_TP, _test_hooks=dict(cycle_budgets=True)),
}
# No float32 variants: float32 engines do not start in SGLang 0.5.16 (sgl_kernel's rmsnorm has no float32
# kernel; test/worker/GPU_RESULTS.md). Exactness comes from the sharp models instead.


def make_prompts(tokenizer, n=48):
    words = ("the quick brown fox jumps over a lazy dog while speculative decoding drafts a tree of tokens "
             "and the target model verifies them alpha beta gamma delta one two three def class return").split()
    prompts = []
    for i in range(n):
        k = 3 + (i * 7) % 23
        text = " ".join(words[(i * 5 + j * 3) % len(words)] for j in range(k)) + f" {i * 7919 % 1000}"
        prompts.append(tokenizer.encode(text))
    return prompts


BATCH_SIZES = (1, 4, 16, 48)  # every prompt at every batch size, except batch 1: the first BS1_PROMPTS
# a config with "_cached_bs1": True also decodes the first BS1_PROMPTS one at a time AGAIN at the end, reported as
# "1c": the radix cache then holds each prompt but its last token, so every prefill is one token (session 46: the
# path prefill graphs from 1 token replace; at 4 / 16 / 48 such requests arrive together and prefill 4+ tokens)
CACHED_BS1 = "1c"
BS1_PROMPTS = 32
# a config with "_continuous": True also decodes every prompt AGAIN at the end with CONTINUOUS_IN_FLIGHT requests in
# flight, each finished one replaced at once (bench_e2e.decode_continuous), reported as "16c": the successors arrive
# while the others decode, so the admission window (worker.admission, on by default: it holds arrivals while >= 12
# requests decode) holds them; the other passes send each batch at once, when nothing runs, so nothing is held
CONTINUOUS = "16c"
CONTINUOUS_IN_FLIGHT = 16
MODEL_DIRS = {"sharp": ("target_sharp", "draft_sharp"), "bias": ("target", "draft_bias")}


def test_hooks_env(hooks) -> dict:
    """Variables for the test plugin's ``hooks`` (``test/worker/_test_plugin_env.py``); puts the plugin on
    this process's sys.path, which the engine's spawned scheduler copies (so it finds the entry point)."""
    sys.path.insert(0, os.path.join(ROOT, "test", "worker"))
    import _test_plugin_env

    _test_plugin_env.add_plugin_path()
    return {k: v for k, v in _test_plugin_env.plugin_env(**hooks).items() if k != "PYTHONPATH"}


def compile_report(path):
    """The compile watch's lines (test plugin, ``DDTREE_TEST_COMPILE_LOG``): {"warmed": ranks that logged the start-up
    warm-up, "rounds_that_compiled": their "compiled" lines (round, bs, kernel counts before / after)}."""
    if not os.path.isfile(path):
        return {"error": f"no compile log at {path}"}
    lines = [json.loads(x) for x in open(path) if x.strip()]
    return {"warmed": sum(x["event"] == "warmed" for x in lines),
            "no_warm_up": sum(x["event"] == "no_warm_up" for x in lines),
            "rounds_that_compiled": [x for x in lines if x["event"] == "compiled"]}


def run_config(name, target, draft, prompts, max_new_tokens, out_dir="."):
    import sglang

    kw = dict(CONFIGS[name])
    hooks = kw.pop("_test_hooks", None)
    batch_sizes = (BATCH_SIZES + ((CACHED_BS1,) if kw.pop("_cached_bs1", False) else ())
                   + ((CONTINUOUS,) if kw.pop("_continuous", False) else ()))
    compile_log = None
    if hooks and hooks.get("compile_watch"):  # the test plugin's compile watch, logged beside results.jsonl
        compile_log = os.path.abspath(os.path.join(out_dir, f"compiles_{name}.jsonl"))
        if os.path.exists(compile_log):
            os.remove(compile_log)
        hooks = {**{k: v for k, v in hooks.items() if k != "compile_watch"}, "compile_log": compile_log}
    env = {**(test_hooks_env(hooks) if hooks else {}), **kw.pop("_env", {})}
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    if kw.get("speculative_algorithm") in ("DDTREE", "DFLASH"):
        kw["speculative_draft_model_path"] = draft
    t0 = time.time()
    engine = sglang.Engine(model_path=target, **{**COMMON, **kw})
    start_s = time.time() - t0
    params = dict(temperature=0.0, max_new_tokens=max_new_tokens, ignore_eos=True)
    out = {"outputs": {}, "accept": {}}
    try:
        for bs in batch_sizes:
            if bs == CONTINUOUS:
                out["outputs"][bs] = decode_continuous(engine, prompts, CONTINUOUS_IN_FLIGHT, params)["outputs"]
                out["accept"][bs] = [None] * len(prompts)  # per request not kept by decode_continuous
                continue
            subset = prompts[:BS1_PROMPTS] if bs in (1, CACHED_BS1) else prompts
            step = 1 if bs == CACHED_BS1 else bs
            ids, acc = [None] * len(subset), [None] * len(subset)
            for s in range(0, len(subset), step):
                res = engine.generate(input_ids=subset[s : s + step], sampling_params=params)
                for j, r in enumerate(res):
                    ids[s + j] = list(r["output_ids"])
                    acc[s + j] = r["meta_info"].get("spec_accept_length")
            out["outputs"][bs], out["accept"][bs] = ids, acc
    finally:
        engine.shutdown()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out["start_s"], out["total_s"] = start_s, time.time() - t0
    if compile_log is not None:
        out["compiles"] = compile_report(compile_log)
    return out


def compare(ref, got):
    """Per batch size: (equal prompts, total prompts, first mismatch)."""
    report = {}
    for bs, outs in got["outputs"].items():
        ref_outs = ref["outputs"][16][: len(outs)]
        eq = [a == b for a, b in zip(outs, ref_outs)]
        first = None
        for i, (a, b) in enumerate(zip(outs, ref_outs)):
            if a != b:
                pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                first = dict(prompt=i, pos=pos, got=a[max(0, pos - 2) : pos + 4], ref=b[max(0, pos - 2) : pos + 4])
                break
        diverge = [next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None) for a, b in zip(outs, ref_outs)]
        report[bs] = dict(equal=sum(eq), total=len(eq), first_mismatch=first,
                          diverge_at=[d for d in diverge if d is not None])
    return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models-root", required=True, help="holds <variant>/ from make_tiny_models.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", required=True, help="comma-separated variant:config")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no new engine after this")
    args = ap.parse_args()
    t_start = time.time()
    from transformers import AutoTokenizer

    refs, prompts = {}, {}
    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "results.jsonl")
    for spec in args.configs.split(","):
        variant, name = spec.split(":")
        if time.time() - t_start > args.deadline_s:
            print(f"[parity] deadline reached, skipping {spec}", flush=True)
            continue
        target, draft = (os.path.join(args.models_root, variant, d) for d in MODEL_DIRS[variant])
        if variant not in prompts:
            prompts[variant] = make_prompts(AutoTokenizer.from_pretrained(target))
        key = (variant, CONFIGS[name].get("attention_backend", "triton"), CONFIGS[name].get("dtype", "bfloat16"),
               CONFIGS[name].get("tp_size", 1))
        print(f"[parity] === {spec} ({time.time() - t_start:.0f}s)", flush=True)
        rec = dict(config=spec, kwargs={k: v for k, v in CONFIGS[name].items()})  # _test_hooks included
        try:
            got = run_config(name, target, draft, prompts[variant], args.max_new_tokens, args.out)
            rec.update(start_s=round(got["start_s"], 1), total_s=round(got["total_s"], 1))
            if "compiles" in got:
                rec["compiles"] = got["compiles"]
            if name.startswith("dflash_"):
                refs[("dflash",) + key] = got
            if name.startswith("plain_") and CONFIGS[name].get("page_size", 1) > 1 and key in refs:
                rec["parity"] = compare(refs[key], got)  # a paged plain engine against the page-1 one
            elif name.startswith("plain_"):
                refs[key] = got
                rec["batch_invariant"] = got["outputs"][1] == got["outputs"][16][:4] and got["outputs"][4] == got["outputs"][16]
                rec["self_parity"] = compare(got, got)
            else:
                ref = refs.get(key)
                rec["parity"] = compare(ref, got) if ref is not None else f"no reference for {key}"
                if name.startswith("dd_") and ("dflash",) + key in refs:  # same drafter, chain verify
                    rec["vs_dflash"] = compare(refs[("dflash",) + key], got)
                accs = [a for v in got["accept"].values() for a in v if a is not None]
                rec["mean_accept_length"] = round(sum(accs) / len(accs), 3) if accs else None
                rec["accept_bs1"] = [round(a, 2) if a else a for a in got["accept"][1]]
        except Exception as e:  # record and go on with the next configuration
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-4000:]
        print("[parity] " + json.dumps({k: v for k, v in rec.items() if k not in ("traceback", "kwargs")}), flush=True)
        with open(results_path, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
