"""accept_greedy: hand tables, chain verification, random paths; T>0 target-only sampling is exact."""

import random

import pytest
import torch

from sglang_ddtree.tree import accept_greedy, build_tree
from sglang_ddtree.tree.reference import sample_target_only_reference
from tree_cases import make_tree, random_inputs

# Tree: root(row 0) -> 1 (tok 5), 2 (tok 6); 1 -> 3 (tok 7), 4 (tok 8); 2 -> 5 (tok 9); pad row 6.
PARENTS = [-1, 0, 0, 1, 1, 2]
TOKENS = [100, 5, 6, 7, 8, 9]
# target token at each of the 7 rows -> num_accepted, accepted rows, bonus
HAND = [
    ([1, 2, 3, 4, 5, 6, 7], 0, [0, -1, -1], 1),  # no child of the root matches
    ([5, 42, 3, 4, 5, 6, 7], 1, [0, 1, -1], 42),  # row 1 matches, then none of its children
    ([6, 2, 9, 4, 5, 77, 7], 2, [0, 2, 5], 77),  # second child, then its child; leaf -> bonus at 5
    ([5, 8, 3, 4, 55, 6, 7], 2, [0, 1, 4], 55),  # first child then second grandchild
    ([5, 7, 3, 33, 5, 6, 7], 2, [0, 1, 3], 33),
    ([0, 2, 3, 4, 5, 6, 7], 0, [0, -1, -1], 0),  # the pad row holds token 0 but is nobody's child
]


@pytest.mark.parametrize("target,num_accepted,accepted,bonus", HAND)
def test_hand_made(target, num_accepted, accepted, bonus):
    tree = make_tree(PARENTS, TOKENS, budget=6, max_depth=2)
    res = accept_greedy(tree, torch.tensor([target]))
    assert res.num_accepted.tolist() == [num_accepted]
    assert res.accepted_node_idx.tolist() == [accepted]
    assert res.bonus_token.tolist() == [bonus]
    assert res.num_accepted.dtype == torch.int32 and res.accepted_node_idx.dtype == torch.int32


def chain_verify(draft: list[int], target: list[int]):
    """gpt-fast style chain verification: accept while draft[i] == target[i]; bonus = target[n]."""
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return n, target[n]


def test_chain_tree_reduces_to_chain_verification():
    gen = torch.Generator().manual_seed(4)
    rnd = random.Random(4)
    for _ in range(200):
        depth_limit = rnd.randint(1, 15)
        budget = rnd.choice([1, 3, depth_limit, depth_limit + 5])
        lp, ids = random_inputs(1, depth_limit, 1, gen)
        ids = torch.randint(0, 3, ids.shape, generator=gen)  # tiny vocab: long matches happen
        tree = build_tree(lp, ids, budget)
        m = min(budget, depth_limit)
        draft = ids[0, :m, 0].tolist()
        target = torch.randint(0, 3, (1, budget + 1), generator=gen)
        res = accept_greedy(tree, target)
        n, bonus = chain_verify(draft, target[0, : m + 1].tolist())
        assert res.num_accepted.tolist() == [n]
        assert res.bonus_token.tolist() == [bonus]
        assert res.accepted_node_idx[0, : n + 1].tolist() == list(range(n + 1))


def test_random_trees_follow_planted_path():
    """Targets planted along a random root path for a random length: exactly that path is accepted."""
    gen = torch.Generator().manual_seed(6)
    rnd = random.Random(6)
    for _ in range(100):
        bs, depth_limit, k = rnd.randint(1, 4), rnd.randint(1, 15), rnd.randint(1, 8)
        budget = rnd.choice([1, 4, 16, 64, 200])
        lp, ids = random_inputs(bs, depth_limit, k, gen, "ties")
        tree = build_tree(lp, ids, budget)
        target = torch.full((bs, budget + 1), -7, dtype=torch.int64)  # -7 matches nothing
        expect = []
        for b in range(bs):
            leaf = rnd.randrange(int(tree.num_nodes[b]))
            path = [leaf]
            while path[-1] != 0:
                path.append(int(tree.parents[b, path[-1]]))
            path.reverse()  # root .. leaf
            stop = rnd.randint(0, len(path) - 1)  # accept path[1..stop]
            for i in range(stop):
                target[b, path[i]] = tree.token_ids[b, path[i + 1]]
            target[b, path[stop]] = 1000 + b
            expect.append((stop, path[: stop + 1], 1000 + b))
        res = accept_greedy(tree, target)
        for b, (n, rows, bonus) in enumerate(expect):
            assert int(res.num_accepted[b]) == n
            assert res.accepted_node_idx[b].tolist() == rows + [-1] * (depth_limit + 1 - len(rows))
            assert int(res.bonus_token[b]) == bonus


def test_bad_target_shape():
    tree = make_tree(PARENTS, TOKENS, budget=6, max_depth=2)
    with pytest.raises(ValueError):
        accept_greedy(tree, torch.zeros(1, 6, dtype=torch.int64))
    with pytest.raises(ValueError):
        accept_greedy(tree, torch.zeros(1, 7))


def test_target_only_sampling_emits_the_target_distribution():
    """First two emitted tokens ~ p(x) p(y | x) exactly, whatever the tree (chi-square-style bound)."""
    vocab = 5
    tree = make_tree(PARENTS, [100, 0, 1, 2, 3, 4], budget=6, max_depth=2)
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(7, vocab, generator=gen) * 1.5, -1)
    trials = 20000
    counts = torch.zeros(vocab)
    for _ in range(trials):
        counts[sample_target_only_reference(tree, probs, gen)[0]] += 1
    expected = probs[0] * trials
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 25.0, (counts, expected)  # 4 dof: p(chi2 > 25) ~ 5e-5
    # given the first token was child row 1 (token 0), the second token ~ probs[1]
    counts2 = torch.zeros(vocab)
    for _ in range(trials):
        out = sample_target_only_reference(tree, probs, gen)
        if out[0] == 0:
            counts2[out[1]] += 1
    expected2 = probs[1] * counts2.sum()
    assert float(((counts2 - expected2) ** 2 / expected2).sum()) < 25.0
