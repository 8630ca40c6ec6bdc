"""``--speculative-ddtree-budget auto`` in the round: verify resources per bucket width and the per-round choice.

The policy itself (buckets, accept and cost models, argmax of expected tokens per second) is
``sglang_ddtree.width_policy``, pure host arithmetic. This module is what the worker needs around it:

``VerifyWidths``  the target's attention backend and decode CUDA-graph runner per bucket budget b, built at
                  verify width b + 1 the way upstream builds EAGLE's adaptive-steps states
                  (``DecodeCudaGraphRunner(model_runner, attn_backend=..., speculative_num_draft_tokens=...)`` under
                  server args that say that width); the largest bucket keeps the runner's own. ``active(b)``
                  swaps one set in for one verify forward and restores the runner's own afterwards (prefill and
                  the draft never see the others). Capture time and graph memory are logged per width.
``AutoWidth``     one decision per round, without a host sync: the choice reads what earlier rounds left in
                  pinned host buffers (their trees' expected accepted drafts per bucket, their observed accepted
                  drafts, their period between two rounds' start events) only once those events have completed
                  (``Event.query``), so the host never waits for the GPU. Start-up calibration replays each
                  captured verify graph per (batch size, bucket) and the draft graph per batch size.
                  Under tensor parallelism (``agree``) every rank must choose the same width every round (each
                  width is its own graphs, whose collectives must pair up): rounds are read at a fixed lag of
                  ``AGREED_LAG`` rounds, waiting on their (long completed) events instead of polling them, and
                  costs are the ranks' mean, agreed every ``share_every`` rounds and at calibration.
Interval statistics for the decode log and ``/metrics`` go to ``metrics.AUTO_STATS`` (the decode log also shows the
cost model's current milliseconds per bucket at the interval's most frequent batch size).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

from sglang_ddtree.config import DDTreeConfig, env_switch, is_chain, parse_bucket
from sglang_ddtree.worker import metrics
from sglang_ddtree.width_policy import (CostModel, DraftForecast, ScoreAcceptModel, TableAcceptModel, WidthPolicy,
                                       chain_expected_drafts, expected_drafts_at)

logger = logging.getLogger(__name__)

# Benchmarks on random weights (``benchmark/bench_shape.py``, ``--load-format dummy``: ~1 token accepted per round)
# decide from a stated accept-length table instead of the drafter's scores: JSON {budget: tokens per round}, e.g.
# '{"16": 8.61, "64": 9.75}' (``width_policy.TableAcceptModel``). Unset in serving.
ACCEPT_TABLE_ENV = "SGLANG_DDTREE_AUTO_ACCEPT_TABLE"
# The chain bucket (``config.ChainBucket``): 1 / unset = auto's buckets hold it where the target verifies on fa3 with
# DDTREE's fused tree attention (``with_chain``), 0 = trees only.
CHAIN_ENV = "SGLANG_DDTREE_AUTO_CHAIN"
# The cost model's ``follow_drift`` (``width_policy.CostModel``): 1 / unset = a bucket's estimate follows the changes of
# the buckets measured after it (the default since session 40's paired runs), 0 = each bucket keeps its own.
COST_DRIFT_ENV = "SGLANG_DDTREE_AUTO_COST_DRIFT"
# The policy's ``explore_stale`` (``width_policy.WidthPolicy``): 1 / unset = exploration also re-measures a drafting
# bucket priced out by a stale estimate, seen longest ago first (the default since session 41), 0 = the least
# observed bucket predicted near, as before.
EXPLORE_STALE_ENV = "SGLANG_DDTREE_AUTO_EXPLORE_STALE"


def accept_model(budgets):
    """The drafter's scores corrected online (serving), or the table of ``ACCEPT_TABLE_ENV`` (benchmarks; a chain
    bucket among ``budgets`` needs its own entry, e.g. "chain15")."""
    import json
    import os

    text = os.environ.get(ACCEPT_TABLE_ENV, "").strip()
    if not text:
        return ScoreAcceptModel(budgets)
    try:
        table = {parse_bucket(b): float(t) for b, t in json.loads(text).items()}
        model = TableAcceptModel(table)
        for b in budgets:
            model.tokens_per_request(b)
    except (ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{ACCEPT_TABLE_ENV}={text!r}: want JSON {{budget: accept length}} covering the buckets "
                         f"{[str(b) for b in budgets]}, e.g. '{{\"16\": 8.61, \"64\": 9.75, \"chain15\": 7.79}}' "
                         f"({e}).") from None
    logger.warning("DDTREE auto: accept lengths from %s=%s, not from the drafter (benchmarks only).",
                   ACCEPT_TABLE_ENV, text)
    return model


def with_chain(config: DDTreeConfig, model_runner, *, hybrid: bool) -> DDTreeConfig:
    """``config`` with the chain bucket (``DDTreeConfig.chain``) where it verifies more cheaply than the tree of
    its width: budget auto, a dense target whose verify runs DDTREE's fused tree attention on fa3 (the chain then
    takes upstream's causal verify, DFLASH's: no merge launch per layer, no ancestor bits; and so does width 0,
    ``DDTreeConfig.verifies_causally``), ``CHAIN_ENV`` not 0.
    On triton and flashinfer a chain's verify is a tree's with a causal mask and costs the same, so it would only
    add graphs; hybrid targets keep trees (their per-row state commit is verified for trees). Reads the env once,
    at start-up."""
    import dataclasses

    from sglang_ddtree.worker import fa3_tree

    if not config.adaptive or hybrid:
        return config
    if not env_switch(CHAIN_ENV, on="budget auto's chain bucket on fa3", off="tree buckets only", default=True):
        return config
    if not fa3_tree.target_uses_fa3(model_runner):
        return config
    return dataclasses.replace(config, chain=True)


# ---- verify resources per width --------------------------------------------------------------------------
# A bucket's verify graphs are not captured where 0.8 x their predicted memory exceeds what is free: the capture
# would run out of memory, and the server then fails with one line saying what to change instead of an
# out-of-memory traceback (budget auto is the default on dense targets since session 44, and its graphs take about
# as much again as the largest bucket's: 3.8 GB beside 3.7 at the Qwen3-8B shape, bs <= 48, on an H100).
GRAPH_MEMORY_SHORT = 0.8


def graph_memory_short(width: int, measured_gb: Dict[int, float], free_gb: float) -> Optional[float]:
    """The GB the verify graphs of ``width`` tokens a request are predicted to take, where ``GRAPH_MEMORY_SHORT``
    x that exceeds ``free_gb``; else None. Predicted from the widest graphs measured so far ({width: GB}), in
    proportion to the width (session 44, Qwen3-8B shape: widths 1 / 2 / 4 / 8 / 16 / 32 took 0.11 / 0.15 / 0.27 /
    0.44 / 0.98 / 1.87 GB, so the next width from the last reads 0.9-1.47x what it took: no capture that would
    leave a quarter of its size free is refused, none that cannot fit at all is started); None before any."""
    if not measured_gb:
        return None
    widest = max(measured_gb)
    need = max(measured_gb[widest], 0.0) * width / widest
    return need if GRAPH_MEMORY_SHORT * need > free_gb else None


@contextlib.contextmanager
def verify_width_args(server_args, num_draft_tokens: int, topk: Optional[int] = None):
    """The target's server args saying verify width ``num_draft_tokens`` (and, with ``topk``, that top-K: 1 for
    a causal bucket, whose fa3 backend then verifies causally) while backends and graph runners of that width are
    built (they read them at construction), restored afterwards."""
    old = dict(speculative_num_draft_tokens=server_args.speculative_num_draft_tokens,
               speculative_eagle_topk=server_args.speculative_eagle_topk)
    _set_fields(server_args, speculative_num_draft_tokens=int(num_draft_tokens),
                speculative_eagle_topk=old["speculative_eagle_topk"] if topk is None else int(topk))
    try:
        yield server_args
    finally:
        _set_fields(server_args, **old)


def _set_fields(server_args, **fields) -> None:
    from sglang_ddtree.compat import adapter

    adapter().write_fields(server_args, "ddtree.verify_width", fields)


class VerifyWidths:
    """Per bucket budget: (attention backend, decode CUDA-graph runner or None) of the target at width b + 1; the
    causal buckets' (``DDTreeConfig.verifies_causally``: the chain bucket, and width 0 beside it) are built at top-K
    1, so that on fa3 they verify causally, as DFLASH's do."""

    def __init__(self, model_runner, server_args, config: DDTreeConfig, *, capture_graphs: bool,
                 is_rank0: bool = True):
        from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
        from sglang.srt.utils import get_available_gpu_memory

        self.model_runner = model_runner
        self.budgets = tuple(config.buckets)
        self.sets: Dict[int, tuple] = {config.budget: (model_runner.attn_backend, model_runner.decode_cuda_graph_runner)}
        self.capture_s: Dict[int, float] = {}
        self.graph_mem_gb: Dict[int, float] = {}
        capture_graphs = capture_graphs and model_runner.decode_cuda_graph_runner is not None
        measured: Dict[int, float] = {}  # verify width -> GB its graphs took (graph_memory_short)
        for budget in self.budgets:
            if budget == config.budget:
                continue
            tic = time.perf_counter()
            before = get_available_gpu_memory(model_runner.device, model_runner.gpu_id)
            need = graph_memory_short(budget + 1, measured, before) if capture_graphs else None
            if need is not None:
                raise RuntimeError(
                    f"DDTREE budget auto: the verify CUDA graphs of width {budget + 1} need about {need:.2f} GB of "
                    f"GPU memory and {before:.2f} GB is free; start with a lower --mem-fraction-static (now "
                    f"{getattr(server_args, 'mem_fraction_static', None)}), a smaller --cuda-graph-max-bs, or a fixed "
                    f"--speculative-ddtree-budget (auto is the default on dense targets at tp 1).")
            with verify_width_args(server_args, budget + 1, topk=1 if config.verifies_causally(budget) else None):
                backend = model_runner._get_attention_backend(init_new_workspace=False)
                runner = (DecodeCudaGraphRunner(model_runner, attn_backend=backend,
                                                speculative_num_draft_tokens=budget + 1)
                          if capture_graphs else None)
            self.sets[budget] = (backend, runner)
            self.capture_s[budget] = time.perf_counter() - tic
            self.graph_mem_gb[budget] = before - get_available_gpu_memory(model_runner.device, model_runner.gpu_id)
            if runner is not None:
                measured[budget + 1] = self.graph_mem_gb[budget]
            if is_rank0:
                logger.info("DDTREE auto: verify width %d (budget %s) %s in %.1f s, %.2f GB.", budget + 1, budget,
                            "captured" if runner is not None else "set up (no CUDA graphs)",
                            self.capture_s[budget], self.graph_mem_gb[budget])

    @contextlib.contextmanager
    def active(self, budget: int):
        """The target model runner verifies at budget ``budget`` inside the block (its own set afterwards)."""
        mr = self.model_runner
        backend, runner = self.sets[budget]
        saved = mr.attn_backend, mr.decode_cuda_graph_runner
        mr.attn_backend, mr.decode_cuda_graph_runner = backend, runner
        try:
            yield backend
        finally:
            mr.attn_backend, mr.decode_cuda_graph_runner = saved


# ---- calibration -----------------------------------------------------------------------------------------
def captured_graphs(runner) -> Dict[int, object]:
    """{batch size: torch.cuda.CUDAGraph} of a decode CUDA-graph runner on upstream's full-graph backend
    ({} for other graph backends or no runner)."""
    graphs = getattr(getattr(runner, "backend", None), "_graphs", None)
    if not isinstance(graphs, dict):
        return {}
    out = {}
    for key, graph in graphs.items():
        if getattr(key, "stream_idx", None) is None and getattr(key, "variant_label", None) is None:
            out[int(key.size)] = graph
    return out


def replay_ms(graph, *, repeats: int = 5) -> float:
    """Median GPU milliseconds of ``repeats`` replays of a captured graph with the inputs it was captured with
    (one warm-up); start-up only, it synchronises."""
    torch.cuda.synchronize()
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def tree_build_ms(config: DDTreeConfig, batch_sizes: Sequence[int], device) -> Dict[int, float]:
    """Start-up: GPU ms of a drafting round's tree builds per batch size (the chosen bucket's and the largest one's
    for the forecast) on random draft log-probs of the real shape; it synchronises."""
    from sglang_ddtree.worker.tree_api import build_tree

    out, k, depth = {}, config.topk, config.draft_positions
    for bs in batch_sizes:
        lp = torch.randn(bs, depth, k, device=device).log_softmax(-1).sort(-1, descending=True).values
        ids = torch.randint(0, 1000, (bs, depth, k), device=device)
        build_tree(lp, ids, config.budget)  # compiles (once per budget class) outside the timing
        build_tree(lp, ids, max(1, config.budget // 2))
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            build_tree(lp, ids, config.budget)
            build_tree(lp, ids, max(1, config.budget // 2))
        end.record()
        end.synchronize()
        out[bs] = start.elapsed_time(end) / 5
    return out


# ---- the per-round choice --------------------------------------------------------------------------------
def _pinned(n: int) -> torch.Tensor:
    """A float32 host buffer the device copies into asynchronously (page-locked)."""
    return torch.zeros(n, dtype=torch.float32, pin_memory=True)


class _Pending:
    __slots__ = ("bs", "budget", "start", "end", "next_start", "dev", "host", "scored", "staged", "followed", "round")

    def __init__(self, num_buckets: int, device):
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.next_start = torch.cuda.Event(enable_timing=True)  # the next decode round's start, when it follows
        # [sum of expected accepted drafts per bucket (num_buckets), sum of accept lengths]: on the device, staged
        # there by the round, then one async copy to pinned host memory
        self.dev = torch.zeros(num_buckets + 1, dtype=torch.float32, device=device)
        self.host = _pinned(num_buckets + 1)
        self.bs = self.budget = self.round = None
        self.scored = False  # the round carried a forecast (the largest bucket's tree scores)
        self.staged = False  # the round copied numbers to ``host`` (forecast rounds only)
        # None until known; True: the next decode round began (next_start recorded); False: another forward
        # (prefill, idle) came between, so the round has no period
        self.followed: Optional[bool] = None


class AutoWidth:
    """Chooses each round's budget (``choose``), and takes the round's results back (``begin`` / ``finish``).

    A round's cost is its period on the GPU's timeline: from its start event to the next decode round's, so
    it includes what the device waits for between rounds (the scheduler's host work, launches the overlap
    scheduler does not hide), which is what throughput pays. A round followed by another forward (a prefill,
    an idle batch: ``interrupt``) has no period and teaches the cost table nothing."""

    RING = 8  # rounds in flight whose numbers have not been read yet (overlap keeps one or two)
    FORECAST_EVERY = 4  # drafting rounds per forecast (the largest bucket's tree + expected drafts per bucket)
    AGREED_LAG = 2  # with ``agree``: a round's numbers are read this many rounds after it began

    def __init__(self, config: DDTreeConfig, batch_sizes: Sequence[int], *, max_batch_size: int, device,
                 agree: Optional[Callable[[List[float]], List[float]]] = None, share_every: int = 16):
        """``agree``: under tensor parallelism, the ranks' mean of a list of floats (a collective every rank calls
        with a list of the same length at the same point); None on one rank."""
        if share_every < 1:
            raise ValueError(f"share_every must be >= 1, got {share_every}")
        self.config = config
        self._agree, self.share_every = agree, share_every
        self._rounds = 0  # decode rounds begun
        self._unshared: List[tuple] = []  # with agree: (bs, budget, ms) read since the costs were last agreed
        self.budgets = tuple(config.buckets)
        sizes = sorted({int(b) for b in batch_sizes} | {int(max_batch_size)})
        self.costs = CostModel(sizes, self.budgets, follow_drift=env_switch(
            COST_DRIFT_ENV, on="budget auto's costs follow the measured buckets' drift", off="each bucket's own",
            default=True))
        metrics.AUTO_STATS.set_cost_source(self.costs)  # the decode log shows the costs the choice weighs
        self.accept = accept_model(self.budgets)
        self.policy = WidthPolicy(self.budgets, self.costs, self.accept, explore_stale=env_switch(
            EXPLORE_STALE_ENV, on="exploration re-measures stale drafting buckets", off="the least observed near one",
            default=True))
        self.forecast: Optional[DraftForecast] = None
        self._ring = [_Pending(len(self.budgets), device) for _ in range(self.RING)]
        self._next = 0
        self._drafting_rounds = 0
        self._forecast_due = False  # a width-0 round ran since the last drafting round: its forecast is stale
        self._inflight: collections.deque = collections.deque()
        self._last: Optional[_Pending] = None  # the latest round begun, until the next one begins
        self._index = {b: i for i, b in enumerate(self.budgets)}
        # the forecast's columns: the b best nodes of the largest tree per tree bucket; the chain bucket's column
        # (its int is its draft count, a placeholder here) is replaced by the chain's own sum in ``finish``
        self._budget_idx = torch.tensor([int(b) for b in self.budgets], dtype=torch.int64, device=device)
        self._chain_col = next((i for i, b in enumerate(self.budgets) if is_chain(b)), None)

    # -- calibration (start-up) --
    def calibrate(self, verify_graphs: Dict[int, Dict[int, object]], draft_graphs: Dict[int, object],
                  tree_ms: Dict[int, float]) -> None:
        """Seed the cost model: verify graph replay per (batch size, budget) plus, when drafting, the draft graph
        and, for a tree bucket, the tree builds of that batch size (the chain's round builds none). Batch sizes
        above the largest captured one run eagerly: seeded by scaling the largest captured cost by the batch ratio
        (observations replace it)."""
        seeds = []  # (bs, budget, ms), in one order on every rank (the replays' collectives pair up)
        for budget in sorted(verify_graphs):
            for bs in sorted(verify_graphs[budget]):
                ms = replay_ms(verify_graphs[budget][bs])
                if budget > 0:  # drafting: the draft graph, and a tree round's builds (a chain builds none)
                    draft = draft_graphs.get(bs)
                    ms += replay_ms(draft) if draft is not None else 0.0
                    ms += 0.0 if is_chain(budget) else tree_ms.get(bs, 0.0)
                seeds.append((bs, budget, ms))
        if self._agree is not None and seeds:
            seeds = [(bs, budget, ms) for (bs, budget, _), ms in zip(seeds, self._agree([m for *_, m in seeds]))]
        largest = {}
        for bs, budget, ms in seeds:
            self.costs.seed(bs, budget, ms)
            if bs >= largest.get(budget, (0, 0.0))[0]:
                largest[budget] = (bs, ms)
        top = self.costs.batch_sizes[-1]
        for budget, (bs, ms) in largest.items():
            if top > bs:
                self.costs.seed(top, budget, ms * top / bs)

    def describe(self) -> List[str]:
        """The start-up log: the cost table and what the policy would pick per batch size."""
        lines = []
        for bs in self.costs.batch_sizes:
            cells = ", ".join(f"{b}: {'-' if self.costs.cost(bs, b) is None else f'{self.costs.cost(bs, b):.2f}'}"
                              for b in self.budgets)
            lines.append(f"bs {bs} ms/round by budget {{{cells}}}")
        lines += self.policy.describe(self.costs.batch_sizes)
        if not self.costs.follow_drift:
            lines.append(f"each bucket keeps its own cost, not the measured buckets' drift ({COST_DRIFT_ENV}=0)")
        if not self.policy.explore_stale:
            lines.append(f"exploration measures the least observed near bucket, not stale ones ({EXPLORE_STALE_ENV}=0)")
        return lines

    # -- the round --
    def choose(self, bs: int) -> int:
        if self._agree is None:
            self._drain()
        else:
            self._drain_agreed()
        return self.policy.choose(bs, self.forecast)

    def wants_forecast(self, budget: int) -> bool:
        """Whether this drafting round should also score the largest bucket's tree: every ``FORECAST_EVERY``-th
        drafting round (forecasts move slowly, and each costs a second tree build below the largest bucket plus
        a sort of its scores), and the first drafting round after a width-0 round. The forecast that chose width
        0 is the only one a width-0 stretch has, and the policy's probe drafts to replace it; until session 39
        the probe carried a forecast only when the count fell on it, so a stretch chosen from one low forecast
        went on for another ``probe_every`` rounds (the tiny pair at bs 1: 33 of 141 log intervals of 40 rounds
        held 10-37 width-0 rounds, while their forecast rounds accepted a median ~1.6 drafts per request). Never
        with a stated accept table (benchmarks): it reads no scores, and its rounds would otherwise pay for a
        forecast every round (none is ever stored)."""
        if budget == 0 or not isinstance(self.accept, ScoreAcceptModel):
            return False
        self._drafting_rounds += 1
        due, self._forecast_due = self._forecast_due, False
        return due or self._drafting_rounds % self.FORECAST_EVERY == 1 or self.forecast is None

    def interrupt(self) -> None:
        """Another forward (prefill, idle) runs before the next decode round: the latest round gets no period."""
        if self._last is not None:
            self._last.followed = False
            self._last = None

    def begin(self, bs: int, budget: int, stream=None) -> _Pending:
        """A decode round starts: its slot, with the start event recorded on ``stream`` (the round's stream, fetched
        once by the caller: each ``Event.record()`` without one looks the current stream up again, a Python call
        that took 54 of the 70 us of ``begin``'s two records in session 33's profile; None: the current stream)."""
        if self._last is not None:  # the previous decode round's period ends where this one starts
            self._last.next_start.record(stream)
            self._last.followed = True
        slot = self._ring[self._next]
        self._next = (self._next + 1) % self.RING
        if slot in self._inflight:  # never read back: drop it rather than wait (the ring is generous)
            self._inflight.remove(slot)
        slot.bs, slot.budget, slot.round = bs, budget, self._rounds
        self._rounds += 1
        slot.followed = None
        slot.start.record(stream)
        self._last = slot
        if budget == 0:
            self._forecast_due = True
        return slot

    def finish(self, slot: _Pending, full_tree_scores: Optional[torch.Tensor], accept_lens: Optional[torch.Tensor],
               chain_log_probs: Optional[torch.Tensor] = None, stream=None) -> None:
        """After the round's last launch: record its end and, for a forecast round, stage its numbers for a later
        ``choose`` (the per-bucket sums of expected drafts and the accepted drafts, one async copy).
        ``full_tree_scores`` [bs, N_max] of the round's tree at the largest budget, or None; with a chain bucket, a
        forecast round also passes ``chain_log_probs`` [bs, D] float32, the top-1 log-probs of the chain's D
        positions. ``accept_lens`` None: a width-0 round, which accepts no drafts by construction. Only a forecast
        round's accepted drafts are read (the accept model and the metrics pair them with its prediction), so the
        other rounds stage nothing: two device ops and a copy fewer a round (session 36: ``finish`` took 127 us a
        round at bs 16 on the tiny pair). ``stream``: as ``begin``'s."""
        slot.scored = full_tree_scores is not None
        if accept_lens is None and (slot.scored or slot.budget != 0):
            raise ValueError(f"only a width-0 round finishes without accept lengths (budget {slot.budget})")
        slot.staged = slot.scored
        if not slot.staged:
            slot.end.record(stream)
            self._inflight.append(slot)
            return
        nb = len(self.budgets)
        if full_tree_scores is not None:
            per_bucket = expected_drafts_at(full_tree_scores, self.budgets, index=self._budget_idx)  # [bs, nb]
            if self._chain_col is not None:
                assert chain_log_probs is not None, "a forecast with a chain bucket needs the chain's log-probs"
                per_bucket[:, self._chain_col] = chain_expected_drafts(chain_log_probs)
            torch.sum(per_bucket, dim=0, out=slot.dev[:nb])
        torch.sum(accept_lens, dim=0, dtype=torch.float32, out=slot.dev[nb])
        slot.host.copy_(slot.dev, non_blocking=True)
        slot.end.record(stream)
        self._inflight.append(slot)

    def _drain(self) -> None:
        """Read every finished round's numbers, oldest first; stop at the first one still running (or whose
        period has not ended yet)."""
        while self._inflight:
            slot = self._inflight[0]
            if slot.followed is None or not slot.end.query() or (slot.followed and not slot.next_start.query()):
                break
            self._inflight.popleft()
            if slot.followed:
                self._observe(slot.bs, slot.budget, slot.start.elapsed_time(slot.next_start))
            self._read(slot)

    def _drain_agreed(self) -> None:
        """``_drain`` under tensor parallelism, the same on every rank: the rounds begun ``AGREED_LAG`` or more
        rounds ago, waiting on their events (recorded that long ago, so complete unless the device runs more than
        that far behind the host; the wait then bounds how far the host runs ahead), and their costs kept until
        every ``share_every``-th round, where the ranks agree on their mean (one CPU collective)."""
        while self._inflight and self._inflight[0].round <= self._rounds - self.AGREED_LAG:
            slot = self._inflight.popleft()
            slot.end.synchronize()
            if slot.followed:
                slot.next_start.synchronize()
                self._unshared.append((slot.bs, slot.budget, slot.start.elapsed_time(slot.next_start)))
            self._read(slot)
        if self._unshared and self._rounds % self.share_every == 0:
            for (bs, budget, _), ms in zip(self._unshared, self._agree([ms for *_, ms in self._unshared])):
                self._observe(bs, budget, ms)
            self._unshared.clear()

    def _observe(self, bs: int, budget: int, ms: float) -> None:
        try:
            self.costs.observe(bs, budget, ms)
        except ValueError:  # a batch larger than max_batch_size: nothing to learn for the table
            pass

    def _read(self, slot: _Pending) -> None:
        """A finished round's counts and, for a forecast round, its expected and accepted drafts."""
        if not slot.staged:  # no forecast (width 0 included): nothing was copied back
            metrics.AUTO_STATS.add(slot.budget, slot.bs)
            return
        values = slot.host.tolist()
        nb = len(self.budgets)
        observed, predicted = values[nb] - slot.bs, values[self._index[slot.budget]]
        if slot.scored and isinstance(self.accept, ScoreAcceptModel):
            self.accept.observe(slot.budget, predicted, observed)
            self.forecast = DraftForecast(slot.bs, values[:nb])
        metrics.AUTO_STATS.add(slot.budget, slot.bs, *((predicted, observed) if slot.scored else ()))
