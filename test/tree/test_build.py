"""build_tree: the batched PyTorch path equals the paper's heap (and the heap equals brute force)."""

import itertools
import random
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_ddtree.tree import Tree, build_tree
from sglang_ddtree.tree.reference import build_tree_reference, build_tree_torch
from tree_cases import assert_trees_equal, random_inputs, tree_row


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0] + 0.0


def brute_force_paths(lp, budget):
    """All prefixes, sorted by the documented total order; the first `budget` (tiny inputs only)."""
    depth_limit, k = lp.shape
    k = min(k, budget)
    rows = [[min(float(x), 0.0) for x in r[:k]] for r in lp.tolist()]
    keyed = []
    for d in range(1, depth_limit + 1):
        for path in itertools.product(range(k), repeat=d):
            scores, s = [], 0.0
            for depth, rank in enumerate(path):
                s = _f32(s + rows[depth][rank])
                scores.append(s)
            keyed.append(((-scores[-1], d, tuple(-x for x in reversed(scores[:-1])), path), path))
    keyed.sort()
    return {p for _, p in keyed[:budget]}


def tree_paths(tree: Tree):
    """Rank paths of a batch-of-one tree, recovered from parents and token ids."""
    paths = {0: ()}
    out = set()
    for r in range(1, int(tree.num_nodes[0])):
        paths[r] = paths[int(tree.parents[0, r])] + (int(tree.token_ids[0, r]),)
        out.add(paths[r])
    return out


def check_invariants(tree: Tree, lp: torch.Tensor, ids: torch.Tensor):
    """Row order and score invariants of every request."""
    for b in range(tree.batch_size):
        num = int(tree.num_nodes[b])
        par, dep, tok = tree.parents[b].tolist(), tree.depths[b].tolist(), tree.token_ids[b].tolist()
        assert tree.valid[b].tolist() == [r < num for r in range(tree.num_rows)]
        assert par[0] == -1 and dep[0] == 0 and float(tree.scores[b, 0]) == 0.0
        rank_of = {}
        for r in range(1, num):
            p = par[r]
            assert 0 <= p < r and dep[r] == dep[p] + 1 <= tree.max_depth
            rank_of[r] = ids[b, dep[r] - 1].tolist().index(tok[r])
            expect = _f32(float(tree.scores[b, p]) + min(float(lp[b, dep[r] - 1, rank_of[r]]), 0.0))
            assert float(tree.scores[b, r]) == expect
            if r > 1:  # rows: (depth, -score, parent row, rank) strictly increasing
                prev = (dep[r - 1], -float(tree.scores[b, r - 1]), par[r - 1], rank_of[r - 1])
                assert prev < (dep[r], -float(tree.scores[b, r]), p, rank_of[r])
        for p in range(num):  # children: ranks 0..c-1 (no gaps), rows ascending with the rank
            kids = [r for r in range(1, num) if par[r] == p]
            assert [rank_of[r] for r in kids] == list(range(len(kids)))
        for r in range(num, tree.num_rows):
            assert (tok[r], par[r], dep[r]) == (0, -1, 0) and tree.scores[b, r] == float("-inf")


@pytest.mark.parametrize("style", ["softmax", "ties", "wide", "special"])
def test_heap_equals_brute_force(style):
    gen = torch.Generator().manual_seed(11)
    rnd = random.Random(11)
    for _ in range(60):
        depth_limit, k = rnd.randint(1, 4), rnd.randint(1, 4)
        budget = rnd.randint(1, 40)
        lp, ids = random_inputs(1, depth_limit, k, gen, style)
        ids = torch.arange(k).expand(1, depth_limit, k).contiguous()  # token id == rank
        ref = build_tree_reference(lp[0], ids[0], budget)
        assert tree_paths(ref) == brute_force_paths(lp[0], budget)


def _sweep(seed, n_batches, budgets, styles):
    gen = torch.Generator().manual_seed(seed)
    rnd = random.Random(seed)
    checked = 0
    for i in range(n_batches):
        bs, depth_limit, k = rnd.randint(1, 4), rnd.randint(1, 15), rnd.randint(1, 10)
        budget = rnd.choice(budgets)
        lp, ids = random_inputs(bs, depth_limit, k, gen, styles[i % len(styles)])
        roots = torch.randint(0, 50, (bs,), generator=gen)
        got = build_tree(lp, ids, budget, roots)  # CPU: the PyTorch path
        check_invariants(got, lp, ids)
        for b in range(bs):
            ref = build_tree_reference(lp[b], ids[b], budget, int(roots[b]))
            assert_trees_equal(tree_row(got, b), ref, f"batch {i} b={b} L-1={depth_limit} K={k} B={budget}")
            checked += 1
    return checked


def test_batched_equals_heap_small_budgets():
    styles = ["softmax", "ties", "wide", "special"]
    assert _sweep(1, 1000, list(range(1, 65)), styles) > 2000


def test_batched_equals_heap_large_budgets():
    styles = ["softmax", "ties", "wide"]
    assert _sweep(2, 60, [65, 100, 255, 256, 257, 512, 700, 1023, 1024], styles) > 100


@settings(max_examples=150, deadline=None)
@given(
    depth_limit=st.integers(1, 6),
    k=st.integers(1, 5),
    budget=st.integers(1, 80),
    values=st.lists(st.sampled_from([0.0, -0.5, -1.0, -1.5, -3.0, float("-inf")]), min_size=30, max_size=30),
)
def test_batched_equals_heap_hypothesis(depth_limit, k, budget, values):
    vals = torch.tensor(values[: depth_limit * k] + [0.0] * max(0, depth_limit * k - len(values)))
    lp = vals[: depth_limit * k].view(1, depth_limit, k).sort(-1, descending=True).values
    ids = torch.arange(k).expand(1, depth_limit, k).contiguous() + 7
    assert_trees_equal(build_tree_torch(lp, ids, budget), build_tree_reference(lp[0], ids[0], budget))


# Hand-made: (log-probs [L-1][K], budget) -> expected (tokens, parents) rows; token id = 10 * depth + rank.
HAND = [
    # chain (K=1): budget below, at and above L-1
    ([[-0.1], [-0.2], [-0.3]], 2, [7, 10, 20], [-1, 0, 1]),
    ([[-0.1], [-0.2], [-0.3]], 3, [7, 10, 20, 30], [-1, 0, 1, 2]),
    ([[-0.1], [-0.2], [-0.3]], 5, [7, 10, 20, 30, 0, 0], [-1, 0, 1, 2, -1, -1]),
    # a confident first position: the whole budget goes deep
    ([[-0.01, -5.0], [-0.02, -6.0], [-0.03, -7.0]], 3, [7, 10, 20, 30], [-1, 0, 1, 2]),
    # an unsure first position: the budget goes wide
    ([[-0.69, -0.70], [-3.0, -4.0], [-3.0, -4.0]], 3, [7, 10, 11, 20], [-1, 0, 0, 1]),
    # exact tie at the budget edge: lower depth wins (-1 at depth 1 vs -0.5 + -0.5 at depth 2)
    ([[-0.5, -1.0], [-0.5, -2.0]], 2, [7, 10, 11], [-1, 0, 0]),
    # tie between two depth-2 nodes: the one under the better parent wins
    ([[-0.5, -0.6], [-0.1, -0.2]], 3, [7, 10, 11, 20], [-1, 0, 0, 1]),
    # -inf tokens are still prefixes, ranked last (and among them lower depth first)
    ([[0.0, float("-inf")], [0.0, float("-inf")]], 3, [7, 10, 11, 20], [-1, 0, 0, 1]),
    # within a depth best first: row 1's second child (-1.1) comes after row 2's first child (-0.3)
    ([[-0.1, -0.2], [-0.1, -1.0]], 5, [7, 10, 11, 20, 20, 21], [-1, 0, 0, 1, 2, 1]),
    # equal scores within a depth: lower parent row first, then lower rank
    ([[-0.1, -0.2], [-0.1, -0.2]], 6, [7, 10, 11, 20, 21, 20, 21], [-1, 0, 0, 1, 1, 2, 2]),
]


@pytest.mark.parametrize("lp,budget,tokens,parents", HAND)
def test_hand_made(lp, budget, tokens, parents):
    lp_t = torch.tensor([lp], dtype=torch.float32)
    depth_limit, k = lp_t.shape[1:]
    ids = (10 * torch.arange(1, depth_limit + 1)[:, None] + torch.arange(k)[None, :]).expand(1, -1, -1)
    ids = ids.contiguous().to(torch.int64)
    for tree in (
        build_tree_torch(lp_t, ids, budget, torch.tensor([7])),
        build_tree_reference(lp_t[0], ids[0], budget, 7),
    ):
        assert tree.token_ids[0].tolist() == tokens
        assert tree.parents[0].tolist() == parents


def test_chain_when_k_is_one():
    gen = torch.Generator().manual_seed(5)
    lp, ids = random_inputs(3, 15, 1, gen)
    for budget in (1, 7, 15, 16, 64):
        tree = build_tree(lp, ids, budget)
        m = min(budget, 15)
        assert tree.parents[:, 1 : m + 1].tolist() == [list(range(m))] * 3
        assert torch.equal(tree.token_ids[:, 1 : m + 1], ids[:, :m, 0])
        assert tree.num_nodes.tolist() == [m + 1] * 3


def test_make_dummy_is_a_valid_empty_tree():
    tree = Tree.make_dummy(2, 8, "cpu", max_depth=4)
    assert tree.num_rows == 9 and tree.budget == 8 and tree.batch_size == 2
    assert tree.valid.sum().item() == 2 and tree.parents.eq(-1).all()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(budget=0),
        dict(budget=2.0),
        dict(lp_dtype=torch.float16),
        dict(ids_dtype=torch.int32),
        dict(shape_ids=(1, 2, 3)),
        dict(backend="cuda"),
    ],
)
def test_bad_arguments(kwargs):
    lp = torch.zeros(1, 2, 2, dtype=kwargs.get("lp_dtype", torch.float32))
    ids = torch.zeros(kwargs.get("shape_ids", (1, 2, 2)), dtype=kwargs.get("ids_dtype", torch.int64))
    with pytest.raises(ValueError):
        build_tree(lp, ids, kwargs.get("budget", 4), backend=kwargs.get("backend", "auto"))


@pytest.mark.parametrize("style", ["softmax", "wide"])
def test_batched_equals_heap_full_size(style):
    gen = torch.Generator().manual_seed(3)
    lp, ids = random_inputs(2, 15, 8, gen, style)
    for budget in (512, 1024):
        got = build_tree(lp, ids, budget)
        assert int(got.num_nodes.min()) == budget + 1
        for b in range(2):
            assert_trees_equal(tree_row(got, b), build_tree_reference(lp[b], ids[b], budget))


@pytest.mark.parametrize("nan_positions", [[0], [3, 4], list(range(6))])
def test_nan_positions_count_as_minus_inf(nan_positions):
    """A drafter's NaN logits give NaN log-probs over a whole position (its logsumexp is NaN): the batched path
    and the paper's heap both read them as -inf, i.e. the same tree as with -inf written there, with no NaN
    score and every parent an earlier row."""
    gen = torch.Generator().manual_seed(len(nan_positions))
    lp, ids = random_inputs(1, 6, 3, gen, "softmax")
    lp[0, nan_positions] = float("nan")
    as_inf = lp.clone()
    as_inf[0, nan_positions] = float("-inf")
    for budget in (4, 12):
        got = build_tree_torch(lp, ids, budget)
        assert_trees_equal(got, build_tree_torch(as_inf, ids, budget), f"budget {budget}")
        assert_trees_equal(got, build_tree_reference(lp[0], ids[0], budget), f"heap, budget {budget}")
        assert not bool(got.scores.isnan().any())
        rows = torch.arange(budget + 1)
        live = got.valid[0] & (rows > 0)
        assert bool(((got.parents[0] >= 0) & (got.parents[0] < rows)).masked_select(live).all())
