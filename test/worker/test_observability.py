"""DDTREE observability on CPU: the accept-length histogram, upstream's own decode-log line (run for
real against a fake scheduler) with the depth accept rate, the /metrics export, the per-request meta
info; and that every hook leaves non-DDTREE algorithms exactly as upstream has them."""

import contextlib
import logging
import types

import pytest

from sglang_ddtree.worker import hooks, metrics
from sglang_ddtree.worker.metrics import AcceptHistogram

REPORTER_LOGGER = metrics.REPORTER_MODULE


def _server_args(algo="DDTREE", **kw):
    base = dict(speculative_algorithm=algo, speculative_ddtree_budget=64, speculative_ddtree_topk=8,
                speculative_dflash_block_size=8, speculative_num_draft_tokens=65, speculative_num_steps=1,
                speculative_eagle_topk=8, speculative_draft_model_path="/nonexistent",
                language_only=False, encoder_transfer_backend=None)
    if algo != "DDTREE":
        base.update(speculative_ddtree_budget=None, speculative_ddtree_topk=None, speculative_num_draft_tokens=8)
    base.update(kw)
    return types.SimpleNamespace(**base)


@pytest.fixture(autouse=True)
def _processor_serves_its_own_args(monkeypatch):
    """The stand-in result processor serves its own ``server_args``. Up to 0.5.18 the adapter reads exactly that;
    from 0.5.19 upstream's processor has none and the adapter reads the published args, which a test cannot
    publish with DDTREE's fields (publishing builds upstream's ``ServerArgs``, without the plugin's class hook).
    The adapters' own reads: ``test_compat_release.py::test_result_processor_server_args_by_release``."""
    from sglang_ddtree.compat import adapter

    monkeypatch.setattr(type(adapter()), "result_processor_server_args", lambda self, processor: processor.server_args)


class _Algo:
    def __init__(self, name):
        self.name = name

    def is_none(self):
        return self.name == "NONE"

    def is_dspark(self):
        return False


def _reporter(algo="DDTREE", *, logging_rank=True, metrics_on=False, interval=4):
    """A SchedulerMetricsReporter carrying just what report_decode_stats reads on a decode step."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter

    pool_stats = types.SimpleNamespace(get_decode_usage_msg_parts=lambda: ["token usage: 0.10"])
    scheduler = types.SimpleNamespace(
        spec_algorithm=_Algo(algo), server_args=_server_args(algo), waiting_queue=[], forward_ct=7,
        disaggregation_mode=DisaggregationMode.NULL,
        pool_stats_observer=types.SimpleNamespace(get_pool_stats=lambda: pool_stats),
        kv_events_publisher=types.SimpleNamespace(publish_kv_events=lambda: None),
    )
    r = object.__new__(SchedulerMetricsReporter)
    r.__dict__.update(
        scheduler=scheduler, is_stats_logging_rank=logging_rank, current_scheduler_metrics_enabled=metrics_on,
        enable_metrics=metrics_on, metrics_collector=None, decode_log_interval=interval, forward_ct_decode=0,
        num_generated_tokens=0, last_decode_stats_tic=0.0, last_gen_throughput=0.0, step_time_dict={},
        enable_mfu_metrics=False, _graph_backend_label="cuda graph", fwd_occupancy=float("nan"),
        spec_num_accept_tokens=0, spec_num_correct_drafts=0, spec_num_forward_ct=0, spec_total_num_accept_tokens=0,
        spec_total_num_forward_ct=0, spec_num_block_accept_tokens=0, spec_num_cap_tokens=0,
        stats=types.SimpleNamespace(spec_accept_rate=None),
    )
    return r


def _processor(reporter):
    return types.SimpleNamespace(metrics_reporter=reporter, server_args=reporter.scheduler.server_args)


def _round(processor, correct_drafts, algo="DDTREE"):
    """One decode result through the resolve hook, then upstream's counters as update_spec_metrics
    moves them (accept tokens include one bonus per request)."""
    result = types.SimpleNamespace(num_correct_drafts_per_req_cpu=list(correct_drafts))
    batch = types.SimpleNamespace(spec_algorithm=_Algo(algo))
    with _published(processor.server_args):
        out = metrics.resolve_spec_v2_tokens(lambda p, res, b: "tokens", processor, result, batch)
    assert out == "tokens"
    r = processor.metrics_reporter
    r.spec_num_accept_tokens += sum(correct_drafts) + len(correct_drafts)
    r.spec_num_correct_drafts += sum(correct_drafts)  # from 0.5.20 upstream's rate reads it
    r.spec_num_forward_ct += len(correct_drafts)


def _upstream_report():
    from sglang.srt.managers.scheduler_components.metrics_reporter import SchedulerMetricsReporter

    return SchedulerMetricsReporter.report_decode_stats


@contextlib.contextmanager
def _published(server_args):
    """The stand-in's speculative widths published process-wide, as the scheduler does (from 0.5.17
    upstream's reporters read them from ``get_spec()``, not from the scheduler's server_args; from 0.5.19 the result
    processor's server args are the published ones too, and publishing resolves the algorithm by its name)."""
    from sglang.srt.runtime_context import get_context

    from sglang_ddtree.plugin import register_algorithm

    register_algorithm()
    with get_context().override_server_args(
            speculative_algorithm=server_args.speculative_algorithm,
            speculative_num_draft_tokens=server_args.speculative_num_draft_tokens,
            speculative_num_steps=server_args.speculative_num_steps,
            speculative_eagle_topk=server_args.speculative_eagle_topk):
        yield


def _decode_step(reporter, batch_reqs=2):
    reporter.forward_ct_decode += 1
    batch = types.SimpleNamespace(reqs=[object()] * batch_reqs, forward_iter=None)
    with _published(reporter.scheduler.server_args):
        return metrics.report_decode_stats(_upstream_report(), reporter, True, running_batch=batch)


def _decode_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Decode batch")]


# ---- the histogram -------------------------------------------------------------------------------
def test_histogram_counts_rounds_by_accept_length():
    h = AcceptHistogram(accept_width=8)
    h.add([0, 2, 2, 7])
    h.add([1])
    assert h.counts == [1, 1, 2, 0, 0, 0, 0, 1] and h.rounds == 5
    assert h.format() == "accept len hist [1..8]: 1 1 2 0 0 0 0 1"
    h.add([9])  # past the width (not produced by a valid tree): kept, not dropped
    assert h.counts[9] == 1 and h.rounds == 6
    h.reset()
    assert h.rounds == 0 and len(h.counts) == 10


@pytest.mark.parametrize("tokens,rounds,depth,rate", [(10, 10, 7, 0.0), (80, 10, 7, 1.0), (30, 10, 7, 2 / 7),
                                                      (5, 0, 7, 0.0)])
def test_depth_accept_rate(tokens, rounds, depth, rate):
    assert metrics.depth_accept_rate(tokens, rounds, depth) == pytest.approx(rate)


def test_resolve_hook_tallies_ddtree_only():
    r = _reporter()
    _round(_processor(r), [0, 3, 7])
    assert getattr(r, metrics.HIST_ATTR).counts == [1, 0, 0, 1, 0, 0, 0, 1]  # W = min(64, 8 - 1) + 1

    other = _reporter("DFLASH")
    _round(_processor(other), [0, 3, 7], algo="DFLASH")
    assert not hasattr(other, metrics.HIST_ATTR)

    silent = _reporter(logging_rank=False, metrics_on=False)  # upstream neither logs nor exports here
    _round(_processor(silent), [1])
    assert not hasattr(silent, metrics.HIST_ATTR)


# ---- the decode log (upstream's report_decode_stats, run for real) -------------------------------
def test_decode_log_line_has_depth_rate_and_histogram(caplog):
    r = _reporter(interval=2)
    p = _processor(r)
    caplog.set_level(logging.INFO, logger=REPORTER_LOGGER)
    _round(p, [1, 3])
    _decode_step(r)
    assert _decode_lines(caplog) == []  # not a log step
    _round(p, [0, 7])
    _decode_step(r)
    (line,) = _decode_lines(caplog)
    # 4 request-rounds, 11 accepted drafts + 4 bonus tokens; max depth 7; upstream would divide by 64.
    assert "accept len: 3.75, accept rate: 0.39 (of depth 7), accept len hist [1..8]: 1 1 0 1 0 0 0 1, " in line
    assert "accept rate: 0.04" not in line
    assert getattr(r, metrics.HIST_ATTR).rounds == 0 and r.spec_num_forward_ct == 0  # both reset

    caplog.clear()
    _round(p, [2, 2])
    _decode_step(r)
    _round(p, [2, 2])
    _decode_step(r)
    assert "accept len: 3.00, accept rate: 0.29 (of depth 7), accept len hist [1..8]: 0 0 4 0 0 0 0 0" in (
        _decode_lines(caplog)[0])
    assert not logging.getLogger(REPORTER_LOGGER).filters  # the rewrite filter never outlives the call


def test_decode_log_of_other_algorithms_is_upstreams(caplog):
    r = _reporter("DFLASH", interval=1)
    caplog.set_level(logging.INFO, logger=REPORTER_LOGGER)
    _round(_processor(r), [1, 3], algo="DFLASH")
    _decode_step(r)
    (line,) = _decode_lines(caplog)
    assert "accept len: 3.00, accept rate: 0.29, cuda graph: True" in line  # 4 / (2 * (8 - 1))
    assert "hist" not in line and "of depth" not in line


def test_separate_line_when_upstreams_line_changed_shape(caplog):
    r = _reporter(interval=1)
    _round(_processor(r), [6])

    def other_format(reporter, *a, **k):
        logging.getLogger(REPORTER_LOGGER).info("Decode batch, acceptance: 7.0")
        reporter.spec_num_accept_tokens = reporter.spec_num_forward_ct = 0

    caplog.set_level(logging.INFO)
    r.forward_ct_decode = 1
    metrics.report_decode_stats(other_format, r)
    messages = [rec.getMessage() for rec in caplog.records]
    assert "Decode batch, acceptance: 7.0" in messages
    assert "DDTREE decode: accept len: 7.00, accept rate: 0.86 (of depth 7), accept len hist [1..8]: " \
           "0 0 0 0 0 0 1 0" in messages


# ---- /metrics --------------------------------------------------------------------------------------
class _Series:
    def __init__(self, store, key):
        self.store, self.key = store, key

    def set(self, v):
        self.store[self.key] = v

    def inc(self, v=1):
        self.store[self.key] = self.store.get(self.key, 0) + v


class _FakeMetric:
    def __init__(self):
        self.values = {}

    def labels(self, **labels):
        return _Series(self.values, tuple(sorted(labels.items())))


def test_metrics_export_rate_gauge_and_histogram_counter(monkeypatch):
    counter = _FakeMetric()
    monkeypatch.setattr(metrics, "_counter", counter)
    r = _reporter(metrics_on=True, interval=1)
    r.metrics_collector = types.SimpleNamespace(labels={"model_name": "m", "tp_rank": "0"},
                                                spec_accept_rate=_FakeMetric())

    def upstream(reporter, *a, **k):  # what upstream leaves: its own (per-node) rate, counters reset
        reporter.stats.spec_accept_rate = 0.01
        reporter.spec_num_accept_tokens = reporter.spec_num_forward_ct = 0

    _round(_processor(r), [0, 7, 7])
    r.forward_ct_decode = 1
    metrics.report_decode_stats(upstream, r)
    def key(**extra):
        return tuple(sorted(dict(model_name="m", tp_rank="0", **extra).items()))

    assert r.stats.spec_accept_rate == pytest.approx(14 / 21)
    assert r.metrics_collector.spec_accept_rate.values == {key(): pytest.approx(14 / 21)}
    assert counter.values == {key(accept_length="1"): 1, key(accept_length="8"): 2}
    _round(_processor(r), [0])
    r.forward_ct_decode = 2
    metrics.report_decode_stats(upstream, r)
    assert counter.values[key(accept_length="1")] == 2  # a counter: intervals add up


def test_budget_auto_interval_stats_in_the_log_line_and_metrics(monkeypatch, caplog):
    """budget auto: the decode line and /metrics carry the interval's chosen budgets and the predicted vs observed
    accepted drafts (rounds that carried a forecast only); the interval resets with the line."""
    fakes = tuple(_FakeMetric() for _ in range(4))
    monkeypatch.setattr(metrics, "_auto_metrics", fakes)
    monkeypatch.setattr(metrics, "_counter", _FakeMetric())
    monkeypatch.setattr(metrics, "AUTO_STATS", metrics.AutoStats())
    stats = metrics.AUTO_STATS
    stats.add(0, 4)  # width 0: no tree
    stats.add(15, 4, 12.0, 6.0)  # a forecast round: 3 predicted, 1.5 observed per request
    stats.add(15, 4)  # a drafting round without a forecast: counts as a round, not in predicted / observed
    stats.add(63, 2, 10.0, 9.0)
    assert stats.request_rounds == 14 and stats.drafted_request_rounds == 6
    mean = (15 * 8 + 63 * 2) / 14
    text = (f"auto budget: mean {mean:.1f}, rounds by budget 0:1 15:2 63:1, accepted drafts predicted 3.67 "
            f"observed 2.50, ")
    r = _reporter(interval=1)  # upstream's own decode line
    caplog.set_level(logging.INFO, logger=REPORTER_LOGGER)
    _round(_processor(r), [1, 2])
    _decode_step(r)
    (line,) = _decode_lines(caplog)
    assert text in line and stats.request_rounds == 0  # reset with the interval
    for args in ((0, 4), (15, 4, 12.0, 6.0), (15, 4), (63, 2, 10.0, 9.0)):
        stats.add(*args)
    r = _reporter(metrics_on=True, interval=1)
    r.metrics_collector = types.SimpleNamespace(labels={"model_name": "m"}, spec_accept_rate=_FakeMetric())

    def upstream(reporter, *a, **k):
        reporter.spec_num_accept_tokens = reporter.spec_num_forward_ct = 0

    _round(_processor(r), [1, 2])
    r.forward_ct_decode = 1
    metrics.report_decode_stats(upstream, r)
    budget, rounds, predicted, observed = fakes
    key = (("model_name", "m"),)
    assert budget.values == {key: pytest.approx(mean)}
    assert rounds.values == {tuple(sorted(key + (("budget", b),))): n for b, n in (("0", 1), ("15", 2), ("63", 1))}
    assert predicted.values == {key: pytest.approx(22 / 6)} and observed.values == {key: pytest.approx(15 / 6)}
    assert stats.request_rounds == 0  # reset with the interval


def test_budget_auto_log_line_shows_the_costs_the_choice_weighs():
    """With budget auto's cost model as its source, the interval's line ends with the milliseconds per round the
    model holds for every bucket at the interval's most frequent batch size ('-': no cost yet), read through the
    model's own batch-size rounding; without a source, or past the model's largest batch, nothing is added."""
    from sglang_ddtree.width_policy import CostModel

    stats = metrics.AutoStats()
    stats.add(15, 4)
    assert stats.format().endswith("observed 0.00, ")  # no source: the line as before
    costs = CostModel([1, 4, 8], (0, 15, 63), warmup=0, settle=1)
    costs.seed(4, 0, 5.2)
    costs.seed(4, 15, 6.9)
    costs.observe(4, 15, 7.25)
    stats.set_cost_source(costs)
    stats.add(15, 3)  # batch 3 runs in the batch-4 graphs: the same costs
    stats.add(63, 3)
    assert stats.format().endswith("ms/round at bs 3 {0: 5.20, 15: 7.25, 63: -}, ")
    stats.reset()
    assert stats.cost_source is costs and stats.format() == ""  # the source stays; an empty interval says nothing
    stats.add(15, 9)  # past the largest captured batch size: no costs, no error
    assert "ms/round" not in stats.format()


def test_report_hook_passes_through_without_ddtree_rounds():
    calls = []
    r = _reporter("DFLASH", metrics_on=True, interval=1)
    r.forward_ct_decode = 1
    metrics.report_decode_stats(lambda rep, *a, **k: calls.append((rep, a, k)), r, True, running_batch=None)
    assert calls == [(r, (True,), {"running_batch": None})] and r.stats.spec_accept_rate is None


# ---- per-request meta info (upstream's TokenizerManager method, run for real) ---------------------
def _meta(algo):
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    manager = types.SimpleNamespace(server_args=_server_args(algo))
    recv = types.SimpleNamespace(spec_verify_ct=[4], spec_num_correct_drafts=[6], completion_tokens=[10],
                                 spec_correct_drafts_histogram=[[1, 1, 0, 2]])
    meta = {}
    with _published(manager.server_args):
        metrics.tokenizer_spec_metrics(TokenizerManager._calculate_spec_decoding_metrics, manager, meta, recv, 0)
    return meta


def test_request_meta_info_ddtree():
    meta = _meta("DDTREE")
    assert meta["spec_verify_ct"] == 4 and meta["spec_num_correct_drafts"] == 6
    assert meta["spec_accept_length"] == pytest.approx(2.5)
    assert meta["spec_correct_drafts_histogram"] == [1, 1, 0, 2]
    assert meta["spec_accept_rate"] == pytest.approx(6 / (4 * 7))
    assert meta["spec_num_proposed_drafts"] == 4 * 64  # tree nodes verified, upstream's count


def test_request_meta_info_other_algorithms_unchanged():
    meta = _meta("DFLASH")
    assert meta["spec_accept_rate"] == pytest.approx(6 / (4 * 7))  # upstream: block 8 -> 7 drafts/round
    assert meta["spec_num_proposed_drafts"] == 28


# ---- wiring ---------------------------------------------------------------------------------------
def test_hook_targets_include_observability_and_request_checks():
    from sglang_ddtree import compat
    from sglang_ddtree.worker import request_checks

    wanted = {metrics.resolve_spec_v2_tokens, metrics.report_decode_stats, metrics.tokenizer_spec_metrics,
              request_checks.validate_dflash_request}
    assert wanted <= set(hooks.HOOK_TARGETS.values())
    for target, hook in hooks.HOOK_TARGETS.items():
        if hook in wanted:
            assert callable(compat.resolve(target)), target
