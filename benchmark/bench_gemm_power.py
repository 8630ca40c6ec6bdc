#!/usr/bin/env python3
"""Does a GEMM's input data change the H200's clock? One bf16 GEMM at a verify forward's shape, fed rows of
different patterns in turn, with the SM clock, power and throttle reasons sampled while each runs.

Why: at the Qwen3-8B shape with dummy weights (session 20, ``benchmark/results/session20/shape_fiplan.json``, c 32)
DDTREE's rounds ran at 1680-1740 MHz and ~690 W with the software power cap active, DFLASH's at 1860-1905 MHz and
563-633 W, and DDTREE's verify GEMMs took 11-13 % longer than DFLASH's with the same row counts: about the clock
ratio. A tensor core's power depends on how many bits toggle, so inputs with many identical rows cost less. The
untested explanation: with random weights the drafter's 15 drafted tokens in a DFLASH block are often one token
repeated (identical embedding rows), while a DDTREE tree holds distinct top-K tokens. If so, the gap is an artefact
of dummy weights that real weights (distinct drafts in both) would not show. This measures the mechanism alone:
  distinct  every row its own random vector (distinct tokens);
  block16   blocks of 16 rows, rows 1..15 of each block identical (one real token + 15 repeated drafts);
  same      every row identical.
Weights are SGLang's dummy initialisation (uniform in [-1e-3, 1e-3], ``initialize_dummy_weights``), activations
N(0, 1). Each repetition runs every pattern for ``--seconds`` in an order rotated by the repetition (paired), so
drift in temperature hits all alike. Reported per pattern and repetition: ms per GEMM (CUDA events around the
loop) and the GPU sampler's summary (``gpu_clocks.GpuSampler``); the medians and each pattern's ratio to
``distinct``.

    python benchmark/bench_gemm_power.py [--rows 512] [--k 4096] [--n 24576] [--patterns distinct,block16,same] \\
        [--seconds 4] [--repeats 3] [--out X.json]

Defaults: Qwen3-8B's gate_up projection (hidden 4096 -> 2 x 12288) at c 32 x 16 verify rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import event_median_us, write_report  # noqa: E402
from gpu_clocks import GpuSampler  # noqa: E402

PATTERNS = ("distinct", "block16", "same")
BLOCK = 16


def parse_patterns(text: str) -> List[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in out if p not in PATTERNS]
    if bad or not out:
        raise ValueError(f"--patterns {text!r}: comma-separated names from {', '.join(PATTERNS)}")
    return out


def make_rows(pattern: str, rows: int, k: int, *, seed: int = 0, device="cpu", dtype=None):
    """[rows, k] activations of ``pattern`` (module docstring); deterministic in ``seed``."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(rows, k, generator=g)
    if pattern == "block16":
        drafts = torch.randn(-(-rows // BLOCK), k, generator=g)  # one repeated draft row per block
        idx = torch.arange(rows)
        x = torch.where((idx % BLOCK == 0).unsqueeze(1), x, drafts[idx // BLOCK])
    elif pattern == "same":
        x = x[:1].expand(rows, k).clone()
    elif pattern != "distinct":
        raise ValueError(pattern)
    return x.to(device=device, dtype=dtype or torch.float32)


def measure(x, w, seconds: float) -> dict:
    """Run ``x @ w`` back to back for ``seconds`` while sampling the GPU; ms per GEMM and the sampler summary."""
    import torch

    per_ms = max(event_median_us(lambda: torch.matmul(x, w), 20) / 1000.0, 1e-3)  # sizes the loop
    iters = max(20, int(seconds * 1000 / per_ms))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with GpuSampler(every_s=0.25) as sampler:
        start.record()
        for _ in range(iters):
            torch.matmul(x, w)
        end.record()
        end.synchronize()
    return {"ms_per_gemm": round(start.elapsed_time(end) / iters, 5), "iters": iters, "gpu": sampler.summary()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=512, help="GEMM rows (verify tokens; default 512 = c 32 x 16)")
    ap.add_argument("--k", type=int, default=4096, help="inner dimension (default 4096, Qwen3-8B's hidden size)")
    ap.add_argument("--n", type=int, default=24576, help="output columns (default 24576, Qwen3-8B's gate_up)")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help=f"row patterns, from {', '.join(PATTERNS)}")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per pattern and repetition (default 4)")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions, each in a rotated order (default 3)")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    try:
        patterns = parse_patterns(args.patterns)
        for flag, v in (("--rows", args.rows), ("--k", args.k), ("--n", args.n), ("--repeats", args.repeats)):
            if v < 1:
                raise ValueError(f"{flag} {v}: need an integer >= 1")
        if args.seconds <= 0:
            raise ValueError(f"--seconds {args.seconds}: need a positive number")
    except ValueError as e:
        ap.error(str(e))
    import torch

    if not torch.cuda.is_available():
        print("bench_gemm_power: a CUDA GPU is required (its clock under load is what this measures)", file=sys.stderr)
        return 1
    dev, bf16 = "cuda", torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(1234)
    w = (torch.rand(args.k, args.n, generator=g) * 2e-3 - 1e-3).to(dev, bf16)
    xs = {p: make_rows(p, args.rows, args.k, device=dev, dtype=bf16) for p in patterns}
    results = {p: [] for p in patterns}
    t0 = time.time()
    for r in range(args.repeats):
        order = patterns[r % len(patterns):] + patterns[: r % len(patterns)]
        for p in order:
            rec = measure(xs[p], w, args.seconds)
            results[p].append(rec)
            gpu = rec["gpu"]
            print(f"[bench_gemm_power] rep {r + 1}/{args.repeats} {p:9s} {rec['ms_per_gemm']:.4f} ms/GEMM, "
                  f"SM {gpu.get('sm_mhz_median')} MHz, {gpu.get('power_w_median')} W, "
                  f"throttle {','.join(gpu.get('throttle', [])) or 'none'}", flush=True)
    summary = {}
    for p in patterns:
        ms = statistics.median(x["ms_per_gemm"] for x in results[p])
        mhz = [x["gpu"].get("sm_mhz_median") for x in results[p] if x["gpu"].get("sm_mhz_median") is not None]
        watts = [x["gpu"].get("power_w_median") for x in results[p] if x["gpu"].get("power_w_median") is not None]
        summary[p] = {"ms_per_gemm_median": ms, "sm_mhz_median": statistics.median(mhz) if mhz else None,
                      "power_w_median": statistics.median(watts) if watts else None}
    if "distinct" in summary:
        base = summary["distinct"]["ms_per_gemm_median"]
        for p in patterns:
            summary[p]["ms_ratio_vs_distinct"] = round(summary[p]["ms_per_gemm_median"] / base, 4)
    for p, s in summary.items():
        print(f"[bench_gemm_power] {p:9s} median {s['ms_per_gemm_median']:.4f} ms/GEMM, SM {s['sm_mhz_median']} MHz, "
              f"{s['power_w_median']} W" + (f", x{s['ms_ratio_vs_distinct']} of distinct" if "ms_ratio_vs_distinct" in s
                                             else ""), flush=True)
    if args.out:
        write_report(args.out, argv, settings={"rows": args.rows, "k": args.k, "n": args.n, "patterns": patterns,
                                               "seconds": args.seconds, "repeats": args.repeats,
                                               "weights": "uniform [-1e-3, 1e-3] bf16", "activations": "N(0, 1) bf16",
                                               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))},
                     results=results, summary=summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
