"""``worker.head_graph`` on a GPU: the captured heads, replayed, write exactly what the eager calls write (upstream's
``assign_extend_cache_locs_func``, ``build_tree``, ``verify_topology`` with the ancestor bits) for captured batch
sizes and padded ones, after larger and smaller rounds, for two budgets sharing the mask buffer. Run with
``pytest -m gpu`` (``bash scripts/device/issue13.sh head``)."""

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_replayed_heads_write_what_the_eager_calls_write():
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func

    from sglang_ddtree.tree import build_tree
    from sglang_ddtree.worker import head_graph
    from sglang_ddtree.worker.tree_api import verify_topology
    from sglang_ddtree.worker.tree_attention import num_words

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    depth, topk, pool_rows, ctx = 15, 8, 64, 512
    req_to_token = torch.randint(1, 10_000, (pool_rows, ctx), generator=g, device=dev, dtype=torch.int32)
    bits_buffers = {}

    def bits_for(tree, budget):  # one static buffer per budget, as each width's fa3 backend holds one
        n = budget + 1
        buf = bits_buffers.setdefault(budget, torch.zeros(64 * n, num_words(n), dtype=torch.int32, device=dev))
        return buf[:tree.batch_size * n]

    # budget 7 reads the draft's 15 positions with fewer levels (session 42: the heads once sized it by the budget)
    heads = head_graph.TreeHeads(batch_sizes=(1, 2, 4, 8, 16, 32, 64), budgets=(7, 15, 63), depth=depth, topk=topk,
                                 device=dev, req_to_token=req_to_token, mask_capacity=64 * 400,
                                 slots=assign_extend_cache_locs_func, bits_for=bits_for, capture=True)
    for bs, budget in ((64, 63), (3, 15), (17, 63), (1, 15), (40, 15), (5, 63), (6, 7), (33, 7)):
        n = budget + 1
        lp = torch.randn(bs, depth, topk, generator=g, device=dev).log_softmax(-1).sort(-1, descending=True).values
        ids = torch.randint(151_936, (bs, depth, topk), generator=g, device=dev)
        bonus = torch.randint(151_936, (bs,), generator=g, device=dev)
        prefix = torch.randint(1, 400 - n, (bs,), generator=g, device=dev)
        rpi = torch.randperm(pool_rows, generator=g, device=dev)[:bs]
        size = heads.padded(bs, budget, 400 * bs)
        got = heads(size, bs, budget, lp, ids, bonus, prefix, rpi)
        torch.cuda.synchronize()
        want_loc = assign_extend_cache_locs_func(req_pool_indices=rpi, req_to_token=req_to_token, start_offset=prefix,
                                                 end_offset=prefix + n, batch_size=bs, draft_token_num=n, device=dev)
        tree = build_tree(lp, ids, budget, bonus)
        bits = torch.zeros(bs * n, num_words(n), dtype=torch.int32, device=dev)
        mask, positions, r_index, r_next, r_sibling = verify_topology(tree, prefix, int(prefix.sum()), bits_out=bits)
        assert torch.equal(got.verify_loc, want_loc), (bs, budget)
        for field in ("token_ids", "parents", "depths", "scores", "valid", "num_nodes"):
            assert torch.equal(getattr(got.tree, field), getattr(tree, field)), (bs, budget, field)
        assert torch.equal(got.mask[:mask.numel()], mask), (bs, budget)
        for a, b in ((got.positions, positions), (got.retrieve_index, r_index), (got.retrieve_next_token, r_next),
                     (got.retrieve_next_sibling, r_sibling), (got.tree_bits, bits)):
            assert torch.equal(a, b), (bs, budget)
        assert got.tree_bits.data_ptr() == bits_buffers[budget].data_ptr()  # in the verify's static buffer
