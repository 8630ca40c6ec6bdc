"""The width policy behind ``--speculative-ddtree-budget auto`` (``sglang_ddtree.width_policy``), on CPU.

- ``expected_drafts_at`` from one large tree equals sum(exp(score)) of the trees built at each smaller budget
  (the budget-b tree is the b best nodes of a larger one), and, for a calibrated drafter, the mean accepted
  drafts of the production walk (``greedy_accept_commit`` fed with draws from the drafter's own
  distributions, as a T > 0 round is): a Monte Carlo check of the formula the policy relies on.
- Cost, accept and choice: table interpolation, padded batch sizes, the ratio correction, width 0 only when it
  pays and probed back out of, equal rates going to the smaller budget.
"""

import math
import random

import pytest
import torch

from sglang_ddtree.tree import build_tree
from sglang_ddtree.width_policy import (
    CostModel, DraftForecast, ScoreAcceptModel, TableAcceptModel, WidthPolicy, bucket_budgets, expected_drafts_at,
)
from sglang_ddtree.worker.kv_commit import greedy_accept_commit
from sglang_ddtree.worker.tree_api import fill_root


def _draft(bs, depth, vocab, k, seed, sharp=1.5):
    g = torch.Generator().manual_seed(seed)
    logq = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g) * sharp, -1)
    lp, ids = logq.topk(k, dim=-1)
    return logq, lp, ids


def test_bucket_budgets():
    assert bucket_budgets(64) == (0, 1, 3, 7, 15, 31, 63, 64)
    assert bucket_budgets(63) == (0, 1, 3, 7, 15, 31, 63)
    assert bucket_budgets(15) == (0, 1, 3, 7, 15)
    assert bucket_budgets(1) == (0, 1)
    assert bucket_budgets(2) == (0, 1, 2)
    assert bucket_budgets(40, smallest=3) == (0, 3, 7, 15, 31, 40)
    with pytest.raises(ValueError):
        bucket_budgets(0)


@pytest.mark.parametrize("seed", range(4))
def test_expected_drafts_match_smaller_trees(seed):
    bs, depth, vocab, k = 3, 6, 12, 4
    _, lp, ids = _draft(bs, depth, vocab, k, seed)
    budgets = (0, 1, 2, 5, 9, 17, 30)
    big = build_tree(lp, ids, 30)
    got = expected_drafts_at(big.scores, budgets)
    assert got.shape == (bs, len(budgets))
    for j, b in enumerate(budgets):
        if b == 0:
            assert torch.equal(got[:, j], torch.zeros(bs))
            continue
        small = build_tree(lp, ids, b)
        want = torch.where(small.valid[:, 1:], small.scores[:, 1:].exp(), torch.zeros(())).sum(1)
        assert torch.allclose(got[:, j], want, rtol=1e-5, atol=1e-6), (b, got[:, j], want)
    with pytest.raises(ValueError):
        expected_drafts_at(big.scores, (0, 31))


def test_expected_drafts_count_real_nodes_only():
    # a tree with fewer real nodes than the budget (K = 1, depth 3): pads contribute nothing
    _, lp, ids = _draft(2, 3, 8, 1, seed=0)
    tree = build_tree(lp, ids, 10)
    got = expected_drafts_at(tree.scores, (0, 3, 10))
    assert torch.allclose(got[:, 1], got[:, 2])


def test_calibrated_drafter_acceptance_matches_the_score_sum():
    """Target = the drafter: the next token at depth d is drawn from the drafter's position-d distribution
    (DFlash drafts every block position at once, independent of the prefix). The walk then accepts each node
    with the probability of its root path, so mean accepted drafts -> sum over nodes of exp(score)."""
    bs, depth, vocab, k, budget, trials = 64, 5, 6, 3, 12, 60
    logq, lp, ids = _draft(bs, depth, vocab, k, seed=3, sharp=2.0)
    q = logq.exp()
    tree = build_tree(lp, ids, budget)
    tokens = fill_root(tree, torch.zeros(bs, dtype=torch.int64))
    n = budget + 1
    pos = tree.depths.clamp(max=depth - 1)  # row at depth d: next token from position d + 1 (index d)
    probs = q.gather(1, pos.unsqueeze(-1).expand(bs, n, vocab))  # [bs, N, V]
    predicted = expected_drafts_at(tree.scores, (budget,))[:, 0]
    g = torch.Generator().manual_seed(11)
    loc = torch.arange(bs * n).view(bs, n) + 1
    observed = torch.zeros(bs)
    for _ in range(trials):
        draws = torch.multinomial(probs.view(-1, vocab), 1, generator=g).view(bs, n)
        c = greedy_accept_commit(tree, tokens, draws, loc, torch.zeros(bs, dtype=torch.int64), depth + 1)
        observed += (c.accept_lens - 1).float()
    observed /= trials
    # per-request accepted drafts have variance <= depth^2 / 4; pooled over bs * trials draws
    sigma = math.sqrt((depth ** 2 / 4) / (bs * trials))
    assert abs(float(observed.mean() - predicted.mean())) < 4 * sigma, (observed.mean(), predicted.mean())
    assert float(predicted.mean()) > 0.5  # a non-trivial tree


def test_table_accept_model_interpolates_in_log2():
    t = TableAcceptModel({16: 8.61, 64: 9.75})
    assert t.tokens_per_request(0) == 1.0
    assert t.tokens_per_request(16) == pytest.approx(8.61)
    assert t.tokens_per_request(32) == pytest.approx((8.61 + 9.75) / 2)
    assert t.tokens_per_request(4) == pytest.approx(8.61)  # clamped below
    assert t.tokens_per_request(512) == pytest.approx(9.75)  # clamped above
    assert t.expected_tokens(4, (0, 16)) == pytest.approx([4.0, 4 * 8.61])
    with pytest.raises(ValueError):
        TableAcceptModel({0: 2.0})


def test_cost_model_pads_batch_sizes_and_takes_the_lower_median():
    c = CostModel([1, 8, 32], (0, 16), window=3, warmup=0, settle=1)
    c.seed(8, 16, 10.0)
    assert c.cost(5, 16) == 10.0  # runs in the bs-8 graph
    assert c.cost(9, 16) is None
    c.observe(8, 16, 14.0)  # settle 1: the first observation replaces the seed
    assert c.cost(8, 16) == pytest.approx(14.0)
    c.observe(8, 16, 10.0)  # an even count: the smaller middle value
    assert c.cost(8, 16) == pytest.approx(10.0)
    c.observe(8, 16, 50.0)
    assert c.cost(8, 16) == pytest.approx(14.0)
    c.observe(8, 16, 60.0)  # the window holds the last 3: 10, 50, 60
    assert c.cost(8, 16) == pytest.approx(50.0)
    c.observe(1, 0, 3.0)  # unseeded: the observation alone
    assert c.cost(1, 0) == 3.0
    with pytest.raises(ValueError):
        c.cost(33, 16)
    with pytest.raises(ValueError):
        c.seed(1, 7, 1.0)
    with pytest.raises(ValueError):
        CostModel([8], (0, 15), window=3, settle=4)


def test_cost_model_lends_observed_offsets_to_unobserved_buckets():
    """A calibration replays graphs alone; a round costs more (host work, eager glue). Unobserved keys take the
    mean offset of settled ones of the same kind (drafting or not), kept as running sums."""
    c = CostModel([1, 8], (0, 3, 15), window=3, warmup=0, settle=1)
    for bs in (1, 8):
        for b, ms in ((0, 0.2), (3, 0.5), (15, 0.6)):
            c.seed(bs, b, ms + bs * 0.01)
    c.observe(1, 15, 1.6)  # replaces the seed (0.61): offset +0.99
    assert c.cost(1, 15) == pytest.approx(1.6)
    assert c.cost(8, 3) == pytest.approx(0.58 + 0.99) and c.cost(1, 0) == pytest.approx(0.21)  # other kind: seed
    c.observe(1, 15, 2.6)  # lower median of (1.6, 2.6): no change
    c.observe(1, 15, 2.4)  # median 2.4: offset +1.79
    c.observe(8, 15, 0.68 + 0.5)  # offset +0.5
    assert c.cost(8, 3) == pytest.approx(0.58 + (1.79 + 0.5) / 2)
    c.observe(1, 0, 0.41)
    assert c.cost(8, 0) == pytest.approx(0.28 + 0.2)
    table = c.table()
    assert len(table) == 6 and table[(1, 15)] == pytest.approx(2.4)


def test_cost_model_skips_compiling_rounds_and_no_stray_round_decides_a_key():
    """A key's first round compiles its kernels (seconds): counted, not used. Until a key has ``settle`` used
    rounds its unobserved estimate counts as one more sample, and then the lower median of its window stands for
    it: neither a stall as its first used round nor a few slow rounds among typical ones move it."""
    c = CostModel([8], (0, 15), window=9)  # warmup 1, settle 3 by default
    c.seed(8, 15, 10.0)
    c.observe(8, 15, 900.0)  # JIT compile of the first round at this width
    assert c.cost(8, 15) == 10.0 and c.observations(8, 15) == 1
    c.observe(8, 15, 123.0)  # a stall as the first used round (session 24, c 1): the seed still stands
    assert c.cost(8, 15) == 10.0
    c.observe(8, 15, 12.0)  # seed, 123, 12: the median
    assert c.cost(8, 15) == pytest.approx(12.0)
    c.observe(8, 15, 12.2)  # settled: 123, 12, 12.2 without the seed
    assert c.cost(8, 15) == pytest.approx(12.2)
    for ms in (12.1, 14.0, 12.0, 13.5, 12.1, 12.0):  # two slow rounds (+15 %) among typical ones
        c.observe(8, 15, ms)
    assert c.cost(8, 15) == pytest.approx(12.1)
    for _ in range(5):  # a lasting change moves it once it holds most of the window
        c.observe(8, 15, 20.0)
    assert c.cost(8, 15) == pytest.approx(20.0)
    assert c.observations(8, 15) == 15 and c.observations(8, 0) == 0


def test_cost_model_settles_a_stale_key_afresh():
    """A key measured again after more than ``stale_after`` observations of others (an exploration, a batch size
    coming back) starts a fresh window with its former estimate as the stand-in: one new round can lower it (costs
    drift, and the choice's rivals are measured rarely), a slow one cannot raise it, and ``settle`` new rounds
    replace it."""
    c = CostModel([8], (0, 7, 15), window=5, warmup=0, stale_after=4)
    for _ in range(3):
        c.observe(8, 15, 10.0)
    for _ in range(5):  # the choice moves to 7: 15 goes stale
        c.observe(8, 7, 8.0)
    c.observe(8, 15, 9.0)  # lower median of (10, 9)
    assert c.cost(8, 15) == pytest.approx(9.0)
    for _ in range(5):
        c.observe(8, 7, 8.0)
    c.observe(8, 15, 30.0)  # still settling (no new restart): 9, 30 and the stand-in 10
    assert c.cost(8, 15) == pytest.approx(10.0)
    c.observe(8, 15, 11.0)  # settled on its fresh rounds alone: 9, 30, 11
    assert c.cost(8, 15) == pytest.approx(11.0)
    c.observe(8, 15, 12.0)  # 9, 30, 11, 12: the smaller middle value
    assert c.cost(8, 15) == pytest.approx(11.0)
    for _ in range(9):
        c.observe(8, 7, 8.0)
    c.observe(8, 15, 12.5)  # settled and stale: a fresh window, 11 the stand-in
    assert c.cost(8, 15) == pytest.approx(11.0)


def test_policy_explores_the_least_observed_near_bucket():
    """Every explore_every-th choice measures a bucket predicted within explore_within of the best, the least
    observed one first, so a wrong estimate next to the choice heals; buckets predicted far worse are left alone."""
    budgets = (0, 3, 15, 63)
    costs = CostModel([8], budgets, warmup=0)
    for b, ms in ((0, 5.0), (3, 5.5), (15, 7.0), (63, 40.0)):
        costs.seed(8, b, ms)
    table = TableAcceptModel({3: 2.5, 15: 3.5, 63: 4.0})  # rates: 0: 1600, 3: 3636, 15: 4000, 63: 800
    policy = WidthPolicy(budgets, costs, table, explore_every=4, explore_within=0.5, tie_every=0)
    picks = [policy.choose(8) for _ in range(12)]
    assert picks == [15, 15, 15, 3, 15, 15, 15, 3, 15, 15, 15, 3]  # 0 (1600 < 2000) and 63 never
    costs.observe(8, 3, 5.5)
    policy = WidthPolicy(budgets, costs, table, explore_every=4, explore_within=0.3, tie_every=0)  # 0 is near
    assert [policy.choose(8) for _ in range(4)][-1] == 0  # never observed beats 3's one observation
    with pytest.raises(ValueError):
        WidthPolicy(budgets, costs, table, explore_within=0.0)


def test_cost_model_says_when_a_key_was_last_used_and_its_cost_at_the_calibrated_gap():
    costs = CostModel([4, 8], (0, 31, 63), warmup=1)
    assert costs.last_seen(4, 63) == -1 and costs.at_calibrated_gap(4, 63, 31) is None  # no seeds
    for b, ms in ((0, 0.13), (31, 0.34), (63, 0.36)):
        costs.seed(4, b, ms)
    assert costs.at_calibrated_gap(4, 63, 31) == pytest.approx(0.36)  # 31 unobserved: its seed
    costs.observe(4, 31, 9.0)  # a warm-up round: counted, not used
    assert costs.last_seen(4, 31) == -1 and costs.observations(4, 31) == 1
    for _ in range(3):
        costs.observe(4, 31, 2.2)
    assert costs.last_seen(3, 31) == 4 and costs.last_seen(4, 63) == -1  # bs 3 pads to 4
    assert costs.at_calibrated_gap(4, 63, 31) == pytest.approx(2.22)  # 31's estimate + 0.02
    assert costs.at_calibrated_gap(4, 31, 63) == pytest.approx(2.22 - 0.02 + 0.0 + 0.02)  # never below ref: 63's
    assert costs.at_calibrated_gap(8, 63, 31) is None  # bs 8 has no seeds
    assert costs.key(3, 63) == (4, 63) and costs.key(5, 0) == (8, 0)


def test_exploration_re_measures_a_drafting_bucket_priced_out_by_a_stale_estimate():
    """``explore_stale``: a drafting bucket whose own estimate is too high to look near, but which would be near at
    its calibrated difference from the best, is explored, the one seen longest ago first; with the switch off (the
    rule before session 41) the exploration goes to the least observed near bucket and never reaches it."""
    budgets = (0, 15, 31, 63)
    table = TableAcceptModel({15: 3.3, 32: 3.55, 64: 3.73})

    def fresh(**kw):
        costs = CostModel([4], budgets, warmup=0, settle=1)
        for b, ms in ((0, 0.13), (15, 0.34), (31, 0.34), (63, 0.36)):
            costs.seed(4, b, ms)
        costs.observe(4, 63, 4.11)  # a slow stretch, long ago
        for _ in range(20):
            costs.observe(4, 15, 2.6)
            costs.observe(4, 31, 2.45)
        costs.observe(4, 0, 1.9)
        return WidthPolicy(budgets, costs, table, explore_every=4, tie_every=0, **kw), costs

    policy, costs = fresh()
    rates = policy.rates(4)  # 63: 3.73 / 4.11 = 0.91 of a token per ms, 0.63 of 31's 3.55 / 2.45
    assert max(rates, key=rates.get) == 31 and rates[63] < 0.8 * rates[31]
    assert [policy.choose(4) for _ in range(4)] == [31, 31, 31, 63]  # at 2.45 + 0.02 it would beat 31
    policy, costs = fresh(explore_stale=False)
    assert [policy.choose(4) for _ in range(8)] == [31, 31, 31, 15, 31, 31, 31, 15]
    # reached by hope alone, 63's stale estimate is dropped as it is explored: priced as never used (its seed plus
    # the offset the measured drafting buckets show: 0.36 + (2.6 + 2.45) / 2 - 0.34) until its round is read
    policy, costs = fresh()
    assert [policy.choose(4) for _ in range(4)] == [31, 31, 31, 63]
    assert costs.cost(4, 63) == pytest.approx(0.36 + 2.525 - 0.34) and costs.observations(4, 63) == 0
    costs.observe(4, 63, 2.5)  # used at once (no second warm-up); no drift lent to the others from 4.11 -> 2.5
    assert costs.cost(4, 63) == pytest.approx(2.5) and costs.cost(4, 31) == pytest.approx(2.45)
    assert policy.rates(4)[63] > policy.rates(4)[31]
    # then the order: the bucket seen longest ago first (15 before 31); 15 is near by its own estimate: kept
    assert _simulate(policy, costs, {15: 2.6, 31: 2.45, 63: 2.5}, 4, 8) == [63, 63, 63, 15, 63, 63, 63, 31]
    assert costs.cost(4, 15) == pytest.approx(2.6) and costs.observations(4, 15) == 21


def _tiny_bs4(seed, *, explore_stale, priced_63=4.11, true_63=2.48, rounds=400, skip=64):
    """Session 41's tiny pair at bs 4 (H100, head graphs): calibration put the drafting buckets within 0.02 ms on the
    GPU, a host-bound round costs ~2.4 ms whatever its width, and budget 63 had settled at ``priced_63`` ms (4.11 in
    a slow stretch). True costs as stated (63's ``true_63``), tokens per round as the engine's accept lengths
    suggest, skewed noise. Returns the share of rounds at 63 after the first ``skip`` and the committed tokens per
    true millisecond over the best fixed bucket's."""
    budgets = (0, 1, 3, 7, 15, 31, 63)
    seeds = {0: 0.13, 1: 0.34, 3: 0.34, 7: 0.34, 15: 0.34, 31: 0.34, 63: 0.36}
    true_ms = {0: 1.9, 1: 2.40, 3: 2.40, 7: 2.42, 15: 2.43, 31: 2.45, 63: true_63}
    table = TableAcceptModel({1: 1.7, 3: 2.3, 7: 2.9, 15: 3.3, 32: 3.55, 64: 3.73})
    rng = random.Random(seed)
    costs = CostModel([4], budgets)
    for b, ms in seeds.items():
        costs.seed(4, b, ms)
    _settle(costs, 4, 63, priced_63)
    for b in (0, 1, 3, 7, 15, 31):
        _settle(costs, 4, b, true_ms[b])
    policy = WidthPolicy(budgets, costs, table, explore_stale=explore_stale)
    picks, spent, tokens = [], 0.0, 0.0
    for _ in range(rounds):
        b = policy.choose(4)
        costs.observe(4, b, true_ms[b] * _skewed_noise(rng))
        picks.append(b)
        spent += true_ms[b]
        tokens += table.tokens_per_request(b)
    best = max(table.tokens_per_request(b) / true_ms[b] for b in budgets)
    return picks[skip:].count(63) / len(picks[skip:]), tokens / spent / best


def test_a_bucket_priced_in_a_slow_stretch_is_taken_back():
    """Session 41: with the stale exploration every one of 20 seeds is back at budget 63 for most rounds after the
    first 64 and keeps >= 99 % of its rate; without it no seed ever runs 63 again (~96 %, stuck at 31)."""
    on = [_tiny_bs4(seed, explore_stale=True) for seed in range(20)]
    off = [_tiny_bs4(seed, explore_stale=False) for seed in range(20)]
    assert min(share for share, _ in on) >= 0.8 and min(rate for _, rate in on) >= 0.99, on
    assert max(share for share, _ in off) == 0.0 and max(rate for _, rate in off) < 0.97, off


def test_a_bucket_dearer_than_its_calibration_is_hoped_for_rarely():
    """The other side: budget 63 truly costs 3.6 ms (a host cost the calibration's replays miss, 0.71x of 31's rate)
    and is priced so. Hope puts it near at every exploration turn; measured and found dear, it is hoped for again only
    ``FORGET_AFTER`` explorations later, so over 2000 rounds it takes <= 1 % of them and the policy keeps >= 99.4 % of
    the best bucket's rate (99.6 % without the rule; 98.9 % when every such turn dropped its estimate)."""
    on = [_tiny_bs4(seed, explore_stale=True, priced_63=3.6, true_63=3.6, rounds=2000, skip=0) for seed in range(20)]
    assert max(share for share, _ in on) <= 0.01 and min(rate for _, rate in on) >= 0.994, on


def _costs(batch_sizes, budgets, *, step_ms=5.0, per_token_ms=0.004, fixed_ms=1.5):
    """A round costs a weight-bound step up to ~128 tokens, then grows with the tokens (Qwen3-8B-like)."""
    c = CostModel(batch_sizes, budgets)
    for bs in batch_sizes:
        for b in budgets:
            tokens = bs * (b + 1)
            c.seed(bs, b, step_ms + max(0, tokens - 128) * per_token_ms + (fixed_ms if b else 0.0))
    return c


def test_policy_shrinks_the_tree_with_load_and_stops_drafting_when_it_does_not_pay():
    budgets = bucket_budgets(63)
    batch_sizes = [1, 2, 4, 8, 16, 32, 64]
    table = TableAcceptModel({16: 8.61, 32: 9.27, 64: 9.75})
    policy = WidthPolicy(budgets, _costs(batch_sizes, budgets), table)
    picks = [policy.choose(bs) for bs in batch_sizes]
    assert picks[0] == 63 and picks == sorted(picks, reverse=True), picks
    for bs, b in zip(batch_sizes, picks):  # never predicted worse than not drafting
        rates = policy.rates(bs)
        assert rates[b] >= rates[0]
    weak = WidthPolicy(budgets, _costs(batch_sizes, budgets, per_token_ms=0.05),
                       TableAcceptModel({2: 1.05, 64: 1.1}), probe_every=3)
    assert [weak.choose(64) for _ in range(5)] == [0, 0, 0, 1, 0]  # probed back out of width 0
    assert len(policy.describe([1, 64])) == 2 and "budget 63" in policy.describe([1])[0]


def test_the_probe_drafts_at_the_drafting_bucket_predicted_best():
    """A host-bound engine (the tiny pair at bs 1, session 39: every drafting bucket ~2.4 ms, width 0 ~1.58 ms):
    a forecast of few drafts makes width 0 the best, and the probe out of it drafts at the best drafting bucket
    (here 63: the same cost as budget 1 for more tokens), not at the smallest one."""
    budgets = bucket_budgets(63)
    costs = CostModel([1], budgets)
    for b in budgets:
        costs.seed(1, b, 1.58 if b == 0 else 2.4)
    low = DraftForecast(1, [0.0, 0.1, 0.15, 0.2, 0.25, 0.28, 0.3])  # expected drafts per bucket, one request
    policy = WidthPolicy(budgets, costs, ScoreAcceptModel(budgets), probe_every=2)
    rates = policy.rates(1, low)
    assert max(rates, key=rates.get) == 0 and max((b for b in budgets if b), key=rates.get) == 63
    assert [policy.choose(1, low) for _ in range(6)] == [0, 0, 63, 0, 0, 63]
    # where a drafting bucket's cost grows with its width (a GPU-bound round), the best drafting bucket is small
    steep = CostModel([1], budgets)
    for b in budgets:
        steep.seed(1, b, 0.5 if b == 0 else 1.0 + 0.05 * b)
    probe = WidthPolicy(budgets, steep, ScoreAcceptModel(budgets), probe_every=1)
    assert [probe.choose(1, low) for _ in range(2)] == [0, 1]


def test_score_model_corrects_overconfident_scores():
    budgets = (0, 4, 16)
    costs = CostModel([4], budgets)
    for b, ms in ((0, 5.0), (4, 7.0), (16, 9.0)):
        costs.seed(4, b, ms)
    acc = ScoreAcceptModel(budgets, smoothing=0.5)
    policy = WidthPolicy(budgets, costs, acc)
    drafts = DraftForecast(4, [0.0, 12.0, 24.0])  # 4 requests; the drafter claims 6 accepted drafts each at 16
    assert policy.choose(4) == 4  # no scores yet: the smallest positive bucket
    assert policy.choose(4, drafts) == 16
    for _ in range(20):  # it accepts a tenth of that
        acc.observe(16, predicted=24.0, observed=2.4)
    assert acc.ratio_for(16) == pytest.approx(0.1, rel=1e-3)
    assert acc.ratio_for(4) == pytest.approx(0.1, rel=1e-3)  # unobserved buckets borrow the mean ratio
    assert policy.choose(4, drafts) == 0  # 1.6 tokens in 9 ms and 1.3 in 7 lose to 1 in 5
    tokens = acc.expected_tokens(8, budgets, drafts)  # scaled from the 4 rows seen to the batch of 8
    assert tokens[0] == pytest.approx(8.0) and tokens[2] == pytest.approx(8 * (1 + 0.1 * 6.0))


def test_policy_arguments():
    with pytest.raises(ValueError):
        WidthPolicy((2, 4), CostModel([1], (2, 4)), TableAcceptModel({2: 2.0}))
    with pytest.raises(ValueError):
        WidthPolicy((0, 2), CostModel([1], (0, 2)), TableAcceptModel({2: 2.0}), probe_every=0)


def _simulate(policy, costs, true_ms, bs, rounds):
    """Each round: the policy picks, the round costs its true milliseconds, the cost model observes them."""
    picks = []
    for _ in range(rounds):
        b = policy.choose(bs)
        costs.observe(bs, b, true_ms[b])
        picks.append(b)
    return picks


def test_a_near_tie_is_settled_by_measuring_the_runner_up():
    """The Qwen3-8B shape at batch 8 (session 10): calibration priced 15 and 31 within 1 % under the paper's table
    (7.59 and ~9 ms), the rounds at 31 cost 9.84 ms while 15 cost what it was priced at. The runner-up of a near tie
    is measured (every tie_every-th round, until four rounds count), so the policy moves to 15 within 16 rounds and
    stays there (but for its rare explorations). Without the tie rule a runner-up that calibration priced too high
    (here 15 at 8.1 ms for 7.62, 2.5 % behind 31 where it is 3.7 % ahead) waits for the explorations, whose first
    round at a new width compiles and does not count: 60 of 62 rounds stay at 31."""
    budgets = (0, 7, 15, 31, 63)
    seeds = {0: 5.3, 7: 6.9, 15: 7.59, 31: 8.98, 63: 13.2}
    true_ms = {0: 5.3, 7: 6.95, 15: 7.62, 31: 9.84, 63: 14.9}
    table = TableAcceptModel({1: 1.8924, 3: 3.3995, 7: 5.5554, 15: 7.79, 16: 8.61, 32: 9.27, 64: 9.75})

    def fresh(seeds, **kw):
        costs = CostModel([8], budgets)  # warm-up 1: a key's first round is not used
        for b, ms in seeds.items():
            costs.seed(8, b, ms)
        return WidthPolicy(budgets, costs, table, **kw), costs

    policy, costs = fresh(seeds)
    rates = policy.rates(8)  # 8 x 9.24 / 8.98 = 8.23k against 8 x 7.79 / 7.59 = 8.21k: 31 by 0.3 %
    assert max(rates, key=rates.get) == 31 and rates[15] > 0.99 * rates[31]
    picks = _simulate(policy, costs, true_ms, 8, 62)
    assert picks[16:].count(15) >= len(picks[16:]) - 2, picks  # two explorations at most in 46 rounds
    assert costs.cost(8, 15) == pytest.approx(7.62) and costs.cost(8, 31) == pytest.approx(9.84)
    overpriced = {**seeds, 15: 8.1, 31: 9.4}
    true_ms = {**true_ms, 31: 9.4}
    policy, costs = fresh(overpriced)
    assert _simulate(policy, costs, true_ms, 8, 62)[16:].count(15) >= 44
    policy, costs = fresh(overpriced, tie_every=0)
    assert _simulate(policy, costs, true_ms, 8, 62).count(31) >= 60
    with pytest.raises(ValueError):
        WidthPolicy(budgets, costs, table, tie_within=1.0)


def _noisy_batch32(seed, rounds=300, cost_kw=None, **kw):
    """The Qwen3-8B shape at batch 32 (session 23's start-up calibration as seeds; true costs as its measured rounds
    suggest: 7 ~12 ms, 15 ~17.5 ms, so 7 beats 15 by ~4 % under the paper's table). Assumed noise: each round's cost
    is the true one x a slow +-5 % drift x a log-normal factor of sigma 0.06. Returns the picks and the committed
    tokens per true millisecond."""
    budgets = (0, 1, 3, 7, 15, 31, 63)
    seeds = {0: 5.58, 1: 8.41, 3: 8.85, 7: 10.10, 15: 14.42, 31: 25.23, 63: 47.18}
    true_ms = {0: 5.6, 1: 8.6, 3: 9.2, 7: 12.0, 15: 17.5, 31: 28.0, 63: 52.0}
    table = TableAcceptModel({1: 1.8924, 3: 3.3995, 7: 5.5554, 15: 7.79, 16: 8.61, 32: 9.27, 64: 9.75})
    rng = random.Random(seed)
    costs = CostModel([32], budgets, **(cost_kw or {}))
    for b, ms in seeds.items():
        costs.seed(32, b, ms)
    policy = WidthPolicy(budgets, costs, table, **kw)
    picks, spent, tokens = [], 0.0, 0.0
    for i in range(rounds):
        b = policy.choose(32)
        costs.observe(32, b, true_ms[b] * (1.0 + 0.05 * math.sin(i / 15.0)) * math.exp(rng.gauss(0.0, 0.06)))
        picks.append(b)
        spent += true_ms[b]
        tokens += table.tokens_per_request(b)
    return picks, tokens / spent, table.tokens_per_request(7) / true_ms[7]


def test_a_noisy_near_tie_does_not_strand_the_policy_on_the_runner_up():
    """Session 23's batch-32 case under stated noise, 40 seeds: with the defaults no seed spends fewer than half of
    its rounds (after the first 16) at the better bucket 7 and none loses more than 3 % of budget 7's rate; with the
    old settings (one noisy round standing for a key, ties measured twice within 5 %, exploration within 50 %) a
    seed is stranded at 15 and loses ~4.5 %."""
    def worst(**kw):
        share, rate = 1.0, 1.0
        for seed in range(40):
            picks, got, best = _noisy_batch32(seed, **kw)
            share = min(share, picks[16:].count(7) / len(picks[16:]))
            rate = min(rate, got / best)
        return share, rate

    share, rate = worst()
    assert share >= 0.5 and rate >= 0.97, (share, rate)
    old = dict(explore_within=0.5, tie_within=0.05, tie_observations=3, explore_stale=False)
    share_old, _ = worst(**old)
    assert share_old < 0.1  # the estimator alone does not rescue it: the exploration window matters too


_PAPER_TABLE = {1: 1.8924, 3: 3.3995, 7: 5.5554, 15: 7.79, 16: 8.61, 32: 9.27, 64: 9.75}


def _skewed_noise(rng):
    """Round periods as session 24's auto engine logged them at c 1-8 on the Qwen3-8B shape (`session24/shape_c1_8`,
    the 5th engine's log): ~87 % within 0.5 % of the typical round, ~8 % slow by 7-20 %, ~5 % fast by 7-20 %."""
    u, core = rng.random(), math.exp(rng.gauss(0.0, 0.003))
    if u < 0.08:
        return core * rng.uniform(1.07, 1.2)
    if u < 0.13:
        return core * rng.uniform(0.8, 0.93)
    return core


def _session24(bs, seed, *, stall_at=None, rounds=160):
    """Session 24's start-up calibration at bs 1 / 2 (the seeds) and its logged medians (true costs of 15, 31 and
    63; the other buckets, never chosen there, at their seed plus the offset the chosen ones showed), the paper's
    table, skewed noise, and at ``stall_at`` a 116 ms stall. Returns the committed tokens per true millisecond
    over the best fixed bucket's."""
    budgets = (0, 1, 3, 7, 15, 31, 63)
    if bs == 1:
        seeds = {0: 5.20, 1: 6.68, 3: 6.65, 7: 6.87, 15: 6.73, 31: 6.89, 63: 7.05}
        true_ms = {**{b: ms + 0.1 for b, ms in seeds.items()}, 31: 6.98, 63: 6.83}
    else:
        seeds = {0: 5.31, 1: 6.69, 3: 6.87, 7: 6.73, 15: 6.86, 31: 7.06, 63: 7.53}
        true_ms = {**{b: ms + 0.3 for b, ms in seeds.items()}, 15: 7.17, 31: 7.19, 63: 7.70}
    rng = random.Random(seed)
    costs = CostModel([bs], budgets)
    for b, ms in seeds.items():
        costs.seed(bs, b, ms)
    table = TableAcceptModel(_PAPER_TABLE)
    policy = WidthPolicy(budgets, costs, table)
    spent = tokens = 0.0
    for i in range(rounds):
        b = policy.choose(bs)
        costs.observe(bs, b, true_ms[b] * _skewed_noise(rng) + (116.0 if i == stall_at else 0.0))
        spent += true_ms[b]
        tokens += table.tokens_per_request(b)
    return tokens / spent / max(table.tokens_per_request(b) / true_ms[b] for b in budgets)


def test_a_stall_as_a_keys_first_used_round_does_not_price_it_out():
    """Session 24 at c 1: a 123 ms round (a stall, 16x the typical 7 ms) among budget 63's first rounds, then 150
    rounds at 31 although the log puts 63 at 6.83 ms against 31's 6.98. Here the stall is 63's first used round: a
    moving average that starts from it prices every drafting bucket out (it lends the +116 ms offset to those not
    yet observed; 0.20x of the best fixed bucket in this simulation); the stand-in keeps the key at its calibrated
    estimate."""
    assert min(_session24(1, seed, stall_at=1) for seed in range(20)) >= 0.98


def test_slow_rounds_do_not_flip_a_near_tie():
    """Session 24 at c 2: 31 beats 63 by 1.8 % (7.19 ms for 9.27 tokens against 7.70 for 9.75), and single slow
    rounds at 31 sent the policy to 63 for stretches of up to 45 rounds. Under the logged noise, 40 seeds: no seed
    loses more than 1 % of budget 31's rate (a moving average clipped at 2x per round: 1.6 %)."""
    assert min(_session24(2, seed) for seed in range(40)) >= 0.99


def _settle(costs, bs, budget, ms, rounds=3):
    for _ in range(costs.warmup + rounds):
        costs.observe(bs, budget, ms)


def test_follow_drift_moves_a_stale_bucket_with_the_measured_ones():
    """Session 38 (tiny pair, H200, continuous load): budget 63 was priced 4.84 ms at bs 16 after a slow stretch
    while budget 15, measured every round, came down to ~3.2; calibration put their GPU difference at 0.04 ms. With
    ``follow_drift`` a settled bucket moves by the median change of the buckets measured after it."""
    budgets = (0, 15, 63)
    for follow in (False, True):
        costs = CostModel([16], budgets, follow_drift=follow)
        _settle(costs, 16, 15, 3.8)
        _settle(costs, 16, 0, 2.2)
        _settle(costs, 16, 63, 4.8)  # measured last, in the slow stretch
        for _ in range(costs.window):  # then 15 and width 0 alone, 1.5 and 0.9 ms faster
            costs.observe(16, 15, 2.3)
            costs.observe(16, 0, 1.3)
        assert costs.cost(16, 15) == 2.3 and costs.cost(16, 0) == 1.3  # the measured buckets: their own estimates
        # 63: unchanged without it; with it, moved by the median change of 15 and 0 (-1.5, -0.9: -1.2)
        assert costs.cost(16, 63) == pytest.approx(4.8 - (1.2 if follow else 0.0))


def test_follow_drift_keeps_a_buckets_own_difference():
    """Changes are compared, not levels: a bucket dearer than the others by itself (session 24: the 8B shape's
    budget 31 ran 0.8 ms above its calibration) stays that much dearer, and a bucket measured most recently, or whose
    neighbours were not measured since, is not moved."""
    budgets = (0, 15, 31)
    costs = CostModel([8, 16], budgets, follow_drift=True)
    _settle(costs, 8, 15, 7.6)
    _settle(costs, 8, 31, 9.8)
    assert costs.cost(8, 31) == 9.8 and costs.cost(8, 15) == 7.6  # nothing measured since either's latest
    for _ in range(costs.window):  # 15 alone, steady
        costs.observe(8, 15, 7.6)
    assert costs.cost(8, 31) == pytest.approx(9.8)
    for _ in range(costs.window):  # 15 moves 0.5 ms: under drift_min (15 %) of 31's 9.8, not followed
        costs.observe(8, 15, 8.1)
    assert costs.cost(8, 31) == pytest.approx(9.8) and costs.cost(8, 15) == pytest.approx(8.1)
    for _ in range(costs.window):  # the host slows by 2.0 ms: followed, 31 stays 2.2 ms above 15
        costs.observe(8, 15, 9.6)
    assert costs.cost(8, 31) == pytest.approx(11.8) and costs.cost(8, 15) == pytest.approx(9.6)
    # other batch sizes do not move it
    for _ in range(costs.window):
        costs.observe(16, 15, 5.0 + _)
    assert costs.cost(8, 31) == pytest.approx(11.8)


def test_follow_drift_re_measures_from_the_moved_estimate():
    """A stale bucket measured again settles afresh from its moved estimate (its stand-in), not its old one."""
    budgets = (0, 15, 63)
    costs = CostModel([16], budgets, follow_drift=True, stale_after=4)
    _settle(costs, 16, 63, 4.8)
    _settle(costs, 16, 15, 3.8)
    for _ in range(costs.window):
        costs.observe(16, 15, 2.8)
    assert costs.cost(16, 63) == pytest.approx(3.8)
    costs.observe(16, 63, 3.9)  # one exploration: the window restarts, the moved estimate standing in
    assert costs.cost(16, 63) == pytest.approx(3.8)  # lower median of [3.9, 3.8]
    with pytest.raises(ValueError, match="drift_min >= 0"):
        CostModel([16], budgets, follow_drift=True, drift_min=-0.1)


def test_follow_drift_lets_the_policy_take_a_stale_bucket_back():
    budgets = (0, 15, 63)
    tokens = {0: 1.0, 15: 2.76, 63: 3.07}  # per request at bs 16 (session 36's tiny pair)
    picks = {}
    for follow in (False, True):
        costs = CostModel([16], budgets, follow_drift=follow)
        _settle(costs, 16, 0, 2.9)  # a slow stretch
        _settle(costs, 16, 15, 4.5)
        _settle(costs, 16, 63, 4.8)
        for _ in range(costs.window):  # then 1.3 ms faster: 63 is worth 3.07 / 2.76 of 15's 3.2 ms, ~3.56
            costs.observe(16, 15, 3.2)
            costs.observe(16, 0, 1.6)
        policy = WidthPolicy(budgets, costs, TableAcceptModel({15: tokens[15], 63: tokens[63]}),
                             explore_every=0, tie_every=0)
        picks[follow] = policy.choose(16)
    assert picks == {False: 15, True: 63}


def test_following_the_drift_keeps_the_noisy_near_tie():
    """``follow_drift`` on session 23's noisy batch-32 tie (``_noisy_batch32``, 40 seeds): with ``drift_min`` 15 %
    the defaults' bounds hold (no seed under half its rounds at 7, none losing 3 %); following every move does
    not (the measured bucket's estimation noise handed to its rivals: worst share ~0.3)."""
    def worst(**cost_kw):
        share, rate = 1.0, 1.0
        for seed in range(40):
            picks, got, best = _noisy_batch32(seed, cost_kw=dict(follow_drift=True, **cost_kw))
            share = min(share, picks[16:].count(7) / len(picks[16:]))
            rate = min(rate, got / best)
        return share, rate

    share, rate = worst()
    assert share >= 0.5 and rate >= 0.97, (share, rate)
    share_all, _ = worst(drift_min=0.0)
    assert share_all < 0.5

