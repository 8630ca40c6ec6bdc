"""Start-up compiles of the Triton kernels a DDTREE round launches outside CUDA graphs.

Triton compiles a kernel once per specialisation: its constexprs, the dtypes and 16-byte alignment of its
pointers, and whether each int argument is 1 or a multiple of 16. The round's eager kernels specialise on the
verify width N = budget + 1 and not on the batch size (the batch is their grid):
  - the tree build and the verify topology, per tree budget (``tree.build_tree``, ``tree.build_verify_topology``;
    chain-shaped rounds, width 0 and the chain bucket, take neither: ``chain_inputs``); the round's build writes
    the roots (the bonus tokens), budget auto's forecast builds the largest tree without them, a second
    specialisation; with fa3's fused tree attention the topology also writes the ancestor bits (its
    ``WRITE_BITS`` specialisation);
  - the fused accept + commit (``kv_commit.greedy_accept_commit``);
  - the ancestor bits of fa3's fused tree attention by their own launch (``tree_attention.ancestor_bits``), per
    word count of N: only a chain-shaped round that verifies with them (width 0 without the chain bucket).
Upstream's ``assign_extend_cache_locs`` of the verify slots specialises on next_power_of_2(batch size) instead.
The KV mover and the T > 0 draw have one specialisation each. Not warmed here: the flashinfer plan's kernels
(``flashinfer_plan``, per power-of-two batch-size class) and the hybrid targets' state-commit kernels.

Compiled on first use, each of them stalls the round that first needs it, and with it every running request:
a cold Triton compile takes from a tenth of a second to seconds (``../shared/device/README.md``: ~60 s of kernel
compiles on a cold machine's first requests). With ``--speculative-ddtree-budget auto`` that is every bucket's
first round, an exploration included, long after start. ``warm_round_kernels`` runs each of them once per bucket,
and the slot kernel once per batch-size class, on one-request dummy inputs of the round's dtypes and layouts, so
that they compile at start-up. The inputs write nothing outside the tensors made here, except the KV mover, whose
one dummy move copies slot 0 (SGLang's dummy slot for padded writes) onto itself; the random-number generators are
left as they were.
"""

from __future__ import annotations

from typing import Callable, List, Optional

import torch

from sglang_ddtree.config import DDTreeConfig, env_switch

# On by default since session 29, when it first ran on the H200: ``test_warmup_gpu.py`` passed, and so did sharp
# parity of auto's bucket cycle and of budget 15 with the compile watch on (no round compiled anything) and the
# control without it (its rounds compiled). 1: warm up (default), 0: do not.
ENV = "SGLANG_DDTREE_WARMUP"


def enabled() -> bool:
    """Whether the worker compiles the round's kernels at start-up (``ENV``; default on, see above)."""
    return env_switch(ENV, on="compile the round's kernels at start-up", off="each at its first round",
                      default=True)


def _pow2_classes(max_batch_size: int) -> List[int]:
    """1, 2, 4, ... up to the first power of two >= ``max_batch_size``: the batch-size classes of a kernel that
    takes next_power_of_2(bs) as a constexpr."""
    out, p = [1], 1
    while p < max_batch_size:
        p *= 2
        out.append(p)
    return out


def warm_round_kernels(
    config: DDTreeConfig,
    device,
    *,
    tree_bits: bool = False,
    vocab_size: Optional[int] = None,
    req_to_token: Optional[torch.Tensor] = None,
    max_batch_size: int = 1,
    move_kv: Optional[Callable] = None,
) -> List[str]:
    """Run every eager kernel of the round once per bucket of ``config`` (``config.buckets``: the budget, or
    budget auto's buckets, 0 included) on one dummy request.

    ``tree_bits``: the rounds write ancestor bits (fa3's fused tree attention); ``vocab_size``: the target's
    vocabulary, for the T > 0 draw (None: not warmed); ``req_to_token``: the target's request-to-slot table, for
    upstream's slot kernel at every batch-size class up to ``max_batch_size`` (None or a device without Triton:
    not warmed); ``move_kv``: the worker's ``AcceptedKVMover`` (None: not warmed). Returns what ran, one entry
    per kernel call (the start-up log counts them). Synchronises once at the end (start-up only)."""
    from sglang_ddtree.config import chain_shaped
    from sglang_ddtree.worker.chain_inputs import ChainInputs
    from sglang_ddtree.worker.kv_commit import greedy_accept_commit
    from sglang_ddtree.worker.sampling import draw_rows
    from sglang_ddtree.worker.tree_api import build_tree, verify_topology
    from sglang_ddtree.worker.tree_attention import ancestor_bits, num_words

    ran = []
    commit = None
    depth, width = config.draft_positions, config.accept_width
    i64 = dict(dtype=torch.int64, device=device)
    # the draft head's layout: [bs, L-1, K] float32 log-probs, each row descending, and int64 token ids
    log_probs = torch.full((1, depth, config.topk), -1.0, dtype=torch.float32, device=device)
    token_ids = torch.arange(depth * config.topk, **i64).view(1, depth, config.topk)
    prefix = torch.zeros(1, **i64)  # the batch's seq_lens (int64)
    bonus = torch.zeros(1, **i64)
    chains = ChainInputs.for_config(config, device=device)
    for budget in config.buckets:
        n = budget + 1
        with_bits = tree_bits and not config.verifies_causally(budget)  # a causal bucket verifies without them
        if chain_shaped(budget):  # the round's chain_inputs: no build, no topology
            tree = chains.tree_of(bonus, token_ids if budget else None, budget)
            tokens = tree.token_ids
        else:
            tree = build_tree(log_probs, token_ids, budget, bonus)  # the round's build, roots written
            ran.append(f"build_tree:{budget}")
            if config.adaptive and budget == config.budget:  # budget auto's forecast: the largest, no roots
                build_tree(log_probs, token_ids, budget)
                ran.append(f"build_tree:{budget}:forecast")
            tokens = tree.token_ids
            # with fa3's fused tree attention the topology also writes the ancestor bits: its WRITE_BITS
            # specialisation
            bits = torch.empty(n, num_words(n), dtype=torch.int32, device=device) if with_bits else None
            verify_topology(tree, prefix, 0, bits_out=bits)
            ran.append(f"verify_topology:{n}" + (":bits" if with_bits else ""))
        if chain_shaped(budget) and with_bits:  # bits by their own launch
            ancestor_bits(tree.parents, config.max_depth)
            ran.append(f"ancestor_bits:{n}")
        verify_loc = torch.zeros(1, n, **i64)  # slot 0: SGLang's dummy slot
        no_token = torch.full((1, n), -1, **i64)  # a target token no child has: the root alone is accepted
        commit = greedy_accept_commit(tree, tokens, no_token, verify_loc, prefix, width)
        ran.append(f"accept_commit:{n}")
    if move_kv is not None and commit is not None:  # one specialisation (its width is W at every bucket)
        move_kv(commit, width)
        ran.append("move_kv")
    if vocab_size:  # its uniform comes from the default generator: restored, so start-up draws nothing
        dev = torch.device(device)
        cuda_ids = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda_ids):
            draw_rows(torch.ones(1, int(vocab_size), dtype=torch.float32, device=device))
        ran.append("draw_rows")
    if req_to_token is not None and torch.device(device).type == "cuda":
        from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func

        for bs in _pow2_classes(max_batch_size):
            zeros = torch.zeros(bs, **i64)
            assign_extend_cache_locs_func(req_pool_indices=zeros, req_to_token=req_to_token, start_offset=zeros,
                                          end_offset=zeros + 1, batch_size=bs, draft_token_num=1, device=device)
            ran.append(f"assign_extend_cache_locs:{bs}")
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return ran
