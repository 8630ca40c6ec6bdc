"""The fused greedy ACCEPT + COMMIT kernel (``worker/kernels/commit.py``) == its PyTorch path (small sizes):
natively on CUDA machines (a ``gpu`` test there), else on CPU under the Triton interpreter.

TRITON_INTERPRET only works if set before Triton is first imported, so without CUDA, unless it is already
set, this module re-runs itself in a subprocess with it (like ``test/tree/test_triton_interp.py``).
"""

import dataclasses

import pytest
import torch

from _interp_rerun import kernel_test_mode

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_COMMIT_INTERP_CHILD", globals())
if _RUN_HERE:
    from sglang_ddtree.tree import build_tree
    from sglang_ddtree.worker.kv_commit import greedy_accept_commit
    from sglang_ddtree.worker.tree_api import fill_root

    @pytest.mark.parametrize("bs,depth,k,budget,agree,prefix_dtype,target_dtype", [
        (3, 7, 3, 15, 0.8, torch.int64, torch.int64),
        (4, 5, 4, 40, 0.9, torch.int32, torch.int32),
        (2, 7, 2, 3, 1.0, torch.int64, torch.int64),  # budget < depth: W = budget + 1 = N
        (1, 3, 1, 1, 1.0, torch.int64, torch.int32),  # one node: W = N = 2
        (5, 6, 3, 30, 0.0, torch.int64, torch.int64),  # the target never agrees: accept length 1 (the bonus only)
    ])
    @pytest.mark.parametrize("seed", range(3))
    def test_kernel_matches_torch(bs, depth, k, budget, agree, prefix_dtype, target_dtype, seed):
        g = torch.Generator().manual_seed(seed)
        vocab = 9
        lp, ids = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g), -1).topk(k, dim=-1)
        tree = build_tree(lp, ids, budget, backend="torch")
        tokens = fill_root(tree, torch.randint(vocab, (bs,), generator=g))
        n = budget + 1
        width = min(budget, depth) + 1
        # the target follows a random child of the current node with probability `agree`, else a token
        # outside the draft vocabulary (a miss)
        target = torch.randint(vocab, 2 * vocab, (bs, n), generator=g)
        for b in range(bs):
            for row in range(n):
                kids = [r for r in range(1, n) if bool(tree.valid[b, r]) and int(tree.parents[b, r]) == row]
                if kids and float(torch.rand((), generator=g)) < agree:
                    target[b, row] = tokens[b, kids[int(torch.randint(len(kids), (), generator=g))]]
        verify_loc = (torch.randperm(4 * bs * n, generator=g)[: bs * n].view(bs, n) + 1).to(DEV)
        prefix = torch.randint(0, 50, (bs,), generator=g).to(DEV, prefix_dtype)
        tree = dataclasses.replace(tree, **{f.name: getattr(tree, f.name).to(DEV) for f in dataclasses.fields(tree)
                                            if isinstance(getattr(tree, f.name), torch.Tensor)})
        tokens, target = tokens.to(DEV), target.to(DEV)
        want = greedy_accept_commit(tree, tokens, target.to(target_dtype), verify_loc, prefix, width,
                                    backend="torch")
        got = greedy_accept_commit(tree, tokens, target.to(target_dtype), verify_loc, prefix, width,
                                   backend="triton")
        for field in want._fields:
            a, b_ = getattr(got, field), getattr(want, field)
            if field == "ctx_rows":  # rows past the accept length are unspecified
                live = (torch.arange(width, device=DEV).view(1, width) < want.accept_lens.view(bs, 1).long()).reshape(-1)
                a, b_ = a[live], b_[live]
            assert a.dtype == b_.dtype and a.shape == b_.shape and torch.equal(a, b_), (field, a, b_)
        if agree == 0.0:
            assert bool((got.accept_lens == 1).all())
        if agree >= 0.9:
            assert int(got.accept_lens.max()) > 1

    @pytest.mark.parametrize("budget,width", [(1, 16), (3, 16), (7, 16), (7, 9), (15, 16)])
    @pytest.mark.parametrize("seed", range(2))
    def test_a_small_bucket_pads_to_the_accept_width_in_the_launch(budget, width, seed):
        """Budget auto's small buckets (N = budget + 1 rows, fewer than the server's accept width W): the kernel
        at width W writes exactly what the round wrote before, the kernel at min(W, N) widened by ``pad_commit``
        (every field, every column), and the PyTorch path at W agrees."""
        from sglang_ddtree.worker.kv_commit import pad_commit

        g = torch.Generator().manual_seed(seed)
        bs, depth, vocab = 4, 15, 9
        lp, ids = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g), -1).topk(3, dim=-1)
        tree = build_tree(lp, ids, budget, backend="torch")
        tokens = fill_root(tree, torch.randint(vocab, (bs,), generator=g))
        n = budget + 1
        target = torch.randint(vocab, 2 * vocab, (bs, n), generator=g)
        for b in range(bs):  # the target follows the first child everywhere: the longest accepts the tree allows
            for row in range(n):
                kids = [r for r in range(1, n) if bool(tree.valid[b, r]) and int(tree.parents[b, r]) == row]
                if kids:
                    target[b, row] = tokens[b, kids[0]]
        verify_loc = (torch.randperm(4 * bs * n, generator=g)[: bs * n].view(bs, n) + 1).to(DEV)
        prefix = torch.randint(0, 50, (bs,), generator=g).to(DEV)
        tree = dataclasses.replace(tree, **{f.name: getattr(tree, f.name).to(DEV) for f in dataclasses.fields(tree)
                                            if isinstance(getattr(tree, f.name), torch.Tensor)})
        tokens, target = tokens.to(DEV), target.to(DEV)
        before = pad_commit(greedy_accept_commit(tree, tokens, target, verify_loc, prefix, min(width, n),
                                                 backend="triton"), width)
        got = greedy_accept_commit(tree, tokens, target, verify_loc, prefix, width, backend="triton")
        torch_path = greedy_accept_commit(tree, tokens, target, verify_loc, prefix, width, backend="torch")
        assert got.out_tokens.shape == (bs, width) and got.ctx_loc_2d.shape == (bs, width)
        for field in before._fields:
            a, b_ = getattr(got, field), getattr(before, field)
            assert a.dtype == b_.dtype and a.shape == b_.shape and torch.equal(a, b_), (field, a, b_)
            if field != "ctx_rows":  # the torch path leaves rows past the accept length unspecified
                assert torch.equal(getattr(torch_path, field), b_), field
        assert int(got.accept_lens.max()) > 1 and int(got.accept_lens.max()) <= min(width, n)
        with pytest.raises(ValueError, match="width"):
            greedy_accept_commit(tree, tokens, target, verify_loc, prefix, 0, backend="triton")

    def test_width_zero_round_commits_the_bonus_at_the_accept_width():
        """Budget auto's width 0 (no drafting: a root-only tree, N = 1): one accepted token, the target's, at
        the server's accept width in one launch, as the kernel at width 1 widened by ``pad_commit`` wrote it."""
        from sglang_ddtree.tree import Tree
        from sglang_ddtree.worker.kv_commit import pad_commit

        bs, width = 3, 16
        tree = Tree.make_dummy(bs, 0, DEV, max_depth=width - 1)
        tokens = fill_root(tree, torch.tensor([5, 6, 7], device=DEV))
        target = torch.tensor([[11], [12], [13]], device=DEV)
        verify_loc = torch.tensor([[101], [102], [103]], device=DEV)
        prefix = torch.tensor([4, 9, 0], device=DEV)
        before = pad_commit(greedy_accept_commit(tree, tokens, target, verify_loc, prefix, 1, backend="triton"), width)
        got = greedy_accept_commit(tree, tokens, target, verify_loc, prefix, width, backend="triton")
        for field in before._fields:
            assert torch.equal(getattr(got, field), getattr(before, field)), field
        assert got.accept_lens.tolist() == [1, 1, 1] and got.out_tokens[:, 0].tolist() == [11, 12, 13]
        assert got.bonus.tolist() == [11, 12, 13] and got.new_seq_lens.tolist() == [5, 10, 1]
