"""The reference DDTree round loop: lossless against plain decoding, chain reduction, sampling."""

import pytest
import torch

from sglang_ddtree.reference.loop import (
    ddtree_generate, dflash_generate, greedy_generate, propose_chain, propose_tree, tree_verify_inputs)
from sglang_ddtree.reference.toy import random_drafter, random_target, tiny_target_config

PROMPTS = [[1, 2, 3, 4, 5], [10, 20, 30], [100, 50, 25, 12]]


@pytest.fixture(scope="module", params=[(0, True), (1, True), (2, False)], ids=["sharp0", "sharp1", "random2"])
def pair(request):
    seed, sharp = request.param
    target = random_target(seed, sharp=sharp)
    return target, random_drafter(target, seed, sharp=sharp, block_size=8)


@pytest.mark.parametrize("budget,topk", [(1, 1), (1, 4), (4, 2), (7, 1), (16, 4), (40, 8)])
def test_ddtree_equals_greedy(pair, budget, topk):
    target, drafter = pair
    for prompt in PROMPTS:
        want = greedy_generate(target, prompt, 40)
        gen = ddtree_generate(target, drafter, prompt, 40, budget=budget, topk=topk)
        assert gen.tokens == want
        assert all(r.tree_size <= budget and r.num_accepted <= min(r.tree_size, 7) for r in gen.rounds)


def test_chain_tree_equals_dflash(pair):
    """top-K = 1 and budget = L-1: the tree is DFLASH's argmax chain, round for round."""
    target, drafter = pair
    for prompt in PROMPTS:
        chain = dflash_generate(target, drafter, prompt, 40)
        tree = ddtree_generate(target, drafter, prompt, 40, budget=7, topk=1)
        assert tree.tokens == chain.tokens == greedy_generate(target, prompt, 40)
        assert tree.rounds == chain.rounds


def test_chain_proposal_is_the_k1_tree():
    logits = torch.randn(7, 50, generator=torch.Generator().manual_seed(0))
    chain, tree = propose_chain(logits, 11), propose_tree(logits, 11, budget=7, topk=1)
    for field in ("token_ids", "parents", "depths", "valid", "num_nodes"):
        assert torch.equal(getattr(chain, field), getattr(tree, field)), field


def test_verify_inputs_of_a_small_tree():
    """Depth-1 candidates a > b, a's child c: rows root, a, b, c (breadth-first), positions start + depth."""
    lp = torch.log(torch.tensor([[0.6, 0.3], [0.9, 0.05]]))
    tree = propose_tree(torch.full((2, 5), -1e9).scatter(1, torch.tensor([[1, 2], [3, 4]]), lp), 9, 3, 2)
    ids, pos, mask = tree_verify_inputs(tree, start=2)
    assert ids.tolist() == [[9, 1, 2, 3]] and pos.tolist() == [[2, 3, 3, 4]]
    assert mask[0].int().tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 1]]


def test_sharp_pair_accepts_deep_paths():
    target = random_target(0)
    drafter = random_drafter(target, 0, block_size=8)
    gen = ddtree_generate(target, drafter, [58, 193, 230, 39, 87, 174], 40, budget=16, topk=4)
    assert max(r.num_accepted for r in gen.rounds) == 7 and gen.tokens_per_round > 4


def test_eos_stops_like_greedy(pair):
    target, drafter = pair
    full = greedy_generate(target, PROMPTS[0], 30)
    eos = full[12]
    want = greedy_generate(target, PROMPTS[0], 30, eos_token_id=eos)
    assert want[-1] == eos and len(want) <= 13
    assert ddtree_generate(target, drafter, PROMPTS[0], 30, budget=8, topk=2, eos_token_id=eos).tokens == want


def test_bad_budget_is_a_value_error(pair):
    with pytest.raises(ValueError, match="budget"):
        ddtree_generate(*pair, PROMPTS[0], 4, budget=0, topk=2)


@torch.no_grad()
def test_sampling_matches_target_distribution():
    """T > 0: the 2nd and 3rd tokens (from tree acceptance or bonus) follow the target's distribution."""
    cfg = tiny_target_config(vocab_size=12, hidden_size=32, num_layers=3)
    target = random_target(5, sharp=False, cfg=cfg)
    with torch.no_grad():
        target.lm_head.weight.mul_(4)  # peaked enough that tree paths get accepted
    drafter = random_drafter(target, 5, sharp=False, num_layers=1, block_size=4, target_layer_ids=(1,))
    prompt, temp, n = [3, 1, 4], 0.8, 1200
    probs = lambda seqs: torch.softmax(target(seqs, torch.arange(seqs.shape[1]).expand(len(seqs), -1)).logits[:, -1] / temp, -1)
    V = cfg.vocab_size
    p1 = probs(torch.tensor([prompt]))[0]  # [V]
    p2 = probs(torch.tensor([prompt + [a] for a in range(V)]))  # [V, V]
    p3 = probs(torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])).view(V, V, V)
    want2, want3 = p1 @ p2, torch.einsum("a,ab,abc->c", p1, p2, p3)
    g = torch.Generator().manual_seed(0)
    got = torch.zeros(2, V)
    accepted = 0
    for _ in range(n):
        gen = ddtree_generate(target, drafter, prompt, 3, budget=6, topk=3, temperature=temp, generator=g)
        got[0, gen.tokens[1]] += 1
        got[1, gen.tokens[2]] += 1
        accepted += gen.rounds[0].num_accepted
    got /= n
    assert accepted > n // 4  # the tree path, not only the bonus, produced many tokens
    tv2, tv3 = 0.5 * (got[0] - want2).abs().sum(), 0.5 * (got[1] - want3).abs().sum()
    assert tv2 < 0.06 and tv3 < 0.06, (tv2, tv3)
