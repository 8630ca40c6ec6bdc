#!/usr/bin/env python3
"""Where a speculative decode round spends its time, from a torch-profiler trace of the scheduler.

Reads a Chrome trace (``*.trace.json[.gz]``) written by SGLang's profiler (``Engine.start_profile`` /
``stop_profile`` with ``with_stack=True``; ``bench_e2e.py --profile-dir`` records one per configuration)
and reports, for the decode rounds of the worker (DDTREE: ``_decode_round``; DFLASH / EAGLE:
``forward_batch_generation`` of the spec-v2 worker):
  - rounds, the median CPU time of one round's Python call, the median period between round starts
    (1 / rounds per second: what bounds throughput when the CPU is the bottleneck);
  - GPU busy time (union of kernel / memcpy / memset intervals) and kernels per round over the rounds' span;
  - a call tree under the round: mean microseconds and calls per round for every Python function down to
    ``--depth`` levels (inclusive times), so two configurations can be compared line by line;
  - the same for the scheduler loop that calls the rounds (e.g. ``event_loop_overlap``), per round.

    python benchmark/analyze_trace.py TRACE [TRACE ...] [--depth 3] [--min-us 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict

ROUND_FUNCS = ("sglang_ddtree/worker/worker.py", "_decode_round"), \
    ("speculative/dflash_worker_v2.py", "forward_batch_generation"), \
    ("speculative/eagle_worker_v2.py", "forward_batch_generation")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path: str) -> list:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _is_round(name: str) -> bool:
    return any(file in name and name.endswith(": " + func) for file, func in ROUND_FUNCS)


def _short(name: str) -> str:
    """'.../site-packages/sglang/srt/x/y.py(12): f' -> 'sglang/srt/x/y.py:f' (line numbers dropped so that
    the same function aggregates across call sites)."""
    path, _, func = name.partition(": ")
    path = path.split("site-packages/")[-1].split("/python/")[-1]
    return f"{path.split('(')[0]}:{func}" if func else name


def _union(intervals) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def analyze(events: list, depth: int = 3, min_us: float = 5.0) -> dict:
    py = [e for e in events if e.get("cat") == "python_function" and e.get("ph") == "X"]
    by_id = {e["args"].get("Python id"): e for e in py if "args" in e}
    children = defaultdict(list)
    for e in py:
        parent = e.get("args", {}).get("Python parent id")
        if parent is not None:
            children[parent].append(e)
    rounds = [e for e in py if _is_round(e["name"])]
    # outermost only (DDTREE's forward_batch_generation is not a round function; _decode_round is)
    round_ids = {e["args"]["Python id"] for e in rounds}

    def has_round_ancestor(e):
        parent = e["args"].get("Python parent id")
        while parent is not None:
            if parent in round_ids:
                return True
            parent = by_id.get(parent, {}).get("args", {}).get("Python parent id")
        return False

    rounds = sorted((e for e in rounds if not has_round_ancestor(e)), key=lambda e: e["ts"])
    if len(rounds) < 3:
        return {"error": f"only {len(rounds)} decode rounds found in the trace"}
    # the first call may be a prefill (same function for DFLASH): drop calls much longer than the median
    med = statistics.median(e["dur"] for e in rounds)
    decode = [e for e in rounds if e["dur"] <= 3 * med]
    starts = [e["ts"] for e in decode]
    periods = [b - a for a, b in zip(starts, starts[1:])]
    t0, t1 = decode[0]["ts"], decode[-1]["ts"] + decode[-1]["dur"]
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events
           if e.get("cat") in GPU_CATS and e.get("ph") == "X" and t0 <= e["ts"] <= t1]
    n = len(decode)
    tree = defaultdict(lambda: [0.0, 0])

    def walk(e, path, level):
        for c in children.get(e["args"]["Python id"], ()):
            key = path + (_short(c["name"]),)
            tree[key][0] += c["dur"]
            tree[key][1] += 1
            if level < depth:
                walk(c, key, level + 1)

    for e in decode:
        walk(e, (), 1)
    rows = [{"path": list(k), "us_per_round": round(v[0] / n, 1), "calls_per_round": round(v[1] / n, 2)}
            for k, v in tree.items() if v[0] / n >= min_us]
    rows.sort(key=lambda r: r["path"])

    # The scheduler loop around the rounds: the first ancestor of a round that outlives the rounds' span
    # (e.g. event_loop_overlap); its children between the first and the last round, per round.
    loop, cur = None, decode[-1]
    while cur is not None:
        parent = by_id.get(cur["args"].get("Python parent id"))
        if parent is not None and parent["ts"] <= t0 and parent["ts"] + parent["dur"] >= t1:
            loop = parent
            break
        cur = parent
    loop_rows = []
    if loop is not None:
        tree.clear()
        inside = [c for c in children.get(loop["args"]["Python id"], ()) if t0 <= c["ts"] < t1]
        for c in inside:
            key = (_short(c["name"]),)
            tree[key][0] += c["dur"]
            tree[key][1] += 1
            walk(c, key, 2)
        loop_rows = [{"path": list(k), "us_per_round": round(v[0] / n, 1), "calls_per_round": round(v[1] / n, 2)}
                     for k, v in tree.items() if v[0] / n >= min_us]
        loop_rows.sort(key=lambda r: r["path"])
    return {
        "round_function": _short(decode[0]["name"]), "rounds": n,
        "round_cpu_us_median": round(statistics.median(e["dur"] for e in decode), 1),
        "round_period_us_median": round(statistics.median(periods), 1) if periods else None,
        "gpu_busy_us_per_round": round(_union(gpu) / n, 1), "gpu_ops_per_round": round(len(gpu) / n, 1),
        "span_us_per_round": round((t1 - t0) / n, 1),
        "call_tree": rows,
        "loop_function": _short(loop["name"]) if loop is not None else None, "loop_tree": loop_rows,
    }


def _print(name: str, rep: dict) -> None:
    print(f"== {name}")
    if "error" in rep:
        print("  " + rep["error"])
        return
    print(f"  {rep['round_function']}: {rep['rounds']} rounds; CPU per round (median) {rep['round_cpu_us_median']} us;"
          f" period {rep['round_period_us_median']} us; GPU busy {rep['gpu_busy_us_per_round']} us/round,"
          f" {rep['gpu_ops_per_round']} GPU ops/round; span {rep['span_us_per_round']} us/round")
    for r in rep["call_tree"]:
        print(f"  {'  ' * (len(r['path']) - 1)}{r['path'][-1]:<70} {r['us_per_round']:>9.1f} us"
              f" x{r['calls_per_round']:g}")
    if rep.get("loop_function"):
        print(f"  -- scheduler loop {rep['loop_function']}, per round:")
        for r in rep["loop_tree"]:
            print(f"  {'  ' * (len(r['path']) - 1)}{r['path'][-1]:<70} {r['us_per_round']:>9.1f} us"
                  f" x{r['calls_per_round']:g}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--min-us", type=float, default=5.0, help="hide call-tree lines below this per round")
    ap.add_argument("--json", help="write the reports here")
    args = ap.parse_args(argv)
    reports = {}
    for path in args.traces:
        reports[path] = analyze(load(path), args.depth, args.min_us)
        _print(path, reports[path])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
