#!/usr/bin/env python3
"""What the prefill iterations between two decode-log lines cost an engine, read from its log (session 44).

An engine run at INFO with ``decode_log_interval`` 40 (``+loginfo`` in ``bench_paired`` / ``bench_e2e``) writes one
``Decode batch`` line per 40 decode iterations and one ``Prefill batch`` line per prefill iteration between them.
Per interval (the time since the previous decode line):

- its wall time: #running-req x 40 x accept len / gen throughput (the tokens of the interval over its throughput;
  #running-req and accept len as logged at its end, so an interval where requests left or joined reads
  approximately);
- for budget auto, the rounds' own time: the interval's rounds by budget x the cost model's ms/round of each
  budget at the logged batch size (the policy's estimates of its rounds, GPU events read a round later);
- the rest, the interval's time outside its rounds: prefill iterations, the scheduling around them, idle;
- the prefill batches in it, and the requests they admitted (#new-seq);
- how many of those batches ran without the target's prefill CUDA graph (``cuda graph: False``: upstream's capture
  list starts at 4 tokens and a replay may at most double a batch, so a 1-token prefill, a prompt the radix cache
  holds but its last token, runs eagerly; session 45 found ~400 such batches in each speculative engine of session
  43's one-length run, ~10 in AR's; ``+pregraph1`` captures from 1 token).

Per engine and batch-size band it prints the median throughput and prefills per interval and, for auto, the rest
per prefill batch (the sum of the rests over the sum of the prefills) and a least-squares slope of the rest
against the prefill count. A rest that grows by several ms per prefill batch says where a one-length load's
time goes; ``PAIRED_PHASES=1 ... +split`` measures its parts directly.

    python benchmark/prefill_gaps.py LOG [LOG ...] [--bands 8-16,30-48,49-64] [--max-interval-s 0.4] [--json OUT]

Intervals longer than ``--max-interval-s`` (a pause between cells or repetitions) are left out.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

DECODE_INTERVAL = 40  # SGLang's --decode-log-interval in the engines this reads (bench_paired's +loginfo)

_RUNNING = re.compile(r"#running-req: (\d+)")
_THROUGHPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
_ACCEPT = re.compile(r"accept len: ([\d.]+)")
_MIX = re.compile(r"rounds by budget ([^,]*),")
_COSTS = re.compile(r"ms/round at bs \d+ \{([^}]*)\}")
_NEW_SEQ = re.compile(r"#new-seq: (\d+)")
_ALGO = re.compile(r"speculative_algorithm=(?:'([A-Z]+)'|None)")


def intervals(lines, interval=DECODE_INTERVAL):
    """[dict(running, throughput, wall_s, rounds_s or None, prefills, admitted)] per decode-log line of ``lines``
    (the first line after start, throughput 0, left out). ``rounds_s`` only where the line carries auto's budget
    mix and a cost for every budget in it."""
    out, prefills, admitted, eager = [], 0, 0, 0
    for line in lines:
        if "Prefill batch" in line:
            prefills += 1
            eager += "cuda graph: False" in line
            m = _NEW_SEQ.search(line)
            admitted += int(m.group(1)) if m else 0
            continue
        if "Decode batch" not in line:
            continue
        running, thr = _RUNNING.search(line), _THROUGHPUT.search(line)
        if running is None or thr is None:
            continue
        running, thr = int(running.group(1)), float(thr.group(1))
        accept = _ACCEPT.search(line)
        accept = float(accept.group(1)) if accept else 1.0
        row = dict(running=running, throughput=thr, prefills=prefills, admitted=admitted, eager=eager, rounds_s=None,
                   wall_s=running * interval * accept / thr if thr > 0 else None)
        mix, costs = _MIX.search(line), _COSTS.search(line)
        if mix and costs:
            est = {}
            for item in costs.group(1).split(","):
                key, _, ms = item.partition(":")
                try:
                    est[key.strip()] = float(ms)
                except ValueError:
                    pass  # '-': not estimated yet
            counts = {k: int(v) for k, v in re.findall(r"((?:chain)?\d+):(\d+)", mix.group(1))}
            if counts and all(k in est for k in counts):
                row["rounds_s"] = sum(n * est[k] for k, n in counts.items()) / 1000.0
        prefills, admitted, eager = 0, 0, 0
        if row["wall_s"] is not None:
            out.append(row)
    return out


def summarise(rows, bands, max_interval_s):
    """Per band (lo, hi) of #running-req: the intervals' medians and, where rounds_s is known, the rest."""
    out = {}
    for lo, hi in bands:
        rr = [r for r in rows if lo <= r["running"] <= hi and r["wall_s"] <= max_interval_s]
        if not rr:
            continue
        band = dict(intervals=len(rr), throughput_median=round(statistics.median(r["throughput"] for r in rr), 1),
                    wall_ms_median=round(1000 * statistics.median(r["wall_s"] for r in rr), 2),
                    prefills_mean=round(statistics.fmean(r["prefills"] for r in rr), 2),
                    admitted_mean=round(statistics.fmean(r["admitted"] for r in rr), 2),
                    eager_mean=round(statistics.fmean(r["eager"] for r in rr), 2))
        timed = [r for r in rr if r["rounds_s"] is not None]
        if timed:
            rest = [r["wall_s"] - r["rounds_s"] for r in timed]
            n = [r["prefills"] for r in timed]
            band["rounds_ms_mean"] = round(1000 * statistics.fmean(r["rounds_s"] for r in timed), 2)
            band["rest_ms_mean"] = round(1000 * statistics.fmean(rest), 2)
            if sum(n):
                band["rest_ms_per_prefill"] = round(1000 * sum(rest) / sum(n), 2)
            if len(set(n)) > 1:
                mean_n, mean_r = statistics.fmean(n), statistics.fmean(rest)
                slope = (sum((a - mean_n) * (b - mean_r) for a, b in zip(n, rest))
                         / sum((a - mean_n) ** 2 for a in n))
                band["rest_ms_slope_per_prefill"] = round(1000 * slope, 2)
        out[f"{lo}-{hi}"] = band
    return out


def _bands(text):
    try:
        return [tuple(int(x) for x in part.split("-")) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--bands {text!r}: use lo-hi pairs of #running-req, e.g. 8-16,30-48")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--bands", type=_bands, default=_bands("8-16,30-48,49-64"))
    ap.add_argument("--max-interval-s", type=float, default=0.4)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    report = {}
    for path in args.logs:
        with open(path, errors="replace") as f:
            lines = f.readlines()
        algo = next((m.group(1) or "none" for m in map(_ALGO.search, lines) if m), "?")
        report[path] = dict(algorithm=algo, bands=summarise(intervals(lines), args.bands, args.max_interval_s))
        for band, s in report[path]["bands"].items():
            rest = (f", rest {s['rest_ms_mean']} ms of which {s.get('rest_ms_per_prefill', '-')} ms per prefill "
                    f"(slope {s.get('rest_ms_slope_per_prefill', '-')})" if "rest_ms_mean" in s else "")
            print(f"{path} [{algo}] running {band}: {s['intervals']} intervals, {s['throughput_median']} tok/s "
                  f"median, {s['wall_ms_median']} ms, {s['prefills_mean']} prefills ({s['admitted_mean']} "
                  f"requests, {s['eager_mean']} eager){', rounds ' + str(s['rounds_ms_mean']) + ' ms' if 'rounds_ms_mean' in s else ''}{rest}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
