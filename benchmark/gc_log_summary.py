#!/usr/bin/env python3
"""Total the scheduler's garbage collections in engine logs written with ``+gclog`` (SGLang's GC logger,
``SGLANG_LOG_GC=1``): per log and generation, how many collections, their total / max duration, and the share
of the wall time between the first and the last collection they took. Python's collector runs inside whatever
code allocates, so in a profiler trace its time looks like every phase being slower; this says how much of a
decode round it is.

    python benchmark/gc_log_summary.py LOG [LOG ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import re
import sys

_END = re.compile(r"GC end: Time ([\d.]+) \| Generation (\d+) \| Duration: ([\d.]+)s")


def summarise(lines) -> dict:
    """{generation: {collections, total_s, max_s}, plus span_s and gc_share} of one log's GC end lines."""
    gens, times = {}, []
    for line in lines:
        m = _END.search(line)
        if not m:
            continue
        t, gen, dur = float(m.group(1)), m.group(2), float(m.group(3))
        times.append(t)
        g = gens.setdefault(gen, {"collections": 0, "total_s": 0.0, "max_s": 0.0})
        g["collections"] += 1
        g["total_s"] += dur
        g["max_s"] = max(g["max_s"], dur)
    total = sum(g["total_s"] for g in gens.values())
    span = (max(times) - min(times)) if len(times) > 1 else 0.0
    return {"generations": {k: {**v, "total_s": round(v["total_s"], 6)} for k, v in sorted(gens.items())},
            "total_s": round(total, 6), "span_s": round(span, 3),
            "gc_share": round(total / span, 4) if span > 0 else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--json", help="write the summaries here")
    args = ap.parse_args(argv)
    out = {}
    for path in args.logs:
        with open(path, errors="replace") as f:
            out[path] = s = summarise(f)
        per = ", ".join(f"gen {g}: {v['collections']} x, {1000 * v['total_s']:.1f} ms (max {1000 * v['max_s']:.1f})"
                        for g, v in s["generations"].items()) or "no GC lines (was the engine run with +gclog?)"
        share = "" if s["gc_share"] is None else f"; {100 * s['gc_share']:.2f} % of {s['span_s']:.1f} s"
        print(f"{path}: {per}{share}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
