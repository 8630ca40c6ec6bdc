"""``python -m sglang_ddtree demo``: DDTree end to end on the CPU, with the pure-PyTorch reference.

Builds a tiny target + DFlash drafter (the trained tiny pair from ``sglang_ddtree.fixtures`` when it is
available, else a seeded random "sharp" pair, see ``reference.toy``), decodes a few prompts with DDTree
(draft -> build tree -> verify -> accept -> commit), prints every round's tree size and accept length,
and checks that the output equals the target's own greedy decoding token for token (exit code 1 if not).
Float32 throughout, so the comparison is exact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List, Optional, Sequence, Tuple


def _find_pair(path: str) -> Tuple[str, str]:
    """The target and drafter checkpoint dirs at or under ``path`` (found by their architectures)."""
    found = {}
    for root, _, files in os.walk(path):
        if "config.json" in files:
            with open(os.path.join(root, "config.json")) as f:
                arch = (json.load(f).get("architectures") or [None])[0]
            found.setdefault(arch, root)
    if "Qwen3ForCausalLM" not in found or "DFlashDraftModel" not in found:
        raise FileNotFoundError(f"no Qwen3ForCausalLM + DFlashDraftModel pair under {path}")
    return found["Qwen3ForCausalLM"], found["DFlashDraftModel"]


def _trained_pair() -> Optional[Tuple[str, str]]:
    """(target dir, draft dir) of the packaged trained tiny pair, or None where it is not installed."""
    try:
        from sglang_ddtree.fixtures import tiny_pair_path
    except ImportError:
        return None
    try:
        pair = tiny_pair_path()
    except FileNotFoundError:
        print("(the trained tiny pair is not installed: using a random pair)")
        return None
    return _find_pair(pair) if isinstance(pair, (str, os.PathLike)) else (pair[0], pair[1])


def load_models(args):
    """Returns (target, drafter, description, tokenizer or None)."""
    from sglang_ddtree.reference.dflash import DFlashDraftModel
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM
    from sglang_ddtree.reference.toy import random_drafter, random_target

    pair = _find_pair(args.pair_dir) if args.pair_dir else None if args.random else _trained_pair()
    if pair:
        tdir, ddir = pair
        target, drafter = Qwen3ForCausalLM.from_pretrained(tdir), DFlashDraftModel.from_pretrained(ddir)
        tokenizer = None
        if os.path.exists(os.path.join(tdir, "tokenizer.json")):
            from tokenizers import Tokenizer
            tokenizer = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
        return target, drafter, f"trained tiny pair ({tdir}, {ddir})", tokenizer
    target = random_target(args.seed)
    drafter = random_drafter(target, args.seed, block_size=args.block_size)
    return target, drafter, f"seeded random 'sharp' pair (seed {args.seed}, see sglang_ddtree.reference.toy)", None


def make_prompts(vocab_size: int, mask_token_id: int, n: int, seed: int, tokenizer) -> List[List[int]]:
    import torch

    if tokenizer is not None:
        texts = ["def __init__(self, ", "import os\nimport sys\n", "for i in range(len(",
                 "class Error(Exception):\n", "        return self."]  # the trained pair saw Python
        return [tokenizer.encode(t).ids for t in texts[:n]]
    g = torch.Generator().manual_seed(seed)
    prompts = []
    while len(prompts) < n:
        p = torch.randint(vocab_size, (6,), generator=g).tolist()
        if mask_token_id not in p:
            prompts.append(p)
    return prompts


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_ddtree demo", description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=32, help="draft tree nodes per round (default 32)")
    ap.add_argument("--topk", type=int, default=4, help="candidate tokens per depth (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=8, help="drafter block size L (random pair only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--random", action="store_true", help="use the random pair even if a trained one exists")
    ap.add_argument("--pair-dir", help="a directory holding a Qwen3ForCausalLM + DFlashDraftModel pair to use")
    args = ap.parse_args(argv)
    if args.budget < 1 or args.topk < 1 or args.max_new_tokens < 1:
        ap.error("--budget, --topk and --max-new-tokens must be >= 1")

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: intra-op threads only add contention on small CPUs
    try:
        with torch.no_grad():
            return _run(args)
    finally:
        torch.set_num_threads(threads)


def _run(args) -> int:
    from sglang_ddtree.reference.loop import ddtree_generate, dflash_generate, greedy_generate

    t0 = time.time()
    target, drafter, what, tokenizer = load_models(args)
    dc = drafter.config
    print(f"models: {what}")
    print(f"  target: {target.config.num_hidden_layers} layers, hidden {target.config.hidden_size}, "
          f"vocab {target.config.vocab_size}; drafter: {dc.num_hidden_layers} layers, block size {dc.block_size}, "
          f"target_layer_ids {dc.target_layer_ids}, mask token {dc.mask_token_id}")
    print(f"DDTree: budget {args.budget}, top-K {args.topk}, max new tokens {args.max_new_tokens}, float32 CPU\n")

    ok, ddtree_tau, dflash_tau, num_rounds = True, [], [], 0
    for i, prompt in enumerate(make_prompts(target.config.vocab_size, dc.mask_token_id, args.num_prompts,
                                            args.seed, tokenizer)):
        expected = greedy_generate(target, prompt, args.max_new_tokens)
        gen = ddtree_generate(target, drafter, prompt, args.max_new_tokens, budget=args.budget, topk=args.topk)
        chain = dflash_generate(target, drafter, prompt, args.max_new_tokens)
        same = gen.tokens == expected
        ok &= same and chain.tokens == expected
        ddtree_tau.append(gen.tokens_per_round)
        dflash_tau.append(chain.tokens_per_round)
        num_rounds += len(gen.rounds)
        print(f"prompt {i}: {prompt}")
        print("  rounds (tree size/accepted): " + " ".join(f"{r.tree_size}/{r.accept_len}" for r in gen.rounds))
        print(f"  {len(gen.tokens)} tokens in {len(gen.rounds) + 1} target forwards (prefill included); "
              f"tokens per round: DDTree {gen.tokens_per_round:.2f}, DFLASH chain {chain.tokens_per_round:.2f}")
        if tokenizer is not None:
            print(f"  text: {tokenizer.decode(gen.tokens)!r}")
        if not same:
            first = next((j for j, (a, b) in enumerate(zip(gen.tokens, expected)) if a != b),
                         min(len(gen.tokens), len(expected)))
            print(f"  MISMATCH at new token {first}: DDTree {gen.tokens[first:first + 8]} "
                  f"vs greedy {expected[first:first + 8]}")
        elif chain.tokens != expected:
            print("  MISMATCH: the DFLASH chain output differs from greedy")
        else:
            print("  == target greedy output, token for token")

    mean = sum(ddtree_tau) / len(ddtree_tau)
    print(f"\nmean accept length (tokens per round incl. bonus): DDTree {mean:.2f}, "
          f"DFLASH chain {sum(dflash_tau) / len(dflash_tau):.2f} over {num_rounds} DDTree rounds; "
          f"{time.time() - t0:.1f} s")
    if not ok:
        print("FAILED: speculative output differs from the target's greedy output", file=sys.stderr)
        return 1
    print("OK: DDTree output equals the target's greedy output for every prompt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
