"""Accept + commit logic of a round on CPU: tree -> topology -> the production ACCEPT + COMMIT -> emitted
tokens, bonus, KV moves and the drafter's new context, each checked against a plain one-request walk.
The worker's tree (``tree_api.build_tree``) is held against the paper's heap (``build_tree_reference``);
its ACCEPT + COMMIT (``kv_commit.greedy_accept_commit``, PyTorch path here, the Triton kernel in
``test_commit_kernel_interp.py``; greedy and T > 0 rounds both take it) is checked against the oracle walk
(``_worker_oracles.accept_walk``: the root path of the target's choices), and so is a re-statement of
sgl_kernel.verify_tree_greedy on the worker's retrieve links (upstream's reading of the same topology)."""

import pytest
import torch

from sglang_ddtree.tree.reference import build_tree_reference
from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker.tree_api import build_tree, fill_root, verify_topology
from sglang_ddtree.worker.kv_commit import commit_from_rows, greedy_accept_commit

from _worker_oracles import accept_walk, verify_tree_greedy


def _make_round(bs, depth, k, budget, seed):
    g = torch.Generator().manual_seed(seed)
    vocab = 6  # tiny vocabulary: the target often agrees with some branch
    lp, ids = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g), -1).topk(k, dim=-1)
    tree = build_tree(lp, ids, budget)
    for b in range(bs):  # every request's tree is exactly the heap's: node set, row order, scores, pads
        ref = build_tree_reference(lp[b], ids[b], budget)
        for field in ("token_ids", "parents", "depths", "scores", "valid"):
            assert torch.equal(getattr(tree, field)[b], getattr(ref, field)[0]), (field, b)
    tokens = fill_root(tree, torch.randint(vocab, (bs,), generator=g))
    target_next = torch.randint(vocab, tokens.shape, generator=g)
    return tree, tokens, target_next


@pytest.mark.parametrize("slack", [0, 11])  # the worker passes a host upper bound of sum(prefix)
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("depth,k,budget", [(7, 3, 15), (7, 4, 64), (3, 2, 1), (5, 6, 30)])
def test_greedy_accept_matches_longest_path(slack, seed, depth, k, budget):
    bs = 5
    cfg = DDTreeConfig(budget=budget, topk=min(k, budget), block_size=depth + 1)
    tree, tokens, target_next = _make_round(bs, depth, k, budget, seed)
    n, width = cfg.num_verify_tokens, cfg.accept_width
    prefix = torch.randint(3, 30, (bs,), generator=torch.Generator().manual_seed(seed))
    bound = int(prefix.sum()) + slack
    mask, pos, r_index, r_next, r_sib = verify_topology(tree, prefix, bound)
    assert mask.numel() == n * (bound + bs * n) and pos.shape == (bs * n,)
    off = 0
    for b in range(bs):  # FULL_MASK rows: prefix visible, tree part = the row itself and its ancestors
        p = int(prefix[b])
        rows = mask[off : off + n * (p + n)].view(n, p + n)
        assert bool(rows[:, :p].all())
        for i in range(n):
            anc, cur = {i}, int(tree.parents[b, i])
            while cur >= 0:
                anc.add(cur)
                cur = int(tree.parents[b, cur])
            assert {j for j in range(n) if bool(rows[i, p + j])} == anc, (b, i)
        assert pos.view(bs, n)[b].tolist() == [p + int(d) for d in tree.depths[b]]
        off += n * (p + n)
    verify_loc = (torch.arange(bs * n) + 1000).view(bs, n)  # distinct, non-zero slots
    c = greedy_accept_commit(tree, tokens, target_next, verify_loc, prefix, width)
    predict, accept_index, num = verify_tree_greedy(tokens, r_index, r_next, r_sib, target_next, width)
    rows = torch.where(accept_index >= 0, accept_index - torch.arange(bs).view(bs, 1) * n, -1)
    via_retrieve_links = commit_from_rows(predict.view(bs, n), rows, num + 1, verify_loc, prefix)
    walks = [accept_walk(tokens[b], tree.parents[b], tree.valid[b], target_next[b]) for b in range(bs)]
    for commit in (c, via_retrieve_links):  # the production path and upstream's reading, against the oracle
        _check_commit(commit, walks, tokens, verify_loc, prefix, width)


def _check_commit(c, walks, tokens, verify_loc, prefix, width):
    bs, n = verify_loc.shape
    for b, (rows, want_bonus) in enumerate(walks):  # rows: root (0) then the accepted node of each depth
        a = len(rows)  # accept length = accepted drafts + bonus
        assert int(c.accept_lens[b]) == a and int(c.new_seq_lens[b]) == int(prefix[b]) + a
        emitted = [int(tokens[b, r]) for r in rows[1:]] + [want_bonus]
        assert c.out_tokens[b, :a].tolist() == emitted and int(c.bonus[b]) == want_bonus
        assert bool((c.out_tokens[b, a:] == 0).all())

    # KV: slot of node j is verify_loc[b, j]; after the moves, depth d must hold the accepted node's KV.
    kv = torch.zeros(2000, dtype=torch.int64)
    kv[verify_loc.reshape(-1)] = torch.arange(bs * n)  # "KV" = global node id
    for chunk in range(0, c.kv_tgt.numel(), 7):  # sequential chunks, read-before-write within one
        t, s = c.kv_tgt[chunk : chunk + 7], c.kv_src[chunk : chunk + 7]
        kv[t] = kv[s].clone()
    for b, (rows, _) in enumerate(walks):
        a = len(rows)
        assert kv[verify_loc[b, :a]].tolist() == [b * n + r for r in rows]
        assert bool((c.kv_tgt.view(bs, width)[b, a:] == 0).all())

    # The drafter's new context: the accepted nodes' hidden states at their final slots and positions.
    hidden = torch.arange(bs * n, dtype=torch.float32).unsqueeze(1).repeat(1, 3)
    ctx_h = hidden[c.ctx_rows]
    assert c.ctx_loc_2d.is_contiguous() and c.ctx_loc_2d.shape == (bs, width)
    for b, (rows, _) in enumerate(walks):
        a = len(rows)
        assert ctx_h.view(bs, width, 3)[b, :a, 0].tolist() == [float(b * n + r) for r in rows]
        assert c.ctx_positions.view(bs, width)[b, :a].tolist() == [int(prefix[b]) + d for d in range(a)]
        assert c.ctx_loc_2d[b, :a].tolist() == verify_loc[b, :a].tolist()


def test_chain_tree_reduces_to_chain_verification():
    """K = 1: the tree is DFLASH's chain; acceptance = longest matching prefix of the chain."""
    bs, depth = 3, 7
    tree, tokens, _ = _make_round(bs, depth, 1, 64, seed=1)
    assert tree.parents[:, : depth + 1].tolist() == [[-1] + list(range(depth))] * bs  # a chain, then pads
    assert not bool(tree.valid[:, depth + 1 :].any())
    target_next = torch.zeros_like(tokens)
    keep = [0, 3, 7]  # accepted drafts per request
    for b in range(bs):
        target_next[b, :depth] = tokens[b, 1 : depth + 1]
        target_next[b, keep[b]] = (tokens[b, keep[b] + 1] + 1) % 6 if keep[b] < depth else 5
    prefix = torch.tensor([5, 6, 7])
    _, _, r_index, r_next, r_sib = verify_topology(tree, prefix, int(prefix.sum()))
    predict, accept_index, num = verify_tree_greedy(tokens, r_index, r_next, r_sib, target_next, depth + 1)
    assert num.tolist() == keep


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_small_auto_buckets_commit_padded_to_the_servers_accept_width(budget):
    """budget auto: a bucket whose tree has fewer rows than the server's accept width W commits through
    ``pad_commit``: the same accepted tokens, bonus, lengths and live KV moves as the unpadded commit, and the
    extra columns past every accept length (no KV move, context slot 0, positions prefix + depth)."""
    from sglang_ddtree.tree.metadata import Tree
    from sglang_ddtree.worker.kv_commit import pad_commit

    bs, width, depth = 4, 8, 7
    g = torch.Generator().manual_seed(budget)
    if budget == 0:
        tree = Tree.make_dummy(bs, 0, "cpu", max_depth=depth)
        tokens = fill_root(tree, torch.randint(6, (bs,), generator=g))
        target_next = torch.randint(6, tokens.shape, generator=g)
    else:
        tree, tokens, target_next = _make_round(bs, depth, 2, budget, budget)
    n = budget + 1
    prefix = torch.tensor([3, 0, 9, 5])
    verify_loc = 100 + torch.arange(bs * n).view(bs, n)
    small = greedy_accept_commit(tree, tokens, target_next, verify_loc, prefix, min(width, n), backend="torch")
    c = pad_commit(small, width)
    assert c.out_tokens.shape == (bs, width) and c.ctx_loc_2d.shape == (bs, width)
    for f in ("kv_tgt", "kv_src", "ctx_rows", "ctx_positions"):
        assert getattr(c, f).shape == (bs * width,), f
    assert torch.equal(c.accept_lens, small.accept_lens) and torch.equal(c.bonus, small.bonus)
    assert bool((c.accept_lens <= n).all())
    assert torch.equal(c.out_tokens[:, :n], small.out_tokens) and not c.out_tokens[:, n:].any()
    assert not c.kv_tgt.view(bs, width)[:, n:].any() and not c.kv_src.view(bs, width)[:, n:].any()
    assert not c.ctx_loc_2d[:, n:].any()
    assert torch.equal(c.ctx_positions.view(bs, width), prefix.view(bs, 1) + torch.arange(width).view(1, width))
    assert torch.equal(c.ctx_rows.view(bs, width)[:, n:], (torch.arange(bs) * n).view(bs, 1).expand(bs, width - n))
    if budget == 0:  # no drafting: the round commits the root's target token, one token per request
        assert torch.equal(c.accept_lens, torch.ones(bs, dtype=torch.int32))
        assert torch.equal(c.bonus, target_next[:, 0])
    assert pad_commit(c, width) is c


@pytest.mark.parametrize("seed", range(3))
def test_a_width_0_round_commits_what_the_one_row_tree_commits(seed):
    """``root_commit`` (width 0 without the commit launch) hands back what ``greedy_accept_commit`` does for a
    one-row tree at the server's accept width: the same tokens (the bonus, then 0), bonus, accept lengths (1)
    and new lengths; and ``root_slots`` is the slot ``assign_extend_cache_locs`` gives the root, req_to_token[b,
    prefix] as int64."""
    from sglang_ddtree.tree.metadata import Tree
    from sglang_ddtree.worker.kv_commit import root_commit, root_slots

    bs, width, depth = 5, 8, 7
    g = torch.Generator().manual_seed(seed)
    tree = Tree.make_dummy(bs, 0, "cpu", max_depth=depth)
    tokens = fill_root(tree, torch.randint(6, (bs,), generator=g))
    target = torch.randint(100, (bs, 1), generator=g)
    prefix = torch.randint(0, 30, (bs,), generator=g)
    req_to_token = torch.randperm(8 * 40, generator=g).to(torch.int32).view(8, 40)
    pool_idx = torch.randperm(8, generator=g)[:bs]
    slots = root_slots(req_to_token, pool_idx, prefix)
    assert slots.dtype == torch.int64
    assert slots.tolist() == [int(req_to_token[int(pool_idx[b]), int(prefix[b])]) for b in range(bs)]
    full = greedy_accept_commit(tree, tokens, target, slots.view(bs, 1), prefix, width, backend="torch")
    c = root_commit(target, prefix, width)
    for f in ("out_tokens", "bonus", "accept_lens", "new_seq_lens"):
        assert torch.equal(getattr(c, f), getattr(full, f)), f
        assert getattr(c, f).dtype == getattr(full, f).dtype, f
    # the drafter's context is the verify's one row per request (worker: ``append_root``), at the root's slot
    assert c.ctx_rows is None and torch.equal(full.ctx_loc_2d[:, 0], slots)
    assert torch.equal(full.ctx_positions.view(bs, width)[:, 0], prefix)
    assert torch.equal(root_commit(target.view(-1).to(torch.int32), prefix, width).bonus, target.view(-1))
    with pytest.raises(ValueError, match="width must be >= 1"):
        root_commit(target, prefix, 0)
