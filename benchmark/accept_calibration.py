#!/usr/bin/env python3
"""How well the drafter's tree scores predict acceptance, per budget bucket: the accept model of
``--speculative-ddtree-budget auto`` (``sglang_ddtree.width_policy``) measured on real draft trees.

Runs the float32 reference loop (``sglang_ddtree.reference``, CPU or GPU) on the tiny trained pair (or any
target + DFlash drafter checkpoint pair the reference models load), greedy, building every round's tree at the
largest budget. For each bucket budget b (``width_policy.bucket_budgets``) and round it records:
  predicted  sum of exp(score) over the tree's b best-scoring nodes (``expected_drafts_at``): the accepted
             drafts a calibrated drafter would give the budget-b tree;
  observed   the drafts the greedy walk accepts in that budget-b tree. One verify forward of the largest tree
             gives every bucket's walk: a node's verify logits see only its ancestors, and the budget-b tree
             is the b best nodes of the larger one (parents score at least their children), so the target's
             token at each of its nodes is the same as in a forward of the budget-b tree alone.
The decode follows the largest tree's acceptance (what a fixed-budget DDTREE run emits). Reported per bucket:
mean predicted and observed accepted drafts per round, their ratio (the ScoreAcceptModel's correction), and
the per-round correlation of predicted with observed (how much a per-request prediction can tell).

    python benchmark/accept_calibration.py --out benchmark/results/accept_calibration_tiny_pair.json \
        [--prompts 8] [--new-tokens 128] [--max-budget 63] [--topk 8] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from sglang_ddtree.reference.dflash import DFlashDraftModel, draft_block_logits  # noqa: E402
from sglang_ddtree.reference.loop import next_tokens, prefill, propose_tree, tree_verify_inputs  # noqa: E402
from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM  # noqa: E402
from sglang_ddtree.tree.reference import accept_greedy_torch  # noqa: E402
from sglang_ddtree.width_policy import bucket_budgets, expected_drafts_at  # noqa: E402


def sub_tree_accepts(tree, target_next: torch.Tensor, budget: int) -> int:
    """Accepted drafts of the greedy walk restricted to the tree's ``budget`` best-scoring nodes (one
    request). Shape: target_next [N] int64, the target's argmax after each row."""
    n = tree.num_rows
    scores = tree.scores[0].clone()
    scores[0] = float("inf")  # the root is always in
    keep = torch.zeros(n, dtype=torch.bool)
    keep[torch.sort(scores, descending=True, stable=True).indices[: budget + 1]] = True
    keep &= tree.valid[0]
    parents, tokens = tree.parents[0].tolist(), tree.token_ids[0].tolist()
    cur, accepted = 0, 0
    while True:
        want = int(target_next[cur])
        nxt = next((r for r in range(1, n) if keep[r] and parents[r] == cur and tokens[r] == want), None)
        if nxt is None:
            return accepted
        accepted, cur = accepted + 1, nxt


@torch.no_grad()
def calibrate(target, drafter, prompts, new_tokens: int, budgets, topk: int) -> dict:
    """Per bucket: lists of (predicted, observed) accepted drafts, one pair per round."""
    layer_ids = drafter.config.target_layer_ids
    pairs = {b: [] for b in budgets}
    rounds = 0
    for prompt_ids in prompts:
        cache, context, bonus = prefill(target, drafter, prompt_ids)
        emitted = 1
        while emitted < new_tokens:
            start = cache.length
            logits = draft_block_logits(target, drafter, torch.tensor([bonus]), start, context)[0]
            tree = propose_tree(logits, bonus, budgets[-1], topk)
            input_ids, pos, mask = tree_verify_inputs(tree, start)
            out = target(input_ids, pos, cache, mask, capture_layer_ids=layer_ids)
            target_next = next_tokens(out.logits[0], 0.0, None)
            predicted = expected_drafts_at(tree.scores, budgets)[0]
            for j, b in enumerate(budgets):
                pairs[b].append((float(predicted[j]), sub_tree_accepts(tree, target_next, b)))
            accepted = accept_greedy_torch(tree, target_next[None])
            path = accepted.accepted_node_idx[0, : int(accepted.num_accepted[0]) + 1].long()
            assert len(path) - 1 == pairs[budgets[-1]][-1][1], "the restricted walk at the full budget must agree"
            cache.append(out.kv, path)
            context.append(drafter.context_kv(out.features[:, path], pos[:, path]))
            bonus = int(accepted.bonus_token[0])
            emitted += len(path)
            rounds += 1
    return {"pairs": pairs, "rounds": rounds}


def summarize(pairs: dict) -> dict:
    out = {}
    for b, ps in pairs.items():
        if not ps:
            continue
        p = torch.tensor([x for x, _ in ps], dtype=torch.float64)
        o = torch.tensor([y for _, y in ps], dtype=torch.float64)
        corr = None
        if len(ps) > 2 and float(p.std()) > 0 and float(o.std()) > 0:
            corr = round(float(torch.corrcoef(torch.stack([p, o]))[0, 1]), 3)
        out[str(b)] = {"rounds": len(ps), "predicted_mean": round(float(p.mean()), 4),
                       "observed_mean": round(float(o.mean()), 4),
                       "ratio_observed_over_predicted": round(float(o.mean() / p.mean()), 4) if float(p.mean()) else None,
                       "per_round_correlation": corr}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", help="target checkpoint dir (default: the packaged tiny pair's)")
    ap.add_argument("--draft", help="DFlash drafter dir (default: the packaged tiny pair's)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--max-budget", type=int, default=63)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    for flag in ("prompts", "prompt_len", "new_tokens", "max_budget", "topk"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.target is None or args.draft is None:
        from sglang_ddtree.fixtures import tiny_pair_path

        pair = tiny_pair_path()
        args.target, args.draft = args.target or pair.target, args.draft or pair.draft
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import train_tiny_pair as train  # the held-out prompts of the tiny pair's accept-length measurement

    t0 = time.time()
    target = Qwen3ForCausalLM.from_pretrained(args.target).to(args.device).eval()
    drafter = DFlashDraftModel.from_pretrained(args.draft).to(args.device).eval()
    ids = train.heldout_tokens(os.path.join(args.target, "tokenizer.json"))
    prompts = [p.tolist() for p in train.sample_prompts(ids, args.prompts, args.prompt_len, seed=args.seed)]
    budgets = bucket_budgets(args.max_budget)[1:]  # 0 drafts nothing: nothing to calibrate
    res = calibrate(target, drafter, prompts, args.new_tokens, budgets, args.topk)
    summary = summarize(res["pairs"])
    report = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
              "environment": {"python": platform.python_version(), "torch": torch.__version__,
                              "device": args.device, "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "rounds": res["rounds"],
              "by_budget": summary, "seconds": round(time.time() - t0, 1)}
    for b, m in summary.items():
        print(f"budget {b:>4}: predicted {m['predicted_mean']:.3f}, observed {m['observed_mean']:.3f} accepted drafts"
              f" per round, ratio {m['ratio_observed_over_predicted']}, per-round correlation {m['per_round_correlation']}")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
