"""``widths.AutoWidth``'s bookkeeping on the CPU, with a fake CUDA clock: a round's cost is its period from its
start event to the next decode round's (host time between rounds included), nothing is read before its events
completed, a round followed by another forward teaches no cost, and a key's first (compiling) round is not a
measurement."""

import pytest
import torch

from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker import metrics, widths


class _Clock:
    now = 0.0  # ms on the fake GPU timeline
    done_until = -1.0  # events recorded at or before this time have completed


class _FakeEvent:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = _Clock.now

    def query(self):
        return self.t is not None and self.t <= _Clock.done_until

    def elapsed_time(self, other):
        assert self.query() and other.query(), "read before completion"
        return other.t - self.t


@pytest.fixture
def auto(monkeypatch):
    monkeypatch.setattr(widths.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(widths, "_pinned", lambda n: torch.zeros(n, dtype=torch.float32))
    monkeypatch.delenv(widths.ACCEPT_TABLE_ENV, raising=False)
    _Clock.now, _Clock.done_until = 0.0, -1.0
    metrics.AUTO_STATS.reset()
    return widths.AutoWidth(DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), [1, 8],
                            max_batch_size=8, device="cpu")


def _round(auto, bs, budget, *, span_ms, gap_ms, accepted=2, scores=None):
    """One decode round at a fixed budget: begin, the device works span_ms, finish, the host works gap_ms."""
    slot = auto.begin(bs, budget)
    _Clock.now += span_ms
    auto.finish(slot, scores, torch.full((bs,), 1 + accepted, dtype=torch.int32))
    _Clock.now += gap_ms
    return slot


def test_cost_is_the_period_between_round_starts(auto):
    _round(auto, 1, 15, span_ms=1000.0, gap_ms=0.0)  # the first round at (1, 15) compiles: not a measurement
    for _ in range(3):
        _round(auto, 1, 15, span_ms=1.0, gap_ms=2.0)  # 1 ms on the device, 2 ms of host work between rounds
    assert auto.costs.cost(1, 15) is None  # nothing completed yet: nothing read
    _Clock.done_until = _Clock.now
    auto.choose(1)
    # rounds 2 and 3 have periods (round 4 has no successor yet); round 1's 1000 ms was the warm-up
    assert auto.costs.observations(1, 15) == 3
    assert auto.costs.cost(1, 15) == pytest.approx(3.0)
    assert metrics.AUTO_STATS.rounds_by_budget[15] == 3


def test_a_round_followed_by_another_forward_teaches_no_cost(auto):
    for _ in range(2):
        _round(auto, 8, 7, span_ms=2.0, gap_ms=1.0)
    auto.interrupt()  # a prefill runs now
    _Clock.now += 50.0
    _round(auto, 8, 7, span_ms=2.0, gap_ms=1.0)
    _Clock.done_until = _Clock.now
    auto.choose(8)
    # round 1: warm-up; round 2 was followed by the prefill: no period; round 3: its successor has not begun
    assert auto.costs.observations(8, 7) == 1 and auto.costs.cost(8, 7) is None
    _round(auto, 8, 7, span_ms=2.0, gap_ms=1.0)
    _Clock.done_until = _Clock.now
    auto.choose(8)
    assert auto.costs.cost(8, 7) == pytest.approx(3.0)  # round 3's period, not 53 ms


def test_forecast_rounds_stage_expected_drafts_per_bucket(auto):
    n = 64
    scores = torch.full((8, n), float("-inf"))
    scores[:, 0] = 0.0
    scores[:, 1:4] = torch.log(torch.tensor([0.9, 0.5, 0.25]))  # 3 real nodes per request
    _round(auto, 8, 3, span_ms=1.0, gap_ms=1.0, accepted=1, scores=scores)
    _round(auto, 8, 3, span_ms=1.0, gap_ms=1.0)
    _Clock.done_until = _Clock.now
    auto.choose(8)
    sums = dict(zip(auto.budgets, auto.forecast.sums))
    assert auto.forecast.rows == 8 and sums[0] == 0.0
    assert sums[1] == pytest.approx(8 * 0.9) and sums[3] == pytest.approx(8 * 1.65) and sums[63] == pytest.approx(sums[3])
    stats = metrics.AUTO_STATS
    assert stats.predicted == pytest.approx(8 * 1.65) and stats.observed == pytest.approx(8.0)
    acc = auto.accept  # one round's sums (8 observed, 8 x 1.65 predicted) on top of the decayed prior
    keep, prior = 1.0 - acc.smoothing, acc.prior_drafts
    assert acc.ratio_for(3) == pytest.approx((keep * prior * acc.prior_ratio + 8.0) / (keep * prior + 8 * 1.65))


def test_only_forecast_rounds_stage_numbers(auto):
    """A drafting round without a forecast stages nothing (its accepted drafts would be read by nobody: the accept
    model and the metrics pair them with a prediction); its period is still measured and the round counted."""
    scores = torch.zeros((8, 64))
    plain = [_round(auto, 8, 15, span_ms=1.0, gap_ms=1.0) for _ in range(3)]
    forecast = _round(auto, 8, 15, span_ms=1.0, gap_ms=1.0, scores=scores)
    assert [s.staged for s in plain] == [False] * 3 and forecast.staged
    assert not any(bool(s.host.any()) for s in plain)  # nothing was copied back
    _round(auto, 8, 15, span_ms=1.0, gap_ms=1.0)  # the forecast round's period ends where this one begins
    _Clock.done_until = _Clock.now
    auto.choose(8)
    # four rounds read (the fifth's period has not ended), one of them with a prediction
    assert metrics.AUTO_STATS.rounds_by_budget[15] == 4 and metrics.AUTO_STATS.drafted_request_rounds == 8
    assert auto.costs.observations(8, 15) == 4


def test_forecasts_every_fourth_drafting_round_and_never_with_a_stated_table(auto, monkeypatch):
    """With the drafter's scores: every drafting round until a forecast is stored, then every FORECAST_EVERY-th
    (width 0 rounds do not count). With a stated accept table (benchmarks) no round forecasts: the table reads no
    scores, and before this rule every one of its rounds built the largest bucket's tree for a forecast that was
    never stored (so the forecast stayed None)."""
    assert [auto.wants_forecast(b) for b in (15, 0, 31)] == [True, False, True]
    auto.forecast = widths.DraftForecast(1, [0.0] * len(auto.budgets))
    wants = [auto.wants_forecast(b) for b in (15, 15, 0, 15, 15, 15, 31)]
    assert wants == [False, False, False, True, False, False, False]  # drafting rounds 3, 4, 5 (= 1 mod 4), 6, 7, 8
    monkeypatch.setenv(widths.ACCEPT_TABLE_ENV, '{"16": 8.61, "64": 9.75}')
    table = widths.AutoWidth(DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), [1, 8],
                             max_batch_size=8, device="cpu")
    assert isinstance(table.accept, widths.TableAcceptModel)
    assert not any(table.wants_forecast(b) for b in (15, 31, 63, 7, 15))


def test_the_first_drafting_round_after_width_0_forecasts(auto):
    """The forecast that chose width 0 is all a width-0 stretch has; the policy's probe drafts to replace it, so that
    round forecasts whatever the count says (session 39, tiny pair at bs 1: stretches of 27-37 rounds at width 0,
    twice the probe interval, where the probe's round had not forecast), and only that round."""
    auto.forecast = widths.DraftForecast(1, [0.0] * len(auto.budgets))
    assert [auto.wants_forecast(b) for b in (15, 15)] == [True, False]  # the count: drafting rounds 1 and 2
    for _ in range(3):
        auto.finish(auto.begin(1, 0), None, None)
    # drafting rounds 3 (the probe, after width 0) and 4; round 5 is the count's (5 = 1 mod 4)
    assert [auto.wants_forecast(b) for b in (1, 15, 15)] == [True, False, True]
    auto.finish(auto.begin(1, 0), None, None)
    auto.begin(1, 63)
    assert auto.wants_forecast(63) and not auto.wants_forecast(63)


def test_nothing_is_read_before_its_events_complete(auto):
    _round(auto, 1, 15, span_ms=1.0, gap_ms=1.0)
    _round(auto, 1, 15, span_ms=1.0, gap_ms=1.0)
    _Clock.done_until = 0.5  # the device is still inside the first round
    auto.choose(1)
    assert auto.costs.observations(1, 15) == 0 and metrics.AUTO_STATS.request_rounds == 0


# ---- tensor parallelism: every rank must choose the same width every round ------------------------------------
def _tp_run(monkeypatch, agree: bool, rounds: int = 240):
    """Two ranks in two threads, each with its own fake device clock and its own noise on the same true costs
    (a near tie between budgets 7 and 15 at bs 8), the same schedule (batch sizes, an interrupting prefill every
    37 rounds); ``agree``: their AutoWidths agree through an in-process mean (a barrier stands for the collective).
    Returns each rank's choices and final cost table."""
    import random
    import threading

    local = threading.local()

    class Clock:
        def __init__(self):
            self.now = 0.0

    class Event:
        def __init__(self, enable_timing=False):
            self.clock, self.t = local.clock, None

        def record(self, stream=None):
            self.t = self.clock.now

        def query(self):  # the device of each rank runs 0-2 rounds behind its host, by its own noise
            return self.t is not None and self.t <= self.clock.now - local.lag

        def synchronize(self):
            assert self.t is not None, "waited on an event never recorded"

        def elapsed_time(self, other):
            return other.t - self.t

    monkeypatch.setattr(widths.torch.cuda, "Event", Event)
    monkeypatch.setattr(widths, "_pinned", lambda n: torch.zeros(n, dtype=torch.float32))
    monkeypatch.setattr(widths, "replay_ms", lambda graph: graph())
    monkeypatch.setenv(widths.ACCEPT_TABLE_ENV, '{"16": 8.61, "32": 9.2, "64": 9.75}')
    true_ms = {0: 5.0, 1: 6.0, 3: 6.5, 7: 7.4, 15: 10.5, 31: 16.0, 63: 30.0, 64: 31.0}
    barrier, box = threading.Barrier(2), {}

    def mean(rank, values):
        box[rank] = list(values)
        barrier.wait()
        out = [(a + b) / 2 for a, b in zip(box[0], box[1])]
        assert len(box[0]) == len(box[1]), "the ranks disagree on what to share"
        barrier.wait()
        return out

    results = [None, None]

    def rank(r):
        local.clock, local.lag = Clock(), 0.0
        rng = random.Random(100 + r)
        auto = widths.AutoWidth(DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), [1, 8, 16],
                                max_batch_size=16, device="cpu",
                                agree=(lambda v: mean(r, v)) if agree else None)
        # start-up calibration: each rank's replays see its own noise (graphs stood in by callables)
        graphs = {b: {n: (lambda b=b, n=n: true_ms[b] * (n / 8) ** 0.5 * rng.lognormvariate(0.0, 0.08))
                      for n in (1, 8, 16)} for b in auto.budgets}
        auto.calibrate(graphs, {}, {})
        choices = []
        for i in range(rounds):
            bs = 8 if i % 50 < 40 else 16
            if i % 37 == 36:
                auto.interrupt()
                local.clock.now += 20.0
            local.lag = rng.choice([0.0, 5.0, 40.0])
            b = auto.choose(bs)
            choices.append(b)
            slot = auto.begin(bs, b)
            local.clock.now += true_ms[b] * (bs / 8) ** 0.5 * rng.lognormvariate(0.0, 0.08)
            auto.finish(slot, None, torch.full((bs,), 2, dtype=torch.int32))
            local.clock.now += 0.5
        results[r] = (choices, auto.costs.table())

    metrics.AUTO_STATS.reset()
    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(res is not None for res in results), "a rank did not finish"
    return results


def test_ranks_that_agree_choose_the_same_width_every_round(monkeypatch):
    """Tensor parallelism: with ``agree`` the two ranks, timing their own noisy rounds, choose the same width in
    every one of 240 rounds and end with the same cost table; without it (each rank on its own timings and its
    own device lag, as before) they part ways, which under TP would pair different graphs' collectives."""
    (a, table_a), (b, table_b) = _tp_run(monkeypatch, agree=True)
    assert a == b and table_a == table_b
    assert len(set(a)) >= 2  # the policy did move between widths
    (c, _), (d, _) = _tp_run(monkeypatch, agree=False)
    assert c != d


def test_agree_needs_a_positive_share_interval():
    with pytest.raises(ValueError, match="share_every must be >= 1"):
        widths.AutoWidth(DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), [1], max_batch_size=1,
                         device="cpu", agree=lambda v: v, share_every=0)


def test_a_width_0_round_stages_nothing_and_counts_no_drafts(auto):
    """The worker finishes a width-0 round without accept lengths (it accepts no drafts by construction): no device
    sum or copy, its period still measured, the interval statistics count its rounds with no drafts."""
    for _ in range(4):
        slot = auto.begin(8, 0)
        _Clock.now += 1.0
        auto.finish(slot, None, None)
        assert not slot.staged
        _Clock.now += 1.0
    _Clock.done_until = _Clock.now
    auto.choose(8)
    assert auto.costs.cost(8, 0) == pytest.approx(2.0)
    assert metrics.AUTO_STATS.rounds_by_budget[0] == 3 and metrics.AUTO_STATS.budget_request_rounds == 0
    with pytest.raises(ValueError, match="only a width-0 round"):
        auto.finish(auto.begin(8, 15), None, None)


def test_calibration_adds_the_tree_build_to_tree_buckets_only(monkeypatch):
    """Start-up seeds: verify replay, plus the draft replay for every drafting bucket, plus the tree builds for a
    tree bucket; the chain's round builds no tree (``chain_inputs``)."""
    from sglang_ddtree.config import ChainBucket

    monkeypatch.setattr(widths.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(widths, "_pinned", lambda n: torch.zeros(n, dtype=torch.float32))
    monkeypatch.setattr(widths, "replay_ms", lambda graph: graph)  # a graph stands in as its milliseconds
    monkeypatch.delenv(widths.ACCEPT_TABLE_ENV, raising=False)
    config = DDTreeConfig(budget=15, topk=8, block_size=16, adaptive=True, chain=True)
    auto = widths.AutoWidth(config, [8], max_batch_size=8, device="cpu")
    c15 = ChainBucket(15)
    auto.calibrate({0: {8: 1.0}, c15: {8: 2.0}, 15: {8: 2.0}}, {8: 0.5}, {8: 0.25})
    assert auto.costs.cost(8, 0) == pytest.approx(1.0)
    assert auto.costs.cost(8, c15) == pytest.approx(2.5)
    assert auto.costs.cost(8, 15) == pytest.approx(2.75)


@pytest.mark.parametrize("env,reads", [
    (widths.COST_DRIFT_ENV, lambda auto: auto.costs.follow_drift),  # session 40
    (widths.EXPLORE_STALE_ENV, lambda auto: auto.policy.explore_stale),  # session 41
])
def test_the_cost_model_and_policy_switches(monkeypatch, env, reads):
    monkeypatch.setattr(widths.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(widths, "_pinned", lambda n: torch.zeros(n, dtype=torch.float32))
    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
    for value, want in (("", True), ("0", False), ("1", True)):  # on unless 0
        monkeypatch.setenv(env, value)
        auto = widths.AutoWidth(config, [1, 8], max_batch_size=8, device="cpu")
        assert reads(auto) is want
        # the start-up log says when it is off
        assert any(f"{env}=0" in line for line in auto.describe()) is not want
    monkeypatch.setenv(env, "yes")
    with pytest.raises(ValueError, match=f"{env}='yes': use 1"):
        widths.AutoWidth(config, [1, 8], max_batch_size=8, device="cpu")
