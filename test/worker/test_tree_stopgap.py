"""The worker's private tree stop-gap: exact node sets, layout invariants, verify topology."""

import pytest
import torch

from sglang_ddtree.worker import _tree_stopgap as tg

from _worker_oracles import best_prefixes, tree_paths


def _random_inputs(bs, depth, k, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, depth, vocab, generator=g) * 2
    lp, ids = torch.log_softmax(logits, -1).topk(k, dim=-1)
    return lp, ids


@pytest.mark.parametrize("depth,k,budget", [(1, 1, 1), (3, 2, 1), (3, 2, 5), (4, 3, 10), (3, 3, 39),
                                            (3, 3, 60), (5, 2, 7), (2, 4, 3)])
def test_node_set_is_the_best_prefixes(depth, k, budget):
    lp, ids = _random_inputs(4, depth, k, seed=depth * 100 + k * 10 + budget)
    tree = tg.build_tree(lp, ids, budget)
    assert tree.token_ids.shape == (4, budget + 1)
    for b in range(4):
        got = tree_paths(tree.token_ids[b], tree.parents[b], tree.valid[b])
        assert got == best_prefixes(lp[b], ids[b], budget)


def test_layout_invariants():
    lp, ids = _random_inputs(3, 7, 4, seed=3)
    tree = tg.build_tree(lp, ids, 64)
    n = tree.parents.shape[1]
    for b in range(3):
        par, dep, val = tree.parents[b], tree.depths[b], tree.valid[b]
        assert bool(val[0]) and int(par[0]) == -1 and int(dep[0]) == 0
        count = int(val.sum())
        assert bool(val[:count].all()) and not bool(val[count:].any())  # pads at the end
        for r in range(1, count):
            p = int(par[r])
            assert 0 <= p < r and int(dep[r]) == int(dep[p]) + 1
            assert float(tree.scores[b, r]) <= float(tree.scores[b, p]) + 1e-6
        for p in range(count):  # siblings: distinct tokens
            kids = [r for r in range(1, count) if int(par[r]) == p]
            assert len({int(tree.token_ids[b, r]) for r in kids}) == len(kids)
        assert int(dep.max()) <= 7 and n == 65


def _full_mask_rows(mask, prefix_lens, n):
    rows, off = [], 0
    for p in prefix_lens.tolist():
        width = p + n
        rows.append(mask[off : off + n * width].view(n, width))
        off += n * width
    return rows, off


def test_verify_topology_mask_positions_and_links():
    lp, ids = _random_inputs(3, 5, 3, seed=11)
    tree = tg.build_tree(lp, ids, 20)
    prefix = torch.tensor([4, 0, 9])
    n = 21
    numel = n * int((prefix + n).sum()) + 37  # oversized on purpose: the tail stays True
    mask, pos, r_index, r_next, r_sib = tg.verify_topology(tree, prefix, 5, numel)
    rows, used = _full_mask_rows(mask, prefix, n)
    assert bool(mask[used:].all())
    for b, m in enumerate(rows):
        p = int(prefix[b])
        assert bool(m[:, :p].all())
        for i in range(n):
            anc = {i}
            cur = int(tree.parents[b, i])
            while cur >= 0:
                anc.add(cur)
                cur = int(tree.parents[b, cur])
            assert {j for j in range(n) if bool(m[i, p + j])} == anc
        assert pos.view(3, n)[b].tolist() == [p + int(d) for d in tree.depths[b]]
        assert r_index[b].tolist() == [b * n + j for j in range(n)]
        for parent in range(n):
            kids = [r for r in range(1, n) if bool(tree.valid[b, r]) and int(tree.parents[b, r]) == parent]
            chain, cur = [], int(r_next[b, parent])
            while cur != -1:
                chain.append(cur)
                cur = int(r_sib[b, cur])
            assert chain == kids  # first child lowest, siblings ascending
        for r in range(n):
            if not bool(tree.valid[b, r]):
                assert int(r_next[b, r]) == -1 and int(r_sib[b, r]) == -1


def test_chain_tree_when_topk_is_one():
    lp, ids = _random_inputs(2, 6, 1, seed=5)
    tree = tg.build_tree(lp, ids, 64)
    for b in range(2):
        assert int(tree.valid[b].sum()) == 7
        assert tree.parents[b, :7].tolist() == [-1, 0, 1, 2, 3, 4, 5]
        assert tree.token_ids[b, 1:7].tolist() == ids[b, :, 0].tolist()


def test_budget_smaller_than_depth_caps_depth():
    lp, ids = _random_inputs(2, 7, 3, seed=6)
    tree = tg.build_tree(lp, ids, 2)
    assert tree.token_ids.shape == (2, 3) and int(tree.depths.max()) <= 2
