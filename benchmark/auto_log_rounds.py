#!/usr/bin/env python3
"""Budget auto's rounds as an engine log records them, one decode-log line per round: per batch size, the bucket
of every round in order, and per (batch size, bucket) the round periods (count, median, spread) and, where the
line carries them (since session 27), the cost model's estimates for that key beside them.

Reads logs of engines run with ``decode_log_interval=1`` at INFO (``bench_shape.py`` sets both for every config
of a run with an auto engine; ``+logrounds`` sets them for one config of ``bench_e2e`` / ``bench_paired``;
``+loginfo`` logs one line per 40 rounds, which this skips). A line whose
interval held one round names its bucket (``rounds by budget b:1``) and its period is #running-req x accept len
/ gen throughput: a host-side reading of the time since the previous line, coarser than the GPU events the
policy itself reads (on random weights, accept len 1). Under the overlap scheduler a line may be written while
the next round runs, so a bucket chosen only in isolated rounds between others' gets periods partly theirs; the
medians of buckets run in stretches are the ones to trust. Session 28 read the cost model's noise from this
(``test_width_policy.py``'s skewed noise; ``results/session28/cost_model.md``).

    python benchmark/auto_log_rounds.py LOG [LOG ...] [--bs 1,2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

from sglang_ddtree.config import is_chain, parse_bucket  # no torch, no SGLang

_LINE = re.compile(r"#running-req: (\d+),.*?accept len: ([\d.]+),.*?rounds by budget ((?:chain)?\d+):1,.*?"
                   r"gen throughput \(token/s\): ([\d.]+)")
# since session 27 the line also holds the cost model's estimates at the interval's batch size (metrics.AutoStats)
_COSTS = re.compile(r"ms/round at bs (\d+) \{([^}]*)\}")
_QUANTILES = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0)


def rounds(lines):
    """[(batch size, bucket, period ms, the cost model's estimates {bucket: ms} or None)] of the single-round
    decode-log lines, in order (a zero throughput, the first line after start, is left out; estimates logged for
    another batch size than the round's, or '-' ones, are left out)."""
    out = []
    for line in lines:
        m = _LINE.search(line)
        if m and float(m.group(4)) > 0:
            bs, accept, budget, tput = int(m.group(1)), float(m.group(2)), parse_bucket(m.group(3)), float(m.group(4))
            est, c = None, _COSTS.search(line)
            if c and int(c.group(1)) == bs:
                cells = (x.split(":") for x in c.group(2).split(",") if ":" in x)
                est = {parse_bucket(b): float(ms) for b, ms in cells if ms.strip() != "-"}
            out.append((bs, budget, 1000.0 * bs * accept / tput, est))
    return out


def summarise(rows, batch_sizes=None) -> dict:
    """{bs: {"sequence": [bucket, ...], "buckets": {bucket: {rounds, median_ms, mean_ms, min_ms, max_ms,
    quantiles_over_median, slow_share, fast_share}}}}; slow / fast: rounds more than 5 % above / below the median.
    The mean is what throughput pays; the cost model estimates a key by a lower median (robust to single stalls), so
    where a bucket's rounds are skewed the two part and the policy under-prices it."""
    out = {}
    for bs, budget, ms, est in rows:
        if batch_sizes and bs not in batch_sizes:
            continue
        entry = out.setdefault(bs, {"sequence": [], "periods": {}, "estimates": {}})
        entry["sequence"].append(budget)
        entry["periods"].setdefault(budget, []).append(ms)
        for b, e in (est or {}).items():
            entry["estimates"].setdefault(b, []).append(e)
    for entry in out.values():
        buckets, estimates = {}, entry.pop("estimates")
        for budget, periods in sorted(entry.pop("periods").items()):
            ordered, med = sorted(periods), statistics.median(periods)
            n = len(ordered)
            buckets[budget] = {
                "rounds": n, "median_ms": round(med, 3), "mean_ms": round(statistics.fmean(periods), 3),
                "min_ms": round(ordered[0], 3),
                "max_ms": round(ordered[-1], 3),
                "quantiles_over_median": {str(q): round(ordered[round(q * (n - 1))] / med, 3) for q in _QUANTILES},
                "slow_share": round(sum(p > 1.05 * med for p in periods) / n, 3),
                "fast_share": round(sum(p < 0.95 * med for p in periods) / n, 3),
            }
            if budget in estimates:  # what the cost model held for this bucket on the lines of this batch size
                buckets[budget]["estimate_ms"] = {"median": round(statistics.median(estimates[budget]), 3),
                                                  "last": round(estimates[budget][-1], 3)}
        entry["buckets"] = buckets
    return dict(sorted(out.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--bs", default="", help="comma-separated batch sizes to keep (default: all)")
    ap.add_argument("--json", help="write the summary (per log) here")
    args = ap.parse_args(argv)
    keep = {int(x) for x in args.bs.split(",") if x.strip()}
    report = {}
    for path in args.logs:
        with open(path, errors="replace") as f:
            report[path] = summary = summarise(rounds(f), keep)
        print(path)
        if not summary:
            print("  no single-round auto lines (decode_log_interval=1 at INFO?)")
        for bs, entry in summary.items():
            print(f"  bs {bs}: {len(entry['sequence'])} rounds, buckets in order: "
                  + " ".join(str(b) for b in entry["sequence"]))
            for budget, s in entry["buckets"].items():
                q = s["quantiles_over_median"]
                est = s.get("estimate_ms")
                print(f"    budget {budget}: {s['rounds']} rounds, median {s['median_ms']:.2f} ms, "
                      f"mean {s['mean_ms']:.2f} "
                      f"(min {s['min_ms']:.2f}, max {s['max_ms']:.2f}; 5/95 % {q['0.05']:.3f} / {q['0.95']:.3f} "
                      f"of the median; {s['slow_share']:.0%} slow, {s['fast_share']:.0%} fast by > 5 %)"
                      + (f"; cost model median {est['median']:.2f}, last {est['last']:.2f} ms" if est else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": " ".join(["python", "benchmark/auto_log_rounds.py"] + list(argv or sys.argv[1:])),
                       "logs": _jsonable(report)}, f, indent=1)
    return 0


def _jsonable(obj):
    """``obj`` with the chain bucket written by its name ("chain15"): json writes an int subclass as a number,
    which would read back as the tree bucket of its width."""
    if isinstance(obj, dict):
        return {(str(k) if is_chain(k) else k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [str(v) if is_chain(v) else _jsonable(v) for v in obj]
    return obj


if __name__ == "__main__":
    sys.exit(main())
