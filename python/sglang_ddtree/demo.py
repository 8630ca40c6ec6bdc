"""``python -m sglang_ddtree demo``: DDTree end to end on the CPU, with the pure-PyTorch reference.

Builds a tiny target + DFlash drafter (the trained tiny pair from ``sglang_ddtree.fixtures`` when it is
available, else a seeded random "sharp" pair, see ``reference.toy``), decodes a few prompts with DDTree
(draft -> build tree -> verify -> accept -> commit), prints every round's tree size and accept length,
and checks that the output equals the target's own greedy decoding token for token (exit code 1 if not).
Float32 throughout, so the comparison is exact. Budget and top-K take the server's limits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple

from sglang_ddtree.config import (
    BUDGET_FLAG,
    MAX_BUDGET,
    MAX_TOPK,
    MIN_BUDGET,
    MIN_TOPK,
    TOPK_FLAG,
    check_budget,
    check_topk,
)

# Prompts for a pair with a tokenizer (the trained pair saw Python); a random pair gets random ids.
PROMPT_TEXTS = ("def __init__(self, ", "import os\nimport sys\n", "for i in range(len(",
                "class Error(Exception):\n", "        return self.")
DEFAULT_BLOCK_SIZE = 8  # the random drafter's block size L
DESCRIPTION = ("DDTree end to end on the CPU with the pure-PyTorch reference: decodes a few prompts and checks "
               "that the output equals the target's own greedy output token for token (exit code 1 if not).")


def _int_arg(lo: int, hi: Optional[int] = None, check: Optional[Callable[[int], int]] = None,
             server_flag: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer in [lo, hi]; ``check`` (the server's own) decides when given."""
    span = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
    like = f" (the server's {server_flag} limits)" if server_flag else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
            if check is not None:
                check(value)
            elif value < lo or (hi is not None and value > hi):
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {span}{like}, got {text!r}") from None
        return value

    return parse


def _find_pair(path: str) -> Tuple[str, str]:
    """The target and drafter checkpoint dirs at or under ``path`` (found by their architectures)."""
    found = {}
    for root, _, files in os.walk(path):
        if "config.json" in files:
            with open(os.path.join(root, "config.json")) as f:
                arch = (json.load(f).get("architectures") or [None])[0]
            found.setdefault(arch, root)
    if "Qwen3ForCausalLM" not in found or "DFlashDraftModel" not in found:
        raise FileNotFoundError(f"no Qwen3ForCausalLM + DFlashDraftModel pair under {path} "
                                "(looked for config.json files naming those architectures)")
    return found["Qwen3ForCausalLM"], found["DFlashDraftModel"]


def _trained_pair() -> Optional[Tuple[str, str]]:
    """(target dir, draft dir) of the packaged trained tiny pair, or None where it is not installed."""
    try:
        from sglang_ddtree.fixtures import tiny_pair_path
    except ImportError:
        return None
    try:
        target, draft = tiny_pair_path()
    except FileNotFoundError:
        print("(the trained tiny pair is not installed: using a random pair)")
        return None
    return target, draft


def _tokenizer_path(target_dir: str) -> Optional[str]:
    path = os.path.join(target_dir, "tokenizer.json")
    return path if os.path.exists(path) else None


def load_models(args, pair: Optional[Tuple[str, str]]):
    """Returns (target, drafter, description, tokenizer or None); ``pair`` None: the seeded random pair."""
    from sglang_ddtree.reference.dflash import DFlashDraftModel
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM
    from sglang_ddtree.reference.toy import random_drafter, random_target

    if pair:
        tdir, ddir = pair
        target, drafter = Qwen3ForCausalLM.from_pretrained(tdir), DFlashDraftModel.from_pretrained(ddir)
        tokenizer = None
        if _tokenizer_path(tdir):
            from tokenizers import Tokenizer
            tokenizer = Tokenizer.from_file(_tokenizer_path(tdir))
        what = "pair from --pair-dir" if args.pair_dir else "trained tiny pair"
        return target, drafter, f"{what} ({tdir}, {ddir})", tokenizer
    target = random_target(args.seed)
    drafter = random_drafter(target, args.seed, block_size=args.block_size or DEFAULT_BLOCK_SIZE)
    return target, drafter, f"seeded random 'sharp' pair (seed {args.seed}, see sglang_ddtree.reference.toy)", None


def make_prompts(vocab_size: int, mask_token_id: int, n: int, seed: int, tokenizer) -> List[List[int]]:
    import torch

    if tokenizer is not None:
        assert n <= len(PROMPT_TEXTS), n  # checked at argument parsing
        return [tokenizer.encode(t).ids for t in PROMPT_TEXTS[:n]]
    g = torch.Generator().manual_seed(seed)
    prompts = []
    while len(prompts) < n:
        p = torch.randint(vocab_size, (6,), generator=g).tolist()
        if mask_token_id not in p:
            prompts.append(p)
    return prompts


def parse_args(argv: Optional[Sequence[str]] = None):
    """The demo's arguments, checked like the server's (one-line usage error, exit 2); also the pair."""
    ap = argparse.ArgumentParser(prog="python -m sglang_ddtree demo", description=DESCRIPTION)
    ap.add_argument("--budget", type=_int_arg(MIN_BUDGET, MAX_BUDGET, check_budget, BUDGET_FLAG), default=32,
                    help=f"draft-tree nodes per round, {MIN_BUDGET}..{MAX_BUDGET} (default 32)")
    ap.add_argument("--topk", type=_int_arg(MIN_TOPK, MAX_TOPK, check_topk, TOPK_FLAG), default=4,
                    help=f"children per tree node at most (the drafter's top-k per position), {MIN_TOPK}..{MAX_TOPK}, "
                         "capped at the budget (default 4)")
    ap.add_argument("--max-new-tokens", type=_int_arg(1), default=48, help="tokens to generate per prompt (default 48)")
    ap.add_argument("--num-prompts", type=_int_arg(1), default=4,
                    help=f"prompts to decode (default 4); a pair with a tokenizer has {len(PROMPT_TEXTS)}")
    ap.add_argument("--block-size", type=_int_arg(2), default=None,
                    help=f"drafter block size L >= 2, random pair only (default {DEFAULT_BLOCK_SIZE})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random pair and its prompts (default 0)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--random", action="store_true", help="use the random pair even if a trained one exists")
    which.add_argument("--pair-dir", help="a directory holding a Qwen3ForCausalLM + DFlashDraftModel pair to use")
    args = ap.parse_args(argv)

    if args.pair_dir is not None:
        if not os.path.isdir(args.pair_dir):
            ap.error(f"argument --pair-dir: {args.pair_dir} is not a directory")
        try:
            pair = _find_pair(args.pair_dir)
        except (FileNotFoundError, OSError, ValueError) as e:  # ValueError: a config.json that is not JSON
            ap.error(f"argument --pair-dir: {e}")
    else:
        pair = None if args.random else _trained_pair()
    if pair is not None and args.block_size is not None:
        ap.error("argument --block-size: applies to the random pair only (--random); "
                 "a checkpoint's drafter has its own block size")
    if pair is not None and _tokenizer_path(pair[0]) and args.num_prompts > len(PROMPT_TEXTS):
        ap.error(f"argument --num-prompts: at most {len(PROMPT_TEXTS)} with a pair that has a tokenizer (the demo's "
                 f"{len(PROMPT_TEXTS)} text prompts), got {args.num_prompts}; --random generates any number")
    if args.topk > args.budget:  # the server's rule (sglang_ddtree.validation): a warning, then the cap
        print(f"warning: --topk={args.topk} exceeds --budget={args.budget}; a node can have at most "
              f"{args.budget} children, using --topk={args.budget}", file=sys.stderr)
        args.topk = args.budget
    return args, pair


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, pair = parse_args(argv)

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: intra-op threads only add contention on small CPUs
    try:
        with torch.no_grad():
            return _run(args, pair)
    finally:
        torch.set_num_threads(threads)


def _run(args, pair) -> int:
    from sglang_ddtree.reference.loop import ddtree_generate, dflash_generate, greedy_generate

    t0 = time.time()
    target, drafter, what, tokenizer = load_models(args, pair)
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
        print("  rounds (tree size/accepted): " + " ".join(f"{r.tree_size}/{r.num_accepted}" for r in gen.rounds))
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
