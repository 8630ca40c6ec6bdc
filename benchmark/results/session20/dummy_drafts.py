#!/usr/bin/env python3
"""CPU experiment (no GPU): what does a DFlash drafter with SGLang's dummy weights draft? Session 20's 8B-shape run
(dummy weights) found DDTREE's c 32 rounds at a lower SM clock than DFLASH's, both at the 700 W power cap; one
untested explanation is that DFLASH's 15 drafted tokens are often one repeated token (identical GEMM rows toggle
fewer bits) while DDTREE's tree holds distinct top-K tokens. This builds the reference Qwen3 target + DFlash drafter
(``sglang_ddtree.reference``) at Qwen3-8B's vocabulary and head layout but a narrower width, gives every floating
parameter SGLang's dummy initialisation (uniform in [-1e-3, 1e-3], ``initialize_dummy_weights``, norms included),
and counts, per draft block after a random 128-token prompt: the distinct tokens among DFLASH's block (bonus + 15
argmax drafts) and among a DDTREE budget-15 tree (top-8 per depth, best-first) and the verify rows' distinct
tokens. bf16 like the engines. Prints one JSON line.

    .venv/bin/python benchmark/results/session20/dummy_drafts.py [--hidden 1024] [--layers 4] [--requests 8] \
        [--init dummy|normal]
"""

import argparse
import json
import time

import torch

from sglang_ddtree.reference.dflash import DFlashConfig, DFlashDraftModel, draft_block_logits
from sglang_ddtree.reference.qwen3 import KVCache, Qwen3Config, Qwen3ForCausalLM
from sglang_ddtree.worker.tree_api import build_tree, fill_root


@torch.no_grad()
def dummy_init(model, low=-1e-3, high=1e-3, seed=1234):
    """SGLang's ``initialize_dummy_weights``: every floating tensor uniform in [low, high], one seed each."""
    for p in model.state_dict().values():
        if torch.is_floating_point(p):
            g = torch.Generator().manual_seed(seed)
            p.copy_(torch.rand(p.shape, generator=g, dtype=torch.float32) * (high - low) + low)


@torch.no_grad()
def normal_init(model, std=0.02, seed=1234):
    """What a freshly initialised transformer has: matrices N(0, std), norm weights 1 (``--init normal``)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.state_dict().items():
        if torch.is_floating_point(p):
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def build_models(hidden: int, layers: int, draft_layers: int):
    """(reference Qwen3 target at Qwen3-8B's vocabulary and head_dim, DFlash drafter, drafter config), fp32, eval."""
    heads = hidden // 128
    cfg = Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), head_dim=128)
    dcfg = DFlashConfig.for_target(cfg, num_hidden_layers=draft_layers, block_size=16, target_layer_ids=[1, layers - 2])
    return Qwen3ForCausalLM(cfg).eval(), DFlashDraftModel(dcfg).eval(), dcfg


@torch.no_grad()
def draft_variety(target, drafter, dcfg, *, requests: int, prompt_len: int, budget: int, topk: int) -> list:
    """Per request (a random prompt, seed 7): the distinct tokens of a DFLASH block (bonus + 15 argmax drafts), of a
    DDTREE tree of ``budget`` (top-``topk`` per depth), the top-K overlap between depths and the logits' spread."""
    g = torch.Generator().manual_seed(7)
    rows = []
    for r in range(requests):
        prompt = torch.randint(0, 150000, (1, prompt_len), generator=g)
        pos = torch.arange(prompt_len)[None]
        with torch.no_grad():
            out = target(prompt, pos, capture_layer_ids=dcfg.target_layer_ids)
            context = KVCache(dcfg.num_hidden_layers)
            context.append(drafter.context_kv(out.features, pos))
            bonus = int(out.logits[0, -1].float().argmax())
            logits = draft_block_logits(target, drafter, torch.tensor([bonus]), prompt_len, context)[0].float()
        drafts = logits.argmax(-1).tolist()  # DFLASH's 15 drafts (depths 1..15)
        lp = torch.log_softmax(logits, -1)
        val, ids = lp.topk(topk, -1)
        tree = build_tree(val[None], ids[None], budget)
        tokens = fill_root(tree, torch.tensor([bonus]))[0]
        valid = tree.valid[0]
        tree_tokens = [int(t) for t, v in zip(tokens.tolist(), valid.tolist()) if v]
        topk_sets = [set(ids[d].tolist()) for d in range(ids.shape[0])]
        overlap = sum(len(topk_sets[d] & topk_sets[d + 1]) for d in range(len(topk_sets) - 1)) / (len(topk_sets) - 1)
        spread = (logits.max(-1).values - logits.min(-1).values).median().item()
        rows.append({"dflash_distinct_of_16": len(set([bonus] + drafts)), "dflash_drafts": drafts,
                     "ddtree_rows": len(tree_tokens), "ddtree_distinct": len(set(tree_tokens)),
                     "topk_overlap_between_depths_of_8": round(overlap, 2), "logit_range_median": spread})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--budget", type=int, default=15)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--init", choices=("dummy", "normal"), default="dummy")
    args = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    target, drafter, dcfg = build_models(args.hidden, args.layers, args.draft_layers)
    init = dummy_init if args.init == "dummy" else normal_init
    init(target)
    init(drafter)
    target, drafter = target.to(torch.bfloat16), drafter.to(torch.bfloat16)
    rows = draft_variety(target, drafter, dcfg, requests=args.requests, prompt_len=args.prompt, budget=args.budget,
                         topk=args.topk)
    summary = {k: sorted(x[k] for x in rows) for k in ("dflash_distinct_of_16", "ddtree_rows", "ddtree_distinct",
                                                       "topk_overlap_between_depths_of_8")}
    print(json.dumps({"settings": vars(args), "summary": summary, "requests": rows,
                      "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
