"""CPU: DDTREE's T > 0 target distribution (``worker.sampling.joint_filtered_probs``) is plain sampling's,
and the T > 0 accept step (one draw per node, then the greedy walk) commits root + accepted drafts.

sgl_kernel's renorm kernels are replaced by PyTorch versions with flashinfer's documented semantics
(top-p: keep the smallest descending prefix whose mass reaches top_p; top-k: keep the top_k largest),
so what is tested is the ORDER of the filters: top-p on the full softmax, then top-k, must equal
SGLang's plain ("joint") filter, and differs from eagle_sample's top-k-then-top-p on purpose-built rows.
"""

import os
import sys
import types

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sampling_stats as st  # noqa: E402
from _worker_oracles import accept_walk  # noqa: E402


def _top_p_renorm(probs, top_p):
    srt, idx = probs.sort(dim=-1, descending=True)
    keep = (srt.cumsum(-1) - srt) < top_p.view(-1, 1)
    out = torch.zeros_like(probs).scatter(-1, idx, torch.where(keep, srt, torch.zeros_like(srt)))
    return out / out.sum(-1, keepdim=True)


def _top_k_renorm(probs, top_k):
    srt, idx = probs.sort(dim=-1, descending=True)
    keep = torch.arange(probs.shape[-1]).view(1, -1) < top_k.view(-1, 1)
    out = torch.zeros_like(probs).scatter(-1, idx, torch.where(keep, srt, torch.zeros_like(srt)))
    return out / out.sum(-1, keepdim=True)


@pytest.fixture
def sampling(monkeypatch):
    fake = types.ModuleType("sgl_kernel")
    fake.top_p_renorm_prob, fake.top_k_renorm_prob = _top_p_renorm, _top_k_renorm
    monkeypatch.setitem(sys.modules, "sgl_kernel", fake)
    from sglang_ddtree.worker import sampling

    return sampling


@pytest.mark.parametrize("seed", range(20))
def test_joint_filter_equals_plain_sampling(sampling, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 50, generator=g) * 3
    temps = torch.tensor([0.7, 1.0, 0.3, 1.3, 0.7, 0.9]).view(-1, 1)
    top_ps = torch.tensor([0.9, 0.5, 1.0, 0.95, 0.8, 0.99])
    top_ks = torch.tensor([20, 3, 1, 50, 5, 1 << 30])
    got = sampling.joint_filtered_probs(logits, temps, top_ps, top_ks)
    for r in range(6):
        want = st.plain_probs(logits[r], float(temps[r]), float(top_ps[r]), int(min(top_ks[r], 50)))
        assert torch.allclose(got[r], want, atol=1e-6), (r, got[r], want)


def test_filters_off_is_softmax(sampling):
    logits = torch.randn(3, 10)
    temps = torch.full((3, 1), 0.5)
    assert torch.allclose(sampling.joint_filtered_probs(logits, temps, None, None), torch.softmax(logits / 0.5, -1))


def test_differs_from_topk_then_topp(sampling):
    """probs [0.5, 0.3, 0.15, 0.05], top_k 2, top_p 0.6: plain keeps {0, 1}; top-k-renorm-then-top-p
    keeps only token 0 (0.5 / 0.8 = 0.625 >= 0.6) - the H200 chi-square failure of upstream's order."""
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    got = sampling.joint_filtered_probs(logits, torch.ones(1, 1), torch.tensor([0.6]), torch.tensor([2]))
    assert torch.allclose(got[0], torch.tensor([0.625, 0.375, 0.0, 0.0]))
    assert torch.allclose(st.tree_probs(logits[0], 1.0, top_p=0.6, top_k=2), torch.tensor([1.0, 0, 0, 0]), atol=1e-6)


def test_node_draws_drive_the_greedy_walk(sampling, monkeypatch):
    """At T > 0 the round draws one token per node (``node_samples``) and walks the tree with them through
    the greedy ACCEPT + COMMIT (``kv_commit.greedy_accept_commit``): accept length = accepted drafts + 1
    (the bonus), the convention the COMMIT step relies on (f8fc813 committed one token too few and the
    engine died at the first T > 0 round). Target logits are one-hot sharp, so every draw is the target's
    token and the expected path is the oracle walk's."""
    from types import SimpleNamespace

    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker.kv_commit import greedy_accept_commit
    from sglang_ddtree.worker.tree_api import build_tree, fill_root

    monkeypatch.setattr(sampling, "get_tp_group", lambda: SimpleNamespace(world_size=1))
    g = torch.Generator().manual_seed(0)
    bs, depth, k, budget, vocab = 4, 5, 3, 12, 6
    lp, ids = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g), -1).topk(k, dim=-1)
    tree = build_tree(lp, ids, budget)
    tokens = fill_root(tree, torch.randint(vocab, (bs,), generator=g))
    n = budget + 1
    target_next = tokens.clone()  # the target follows the tree's first-ranked branch as deep as it goes
    for b in range(bs):
        for row in range(n):
            kids = [r for r in range(1, n) if bool(tree.valid[b, r]) and int(tree.parents[b, r]) == row]
            target_next[b, row] = int(tokens[b, kids[-1]]) if kids and b % 2 == 0 else (b + row) % vocab
    verify_input = SimpleNamespace(draft_token=tokens.reshape(-1), draft_token_num=n)
    info = SimpleNamespace(is_all_greedy=False, temperatures=torch.full((bs, 1), 0.7),
                           top_ps=torch.full((bs,), 0.9), top_ks=torch.full((bs,), 20),
                           need_top_p_sampling=True, need_top_k_sampling=True, acc_additive_penalties=None,
                           acc_scaling_penalties=None, logit_bias=None)
    batch = SimpleNamespace(sampling_info=info, seq_lens=torch.full((bs,), 7), device="cpu",
                            forward_mode=SimpleNamespace(is_idle=lambda: False))
    logits = torch.full((bs * n, vocab), -1e4)
    logits[torch.arange(bs * n), target_next.reshape(-1)] = 0.0
    draws = sampling.node_samples(verify_input, batch, SimpleNamespace(next_token_logits=logits))
    assert draws.shape == (bs, n) and draws.dtype == torch.int64 and torch.equal(draws, target_next)
    verify_loc = torch.arange(bs * n).view(bs, n) + 100
    width = DDTreeConfig(budget=budget, topk=k, block_size=depth + 1).accept_width
    c = greedy_accept_commit(tree, tokens, draws, verify_loc, torch.full((bs,), 7), width)
    out, bonus, accept_lens = c.out_tokens, c.bonus, c.accept_lens
    for b in range(bs):
        rows, want_bonus = accept_walk(tokens[b], tree.parents[b], tree.valid[b], target_next[b])
        assert int(accept_lens[b]) == len(rows), (b, accept_lens, rows)
        assert out[b, : len(rows)].tolist() == [int(tokens[b, r]) for r in rows[1:]] + [want_bonus]
        assert int(bonus[b]) == want_bonus
    assert int(accept_lens.min()) >= 1 and int(accept_lens[::2].max()) > 1  # even requests walk into the tree
