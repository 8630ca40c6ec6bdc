#!/usr/bin/env python3
"""GPU time of the draft head's fused top-K + logsumexp (``draft_head.topk_lse`` on ``worker/kernels/topk_lse.py``)
per launch configuration, against PyTorch's ``topk`` + ``logsumexp``, at the draft head's real shapes.

Why: at the Qwen3-8B shape on the H200 (session 18, c 32, budget 15) ``topk_lse_slices_kernel`` took 349 us of each
DDTREE round's draft (480 rows x 151936 logits): about 10x the time one read of those bf16 logits takes at the
H200's bandwidth. Its cost is reductions, not memory: 2K + 2 block reductions per program, one program per
(row, ``block`` columns). A wider block means fewer programs and fewer reductions in all; this measures which
(block, num_warps) is fastest per row count, and checks each against PyTorch on the same logits (values and ids
exact, lower id first on ties; logsumexp within 2e-5 relative).

Rows: the draft head reduces (block size - 1) positions per request, at most 256 rows at once (its token chunk);
``--rows 15,120,256`` covers c 1, c 8 and a full chunk. Times are CUDA-event medians in microseconds a call over
``--iters`` replays of a CUDA graph of ``GRAPH_CALLS`` calls (the draft graph runs the head the same way), after a
warm-up; ``--timer launch`` times each call alone, which shows its host launches where the kernels are short
(session 27: the threshold form's four launches read ~100 us up to 150 rows). PyTorch's reference is timed per call.

    python benchmark/bench_topk_lse.py [--rows 15,120,256] [--vocab 151936] [--topk 8] \\
        [--configs 4096x8,8192x8,16384x16,threshold:4096x8] [--iters 50] [--timer graph|launch] [--out X.json]

A packed-key form of the slice kernel (``keyed:BLOCKxWARPS``) was measured here slower on the H200 (session 20,
``benchmark/results/session20/topk_lse.json``: 35-48 % slower than 4096x8 at 120-256 rows, 3 us faster at 15)
and removed; configurations are plain BLOCKxWARPS. ``threshold:BLOCKxWARPS`` runs only the slices whose max reaches
the row's K-th largest slice max through the K rounds (``kernels/topk_lse.py``); the draft head takes it at
every row count as ``threshold:2048x4`` (session 29, ``benchmark/results/session29/topk_lse.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import TIMERS, event_median_us, kernel_median_us, positive_ints, write_report  # noqa: E402

DEFAULT_CONFIGS = "4096x8,8192x8,16384x16,threshold:4096x8,threshold:8192x8,threshold:2048x4"


def parse_rows(text: str) -> List[int]:
    return positive_ints(text, "--rows", "row counts", "15,120,256")


def parse_configs(text: str) -> List[Tuple[int, int, str]]:
    """'[threshold:]BLOCKxWARPS,...' -> [(block, warps, select)]; block a power of two >= 64, warps one of 1, 2, 4,
    8, 16, 32; ``threshold:`` times ``draft_head.topk_lse(select="threshold")`` (only the slices that can hold
    the top-K take their K rounds), no prefix the slice kernel (``select="all"``)."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        select, _, shape = item.rpartition(":")
        select = select or "all"
        try:
            block, warps = (int(v) for v in shape.split("x"))
        except ValueError:
            block = warps = 0
        if select != "threshold" and item.count(":"):
            block = warps = 0
        if block < 64 or block & (block - 1) or warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"--configs {item!r}: [threshold:]BLOCKxWARPS with BLOCK a power of two >= 64 and "
                             f"WARPS one of 1, 2, 4, 8, 16, 32, e.g. {DEFAULT_CONFIGS}")
        out.append((block, warps, select))
    if not out:
        raise ValueError(f"--configs {text!r}: at least one [threshold:]BLOCKxWARPS, e.g. {DEFAULT_CONFIGS}")
    return out


def config_name(block: int, warps: int, select: str = "all") -> str:
    return f"{block}x{warps}" if select == "all" else f"{select}:{block}x{warps}"


GRAPH_CALLS = 8  # calls a graph replay holds with --timer graph


def run(rows_list: Sequence[int], vocab: int, topk: int, configs: Sequence[Tuple[int, int]], iters: int,
        timer: str = "graph") -> dict:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("a CUDA GPU is required (the kernel's time is what this measures)")
    from sglang_ddtree.worker.draft_head import topk_lse

    out = {}
    for rows in rows_list:
        g = torch.Generator(device="cuda").manual_seed(rows)
        logits = (torch.randn(rows, vocab, device="cuda", generator=g) * 4).to(torch.bfloat16)
        wide = logits.float()
        order = torch.sort(-wide, dim=-1, stable=True).indices[:, :topk]
        want_val, want_lse = wide.gather(1, order), torch.logsumexp(wide, dim=-1)
        val = torch.empty((rows, topk), dtype=torch.float32, device="cuda")
        ids = torch.empty((rows, topk), dtype=torch.int64, device="cuda")
        lse = torch.empty((rows,), dtype=torch.float32, device="cuda")
        rec = {"torch_topk_logsumexp_us": event_median_us(
            lambda: (logits.float().topk(topk, dim=-1), torch.logsumexp(logits.float(), dim=-1)), iters)}
        for block, warps, select in configs:
            key = config_name(block, warps, select)
            try:
                topk_lse(logits, topk, val, ids, lse, backend="triton", block=block, num_warps=warps, select=select)
            except Exception as e:  # a configuration that does not compile or launch (registers, shared memory)
                rec[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
                continue
            exact = bool(torch.equal(val, want_val) and torch.equal(ids, order))
            lse_ok = bool(torch.allclose(lse, want_lse, rtol=2e-5, atol=0))
            us = kernel_median_us(timer, lambda: topk_lse(logits, topk, val, ids, lse, backend="triton", block=block,
                                                          num_warps=warps, select=select), iters, calls=GRAPH_CALLS)
            rec[key] = {"us": us, "exact": exact, "lse_ok": lse_ok}
        ok = {k: v["us"] for k, v in rec.items() if isinstance(v, dict) and v.get("exact") and v.get("lse_ok")}
        rec["fastest"] = min(ok, key=ok.get) if ok else None
        out[str(rows)] = rec
        print(f"[bench_topk_lse] rows {rows}: " + ", ".join(
            f"{k} {v['us'] if isinstance(v, dict) and 'us' in v else v}" for k, v in rec.items()), flush=True)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_topk_lse", usage="%(prog)s [options] (see --help)",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="15,120,256", help="row counts (comma-separated)")
    ap.add_argument("--vocab", type=int, default=151936, help="columns per row (Qwen3: 151936)")
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="launch configurations BLOCKxWARPS (comma-separated)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--timer", choices=TIMERS, default="graph",
                    help=f"graph: {GRAPH_CALLS} calls a CUDA-graph replay, as the draft graph runs the head (default); "
                         "launch: each call timed alone (its host launches show)")
    ap.add_argument("--out", help="JSON report")
    args = ap.parse_args(argv)
    try:
        rows, configs = parse_rows(args.rows), parse_configs(args.configs)
    except ValueError as e:
        ap.error(str(e))
    for flag, value, low in (("--vocab", args.vocab, 2), ("--topk", args.topk, 1), ("--iters", args.iters, 1)):
        if value < low:
            ap.error(f"{flag} {value}: must be at least {low}")
    if args.topk > args.vocab:
        ap.error(f"--topk {args.topk}: must be at most --vocab ({args.vocab})")
    try:
        results = run(rows, args.vocab, args.topk, configs, args.iters, args.timer)
    except (ImportError, RuntimeError) as e:
        print(f"bench_topk_lse: error: {e}", file=sys.stderr)
        return 1
    if args.out:
        write_report(args.out, sys.argv[1:] if argv is None else list(argv),
                     settings={"rows": rows, "vocab": args.vocab, "topk": args.topk, "iters": args.iters,
                               "timer": args.timer, "graph_calls": GRAPH_CALLS,
                               "configs": [config_name(*c) for c in configs]},
                     by_rows=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
