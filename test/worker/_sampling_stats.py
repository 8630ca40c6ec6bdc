"""Statistics for the T > 0 sampling tests: pooled chi-square tests and exact target distributions.

The two-sample test compares DDTREE's sampled tokens with plain sampling's; the goodness-of-fit test
compares either with the exact float32 distribution of the reference target (``reference.qwen3``).
Filters follow SGLang 0.5.16: the plain sampler (``sampling_backend="pytorch"``) masks top-k and
top-p on the full softmax, then renormalises (:func:`plain_probs`); tree sampling (``eagle_sample``)
renormalises after top-k, then applies top-p to that (:func:`tree_probs`). p-values use the chi-square
survival function ``Q(df/2, stat/2)`` (torch's regularised upper incomplete gamma, float64; no SciPy).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence

import torch

MIN_EXPECTED = 5.0  # categories expected fewer times than this are pooled (the usual chi-square rule)


@dataclass(frozen=True)
class ChiSquare:
    stat: float
    df: int
    p: float
    bins: int  # categories after pooling


def chi2_sf(stat: float, df: int) -> float:
    """P(X >= stat) for X ~ chi-square(df)."""
    if df <= 0:
        return 1.0
    if stat == float("inf"):
        return 0.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def _pool(keys: List, weight: Dict) -> List[List]:
    """Group ``keys`` into bins: every key with weight >= MIN_EXPECTED alone, the rest in one pooled bin,
    grown with the lightest remaining bins until it too reaches MIN_EXPECTED (or is all there is)."""
    keys = sorted(keys, key=lambda k: (weight[k], str(k)))
    pooled = [k for k in keys if weight[k] < MIN_EXPECTED]
    alone = [k for k in keys if weight[k] >= MIN_EXPECTED]
    while pooled and alone and sum(weight[k] for k in pooled) < MIN_EXPECTED:
        pooled.append(alone.pop(0))
    return [[k] for k in alone] + ([pooled] if pooled else [])


def chi2_two_sample(a: Iterable, b: Iterable) -> ChiSquare:
    """Chi-square test of homogeneity for two samples of hashable outcomes (a 2 x k contingency table);
    a category's weight for pooling is its smaller expected count, min(n_a, n_b) * (a_i + b_i) / n."""
    ca, cb = Counter(a), Counter(b)
    na, nb = sum(ca.values()), sum(cb.values())
    n = na + nb
    assert na > 0 and nb > 0, "both samples must be non-empty"
    keys = list(set(ca) | set(cb))
    weight = {k: min(na, nb) * (ca[k] + cb[k]) / n for k in keys}
    bins = _pool(keys, weight)
    stat = 0.0
    for group in bins:
        oa, ob = sum(ca[k] for k in group), sum(cb[k] for k in group)
        col = oa + ob
        for obs, row in ((oa, na), (ob, nb)):
            exp = row * col / n
            stat += (obs - exp) ** 2 / exp
    df = len(bins) - 1
    return ChiSquare(stat, df, chi2_sf(stat, df), len(bins))


def chi2_goodness_of_fit(sample: Iterable, probs: Dict) -> ChiSquare:
    """Chi-square goodness of fit of a sample to ``probs`` (outcome -> probability, summing to ~1).
    Outcomes seen but absent from ``probs`` have expected count 0 and land in the pooled bin; if that
    bin still expects nothing while observing something, the statistic is infinite (p = 0)."""
    counts = Counter(sample)
    n = sum(counts.values())
    total = sum(probs.values())
    keys = list(set(counts) | {k for k, v in probs.items() if v > 0})
    weight = {k: n * probs.get(k, 0.0) / total for k in keys}
    bins = _pool(keys, weight)
    stat = 0.0
    for group in bins:
        obs, exp = sum(counts[k] for k in group), sum(weight[k] for k in group)
        if exp == 0:
            stat = float("inf") if obs else stat
            continue
        stat += (obs - exp) ** 2 / exp
    df = len(bins) - 1
    return ChiSquare(stat, df, chi2_sf(stat, df), len(bins))


def plain_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = -1) -> torch.Tensor:
    """SGLang's plain sampler (pytorch backend): softmax(logits / T); in descending order zero ranks >= top_k
    and tokens whose preceding mass exceeds top_p, both judged on the full softmax; renormalise.
    Shape: logits [..., V] float -> probs [..., V] float32."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    srt, idx = probs.sort(dim=-1, descending=True)
    before = srt.cumsum(-1) - srt
    rank = torch.arange(srt.shape[-1])
    keep = before <= top_p
    if top_k > 0:
        keep &= rank < top_k
    srt = torch.where(keep, srt, torch.zeros_like(srt))
    out = torch.zeros_like(probs).scatter(-1, idx, srt)
    return out / out.sum(-1, keepdim=True)


def tree_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = -1) -> torch.Tensor:
    """Tree sampling's target distribution (``eagle_sample``): softmax(logits / T), top-k renormalised,
    then top-p applied to that renormalised distribution. Shape as :func:`plain_probs`."""
    probs = plain_probs(logits, temperature, 1.0, top_k)
    return plain_probs(probs.clamp_min(1e-38).log() * temperature, temperature, top_p, -1) if top_p < 1 else probs


@torch.no_grad()
def exact_next(model, prompt: Sequence[int]) -> torch.Tensor:
    """float32 logits of the token after ``prompt``. Shape: [V] float32."""
    ids = torch.tensor([list(prompt)])
    return model(ids, torch.arange(ids.shape[1])[None]).logits[0, -1].float()


@torch.no_grad()
def exact_second(model, prompt: Sequence[int], first: torch.Tensor, filt, mass: float = 0.9995,
                 max_branches: int = 512) -> torch.Tensor:
    """Marginal of the second generated token: sum_t1 first[t1] * filt(logits | prompt + t1), over the
    most likely first tokens covering ``mass`` (at most ``max_branches``), renormalised over them.
    Shape: first [V] float32 -> [V] float32."""
    srt, idx = first.sort(descending=True)
    m = int(min(max_branches, int((srt.cumsum(0) < mass).sum()) + 1))
    ids = torch.tensor([list(prompt) + [int(t)] for t in idx[:m]])
    logits = model(ids, torch.arange(ids.shape[1])[None].expand(m, -1)).logits[:, -1].float()
    return (srt[:m, None] * filt(logits)).sum(0) / srt[:m].sum()


def as_dict(probs: torch.Tensor, floor: float = 0.0) -> Dict[int, float]:
    """{token: probability} for tokens with probability > floor."""
    nz = (probs > floor).nonzero().flatten()
    return {int(t): float(probs[t]) for t in nz}
