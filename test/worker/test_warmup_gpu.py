"""GPU: after ``worker.warmup.warm_round_kernels``, the round's eager kernels compile nothing more at any batch
size or bucket: every Triton specialisation a round needs was compiled at start-up.

The round's own calls are made here with the round's shapes, dtypes and layouts at batch sizes 1 / 2 / 3 / 16 /
17 / 48 (each class of int specialisation: 1, multiples of 16, others) and every bucket of budget auto, on
random draft log-probs; the count of compiled variants of each kernel (Triton's per-device kernel cache) must
not grow. A kernel the warm-up misses, or warms at another specialisation, fails it."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _test_plugin_env  # noqa: E402,F401  (puts the test plugin's modules on sys.path)
from ddtree_test_hooks import compile_watch  # noqa: E402

from sglang_ddtree.config import DDTreeConfig  # noqa: E402

pytestmark = pytest.mark.gpu

BATCH_SIZES = (1, 2, 3, 16, 17, 48)


def _round_calls(config, bs, req_to_token, vocab):
    """A round's eager kernels at batch size ``bs``, every bucket, as the worker calls them: chain-shaped buckets
    (width 0 and the chain) through ``chain_inputs`` (no build, no topology), width 0 with its slots by one gather
    and its commit without the launch (``root_slots``, ``root_commit``); a tree's build writes the roots, and budget
    auto's forecast builds the largest tree without them."""
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
    from sglang_ddtree.config import chain_shaped
    from sglang_ddtree.worker.chain_inputs import ChainInputs
    from sglang_ddtree.worker.kv_commit import greedy_accept_commit, root_commit, root_slots
    from sglang_ddtree.worker.sampling import draw_rows
    from sglang_ddtree.worker.tree_api import build_tree, verify_topology
    from sglang_ddtree.worker.tree_attention import ancestor_bits, num_words

    dev, depth = "cuda", config.block_size - 1
    g = torch.Generator(device=dev).manual_seed(bs)
    logits = torch.randn(bs, depth, 50, device=dev, generator=g)
    log_probs, token_ids = logits.log_softmax(-1).topk(config.topk, dim=-1)
    prefix = torch.randint(10, 100, (bs,), device=dev, generator=g)  # int64, as the batch's seq_lens
    req_pool_indices = torch.arange(bs, device=dev)
    root = torch.zeros(bs, dtype=torch.int64, device=dev)
    chains = ChainInputs.for_config(config, device=dev)
    for budget in config.buckets:
        n = budget + 1
        if n == 1:
            verify_loc = root_slots(req_to_token, req_pool_indices, prefix)
        else:
            verify_loc = assign_extend_cache_locs_func(
                req_pool_indices=req_pool_indices, req_to_token=req_to_token, start_offset=prefix,
                end_offset=prefix + n, batch_size=bs, draft_token_num=n, device=dev)
        if chain_shaped(budget):
            tree = chains.tree_of(root, token_ids if budget else None, budget)
            tokens = tree.token_ids
            chains.positions(prefix, n)
        else:
            tree = build_tree(log_probs, token_ids, budget, root)
            tokens = tree.token_ids
            bits = (torch.empty(bs * n, num_words(n), dtype=torch.int32, device=dev)
                    if not config.verifies_causally(budget) else None)  # fa3's bits from the same launch
            verify_topology(tree, prefix, int(prefix.sum()) + bs * config.accept_width, bits_out=bits)
        if budget and config.adaptive:  # the forecast (any drafting round may take it): the largest tree, no roots
            build_tree(log_probs, token_ids, config.budget)
        if chain_shaped(budget) and not config.verifies_causally(budget):  # a chain's bits by their own launch
            ancestor_bits(tree.parents, config.max_depth)
        targets = torch.randint(0, 50, (bs * n, vocab), device=dev, generator=g).float().argmax(-1).view(bs, n)
        if budget:
            greedy_accept_commit(tree, tokens, targets, verify_loc.view(bs, n), prefix, config.accept_width)
        else:
            root_commit(targets, prefix, config.accept_width)
    draw_rows(torch.rand(bs * 2, vocab, device=dev, generator=g))


def test_no_kernel_compiles_after_the_warm_up():
    from sglang_ddtree.worker import warmup

    vocab, max_bs = 1000, 48
    req_to_token = torch.arange(64 * 512, dtype=torch.int32, device="cuda").view(64, 512)
    for chain in (False, True):  # trees only (triton, flashinfer, hybrid) and with the chain bucket (fa3)
        config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True, chain=chain)
        warmup.warm_round_kernels(config, "cuda", tree_bits=True, vocab_size=vocab, req_to_token=req_to_token,
                                  max_batch_size=max_bs)
        before = compile_watch.counts()
        for bs in BATCH_SIZES:
            _round_calls(config, bs, req_to_token, vocab)
        torch.cuda.synchronize()
        assert compile_watch.grown(before, compile_watch.counts()) == {}, chain
    # each was compiled (the counting reads the cache the warm-up fills); the KV mover needs a pool (engine check:
    # ddtree_parity.py's *_compiles configs)
    assert all(v for k, v in before.items() if k != "move_kv"), before
