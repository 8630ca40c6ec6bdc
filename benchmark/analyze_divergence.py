#!/usr/bin/env python3
"""Classify where speculative outputs left the autoregressive output in a bench_e2e run: near-ties or not.

bf16 serving computes a token's logits in a verify (extend-style) forward for DFLASH / DDTREE and in a
decode forward for autoregressive decoding; the two round differently, so on near-tied logits they may
pick different tokens without anything being wrong. For every prompt whose output differs from the
autoregressive one, this recomputes, in float32 on CPU with the reference Qwen3 (``sglang_ddtree.reference``),
the target's logits at the FIRST differing position (the prefixes agree up to there) and reports the
margin logit[autoregressive token] - logit[speculative token] and the float32 top-2 gap. A margin near 0
(below ``--epsilon``) is a near-tie; a large margin would be an error in the speculative path.

    python benchmark/analyze_divergence.py benchmark/results/e2e_tiny_pair_h200.json \
        --out benchmark/results/e2e_tiny_pair_h200_divergence.json [--epsilon 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _prompts(report):
    """The exact prompt token ids bench_e2e used (same texts, same tokenizer call)."""
    sys.path.insert(0, HERE)
    from bench_e2e import PROMPTS
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(report["settings"]["target"])
    n = report["settings"]["num_prompts"]
    return [tok.encode(PROMPTS[i % len(PROMPTS)]) for i in range(n)]


@torch.no_grad()
def analyse(report, target, epsilon: float) -> dict:
    prompts = _prompts(report)
    plain = next(r for r in report["results"] if r.get("config") == "plain")
    out = {"epsilon": epsilon, "configs": {}}
    for rec in report["results"]:
        if rec.get("config") == "plain" or "by_bs" not in rec:
            continue
        for bs, m in rec["by_bs"].items():
            cases = []
            for i, (got, ref) in enumerate(zip(m["outputs"], plain["by_bs"][bs]["outputs"])):
                j = next((k for k, (a, b) in enumerate(zip(got, ref)) if a != b), None)
                if j is None:
                    continue
                ids = torch.tensor([prompts[i] + ref[:j]])
                logits = target(ids, torch.arange(ids.shape[1])[None]).logits[0, -1].float()
                top2 = torch.topk(logits, 2)
                margin = float(logits[ref[j]] - logits[got[j]])
                cases.append({"prompt": i, "pos": j, "autoregressive_token": ref[j], "speculative_token": got[j],
                              "margin": round(margin, 5), "top2_gap": round(float(top2.values[0] - top2.values[1]), 5),
                              "speculative_token_rank": int((logits > logits[got[j]]).sum()),
                              "top_margin": round(float(top2.values[0] - logits[got[j]]), 5)})
            out["configs"][f"{rec['config']} bs {bs}"] = {
                "divergent_prompts": len(cases),
                "near_ties": sum(abs(c["margin"]) < epsilon for c in cases),
                "max_abs_margin": max((abs(c["margin"]) for c in cases), default=None),
                "cases": cases,
            }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="a bench_e2e JSON with outputs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--epsilon", type=float, default=0.05, help="|margin| below this counts as a near-tie")
    ap.add_argument("--target", default=None, help="target checkpoint (default: the report's, else the packaged pair)")
    args = ap.parse_args(argv)
    with open(args.report) as f:
        report = json.load(f)
    target_dir = args.target or report["settings"]["target"]
    if not os.path.isdir(target_dir):
        from sglang_ddtree.fixtures import tiny_pair_path

        target_dir = tiny_pair_path().target
        report["settings"]["target"] = target_dir
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    target = Qwen3ForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    result = analyse(report, target, args.epsilon)
    result.update(source=args.report, target=target_dir, command=" ".join(["python", *sys.argv]))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for name, c in result["configs"].items():
        print(f"{name:>22}: {c['divergent_prompts']:>2} divergent, {c['near_ties']:>2} near-ties "
              f"(|margin| < {args.epsilon}), max |margin| {c['max_abs_margin']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
