"""CPU: the chi-square helpers of the sampling GPU test accept equal distributions and reject shifted ones.

Seeded, so deterministic. The distributions look like the GPU test's prompts at T = 0.7 (64 live tokens,
top token ~0.25-0.32). The shifted case moves 5% of the probability mass from the most likely token to
the fifth (p ~0.06-0.09) at the GPU test's sample size (2,000 per side): the helper must reject it at
the GPU test's threshold (p <= 0.001), or that test could never fail. (A shift between two large tokens
is harder to see: chi-square grows like n * delta^2 * (1/p1 + 1/p2), so 4% between tokens of 0.5 and
0.3 at n = 2,000 is not caught.)
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sampling_stats as st  # noqa: E402

N = 2000
P_MIN = 1e-3


def _dist(vocab=2048, live=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.full((vocab,), -30.0)
    logits[torch.randperm(vocab, generator=g)[:live]] = -torch.arange(live) * 0.35 + 0.2 * torch.randn(live, generator=g)
    return torch.softmax(logits, -1)


def _sample(probs, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.multinomial(probs, n, replacement=True, generator=g).tolist()


def _shift(probs, mass=0.05):
    top = probs.topk(5).indices
    out = probs.clone()
    out[top[0]] -= mass
    out[top[4]] += mass
    return out


def test_chi2_sf_matches_known_values():
    assert st.chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, abs=1e-9)
    assert st.chi2_sf(18.307038053275146, 10) == pytest.approx(0.05, abs=1e-9)
    assert st.chi2_sf(0.0, 5) == 1.0 and st.chi2_sf(float("inf"), 5) == 0.0 and st.chi2_sf(7.0, 0) == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_two_sample_accepts_same_distribution(seed):
    p = _dist(seed=seed)
    r = st.chi2_two_sample(_sample(p, N, 100 + seed), _sample(p, N, 200 + seed))
    assert r.df >= 5 and r.p > P_MIN, r


@pytest.mark.parametrize("seed", range(5))
def test_two_sample_rejects_shift_of_five_percent(seed):
    p = _dist(seed=seed)
    r = st.chi2_two_sample(_sample(p, N, 100 + seed), _sample(_shift(p), N, 200 + seed))
    assert r.p <= P_MIN, r


def test_two_sample_rejects_disjoint_tokens_and_pairs():
    a = [(0, 1)] * 1000 + [(0, 2)] * 1000
    assert st.chi2_two_sample(a, [(0, 1)] * 2000).p < 1e-100
    assert st.chi2_two_sample([1] * 2000, [1] * 2000).p == 1.0  # one category: nothing to test


def test_pooling_keeps_expected_counts_at_least_five():
    p = _dist(seed=3)
    a, b = _sample(p, N, 1), _sample(p, N, 2)
    r = st.chi2_two_sample(a, b)
    assert r.bins < len(set(a) | set(b))  # rare tokens were pooled


@pytest.mark.parametrize("seed", range(3))
def test_goodness_of_fit(seed):
    p = _dist(seed=seed)
    exact = st.as_dict(p)
    assert st.chi2_goodness_of_fit(_sample(p, N, seed), exact).p > P_MIN
    assert st.chi2_goodness_of_fit(_sample(_shift(p), N, seed), exact).p <= P_MIN
    assert st.chi2_goodness_of_fit([4] * N, {4: 0.5, 6: 0.5}).p < 1e-100


def test_filters_follow_sglang():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(st.plain_probs(logits, 1.0), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    # top_p 0.85: tokens whose preceding mass is <= 0.85 stay (0.5, 0.3 and 0.15)
    assert torch.allclose(st.plain_probs(logits, 1.0, top_p=0.85), torch.tensor([0.5, 0.3, 0.15, 0]) / 0.95)
    assert torch.allclose(st.plain_probs(logits, 1.0, top_k=2), torch.tensor([0.5, 0.3, 0, 0]) / 0.8)
    # plain judges top_p 0.6 on the full softmax (token 1's preceding mass 0.5 <= 0.6: kept); tree sampling
    # renormalises after top_k first (token 1's preceding mass 0.625 > 0.6: dropped)
    assert torch.allclose(st.plain_probs(logits, 1.0, top_p=0.6, top_k=2), torch.tensor([0.5, 0.3, 0, 0]) / 0.8)
    assert torch.allclose(st.tree_probs(logits, 1.0, top_p=0.6, top_k=2), torch.tensor([1.0, 0, 0, 0]), atol=1e-6)
    t = st.plain_probs(logits, 0.5)
    assert torch.allclose(t, torch.softmax(logits / 0.5, -1))
