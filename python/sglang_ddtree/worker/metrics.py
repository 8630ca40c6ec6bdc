"""Accept-length observability for DDTREE: the periodic decode log, ``/metrics`` and request meta info.

Bookkeeping of the ACCEPT step, on the scheduler's host side only: it reads the per-request accept
lengths the scheduler has already copied to the host (``result.num_correct_drafts_per_req_cpu``,
filled by ``_resolve_spec_v2_tokens``), so the decode round gains no device sync.
Vocabulary (``sglang_ddtree.tree``): accept length = accepted drafts + the bonus token, 1..W with
W = max depth D + 1. DDTREE's accept rate is accepted drafts / D per round, which is what DFLASH's
rate is for its chain of L - 1 drafts; upstream divides by the proposed drafts (the budget for a tree),
which would show ~0.03 at budget 64 for a path 2 deep. Per-request counts (``spec_verify_ct``,
``spec_num_correct_drafts``, ``spec_accept_length``, ``spec_correct_drafts_histogram``) are upstream's.
"""

from __future__ import annotations

import collections
import logging
from typing import Dict, List, Optional, Sequence

from sglang_ddtree.config import DDTreeConfig, is_ddtree, is_validated_ddtree_args, resolved_args

logger = logging.getLogger(__name__)

# The upstream module whose logger writes the "Decode batch, ..." line.
REPORTER_MODULE = "sglang.srt.managers.scheduler_components.metrics_reporter"
HIST_ATTR = "ddtree_accept_hist"  # set on the scheduler's metrics reporter
COUNTER_NAME = "sglang:ddtree_accept_length"  # exposed as sglang:ddtree_accept_length_total


class AcceptHistogram:
    """Request-rounds per accept length over one decode-log interval.

    counts[a - 1]: request-rounds that committed ``a`` tokens (a - 1 accepted drafts + bonus), a in 1..W.
    """

    __slots__ = ("counts",)

    def __init__(self, accept_width: int):
        assert accept_width >= 1, accept_width
        self.counts: List[int] = [0] * accept_width

    def add(self, num_accepted: Sequence[int]) -> None:
        """Count one round of a batch: accepted drafts (bonus excluded; upstream's
        ``num_correct_drafts_per_req_cpu``) per request, host ints."""
        counts = self.counts
        for n in num_accepted:
            if n >= len(counts):  # cannot happen with a valid tree; keep the count rather than drop it
                counts.extend([0] * (n + 1 - len(counts)))
            counts[n] += 1

    @property
    def rounds(self) -> int:
        return sum(self.counts)

    def reset(self) -> None:
        self.counts = [0] * len(self.counts)

    def format(self) -> str:
        return f"accept len hist [1..{len(self.counts)}]: " + " ".join(map(str, self.counts))


def depth_accept_rate(accept_tokens: int, rounds: int, max_depth: int) -> float:
    """Accepted drafts / (request-rounds * max depth); ``accept_tokens`` includes one bonus per round."""
    return (accept_tokens - rounds) / (rounds * max_depth) if rounds > 0 and max_depth > 0 else 0.0


def upstream_accept_fragment(accept_tokens: int, rounds: int, server_args) -> str:
    """The "accept len / accept rate" part of upstream's decode line, as SGLang 0.5.16 formats it."""
    if server_args.speculative_num_draft_tokens:
        per_round = server_args.speculative_num_draft_tokens - 1
    else:
        per_round = server_args.speculative_num_steps or 0
    total = rounds * per_round
    rate = (accept_tokens - rounds) / total if total > 0 else 0
    return f"accept len: {accept_tokens / rounds:.2f}, accept rate: {rate:.2f}, "


def ddtree_accept_fragment(accept_tokens: int, rounds: int, max_depth: int, hist: AcceptHistogram) -> str:
    rate = depth_accept_rate(accept_tokens, rounds, max_depth)
    return (f"accept len: {accept_tokens / rounds:.2f}, accept rate: {rate:.2f} (of depth {max_depth}), "
            f"{hist.format()}, ")


# ---- --speculative-ddtree-budget auto: the interval statistics (worker.widths adds to them) --------------
class AutoStats:
    """Request-rounds per chosen budget, and predicted vs observed accepted drafts, over one log interval; with a
    cost source (``set_cost_source``: budget auto's ``CostModel``), also the milliseconds per round it currently
    holds for every bucket at the interval's most frequent batch size (what the choice weighs, read a round late)."""

    def __init__(self):
        self.cost_source = None  # CostModel-like: .budgets, .cost(bs, budget) -> ms or None; kept across intervals
        self.reset()

    def set_cost_source(self, costs) -> None:
        self.cost_source = costs

    def reset(self) -> None:
        self.rounds_by_budget: Dict[int, int] = collections.Counter()
        self.request_rounds = 0
        self.budget_request_rounds = 0  # sum of budget x requests
        self.predicted = 0.0
        self.observed = 0.0
        self.drafted_request_rounds = 0  # request-rounds with a tree (budget > 0) and a forecast
        self.rounds_by_rows: Dict[int, int] = collections.Counter()  # rounds per batch size

    def add(self, budget: int, rows: int, predicted: Optional[float] = None, observed: Optional[float] = None) -> None:
        """One round of ``rows`` requests at ``budget``; predicted / observed accepted drafts (sums over the rows)
        for the rounds that carried a forecast."""
        self.rounds_by_budget[budget] += 1
        self.rounds_by_rows[rows] += 1
        self.request_rounds += rows
        self.budget_request_rounds += budget * rows
        if budget > 0 and predicted is not None:
            self.predicted += predicted
            self.observed += observed
            self.drafted_request_rounds += rows

    def format(self) -> str:
        if self.request_rounds == 0:
            return ""
        picks = " ".join(f"{b}:{n}" for b, n in sorted(self.rounds_by_budget.items()))
        mean = self.budget_request_rounds / self.request_rounds
        per = max(self.drafted_request_rounds, 1)
        return (f"auto budget: mean {mean:.1f}, rounds by budget {picks}, accepted drafts predicted "
                f"{self.predicted / per:.2f} observed {self.observed / per:.2f}, " + self._costs())

    def _costs(self) -> str:
        """'ms/round at bs B {b: ms, ...}, ' for the interval's most frequent batch size (ties: the larger), from
        the cost source ('-' where it has no cost yet; nothing without a source or past its largest batch)."""
        if self.cost_source is None or not self.rounds_by_rows:
            return ""
        bs = max(self.rounds_by_rows, key=lambda r: (self.rounds_by_rows[r], r))
        try:
            cells = {b: self.cost_source.cost(bs, b) for b in self.cost_source.budgets}
        except ValueError:  # a batch larger than the cost table's largest
            return ""
        text = ", ".join(f"{b}: {'-' if ms is None else f'{ms:.2f}'}" for b, ms in cells.items())
        return f"ms/round at bs {bs} {{{text}}}, "


AUTO_STATS = AutoStats()


class _RewriteOnce(logging.Filter):
    """Replace ``old`` by ``new`` in the first plain (argument-free) record that contains it."""

    def __init__(self, old: str, new: str):
        super().__init__()
        self.old, self.new, self.done = old, new, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.done and not record.args and isinstance(record.msg, str) and self.old in record.msg:
            record.msg = record.msg.replace(self.old, self.new, 1)
            self.done = True
        return True


# ---- hooks (AROUND; registered in sglang_ddtree.worker.hooks) -------------------------------------
def resolve_spec_v2_tokens(original, processor, result, batch):
    """``SchedulerBatchResultProcessor._resolve_spec_v2_tokens`` (decode results only): after upstream
    has the accept lengths on the host, count them into the reporter's interval histogram."""
    out = original(processor, result, batch)
    if not is_ddtree(batch.spec_algorithm):
        return out
    reporter = processor.metrics_reporter
    if not (reporter.is_stats_logging_rank or reporter.current_scheduler_metrics_enabled):
        return out  # upstream neither logs nor exports on this rank
    hist = getattr(reporter, HIST_ATTR, None)
    if hist is None:
        from sglang_ddtree.compat import adapter

        server_args = adapter().result_processor_server_args(processor)
        hist = AcceptHistogram(DDTreeConfig.from_server_args(server_args).accept_width)
        setattr(reporter, HIST_ATTR, hist)
    hist.add(result.num_correct_drafts_per_req_cpu)
    return out


def report_decode_stats(original, reporter, *args, **kwargs):
    """``SchedulerMetricsReporter.report_decode_stats``: on DDTREE log steps, upstream's own line gets
    the depth-normalised accept rate and the histogram; the rate gauge and histogram counter follow."""
    hist: Optional[AcceptHistogram] = getattr(reporter, HIST_ATTR, None)
    if hist is None or hist.rounds == 0 or reporter.forward_ct_decode % reporter.decode_log_interval != 0:
        return original(reporter, *args, **kwargs)
    server_args = resolved_args(reporter.scheduler.server_args)  # the widths upstream's line is made of
    accept_tokens, rounds = reporter.spec_num_accept_tokens, reporter.spec_num_forward_ct
    if rounds <= 0:
        return original(reporter, *args, **kwargs)
    max_depth = DDTreeConfig.from_server_args(server_args).max_depth
    new = ddtree_accept_fragment(accept_tokens, rounds, max_depth, hist) + AUTO_STATS.format()
    rewrite = _RewriteOnce(upstream_accept_fragment(accept_tokens, rounds, server_args), new)
    upstream_logger = logging.getLogger(REPORTER_MODULE)
    upstream_logger.addFilter(rewrite)
    try:
        out = original(reporter, *args, **kwargs)
    finally:
        upstream_logger.removeFilter(rewrite)
    if reporter.is_stats_logging_rank and not rewrite.done:  # upstream's line changed shape
        logger.info("DDTREE decode: %s", new.rstrip(", "))
    if reporter.current_scheduler_metrics_enabled and reporter.metrics_collector is not None:
        rate = depth_accept_rate(accept_tokens, rounds, max_depth)
        reporter.stats.spec_accept_rate = rate
        export_to_prometheus(reporter.metrics_collector, rate, hist)
        if AUTO_STATS.request_rounds:
            export_auto_to_prometheus(reporter.metrics_collector, AUTO_STATS)
    hist.reset()
    AUTO_STATS.reset()
    return out


def tokenizer_spec_metrics(original, manager, meta_info, recv_obj, i):
    """``TokenizerManager._calculate_spec_decoding_metrics``: per-request ``spec_accept_rate`` is
    accepted drafts / (verify rounds * max depth) for DDTREE; the counts stay upstream's."""
    original(manager, meta_info, recv_obj, i)
    if "spec_accept_rate" not in meta_info:
        return
    if not is_validated_ddtree_args(manager.server_args):
        return
    verify_ct = meta_info["spec_verify_ct"]
    max_depth = DDTreeConfig.from_server_args(manager.server_args).max_depth
    meta_info["spec_accept_rate"] = meta_info["spec_num_correct_drafts"] / (verify_ct * max_depth)


# ---- /metrics ----------------------------------------------------------------------------------
_counter = None


def _accept_counter(labelnames):
    """Created on first use in the scheduler process (after SGLang set up prometheus_client)."""
    global _counter
    if _counter is None:
        from prometheus_client import Counter

        _counter = Counter(
            name=COUNTER_NAME,
            documentation="DDTREE request-rounds by accept length (accepted drafts + bonus token).",
            labelnames=list(labelnames) + ["accept_length"],
        )
    return _counter


def export_to_prometheus(collector, rate: float, hist: AcceptHistogram) -> None:
    """Overwrite ``sglang:spec_accept_rate`` with the depth rate; add the interval to the counter."""
    labels = dict(collector.labels)
    collector.spec_accept_rate.labels(**labels).set(rate)
    counter = _accept_counter(labels.keys())
    for length, count in enumerate(hist.counts, start=1):
        if count:
            counter.labels(**labels, accept_length=str(length)).inc(count)


_auto_metrics = None
AUTO_BUDGET_NAME = "sglang:ddtree_budget"
AUTO_ROUNDS_NAME = "sglang:ddtree_budget_rounds"  # exposed as sglang:ddtree_budget_rounds_total
AUTO_PREDICTED_NAME = "sglang:ddtree_predicted_accepted_drafts"
AUTO_OBSERVED_NAME = "sglang:ddtree_observed_accepted_drafts"


def _auto_collectors(labelnames):
    global _auto_metrics
    if _auto_metrics is None:
        from prometheus_client import Counter, Gauge

        names = list(labelnames)
        _auto_metrics = (
            Gauge(AUTO_BUDGET_NAME, "DDTREE budget auto: mean verified budget per request-round over the last "
                  "log interval (0 = no drafting).", labelnames=names),
            Counter(AUTO_ROUNDS_NAME, "DDTREE budget auto: decode rounds by the budget they verified.",
                    labelnames=names + ["budget"]),
            Gauge(AUTO_PREDICTED_NAME, "DDTREE budget auto: accepted drafts per drafting request-round the "
                  "drafter's tree scores predicted (sum of exp(path score)), last log interval.", labelnames=names),
            Gauge(AUTO_OBSERVED_NAME, "DDTREE budget auto: accepted drafts per drafting request-round observed, "
                  "last log interval.", labelnames=names),
        )
    return _auto_metrics


def export_auto_to_prometheus(collector, stats: AutoStats) -> None:
    labels = dict(collector.labels)
    budget, rounds, predicted, observed = _auto_collectors(labels.keys())
    budget.labels(**labels).set(stats.budget_request_rounds / stats.request_rounds)
    for b, n in stats.rounds_by_budget.items():
        rounds.labels(**labels, budget=str(b)).inc(n)
    if stats.drafted_request_rounds:
        predicted.labels(**labels).set(stats.predicted / stats.drafted_request_rounds)
        observed.labels(**labels).set(stats.observed / stats.drafted_request_rounds)
