"""CPU: DDTREE's T > 0 target distribution (``worker.sampling.joint_filtered_probs``) is plain sampling's.

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
