#!/usr/bin/env python3
"""GPU: DDTREE on the hybrid Qwen3.5 fixture (``scripts/make_hybrid_fixture.py``) vs the same target without
speculative decoding, greedy, token for token. DDTREE configurations on triton at tp 1 run as users run them (the
GPU-verified hybrid configuration, no switch); the tp 2 ones with ``SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1``.

    python3 scripts/device/hybrid_parity.py --fixture DIR --out DIR --configs plain,dd_b15,dd_b64_nograph \
        [--deadline-s 480]
``--fixture`` holds ``target/`` and ``draft/`` (written there first if missing; ``--plain-weights`` writes the
fixture's ``--plain`` variant, where the linear-attention state visibly moves the logits). One ``sglang.Engine``
per configuration, one after another in this process. Phases of every configuration:
  greedy   40 prompts at batch 1 (the first 16, one request at a time), 8 and 32 (requests submitted together),
           32 new tokens each (ignore_eos);
  shared   12 prompts sharing a 300-token prefix, first one at a time (every later one hits the radix cache, which
           must restore the recurrent state of the shared prefix), then all 12 together.
The reference is the first configuration starting with ``plain`` (no speculation, radix cache off). Results:
``--out/results.jsonl``, one line per configuration: per phase and batch size the prompts equal to the
reference, the tokens they share with it before the first difference (``prefix_tokens`` of ``tokens``), the
first mismatch and the mean accept length. ``_fault_chain`` / ``_fault_siblings`` configurations inject the test
plugin's ``DDTREE_TEST_HYBRID_FAULT`` (commit row accept_len - 1; children linked highest row first): a suite that
catches a wrong state must see them diverge. Such a fault shows only where a round accepts a node off the tree's
first chain, which a random drafter never drafts: ``dd_b64_oracle*`` replace the drafter's top-K with the test
plugin's replay oracle (``DDTREE_TEST_DRAFT_ORACLE``) around the reference's own outputs (``--out/oracle.json``,
written after the reference ran), so rounds accept planned depths through planned siblings. ``dd_auto_cycle*`` run
budget auto through the test plugin's ``DDTREE_TEST_CYCLE_BUDGETS`` (every bucket in turn, 0 = no drafting
included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HYBRID_ENV = "SGLANG_DDTREE_EXPERIMENTAL_HYBRID"
PAGED_ENV = "SGLANG_DDTREE_EXPERIMENTAL_PAGED"

COMMON = dict(dtype="bfloat16", mem_fraction_static=0.45, context_length=2048, max_total_tokens=65536,
              max_running_requests=32, sampling_backend="pytorch", cuda_graph_max_bs_decode=32,
              attention_backend="triton", log_level="info", decode_log_interval=20)


def ddtree(budget, topk, **kw):
    return dict(speculative_algorithm="DDTREE", speculative_ddtree_budget=budget, speculative_ddtree_topk=topk, **kw)


CONFIGS = {
    "plain": dict(disable_radix_cache=True),  # the reference
    "plain_radix": dict(),  # radix cache on (overlap on: SGLang picks --mamba-scheduler-strategy extra_buffer)
    "dflash": dict(speculative_algorithm="DFLASH"),  # upstream's chain verify with the same drafter
    "dd_b15": ddtree(15, 4),
    "dd_b64": ddtree(64, 8),
    "dd_b15_nograph": ddtree(15, 4, disable_cuda_graph=True),
    "dd_b64_nograph": ddtree(64, 8, disable_cuda_graph=True),
    "dd_b15_nooverlap": ddtree(15, 4, disable_overlap_schedule=True),  # radix: no_buffer strategy
    "dd_b64_nooverlap": ddtree(64, 8, disable_overlap_schedule=True),
    "dd_b64_noradix": ddtree(64, 8, disable_radix_cache=True),
    "dd_b64_extra_buffer": ddtree(64, 8, mamba_radix_cache_strategy="extra_buffer", mamba_track_interval=128),
    "dd_b1": ddtree(1, 1),  # topk 1: the backend's chain path
    # --page-size 16 / 64 (issue 15 item 3; all passed in session 26, so DDTREE takes them without a switch):
    # compared with the page-1 reference like every config; with the radix cache, extra_buffer's track interval
    # must be a multiple of the page size (SGLang's check)
    "plain_p16": dict(disable_radix_cache=True, page_size=16),
    "dd_b15_p16": ddtree(15, 4, page_size=16),
    "dd_b64_p64": ddtree(64, 8, page_size=64),
    "dd_b64_p16_nograph": ddtree(64, 8, page_size=16, disable_cuda_graph=True),
    "dd_b15_p64_nooverlap": ddtree(15, 4, page_size=64, disable_overlap_schedule=True),
    "dd_b64_p16_extra_buffer": ddtree(64, 8, page_size=16, mamba_radix_cache_strategy="extra_buffer",
                                      mamba_track_interval=128),
    # tensor parallelism (2 GPUs): GDN heads split over the ranks, the one KV head replicated
    "plain_tp2": dict(disable_radix_cache=True, tp_size=2),
    "dd_b15_tp2": ddtree(15, 4, tp_size=2),
    "dd_b64_tp2_nooverlap": ddtree(64, 8, tp_size=2, disable_overlap_schedule=True),
    # budget auto: the policy's own widths, and a fixed cycle through every bucket (test plugin's
    # DDTREE_TEST_CYCLE_BUDGETS): width changes from round to round, each width on its own backend and graphs
    "dd_auto": ddtree("auto", 8),
    "dd_auto_cycle": ddtree("auto", 8, _cycle=True),
    "dd_auto_cycle_nograph": ddtree("auto", 8, disable_cuda_graph=True, _cycle=True),
    "dd_auto_cycle_nooverlap": ddtree("auto", 8, disable_overlap_schedule=True, _cycle=True),
    "dd_b64_fault_chain": ddtree(64, 8, _fault="chain_commit"),
    "dd_b64_fault_siblings": ddtree(64, 8, _fault="reversed_siblings"),
    # the replay oracle drafts the reference's continuation at planned depths and sibling ranks
    "dd_b64_oracle": ddtree(64, 8, _oracle=True),
    "dd_b64_oracle_fault_chain": ddtree(64, 8, _oracle=True, _fault="chain_commit"),
    "dd_b64_oracle_fault_siblings": ddtree(64, 8, _oracle=True, _fault="reversed_siblings"),
}
ORACLE_SEED = 0
BATCH_SIZES = (1, 8, 32)
BS1_PROMPTS = 16
NUM_PROMPTS = 40
SHARED_PROMPTS, SHARED_PREFIX = 12, 300


def make_prompts(tokenizer, n=NUM_PROMPTS):
    words = ("the quick brown fox jumps over a lazy dog while speculative decoding drafts a tree of tokens "
             "and the target model verifies them alpha beta gamma delta one two three def class return").split()
    out = []
    for i in range(n):
        k = 3 + (i * 7) % 23
        out.append(tokenizer.encode(" ".join(words[(i * 5 + j * 3) % len(words)] for j in range(k)) + f" {i}"))
    return out


def make_shared_prompts(tokenizer, n=SHARED_PROMPTS, prefix_len=SHARED_PREFIX):
    text = " ".join(f"item {i} is {i * 37 % 101}" for i in range(400))
    prefix = tokenizer.encode(text)[:prefix_len]
    return [prefix + tokenizer.encode(f" question {i}: what is item {i * 13 % 97}")
            for i in range(n)]


def _engine_env(fault, cycle=False, oracle="", experimental=False, paged=False):
    """A DDTREE engine's environment: the hybrid switch only outside the GPU-verified hybrid configuration (tp > 1
    here; every config runs triton), the paged switch for a page size > 1 outside its verified configuration (tp > 1
    or budget auto: ``hybrid_args``), the test plugin's hooks for a fault, a bucket cycle or the replay oracle."""
    env = {HYBRID_ENV: "1"} if experimental else {}
    if paged:
        env[PAGED_ENV] = "1"
    if fault or cycle or oracle:
        sys.path.insert(0, os.path.join(ROOT, "test", "worker"))
        import _test_plugin_env

        _test_plugin_env.add_plugin_path()
        hooks = _test_plugin_env.plugin_env(hybrid_fault=fault or "", cycle_budgets=cycle, draft_oracle=oracle)
        env.update({k: v for k, v in hooks.items() if k != "PYTHONPATH"})
    return env


def write_oracle(path, ref, prompts, shared, vocab_size):
    """The replay oracle's spec: every reference sequence (prompt + greedy output), position = index."""
    seqs = []
    for phase, phase_prompts in (("greedy", prompts), ("shared", shared)):
        for outs in ref[phase].values():
            seqs += [list(p) + list(o) for p, o in zip(phase_prompts, outs)]
    with open(path, "w") as f:
        json.dump({"replay": seqs, "vocab_size": int(vocab_size), "seed": ORACLE_SEED}, f)
    return path


def target_vocab_size(target):
    with open(os.path.join(target, "config.json")) as f:
        cfg = json.load(f)
    return int(cfg.get("text_config", cfg)["vocab_size"])


def config_engine(name, oracle=""):
    """(sglang.Engine kwargs, environment) of configuration ``name``; the environment only for DDTREE."""
    kw = dict(CONFIGS[name])
    fault, cycle, wants_oracle = kw.pop("_fault", None), kw.pop("_cycle", False), kw.pop("_oracle", False)
    if wants_oracle and not oracle:
        raise RuntimeError(f"{name}: the replay oracle needs the plain reference's outputs: list a plain "
                           "configuration first")
    tp2 = int(kw.get("tp_size", 1)) > 1
    env = (_engine_env(fault, cycle, oracle if wants_oracle else "", experimental=tp2,
                       paged=int(kw.get("page_size", 1)) > 1 and (tp2 or kw.get("speculative_ddtree_budget") == "auto"))
           if kw.get("speculative_algorithm") == "DDTREE"
           else {})
    return kw, env


def run_config(name, target, draft, prompts, shared, max_new_tokens, oracle=""):
    import sglang

    kw, env = config_engine(name, oracle)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    if kw.get("speculative_algorithm") in ("DDTREE", "DFLASH"):
        kw["speculative_draft_model_path"] = draft
    t0 = time.time()
    params = dict(temperature=0.0, max_new_tokens=max_new_tokens, ignore_eos=True)
    out = {"greedy": {}, "shared": {}, "accept": []}
    try:
        engine = sglang.Engine(model_path=target, **{**COMMON, **kw})
        out["start_s"] = time.time() - t0
        try:
            for bs in BATCH_SIZES:
                subset = prompts[:BS1_PROMPTS] if bs == 1 else prompts
                out["greedy"][bs] = _generate(engine, subset, bs, params, out["accept"])
            out["shared"][1] = _generate(engine, shared, 1, params, out["accept"])
            out["shared"][len(shared)] = _generate(engine, shared, len(shared), params, out["accept"])
        finally:
            engine.shutdown()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out["total_s"] = time.time() - t0
    return out


def _generate(engine, prompts, bs, params, accept):
    ids = []
    for s in range(0, len(prompts), bs):
        for r in engine.generate(input_ids=prompts[s : s + bs], sampling_params=params):
            ids.append(list(r["output_ids"]))
            accept.append(r["meta_info"].get("spec_accept_length"))
    return ids


def _common_prefix(a, b):
    return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(ref_outs, outs):
    eq = [a == b for a, b in zip(outs, ref_outs)]
    prefix = sum(_common_prefix(a, b) for a, b in zip(outs, ref_outs))
    first = None
    for i, (a, b) in enumerate(zip(outs, ref_outs)):
        if a != b:
            pos = _common_prefix(a, b)
            first = dict(prompt=i, pos=pos, got=a[max(0, pos - 2) : pos + 4], ref=b[max(0, pos - 2) : pos + 4])
            break
    return dict(equal=sum(eq), total=len(eq), prefix_tokens=prefix, tokens=sum(len(b) for b in ref_outs),
                first_mismatch=first)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--plain-weights", action="store_true", help="write the fixture's --plain variant if missing")
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", required=True, help="comma-separated names of CONFIGS, the reference first")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no new engine after this")
    args = ap.parse_args()
    t_start = time.time()
    target, draft = os.path.join(args.fixture, "target"), os.path.join(args.fixture, "draft")
    if not os.path.isdir(target):
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import make_hybrid_fixture

        make_hybrid_fixture.write_fixture(args.fixture, sharp=not args.plain_weights)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target)
    prompts, shared = make_prompts(tok), make_shared_prompts(tok)
    os.makedirs(args.out, exist_ok=True)
    ref, oracle = None, ""
    with open(os.path.join(args.out, "results.jsonl"), "a") as f:
        for name in args.configs.split(","):
            if time.time() - t_start > args.deadline_s:
                print(f"[hybrid_parity] deadline reached, skipping {name}", flush=True)
                continue
            print(f"[hybrid_parity] === {name} ({time.time() - t_start:.0f}s)", flush=True)
            rec = dict(config=name, kwargs=CONFIGS[name], fixture=args.fixture)
            try:
                got = run_config(name, target, draft, prompts, shared, args.max_new_tokens, oracle)
                rec.update(start_s=round(got["start_s"], 1), total_s=round(got["total_s"], 1))
                if ref is None and name.startswith("plain"):
                    ref = got
                    rec["reference"] = True
                    oracle = write_oracle(os.path.join(args.out, "oracle.json"), ref, prompts, shared,
                                          target_vocab_size(target))
                if ref is not None:
                    rec["greedy"] = {bs: compare(ref["greedy"][bs], o) for bs, o in got["greedy"].items()}
                    rec["shared"] = {bs: compare(ref["shared"][bs], o) for bs, o in got["shared"].items()}
                accs = [a for a in got["accept"] if a is not None]
                rec["mean_accept_length"] = round(sum(accs) / len(accs), 3) if accs else None
            except Exception as e:  # record and go on with the next configuration
                rec["error"] = f"{type(e).__name__}: {e}"
                rec["traceback"] = traceback.format_exc()[-4000:]
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(f"[hybrid_parity] {json.dumps({k: v for k, v in rec.items() if k != 'traceback'})[:1500]}",
                  flush=True)


if __name__ == "__main__":
    main()
