"""Choosing a round's verify width from the load: the policy behind ``--speculative-ddtree-budget auto``.

A round at budget b verifies b + 1 tokens per request (b = 0: no drafting, the round is one target decode
step that commits the bonus token). It commits, per request, 1 + (accepted drafts) tokens and costs
``cost(bs, b)`` milliseconds. The policy picks, from a small bucket set that includes 0, the budget with
the most expected committed tokens per second for the batch:

    argmax_b  sum_r E[tokens_r | b] / cost(bs, b)

Expected tokens come from an accept model:
  ``ScoreAcceptModel``  the drafter's own tree scores: a node is accepted exactly when its whole root path is,
                        and its score is that path's draft log-probability, so for a calibrated drafter the
                        expected accepted drafts of the budget-b tree are the sum of exp(score) over its b
                        nodes (``expected_drafts_at``: the budget-b tree is the b best-scoring nodes of any
                        larger tree, parents scoring at least their children). A ratio per bucket, observed
                        accepted / predicted as decayed sums (a round weighs what it predicted), corrects it
                        online.
  ``TableAcceptModel``  a stated accept-length table (tokens per round by budget): what benchmarks on random
                        weights project from (``benchmark/bench_shape.py``'s table).
With the chain bucket (``config.ChainBucket``: the top-1 chain, verified as DFLASH verifies it) its expected
accepted drafts are the sum over its depths of exp(path score) (``chain_expected_drafts``), and a table states
its accept length as its own entry.
Costs come from ``CostModel``: a start-up calibration per (captured batch size, bucket), refined online by
round timings read a round later. ``WidthPolicy`` combines them; while it runs width 0 it has no tree
scores, so every ``probe_every``-th such round it drafts, at the drafting bucket predicted best, to look again
(the worker's round then carries a forecast: ``AutoWidth.wants_forecast``).
Pure host-side arithmetic on small arrays (the GPU side hands over its numbers a round late, without a
sync): nothing here touches SGLang.
"""

from __future__ import annotations

import bisect
import collections
import math
from typing import Dict, NamedTuple, Optional, Sequence

import torch

from sglang_ddtree.config import bucket_budgets, is_chain  # noqa: F401  (bucket_budgets re-exported: the bucket set)


def expected_drafts_at(scores: torch.Tensor, budgets: Sequence[int], *, index: Optional[torch.Tensor] = None
                       ) -> torch.Tensor:
    """Expected accepted drafts of each request's budget-b tree, for every b in ``budgets``, from one tree of
    a budget >= max(budgets): the sum of exp(score) over its b best-scoring nodes (0 for b = 0; fewer real
    nodes than b: all of them). Shape: scores [bs, N] float32 (``Tree.scores``: row 0 the root, pads -inf)
    -> [bs, len(budgets)] float32. ``index``: ``budgets`` as an int64 tensor on the scores' device (a caller in
    the decode round passes one made once: building it from a list here would copy from pageable host
    memory, which waits for the stream). No host sync with ``index``."""
    nodes = scores[:, 1:].float()
    bs, n_nodes = nodes.shape
    if max(budgets, default=0) > n_nodes:
        raise ValueError(f"budgets {list(budgets)} exceed the tree's {n_nodes} nodes")
    top = torch.sort(nodes, dim=1, descending=True).values.exp()  # pads: exp(-inf) = 0
    cum = torch.cat([torch.zeros((bs, 1), dtype=top.dtype, device=top.device), top.cumsum(dim=1)], dim=1)
    idx = index if index is not None else torch.tensor(list(budgets), dtype=torch.int64, device=scores.device)
    return cum.index_select(1, idx)


def chain_expected_drafts(top1_log_probs: torch.Tensor) -> torch.Tensor:
    """Expected accepted drafts of each request's chain (``config.ChainBucket``): the sum over its depths of
    exp(path score), the path score at depth d being the sum of the top-1 log-probs of positions 1..d.
    Shape: top1_log_probs [bs, D] float32 (D drafts) -> [bs] float32. No host sync."""
    return top1_log_probs.float().cumsum(dim=1).exp().sum(dim=1)


class DraftForecast(NamedTuple):
    """What the accept model reads of one round's trees: ``rows`` requests and, per bucket budget, the sum over
    them of their expected accepted drafts (``expected_drafts_at`` summed over requests, read a round late)."""

    rows: int
    sums: Sequence[float]


class CostModel:
    """Milliseconds per round by (batch size, bucket budget): seeded by a start-up calibration of each captured
    batch size, then estimated from observed rounds as the lower median of a key's last ``window`` used rounds.
    A batch runs at the smallest captured size that holds it (CUDA graphs pad), so lookups round the batch size up.

    Round periods are skewed: most rounds sit within ~1 % of the typical one, and a few are 10-20 % (a stall,
    a collection, a neighbour on the machine) or many times slower. A moving average lets one slow round move a
    near tie, after which the incumbent's rival is measured only by exploration (session 24, Qwen3-8B shape at
    c 2: stretches of 45 rounds at 63 after single slow rounds at 31); the lower median of the window moves only
    when most of its rounds do.
    - The first ``warmup`` observations of a key are counted but not used: the first round at a new (batch size,
      width) compiles the Triton kernels of its shapes (up to seconds).
    - Until a key has ``settle`` used rounds, a stand-in counts as one more sample: the estimate it would have
      unobserved (its seed plus the lent offset, below). So a single stray round cannot decide a key alone
      (session 24 at c 1: a 123 ms round among budget 63's first ones, then 150 rounds at 31, whose logged median
      was 6.98 ms against 63's 6.83; a mean it enters prices 63, and through the lent offset every drafting bucket
      not yet observed, 116 ms too high).
    - A key measured again after ``stale_after`` observations of other keys (an exploration, a batch size coming
      back) settles afresh, its former estimate the stand-in: costs drift with the GPU's power cap while the
      choice is measured every round and its rivals rarely, and a window of old rounds would otherwise need
      most of its length in explorations to follow.
    - With ``follow_drift`` (on by default since session 40's paired runs; ``SGLANG_DDTREE_AUTO_COST_DRIFT=0`` turns
      it off in a server), a settled key's estimate follows the other buckets of its batch size: it moves by the
      median change of their estimates since its own latest observation (those measured after it). On a host-bound
      engine (session 38, the tiny pair on the H200) the buckets' calibrated differences were a few percent of a
      round while estimates formed at different times differed by 10-40 %: a bucket measured in a slow stretch kept
      that price, and the exploration, which only tries buckets predicted within 80 % of the best, rarely measured
      it again. Changes, not levels, are compared, so a bucket's own steady difference from the others (session
      24's mis-calibrated 31 at the 8B shape) is kept. A move smaller than ``drift_min`` of the key's estimate is not followed: the
      measured bucket's estimate carries its own noise, and following every move hands that noise to its rivals
      (session 23's noisy batch-32 tie, simulated over 40 seeds: mean rate 0.9895 of the best bucket's when every
      move is followed, 0.9942 at 15 %, 0.9945 without following; worst seed 0.971 / 0.983 / 0.989)."""

    def __init__(self, batch_sizes: Sequence[int], budgets: Sequence[int], *, window: int = 21, warmup: int = 1,
                 settle: int = 3, stale_after: int = 8, follow_drift: bool = True, drift_min: float = 0.15):
        if window < 1 or warmup < 0 or not 1 <= settle <= window or stale_after < 1 or drift_min < 0.0:
            raise ValueError(f"window must be >= 1, warmup >= 0, settle in [1, window], stale_after >= 1 and "
                             f"drift_min >= 0, got {window}, {warmup}, {settle}, {stale_after}, {drift_min}")
        self.batch_sizes = sorted({int(b) for b in batch_sizes})
        self.budgets = tuple(budgets)
        self.window = window
        self.warmup = warmup
        self.settle = settle
        self.stale_after = stale_after
        self.follow_drift = bool(follow_drift)
        self.drift_min = float(drift_min)
        self._seed: Dict[tuple, float] = {}
        self._used: Dict[tuple, collections.deque] = {}  # the last ``window`` used observations of a key
        self._count: Dict[tuple, int] = {}  # observations per key, warm-up ones included
        self._ms: Dict[tuple, float] = {}  # keys settled once: the lower median of their window when they settled
        self._stand_in: Dict[tuple, float] = {}  # keys settling afresh: their former estimate
        self._ticks = 0  # observations of any key
        self._last: Dict[tuple, int] = {}  # a key's latest used observation, in ``_ticks``
        # Running sums of (estimate - seed) over settled seeded keys, by kind (drafting or not): O(1) lookups,
        # since the policy asks for every bucket's cost every round.
        self._offset_sum = {False: 0.0, True: 0.0}
        self._offset_n = {False: 0, True: 0}
        # follow_drift: per batch size, its settled keys' estimate changes summed since each first settled, and per
        # settled key those sums of the other keys of its batch size when its own estimate last changed (a key
        # settled since counts from 0); by batch size, so a lookup reads one bucket set, not the whole table
        self._moved: Dict[int, Dict[tuple, float]] = {}
        self._snap: Dict[tuple, Dict[tuple, float]] = {}

    def key(self, bs: int, budget: int) -> tuple:
        """The table's key of (bs, budget): the smallest captured batch size that holds ``bs``, and the budget."""
        return self._key(bs, budget)

    def _key(self, bs: int, budget: int) -> tuple:
        i = bisect.bisect_left(self.batch_sizes, bs)
        if i == len(self.batch_sizes):
            raise ValueError(f"batch size {bs} exceeds the largest captured one ({self.batch_sizes[-1]})")
        if budget not in self.budgets:
            raise ValueError(f"budget {budget} is not a bucket ({self.budgets})")
        return self.batch_sizes[i], budget

    def seed(self, bs: int, budget: int, ms: float) -> None:
        self._seed[self._key(bs, budget)] = float(ms)

    def observe(self, bs: int, budget: int, ms: float) -> None:
        key = self._key(bs, budget)
        self._ticks += 1
        n = self._count.get(key, 0) + 1
        self._count[key] = n
        if n <= self.warmup:
            return
        used = self._used.get(key)
        if used is None:
            used = self._used[key] = collections.deque(maxlen=self.window)
        if key in self._ms and key not in self._stand_in and self._ticks - self._last[key] > self.stale_after:
            used.clear()
            self._stand_in[key] = self._ms[key] + self._drift(key)
        self._last[key] = self._ticks
        used.append(float(ms))
        if len(used) < self.settle:
            return
        self._stand_in.pop(key, None)
        new, old = _lower_median(used), self._ms.get(key)
        self._ms[key] = new
        if self.follow_drift:
            moved = self._moved.setdefault(key[0], {})
            moved[key] = 0.0 if old is None else moved[key] + new - old
            self._snap[key] = {o: m for o, m in moved.items() if o != key}
        if key in self._seed:
            kind = budget > 0
            if old is None:
                self._offset_sum[kind] += new - self._seed[key]
                self._offset_n[kind] += 1
            else:
                self._offset_sum[kind] += new - old

    def observations(self, bs: int, budget: int) -> int:
        """Rounds observed at the key of (bs, budget), warm-up rounds included."""
        return self._count.get(self._key(bs, budget), 0)

    def forget(self, bs: int, budget: int) -> None:
        """Drop the estimate of (bs, budget): it is priced again as one never used (its seed plus the lent offset
        standing in until ``settle`` rounds), its next round used (the key has compiled: no warm-up again)."""
        key = self._key(bs, budget)
        if key in self._ms and key in self._seed:  # its offset leaves the one lent to unobserved keys
            kind = key[1] > 0
            self._offset_sum[kind] -= self._ms[key] - self._seed[key]
            self._offset_n[kind] -= 1
        for table in (self._used, self._ms, self._stand_in, self._last, self._snap):
            table.pop(key, None)
        self._moved.get(key[0], {}).pop(key, None)
        self._count[key] = min(self._count.get(key, 0), self.warmup)

    def last_seen(self, bs: int, budget: int) -> int:
        """When the key of (bs, budget) was last used, counted in observations of any key; -1 if never."""
        return self._last.get(self._key(bs, budget), -1)

    def at_calibrated_gap(self, bs: int, budget: int, ref: int) -> Optional[float]:
        """``ref``'s current estimate plus how much dearer calibration found ``budget`` (0 where it found it cheaper):
        what ``budget`` would cost if the two differed as their graph replays do, the hope for a stale estimate;
        None without both seeds or an estimate of ``ref``."""
        kb, kr = self._key(bs, budget), self._key(bs, ref)
        ref_ms = self.cost(bs, ref)
        if kb not in self._seed or kr not in self._seed or ref_ms is None:
            return None
        return ref_ms + max(0.0, self._seed[kb] - self._seed[kr])

    def cost(self, bs: int, budget: int) -> Optional[float]:
        """A settled key's lower median; a settling one's lower median with its stand-in as one more sample; a
        seeded, never observed key's seed plus the mean offset (estimate - seed) of the settled keys of the same
        kind (drafting or not, any batch size), since a calibration replays the graphs alone and misses the
        round's fixed host and glue cost; None for a key with neither seed nor observation."""
        key = self._key(bs, budget)
        stand_in = self._stand_in.get(key)
        if stand_in is None:
            if key in self._ms:
                return self._ms[key] + self._drift(key)
            if key in self._seed:
                n = self._offset_n[budget > 0]
                stand_in = self._seed[key] + (self._offset_sum[budget > 0] / n if n else 0.0)
        used = self._used.get(key)
        if not used:
            return stand_in
        return _lower_median(list(used) + ([stand_in] if stand_in is not None else []))

    def _drift(self, key: tuple) -> float:
        """With ``follow_drift``: the median change of the other settled keys' estimates (same batch size) among
        those observed after ``key`` last was, since ``key``'s estimate last changed, where it exceeds ``drift_min``
        of that estimate; else 0."""
        snap = self._snap.get(key) if self.follow_drift else None
        if snap is None:
            return 0.0
        since = self._last[key]
        moves = sorted(m - snap.get(o, 0.0) for o, m in self._moved[key[0]].items()
                       if o != key and self._last[o] > since)
        if not moves:
            return 0.0
        mid = len(moves) // 2
        drift = moves[mid] if len(moves) % 2 else 0.5 * (moves[mid - 1] + moves[mid])
        return drift if abs(drift) > self.drift_min * self._ms[key] else 0.0

    def table(self) -> Dict[tuple, Optional[float]]:
        """{(batch size, budget): ms} for every captured batch size and bucket (the start-up log)."""
        return {(bs, b): self.cost(bs, b) for bs in self.batch_sizes for b in self.budgets}


def _lower_median(values) -> float:
    """The median of an odd count, the smaller middle value of an even one (slow rounds are the outliers)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


class TableAcceptModel:
    """Tokens per round from a stated table {budget: accept length (bonus included)}; budget 0 commits 1.
    Between tree entries linear in log2(budget), clamped outside (as ``bench_shape``'s projection). A chain
    bucket (``config.ChainBucket``) takes its own entry, exactly: a chain is not a tree of its width."""

    def __init__(self, table: Dict[int, float]):
        if not table or any(int(b) < 1 or float(t) < 1.0 for b, t in table.items()):
            raise ValueError(f"accept table needs budgets >= 1 with accept lengths >= 1, got {table}")
        self.chains = {b: float(t) for b, t in table.items() if is_chain(b)}
        self.points = sorted((math.log2(int(b)), float(t)) for b, t in table.items() if not is_chain(b))
        if not self.points:
            raise ValueError(f"accept table needs at least one tree budget, got {table}")

    def tokens_per_request(self, budget: int) -> float:
        if budget == 0:
            return 1.0
        if is_chain(budget):
            if budget not in self.chains:
                raise ValueError(f"accept table has no entry for the chain bucket {budget} "
                                 f"(entries {sorted(self.chains, key=int)})")
            return self.chains[budget]
        x, pts = math.log2(budget), self.points
        if x <= pts[0][0]:
            return pts[0][1]
        if x >= pts[-1][0]:
            return pts[-1][1]
        i = bisect.bisect_left([p[0] for p in pts], x)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    def expected_tokens(self, bs: int, budgets: Sequence[int], drafts=None) -> list:
        return [bs * self.tokens_per_request(b) for b in budgets]


class ScoreAcceptModel:
    """Tokens per round from the drafter's tree scores, corrected online.

    ``expected_tokens(bs, budgets, drafts)`` with drafts a ``DraftForecast`` of the latest trees (R requests,
    read a round late; None when no tree has been seen) is (R + ratio_b * sum_b) scaled from R to bs
    requests. ``observe(budget, predicted, observed)`` (accepted drafts of one round, summed over its requests)
    updates ratio_b, the ratio of decayed sums: observed over predicted, each sum multiplied by
    ``1 - smoothing`` before a round's numbers are added, and started from ``prior_drafts`` predicted drafts
    observed at ``prior_ratio``. A round weighs what it predicted: one request's two accepted drafts against one
    predicted move a bucket's ratio a little, a batch's dozens move it most of the way. (Until session 38 each
    round's own ratio entered an average with weight ``smoothing`` and a bucket's first round set it outright:
    in session 36's tiny-pair run at bs 16 the chain bucket's first forecast round, two requests with 1.06
    drafts predicted and 2 observed, set its ratio to 1.89; it moved only with the chain's own forecast rounds,
    still 1.59 after the other seven, whose sums read 0.94, so the chain's drafts were priced ~1.7x and auto ran
    it in stretches; that run's auto took 1306 us per token, budget 63 885.) A bucket never observed uses the
    mean ratio of those that were (``prior_ratio`` before any)."""

    def __init__(self, budgets: Sequence[int], *, smoothing: float = 0.05, prior_ratio: float = 1.0,
                 prior_drafts: float = 8.0):
        if not 0.0 < smoothing <= 1.0 or prior_ratio <= 0.0 or prior_drafts < 0.0:
            raise ValueError(f"smoothing must be in (0, 1], prior_ratio > 0 and prior_drafts >= 0, got {smoothing}, "
                             f"{prior_ratio}, {prior_drafts}")
        self.budgets = tuple(budgets)
        self.smoothing = smoothing
        self.prior_ratio = prior_ratio
        self.prior_drafts = prior_drafts
        self.ratio: Dict[int, float] = {}
        self._sums: Dict[int, list] = {}  # budget -> [predicted, observed] accepted drafts, decayed

    def ratio_for(self, budget: int) -> float:
        if budget in self.ratio:
            return self.ratio[budget]
        return sum(self.ratio.values()) / len(self.ratio) if self.ratio else self.prior_ratio

    def observe(self, budget: int, predicted: float, observed: float) -> None:
        if budget == 0 or predicted <= 0.0:
            return
        sums = self._sums.get(budget)
        if sums is None:
            sums = self._sums[budget] = [self.prior_drafts, self.prior_ratio * self.prior_drafts]
        keep = 1.0 - self.smoothing
        sums[0] = keep * sums[0] + float(predicted)
        sums[1] = keep * sums[1] + float(observed)
        self.ratio[budget] = sums[1] / sums[0]

    def expected_tokens(self, bs: int, budgets: Sequence[int], drafts: Optional[DraftForecast] = None
                        ) -> Optional[list]:
        if drafts is None or drafts.rows <= 0:
            return None
        rows = drafts.rows
        return [(rows + (self.ratio_for(b) * float(drafts.sums[j]) if b else 0.0)) * bs / rows
                for j, b in enumerate(budgets)]


class WidthPolicy:
    """Picks each round's bucket budget (see the module docstring).

    ``choose(bs, drafts)`` -> budget; ``rates(bs, drafts)`` -> {budget: predicted tokens per second or None}.
    Width 0 is chosen only when it pays; after ``probe_every`` consecutive width-0 rounds the next round drafts
    so that the accept model sees fresh scores, at the drafting bucket predicted best: the probe's forecast is
    the largest bucket's tree whatever the probe verifies, so the probe need only lose the least (until session
    39 it took the smallest positive bucket, which on a host-bound engine costs what budget 63 costs for fewer
    tokens). Buckets without a cost are skipped; with no usable prediction the policy drafts at the smallest
    positive bucket. Every
    ``explore_every``-th choice goes to the least observed other bucket predicted within ``explore_within`` of
    the best, so the costs next to the choice stay measured and a wrong estimate heals (at most one round in
    ``explore_every`` at a bucket predicted that much slower).

    With ``explore_stale`` (the default since session 41; ``SGLANG_DDTREE_AUTO_EXPLORE_STALE=0`` turns it off in a
    server) the exploration also reaches a drafting bucket whose own estimate is too high to look near, where its
    cost at the calibrated difference from the best drafting bucket (``CostModel.at_calibrated_gap``) would make it
    near, and it measures the bucket seen longest ago first (never seen first). Session 41 (tiny pair, H100, paired
    runs with ``+loginfo``): on a host-bound engine a bucket priced in a slow stretch kept that price for the whole
    run, 30-60 % above the buckets that cost the same on the GPU (budget 63 at 4.11 ms against 31's 2.2-2.7 at bs 4,
    calibrated 0.02 ms apart), so exploration never measured it again and auto ran 31 where budget 63 alone was
    1.08x faster; the least-observed order would have measured such a bucket, once chosen for hundreds of rounds,
    last. The cost is bounded as before: one round in ``explore_every``. A bucket reached by hope alone has its
    estimate dropped (``CostModel.forget``) as it is measured: it is priced as one never used (its seed plus the
    offset the measured buckets show) while it settles, and measured as a new near tie is, rather than through its
    old price standing in (which would leave it half-healed after one slow round for another ``explore_every``
    rounds per bucket explored). A bucket truly dearer than its calibration says (a host cost the replays miss)
    would be explored, dropped, re-priced and chosen for a few rounds at every such turn; so a bucket hoped for is
    hoped for again only ``FORGET_AFTER`` explorations later, its own estimate deciding between.

    A near tie is where one measurement decides: while another bucket is predicted within ``tie_within`` of the
    best and has fewer than ``tie_observations`` rounds observed at this batch size (its calibration seed, or a
    cost lent from other buckets' offsets, standing in), every ``tie_every``-th choice measures it, costing at
    most ``tie_within`` of those rounds. (Seen at the Qwen3-8B shape, batch 8: calibration priced budgets 15 and
    31 within 1 % of each other, the rounds at 31 then took 9.84 ms against the 9.01 calibrated while 15 took the
    7.62 ms it was priced at, and one exploration in 32 rounds, its first observation skipped as a compile, never
    measured 15 within a 62-round benchmark window.)

    The defaults come from the Qwen3-8B shape at batch 32 (session 23): budgets 7 and 15 were within ~4 % of each
    other while round costs moved with the GPU's power cap, and 10 of 61 measured rounds went to 15 and 31. A single
    noisy round could stand for a bucket the policy then rarely measured again, and ``explore_within`` 0.5 spent the
    explorations on 3 and 31 rather than on the runner-up; hence four used rounds for a near tie (within 10 %) and
    exploration within 20 % (``test_width_policy.py`` simulates that case with stated noise).
    """

    FORGET_AFTER = 16  # explorations before a bucket hoped for and measured may be hoped for again

    def __init__(self, budgets: Sequence[int], costs: CostModel, accept, *, probe_every: int = 16,
                 explore_every: int = 32, explore_within: float = 0.8, tie_every: int = 4, tie_within: float = 0.1,
                 tie_observations: Optional[int] = None, explore_stale: bool = True):
        if 0 not in budgets or sorted(budgets) != list(budgets):
            raise ValueError(f"budgets must be ascending and include 0, got {list(budgets)}")
        if probe_every < 1 or explore_every < 0 or not 0.0 < explore_within <= 1.0:
            raise ValueError(f"probe_every must be >= 1, explore_every >= 0 (0: never) and explore_within in (0, 1], "
                             f"got {probe_every}, {explore_every}, {explore_within}")
        if tie_every < 0 or not 0.0 <= tie_within < 1.0:
            raise ValueError(f"tie_every must be >= 0 (0: never) and tie_within in [0, 1), got {tie_every}, "
                             f"{tie_within}")
        self.budgets = tuple(budgets)
        self.costs = costs
        self.accept = accept
        self.probe_every = probe_every
        self.explore_every = explore_every
        self.explore_within = explore_within
        self.tie_every = tie_every
        self.tie_within = tie_within
        # four rounds the cost model uses (its first ``warmup`` rounds of a key are compile rounds, not used)
        self.tie_observations = costs.warmup + 4 if tie_observations is None else int(tie_observations)
        self.explore_stale = bool(explore_stale)
        self._forgotten: Dict[tuple, int] = {}  # cost key -> the choice at which its estimate was last dropped
        self._zero_run = 0
        self._choices = 0

    def rates(self, bs: int, drafts=None) -> Dict[int, Optional[float]]:
        tokens = self.accept.expected_tokens(bs, self.budgets, drafts)
        out = {}
        for j, b in enumerate(self.budgets):
            ms = self.costs.cost(bs, b)
            out[b] = None if (tokens is None or ms is None or ms <= 0) else 1000.0 * tokens[j] / ms
        return out

    def choose(self, bs: int, drafts=None) -> int:
        rates = self.rates(bs, drafts)
        known = {b: r for b, r in rates.items() if r is not None}
        smallest = self.budgets[1] if len(self.budgets) > 1 else 0
        if not known:
            self._zero_run = 0
            return smallest
        best = max(known, key=lambda b: (known[b], -b))  # equal rates: the smaller budget
        self._choices += 1
        if self.tie_every and self._choices % self.tie_every == 0:
            ties = [b for b, r in known.items() if b != best and r >= (1.0 - self.tie_within) * known[best]
                    and self.costs.observations(bs, b) < self.tie_observations]
            if ties:
                return min(ties, key=lambda b: (self.costs.observations(bs, b), -known[b]))
        if self.explore_every and self._choices % self.explore_every == 0:
            if self.explore_stale:
                hoped = self._hoped(bs, known, best)
                near = [b for b, r in hoped.items() if b != best and r >= self.explore_within * known[best]]
                if near:
                    pick = min(near, key=lambda b: (self.costs.last_seen(bs, b), -hoped[b]))
                    if known[pick] < self.explore_within * known[best]:  # reached by hope alone: a stale price
                        self.costs.forget(bs, pick)
                        self._forgotten[self.costs.key(bs, pick)] = self._choices
                    return pick
            else:
                near = [b for b, r in known.items() if b != best and r >= self.explore_within * known[best]]
                if near:
                    return min(near, key=lambda b: (self.costs.observations(bs, b), -known[b]))
        if best == 0:
            self._zero_run += 1
            if self._zero_run > self.probe_every:
                self._zero_run = 0
                return max((b for b in known if b != 0), key=lambda b: (known[b], -b), default=smallest)
            return 0
        self._zero_run = 0
        return best

    def _hoped(self, bs: int, known: Dict[int, float], best: int) -> Dict[int, float]:
        """Each known bucket's rate at the lower of its estimate and, for a drafting bucket beside a drafting best,
        its cost at the calibrated difference from the best (``explore_stale``; one exploration turn in
        ``explore_every`` asks): its known rate rescaled by estimate / that cost (the same tokens)."""
        if best == 0:
            return dict(known)
        hoped = dict(known)
        for b in known:
            if b == 0 or b == best:
                continue
            dropped = self._forgotten.get(self.costs.key(bs, b))
            if dropped is not None and self._choices - dropped < self.FORGET_AFTER * self.explore_every:
                continue  # hoped for lately and measured: its own estimate speaks until then
            floor = self.costs.at_calibrated_gap(bs, b, best)
            if floor is not None and floor > 0:
                hoped[b] = max(known[b], known[b] * self.costs.cost(bs, b) / floor)
        return hoped

    def describe(self, batch_sizes: Sequence[int], drafts=None) -> list:
        """One line per batch size: the pick and the predicted tokens/s per bucket (the start-up log)."""
        lines = []
        for bs in batch_sizes:
            rates = self.rates(bs, drafts)
            known = {b: r for b, r in rates.items() if r is not None}
            pick = max(known, key=lambda b: (known[b], -b)) if known else None
            cells = ", ".join(f"{b}: {'-' if r is None else f'{r:.0f}'}" for b, r in rates.items())
            lines.append(f"bs {bs}: budget {pick if pick is not None else '?'} (tokens/s by budget {cells})")
        return lines
