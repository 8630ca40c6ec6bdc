"""CPU: DDTREE's T > 0 target distribution (``worker.sampling.joint_filtered_probs``) is plain sampling's,
and the T > 0 accept step returns what the round commits (root + accepted drafts, like ``eagle_sample``).

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
from _worker_oracles import accept_walk, verify_tree_greedy  # noqa: E402


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


def _target_only_one_hot(*, predicts, accept_index, accept_token_num, candidates, retrive_index,
                         retrive_next_token, retrive_next_sibling, target_probs, **_):
    """sgl_kernel.tree_speculative_sampling_target_only for one-hot target distributions: the walk
    then follows the target's token at each node (verify_tree_greedy); like the kernel it writes the
    number of accepted DRAFT nodes (root excluded) to ``accept_token_num``."""
    target = target_probs.argmax(-1)
    p, a, num = verify_tree_greedy(candidates, retrive_index, retrive_next_token, retrive_next_sibling, target,
                                   accept_index.shape[1])
    predicts.copy_(p.to(predicts.dtype))
    accept_index.copy_(a.to(accept_index.dtype))
    accept_token_num.copy_(num.to(accept_token_num.dtype))


@pytest.fixture
def sampling(monkeypatch):
    fake = types.ModuleType("sgl_kernel")
    fake.top_p_renorm_prob, fake.top_k_renorm_prob = _top_p_renorm, _top_k_renorm
    fake.tree_speculative_sampling_target_only = _target_only_one_hot
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


def test_target_only_accept_counts_the_root(sampling, monkeypatch):
    """At T > 0 ``sample_tree`` returns accept_lens = accepted drafts + 1 (the root / bonus slot), the
    convention of ``eagle_sample`` the COMMIT step relies on (f8fc813 returned the bare kernel count
    and the engine died at the first T > 0 round). Target logits are one-hot sharp, so the walk is the
    greedy one and the expected path is known."""
    from types import SimpleNamespace

    from sglang_ddtree.worker.kv_commit import commit_from_accept_index
    from sglang_ddtree.worker.tree_api import build_tree, fill_root, verify_topology

    monkeypatch.setattr("sglang.srt.runtime_context.get_server_args",
                        lambda: SimpleNamespace(speculative_accept_threshold_single=1.0,
                                                speculative_accept_threshold_acc=1.0))
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
    _, _, r_index, r_next, r_sib = verify_topology(tree, torch.full((bs,), 7), 7 * bs)
    verify_input = SimpleNamespace(draft_token=tokens.reshape(-1), draft_token_num=n, max_tree_depth=depth + 1,
                                   retrieve_index=r_index, retrieve_next_token=r_next, retrieve_next_sibling=r_sib)
    info = SimpleNamespace(is_all_greedy=False, temperatures=torch.full((bs, 1), 0.7),
                           top_ps=torch.full((bs,), 0.9), top_ks=torch.full((bs,), 20),
                           need_top_p_sampling=True, need_top_k_sampling=True, acc_additive_penalties=None,
                           acc_scaling_penalties=None, logit_bias=None)
    batch = SimpleNamespace(sampling_info=info, seq_lens=torch.full((bs,), 7), device="cpu",
                            forward_mode=SimpleNamespace(is_idle=lambda: False))
    logits = torch.full((bs * n, vocab), -1e4)
    logits[torch.arange(bs * n), target_next.reshape(-1)] = 0.0
    predict, accept_lens, accept_index = sampling.sample_tree(verify_input, batch,
                                                              SimpleNamespace(next_token_logits=logits))
    verify_loc = torch.arange(bs * n).view(bs, n) + 100
    c = commit_from_accept_index(predict, accept_index, accept_lens, verify_loc, torch.full((bs,), 7))
    out, bonus = c.out_tokens, c.bonus
    for b in range(bs):
        rows, want_bonus = accept_walk(tokens[b], tree.parents[b], tree.valid[b], target_next[b])
        assert int(accept_lens[b]) == len(rows), (b, accept_lens, rows)
        assert out[b, : len(rows)].tolist() == [int(tokens[b, r]) for r in rows[1:]] + [want_bonus]
        assert int(bonus[b]) == want_bonus
    assert int(accept_lens.min()) >= 1 and int(accept_lens[::2].max()) > 1  # even requests walk into the tree
