"""``ddtree:auto`` in ``bench_shape.py``, engine side: the accept table its engine decides from, and the verified
budget of every round, counted by the worker's own Prometheus counter ``sglang:ddtree_budget_rounds_total{budget}``
and read from the engine process's prometheus_client multiprocess directory (files; the engine is never asked).
Why this channel and what it cannot see: ``bench_shape``'s docstring, "Budget auto"."""

from __future__ import annotations

import json
import time

from bench_e2e import engine_env
from shape_projection import is_auto

from sglang_ddtree.config import AUTO_MAX_BUDGET, bucket_budgets, parse_bucket  # no torch, no SGLang
from sglang_ddtree.worker.metrics import AUTO_ROUNDS_NAME

# ``sglang_ddtree.worker.widths.ACCEPT_TABLE_ENV`` (spelled here: that module imports torch): the accept lengths
# ``ddtree:auto`` decides from on random weights; every auto engine gets the projection's own table in it.
ACCEPT_TABLE_ENV = "SGLANG_DDTREE_AUTO_ACCEPT_TABLE"
AUTO_BUCKETS = bucket_budgets(AUTO_MAX_BUDGET)  # the budgets auto chooses from: 0 (no drafting), 1, 3, ..., 63
# Engine settings of EVERY config of a run that has a ddtree:auto config (paired: all pay the same log-step
# work): the verified-budget counter is exported at decode-log steps only, so every decode round is one.
BUDGET_COUNT_SETTINGS = {"enable_metrics": True, "decode_log_interval": 1}


def config_env(spec: str, table: dict) -> dict:
    """Environment variables of a config's engine processes: its modifiers' (``bench_e2e.engine_env``, e.g.
    ``+fa3tree``) and, for ``ddtree:auto``, the projection's DDTree accept lengths as ``ACCEPT_TABLE_ENV``
    (JSON {budget: tau}), so the policy chooses with the tau the projection then applies to its choices."""
    env = engine_env(spec)
    if is_auto(spec):
        points = sorted((parse_bucket(b), float(t)) for b, t in table["ddtree"].items())  # a chain after its width
        env[ACCEPT_TABLE_ENV] = json.dumps({str(b): t for b, t in points})
    return env


def read_budget_rounds(prom_dir: str) -> dict:
    """{budget: rounds} of ``sglang:ddtree_budget_rounds_total`` (every label set summed) as the engine's
    processes left it in their prometheus_client multiprocess directory ``prom_dir``: reads files, asks the
    engine nothing. Import prometheus_client only after PROMETHEUS_MULTIPROC_DIR is set (it reads it once)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=prom_dir)
    out = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name in (AUTO_ROUNDS_NAME, AUTO_ROUNDS_NAME + "_total") and "budget" in sample.labels:
                b = parse_bucket(sample.labels["budget"])
                out[b] = out.get(b, 0) + int(round(sample.value))
    return out


def settled_budget_rounds(prom_dir: str, *, poll_s: float = 0.02, max_polls: int = 25) -> dict:
    """``read_budget_rounds`` once two reads ``poll_s`` apart agree (at most ``max_polls``): upstream streams a
    round's output before its decode-log step exports the counter, so a generate can return just before it."""
    last = read_budget_rounds(prom_dir)
    for _ in range(max_polls):
        time.sleep(poll_s)
        now = read_budget_rounds(prom_dir)
        if now == last:
            break
        last = now
    return last


def count_diff(after: dict, before: dict) -> dict:
    """{budget: after - before} for budgets that grew (a counter never shrinks while its engine lives)."""
    assert all(after.get(b, 0) >= n for b, n in before.items()), (before, after)
    return {b: n - before.get(b, 0) for b, n in sorted(after.items()) if n > before.get(b, 0)}
