"""build_verify_topology: masks, positions and retrieve links match hand tables and the upstream rules."""

import random

import pytest
import torch

from sglang_ddtree.tree import build_tree, build_verify_topology, full_mask_numel
from sglang_ddtree.tree.reference import reconstruct_indices_reference
from tree_cases import make_tree, random_inputs

# (parents, budget, seq_len) -> ancestor sets per row, positions, next_token, next_sibling
HAND = [
    (  # root -> {1, 2}; 1 -> {3, 4}; 2 -> {5}; one pad row
        [-1, 0, 0, 1, 1, 2], 6, 10,
        [{0}, {0, 1}, {0, 2}, {0, 1, 3}, {0, 1, 4}, {0, 2, 5}, {6}],
        [10, 11, 11, 12, 12, 12, 10],
        [1, 3, 5, -1, -1, -1, -1],
        [-1, 2, -1, 4, -1, -1, -1],
    ),
    (  # chain of three (what K = 1 gives)
        [-1, 0, 1, 2], 3, 0,
        [{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}],
        [0, 1, 2, 3],
        [1, 2, 3, -1],
        [-1, -1, -1, -1],
    ),
    (  # root only, all pads
        [-1], 3, 5,
        [{0}, {1}, {2}, {3}],
        [5, 5, 5, 5],
        [-1, -1, -1, -1],
        [-1, -1, -1, -1],
    ),
    (  # star: four children of the root
        [-1, 0, 0, 0, 0], 4, 2,
        [{0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}],
        [2, 3, 3, 3, 3],
        [1, -1, -1, -1, -1],
        [-1, 2, 3, 4, -1],
    ),
]


@pytest.mark.parametrize("parents,budget,seq_len,anc,positions,next_token,next_sibling", HAND)
def test_hand_made(parents, budget, seq_len, anc, positions, next_token, next_sibling):
    tree = make_tree(parents, list(range(len(parents))), budget, max_depth=4)
    seq = torch.tensor([seq_len])
    topo = build_verify_topology(tree, seq, seq_len)
    n = budget + 1
    expect_mask = torch.tensor([[j in anc[i] for j in range(n)] for i in range(n)])
    assert torch.equal(topo.tree_mask[0], expect_mask)
    assert topo.positions.tolist() == positions
    assert topo.retrieve_index.tolist() == [list(range(n))]
    assert topo.retrieve_next_token.tolist() == [next_token]
    assert topo.retrieve_next_sibling.tolist() == [next_sibling]
    full = topo.custom_mask.view(n, seq_len + n)
    assert full[:, :seq_len].all() and torch.equal(full[:, seq_len:], expect_mask)
    # what upstream's reconstruct_indices_from_tree_mask derives from the mask is the same
    rec = reconstruct_indices_reference(topo.tree_mask, seq)
    assert [t.tolist() for t in rec] == [positions, [list(range(n))], [next_token], [next_sibling]]


def _random_trees(seed, count):
    gen = torch.Generator().manual_seed(seed)
    rnd = random.Random(seed)
    for _ in range(count):
        bs, depth_limit, k = rnd.randint(1, 4), rnd.randint(1, 15), rnd.randint(1, 8)
        budget = rnd.choice([1, 2, 3, 7, 16, 33, 64, 100])
        lp, ids = random_inputs(bs, depth_limit, k, gen, rnd.choice(["softmax", "ties"]))
        seq = torch.randint(0, 50, (bs,), generator=gen)
        yield build_tree(lp, ids, budget), seq


def test_links_equal_upstream_rules_from_mask():
    for tree, seq in _random_trees(7, 120):
        topo = build_verify_topology(tree, seq)
        assert topo.custom_mask is None
        pos, idx, nxt, sib = reconstruct_indices_reference(topo.tree_mask, seq)
        assert torch.equal(pos, topo.positions)
        assert torch.equal(idx, topo.retrieve_index)
        assert torch.equal(nxt, topo.retrieve_next_token)
        assert torch.equal(sib, topo.retrieve_next_sibling)
        # the mask is the ancestor relation of `parents`
        for b in range(tree.batch_size):
            for r in range(tree.num_rows):
                anc, cur = set(), r
                while cur >= 0:
                    anc.add(cur)
                    cur = int(tree.parents[b, cur])
                assert set(torch.nonzero(topo.tree_mask[b, r]).flatten().tolist()) == anc


def test_full_mask_layout_matches_per_request_concat():
    """The layout NGRAM builds with a Python loop: per request cat(ones(N, seq), tree_mask).flatten()."""
    for tree, seq in _random_trees(8, 40):
        n, bs = tree.num_rows, tree.batch_size
        topo = build_verify_topology(tree, seq, int(seq.sum()))
        rows = [torch.cat([torch.ones(n, int(seq[b]), dtype=torch.bool), topo.tree_mask[b]], 1) for b in range(bs)]
        ref = torch.cat([r.flatten() for r in rows])
        assert topo.custom_mask.numel() == full_mask_numel(int(seq.sum()), bs, n)
        assert torch.equal(topo.custom_mask, ref)


def test_full_mask_into_preallocated_buffer():
    tree, seq = next(_random_trees(9, 1))
    total = int(seq.sum())
    buf = torch.zeros(full_mask_numel(total, tree.batch_size, tree.num_rows) + 100, dtype=torch.bool)
    topo = build_verify_topology(tree, seq, total, custom_mask_out=buf, with_tree_mask=False)
    assert topo.tree_mask is None
    assert topo.custom_mask.data_ptr() == buf.data_ptr()
    assert torch.equal(topo.custom_mask, build_verify_topology(tree, seq, total).custom_mask)
    assert not buf[-100:].any()
    with pytest.raises(ValueError):
        build_verify_topology(tree, seq, total, custom_mask_out=buf[:10])


def test_int32_seq_lens_and_bad_shapes():
    tree, seq = next(_random_trees(10, 1))
    a = build_verify_topology(tree, seq.to(torch.int32), int(seq.sum()))
    b = build_verify_topology(tree, seq, int(seq.sum()))
    assert torch.equal(a.custom_mask, b.custom_mask) and torch.equal(a.positions, b.positions)
    with pytest.raises(ValueError):
        build_verify_topology(tree, seq[:0])
    with pytest.raises(ValueError):
        build_verify_topology(tree, seq.float())


def test_full_mask_with_an_upper_bound_on_seq_lens_sum():
    """A host bound >= seq_lens.sum() (what a lagging host length gives) sizes the mask; the head is exact."""
    for tree, seq in _random_trees(11, 10):
        exact = build_verify_topology(tree, seq, int(seq.sum())).custom_mask
        bound = build_verify_topology(tree, seq, int(seq.sum()) + 37).custom_mask
        assert bound.numel() == exact.numel() + 37 * tree.num_rows
        assert torch.equal(bound[: exact.numel()], exact)


def test_bad_arguments(monkeypatch):
    """Caller mistakes are ValueErrors naming the argument; Triton on CPU needs the interpreter."""
    from sglang_ddtree.tree._common import triton_importable

    tree, seq = next(_random_trees(12, 1))
    total = int(seq.sum())
    buf = torch.zeros(full_mask_numel(total, tree.batch_size, tree.num_rows), dtype=torch.bool)
    with pytest.raises(ValueError, match="custom_mask_out needs seq_lens_sum"):
        build_verify_topology(tree, seq, None, custom_mask_out=buf)
    with pytest.raises(ValueError, match="custom_mask_out must be torch.bool"):
        build_verify_topology(tree, seq, total, custom_mask_out=buf.to(torch.uint8))
    with pytest.raises(ValueError, match="backend must be one of"):
        build_verify_topology(tree, seq, total, backend="cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    err, match = (ValueError, "needs TRITON_INTERPRET=1") if triton_importable() else (RuntimeError, "not importable")
    with pytest.raises(err, match=match):
        build_verify_topology(tree, seq, total, backend="triton")
