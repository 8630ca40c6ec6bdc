"""Projected throughput of ``bench_shape.py``: accept lengths (tau, tokens per round, bonus included) per config
from a stated table, since dummy weights accept ~1 token per round. Fixed budgets read the table (linear in
log2(budget) between entries, clamped outside); ``ddtree:auto`` averages tau over its verified rounds' budgets
(tau(0) = 1). Pure arithmetic, no engine; the table's sources are in ``bench_shape``'s docstring."""

from __future__ import annotations

import bisect
import json
import math

from sglang_ddtree.config import ChainBucket, is_chain, parse_bucket  # no torch, no SGLang

PAPER_ACCEPT = {
    "source": "DDTree paper (arXiv 2604.12989), Qwen3-8B, MATH-500, T=0: DFlash tau from Table 1, DDTree tau "
              "per node budget from the budget-tradeoff figure (liranringel/ddtree, math500-budget-tradeoff.pdf)",
    "plain": 1.0, "dflash": 7.79,
    "ddtree": {"16": 8.61, "32": 9.27, "64": 9.75, "128": 10.20, "256": 10.43, "512": 10.73, "1024": 10.98},
}


def chain_rate(dflash_tau: float, depth: int) -> float:
    """The per-position acceptance a in (0, 1] of a chain of ``depth`` drafts whose expected accept length is
    ``dflash_tau`` (bonus included): 1 + a + a^2 + ... + a^depth = tau, solved by bisection."""
    target = float(dflash_tau)
    if not 1.0 <= target <= depth + 1:
        raise ValueError(f"DFLASH tau {dflash_tau} must be in [1, {depth + 1}] for a chain of {depth} drafts")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(depth + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def with_small_budgets(table: dict, budgets, depth: int = 15) -> dict:
    """``table`` plus, for every budget in ``budgets`` below its smallest DDTree entry B0, an ASSUMED accept length:
    the larger of two lower bounds of what a tree of b drafts accepts (tokens per round, bonus included).
    - DFLASH's chain of b drafts: tau(b) = 1 + a + ... + a^min(b, depth), with a from the table's DFLASH tau
      (``chain_rate``). A chain of b nodes is a tree of budget b, and the best-first tree's nodes score at least
      the chain's, so this is what such a tree accepts when branching buys nothing.
    - b / B0 of the B0-node tree's drafts: tau(b) = 1 + (b / B0) (tau(B0) - 1). Best-first trees are nested (the
      b best nodes are among the B0 best), and for a calibrated drafter a node's acceptance is its path
      probability, so the b best of the B0 nodes hold at least b / B0 of their expected drafts.
    At the paper's table (B0 = 16, tau 8.61) the second bound decides budget 15 (8.13 against the chain's 7.79); the
    chain decides 1 / 3 / 7. Each added entry is named in ``assumed``; the policy (through
    SGLANG_DDTREE_AUTO_ACCEPT_TABLE) and the projection read the same table."""
    smallest = min(int(b) for b in table["ddtree"])
    small = sorted(int(b) for b in budgets if 0 < int(b) < smallest)
    if not small:
        return table
    a = chain_rate(table["dflash"], depth)
    top = float(table["ddtree"][str(smallest)])
    ddtree = dict(table["ddtree"])
    for b in small:
        chain = sum(a ** i for i in range(min(b, depth) + 1))
        nested = 1.0 + b / smallest * (top - 1.0)
        ddtree[str(b)] = round(max(chain, nested), 4)
    return dict(table, ddtree=ddtree, assumed={
        "budgets": small, "rule": f"the larger of DFLASH's chain of min(b, {depth}) drafts at per-position acceptance "
                                  f"{a:.4f} (from dflash tau {table['dflash']}) and b / {smallest} of the "
                                  f"{smallest}-node tree's drafts (1 + b / {smallest} x {top - 1.0:.4g})"})


def with_chain_bucket(table: dict, drafts: int = 15, depth: int = 15) -> dict:
    """``table`` plus the chain bucket's accept length (budget auto on fa3, ``config.ChainBucket``): the top-1
    chain of ``drafts`` drafts is DFLASH's own draft, so tau = 1 + a + ... + a^drafts at DFLASH's per-position
    acceptance a (``chain_rate``); for ``drafts`` = ``depth`` that is the table's DFLASH tau itself, no
    assumption beyond the drafter's. The entry is named ``chain<drafts>``, as the policy reads it; a table that
    states it keeps its own."""
    if str(ChainBucket(drafts)) in table["ddtree"]:
        return table
    a = chain_rate(table["dflash"], depth)
    tau = round(sum(a ** i for i in range(min(drafts, depth) + 1)), 4)
    return dict(table, ddtree={**table["ddtree"], str(ChainBucket(drafts)): tau})


def config_key(spec: str):
    """``dflash+fa3`` -> ("dflash", None); ``ddtree:16:8+fa3`` -> ("ddtree", 16); ``ddtree:auto:8`` ->
    ("ddtree", "auto")."""
    base = spec.split("+")[0]
    if base.startswith("ddtree:"):
        budget = base.split(":")[1]
        return "ddtree", budget if budget == "auto" else int(budget)
    return base, None


def tau_for_budget(ddtree_table: dict, budget: float) -> tuple[float, str]:
    """Accept length at ``budget`` from {budget: tau}: exact, linear in log2(budget) between neighbours,
    or clamped outside the table; the chain bucket (``chain15``) exactly its own entry. Returns (tau, how)."""
    if is_chain(budget):
        if str(budget) not in ddtree_table:
            raise ValueError(f"the accept table has no entry for the chain bucket {budget}")
        return float(ddtree_table[str(budget)]), "table (the chain: DFLASH's draft)"
    points = sorted((int(b), float(t)) for b, t in ddtree_table.items() if not is_chain(parse_bucket(b)))
    xs = [b for b, _ in points]
    if budget in xs:
        return points[xs.index(budget)][1], "table"
    if budget < xs[0] or budget > xs[-1]:
        b, t = points[0] if budget < xs[0] else points[-1]
        return t, f"clamped to the table's budget {b}"
    i = bisect.bisect(xs, budget)
    (b0, t0), (b1, t1) = points[i - 1], points[i]
    w = (math.log2(budget) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
    return t0 + w * (t1 - t0), f"interpolated in log2(budget) between {b0} and {b1}"


def projected_tau(spec: str, table: dict, budget_rounds: dict = None):
    """(tau, how) for a config, or (None, why) when it cannot be projected. ``ddtree:auto`` needs its
    verified-budget distribution ``budget_rounds`` {budget: rounds} and projects ``auto_tau`` of it."""
    kind, budget = config_key(spec)
    if kind != "ddtree":
        return float(table[kind]), "table"
    if budget == "auto":
        if not budget_rounds or sum(budget_rounds.values()) <= 0:
            return None, "ddtree:auto without a verified-budget distribution (no budget-rounds counts)"
        return auto_tau(table["ddtree"], budget_rounds)
    return tau_for_budget(table["ddtree"], budget)


def tau_by_budget(ddtree_table: dict, budgets) -> dict:
    """{budget: (tau, how)}: budget 0 (no drafting) commits the bonus token only, 1.0; others as fixed budgets."""
    return {b: (1.0, "no drafting") if b == 0 else tau_for_budget(ddtree_table, b) for b in map(parse_bucket, budgets)}


def auto_tau(ddtree_table: dict, budget_rounds: dict) -> tuple[float, str]:
    """Tokens per round of ``ddtree:auto`` over rounds that verified budget b_r: the mean over rounds of tau(b_r)
    (every request of a round verifies the round's budget), NOT tau at the mean budget (tau is concave in the
    budget, and budget 0 commits 1 token). ``budget_rounds``: {budget: rounds}. Returns (tau, how)."""
    counts = {parse_bucket(b): int(n) for b, n in budget_rounds.items() if int(n) > 0}
    taus = tau_by_budget(ddtree_table, counts)
    total = sum(counts.values())
    tau = sum(n * taus[b][0] for b, n in counts.items()) / total
    clamped = sorted(b for b, (_, how) in taus.items() if how.startswith("clamped"))
    note = f"; budgets {clamped} clamped to the table's ends" if clamped else ""
    return tau, f"mean over {total} verified rounds of tau(budget) (budget 0: 1.0){note}"


def _is_bucket_name(text) -> bool:
    try:
        return parse_bucket(str(text)) >= 0
    except ValueError:
        return False


def load_accept_table(path: str) -> dict:
    with open(path) as f:
        table = json.load(f)
    ok = (isinstance(table, dict) and all(isinstance(table.get(k), (int, float)) for k in ("plain", "dflash"))
          and isinstance(table.get("ddtree"), dict) and table["ddtree"]
          and all(_is_bucket_name(b) and isinstance(t, (int, float)) for b, t in table["ddtree"].items()))
    if not ok:
        raise ValueError(f"--accept-table {path}: want {{\"source\": ..., \"plain\": 1.0, \"dflash\": 7.79, "
                         f"\"ddtree\": {{\"16\": 8.61, ...}}}}")
    return table


def is_auto(spec: str) -> bool:
    return config_key(spec) == ("ddtree", "auto")


def auto_record(ms: list, table: dict) -> dict:
    """A ``ddtree:auto`` config at one concurrency: its verified budgets pooled over the repetitions' windows
    and per window, the mean budget, tau per budget and the projected tau (``auto_tau``) pooled and per
    repetition. A window whose distribution is missing voids the projection (its round time is in the median)."""
    windows = [{parse_bucket(b): n for b, n in m["budget_rounds"].items()} if m.get("budget_rounds") else None
               for m in ms]
    pooled = {}
    for w in windows:
        for b, n in (w or {}).items():
            pooled[b] = pooled.get(b, 0) + n
    lost = [r for r, w in enumerate(windows) if not w]
    rec = {"budget_rounds": {str(b): pooled[b] for b in sorted(pooled)},
           "budget_rounds_per_repetition": [m.get("budget_rounds") for m in ms],
           "budget_rounds_coverage": [[m.get("budget_rounds_counted"), m.get("rounds_run")] for m in ms],
           "budget_mean": round(sum(b * n for b, n in pooled.items()) / sum(pooled.values()), 3) if pooled else None,
           "tau_by_budget": {str(b): round(t, 4)
                             for b, (t, _) in tau_by_budget(table["ddtree"], sorted(pooled)).items()},
           "tau_per_repetition": [auto_tau(table["ddtree"], w)[0] if w else None for w in windows]}
    if lost:
        rec.update(tau=None, tau_source=f"ddtree:auto: repetitions {lost} counted no verified budgets")
    else:
        rec["tau"], rec["tau_source"] = auto_tau(table["ddtree"], pooled)
    return rec
