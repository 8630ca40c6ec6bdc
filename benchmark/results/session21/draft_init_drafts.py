#!/usr/bin/env python3
"""CPU experiment (no GPU): which random drafter weights make DFLASH's drafts as varied as real ones? The 8B-shape
benchmark gives target and drafter SGLang's dummy weights, with which every DFLASH block drafts one token 15 times
(session 20, ``session20/dummy_drafts.py``), and a GEMM over such rows runs 14 % faster at the H200's power cap than
over distinct rows (session 21, ``gemm_power.json``): the benchmark's DFLASH rounds at high concurrency are cheaper
than a real drafter's would be. Here the target keeps SGLang's dummy weights (what ``--load-format dummy`` gives)
and only the drafter's weights vary: ``dummy`` (uniform in [-1e-3, 1e-3], one seed for every tensor, as SGLang),
``normal`` (matrices N(0, 0.02), norm weights 1) and ``scaled`` (matrices N(0, 1 / fan_in), i.e. unit-variance
activations, norm weights 1). Counted per draft block after a random 128-token prompt by session 20's
``draft_variety``: the distinct tokens of a DFLASH block (bonus + 15 argmax drafts) and of a DDTREE budget-15 tree.
bf16. One JSON line.

    .venv/bin/python benchmark/results/session21/draft_init_drafts.py [--draft-init dummy|normal|scaled] \
        [--hidden 1024] [--layers 4] [--draft-layers 2] [--requests 8]
"""

import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "session20"))
from dummy_drafts import build_models, draft_variety, dummy_init, normal_init  # noqa: E402


@torch.no_grad()
def scaled_init(model, seed=1234):
    """Matrices N(0, 1 / fan_in) (each output unit-variance for unit-variance inputs), norm weights 1."""
    g = torch.Generator().manual_seed(seed)
    for p in model.state_dict().values():
        if torch.is_floating_point(p):
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


INITS = {"dummy": dummy_init, "normal": normal_init, "scaled": scaled_init}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--budget", type=int, default=15)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--draft-init", choices=sorted(INITS), default="scaled")
    args = ap.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    target, drafter, dcfg = build_models(args.hidden, args.layers, args.draft_layers)
    dummy_init(target)
    INITS[args.draft_init](drafter)
    target, drafter = target.to(torch.bfloat16), drafter.to(torch.bfloat16)
    rows = draft_variety(target, drafter, dcfg, requests=args.requests, prompt_len=args.prompt, budget=args.budget,
                         topk=args.topk)
    summary = {k: sorted(x[k] for x in rows) for k in ("dflash_distinct_of_16", "ddtree_rows", "ddtree_distinct")}
    all_drafts = [t for x in rows for t in x["dflash_drafts"]]
    summary["dflash_distinct_over_all_requests"] = len(set(all_drafts))
    print(json.dumps({"settings": vars(args), "summary": summary, "requests": rows,
                      "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
