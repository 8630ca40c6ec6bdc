#!/usr/bin/env python3
"""GPU time of the fa3 verify's tree part (``worker.tree_attention.tree_attention_merge``, one launch per target
layer) per launch configuration, at the target's real head shape, checked against the PyTorch reference.

Why: at the Qwen3-8B shape on the H200 the merge is the one kernel of DDTREE's verify that DFLASH's causal verify
does not have: 230 us a round at c 16 (36 launches of ~6.4 us, budget 15) and 296 us at c 32
(``benchmark/results/session26/c16_structural_costs.md``). Its default tile (64 keys, 64 query rows = 16 tree
rows x 4 heads per program) masks three quarters of the keys at 16 tree rows. This times other tiles and warps
(``MergeLaunch``: keys per tile, query rows per program, heads per program, warps) per batch size and budget, and
checks each against ``tree_attention_merge_torch`` on the same inputs (bf16 tolerance 2e-2, as the kernel tests).

Inputs per (batch, budget): q [bs * N, Hq, D] and the tree rows' k / v (bf16, N(0, 1)), a random tree per request
(each row's parent drawn below it), its ancestor bits, a prefix output and LSE (N(0, 1), LSE around 5). Times are
CUDA-event medians over ``--iters`` replays of a CUDA graph of ``--layers`` launches (a round's, as the verify
graph runs them; ``--timer launch`` times each launch alone, which at budget 15 measured the host's launch, ~64 us,
in session 27), in microseconds per launch; the report adds the per-round figure (x ``--layers``) for the
verify's own launch and the fastest configuration.

    python benchmark/bench_tree_attention.py [--bs 1,8,16,32,64] [--budgets 15,63] [--heads 32] [--kv-heads 8] \\
        [--head-dim 128] [--layers 36] [--configs 64x64x16x0,32x64x16x0,...] [--iters 50] [--timer graph|launch] \\
        [--out X.json]

A configuration is BLOCK_NxROWSxHEADSxWARPS (``MergeLaunch(block_n, rows_per_program, max_heads, num_warps)``;
warps 0 = the default rule). Every shape also times ``verify``: the launch the verify takes for that shape on this
GPU (``merge_launch``; its name in ``verify_launch``), the per-round figure's baseline. The first of the default list
is the verify's launch before session 29.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import TIMERS, kernel_median_us, positive_ints, write_report  # noqa: E402

DEFAULT_CONFIGS = "64x64x16x0,32x64x16x0,32x32x16x0,32x16x16x0,32x64x16x2,32x32x16x2,32x64x2x0,32x128x16x8,64x32x16x0"
TOLERANCE = 2e-2  # bf16 (atol = rtol), as test/worker/test_tree_attention_interp.py


def parse_bs(text: str) -> List[int]:
    return positive_ints(text, "--bs", "batch sizes", "1,16,32")


def parse_budgets(text: str) -> List[int]:
    return positive_ints(text, "--budgets", "budgets", "15,63")


def parse_configs(text: str) -> List[Tuple[int, int, int, int]]:
    """'BLOCK_NxROWSxHEADSxWARPS,...' -> [(block_n, rows, heads, warps)], each a valid ``MergeLaunch``."""
    from sglang_ddtree.worker.tree_attention import MergeLaunch

    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        try:
            fields = tuple(int(v) for v in item.split("x"))
            if len(fields) != 4:
                raise ValueError("four fields")
            MergeLaunch(*fields)
        except ValueError as e:
            raise ValueError(f"--configs {item!r}: BLOCK_NxROWSxHEADSxWARPS ({e}), e.g. {DEFAULT_CONFIGS}") from None
        out.append(fields)
    if not out:
        raise ValueError(f"--configs {text!r}: at least one BLOCK_NxROWSxHEADSxWARPS, e.g. {DEFAULT_CONFIGS}")
    return out


def config_name(block_n: int, rows: int, heads: int, warps: int) -> str:
    return f"{block_n}x{rows}x{heads}x{warps}"


def _inputs(torch, bs: int, n: int, hq: int, hkv: int, d: int, seed: int):
    from sglang_ddtree.worker.tree_attention import ancestor_bits

    g = torch.Generator(device="cuda").manual_seed(seed)
    t = bs * n
    q, o_p = (torch.randn(t, hq, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(t, hkv, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    lse = (torch.randn(hq, t, device="cuda", generator=g) + 5.0).float()
    rows = torch.arange(n, device="cuda")
    parents = (torch.rand(bs, n, device="cuda", generator=g) * rows).long()  # in [0, i) for row i >= 1
    parents[:, 0] = -1
    bits = ancestor_bits(parents, n, backend="triton")
    return q, k, v, bits, o_p, lse


def run(bs_list: Sequence[int], budgets: Sequence[int], hq: int, hkv: int, d: int, layers: int,
        configs: Sequence[Tuple[int, int, int, int]], iters: int, timer: str = "graph") -> dict:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("a CUDA GPU is required (the kernel's time is what this measures)")
    from sglang_ddtree.worker.tree_attention import (MergeLaunch, merge_launch, sm_count, tree_attention_merge,
                                                     tree_attention_merge_torch)

    scale = d ** -0.5
    out = {}
    for budget in budgets:
        n = budget + 1
        for bs in bs_list:
            q, k, v, bits, o_p, lse = _inputs(torch, bs, n, hq, hkv, d, seed=bs * 1000 + n)
            want = tree_attention_merge_torch(q, k, v, bits, o_p, lse, num_rows=n, sm_scale=scale).float()
            res = torch.empty_like(q)
            chosen = merge_launch(n, bs, hkv, hq // hkv, sm_count(q.device))
            rec = {"verify_launch": config_name(chosen.block_n, chosen.rows_per_program, chosen.max_heads,
                                                chosen.num_warps)}
            launches = [("verify", None)] + [(config_name(*cfg), MergeLaunch(*cfg)) for cfg in configs]
            for key, launch in launches:
                call = lambda: tree_attention_merge(q, k, v, bits, o_p, lse, num_rows=n, sm_scale=scale,  # noqa
                                                    out=res, backend="triton", launch=launch)
                try:
                    call()
                except Exception as e:  # a configuration that does not compile or launch (registers, shared memory)
                    rec[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
                    continue
                err = (res.float() - want).abs()
                ok = bool((err <= TOLERANCE + TOLERANCE * want.abs()).all())
                rec[key] = {"us": kernel_median_us(timer, call, iters, calls=layers, digits=2), "ok": ok,
                            "max_abs_err": round(float(err.max()), 5)}
            good = {key: r["us"] for key, r in rec.items() if isinstance(r, dict) and r.get("ok")}
            fastest = min((key for key in good if key != "verify"), key=good.get, default=None)
            rec["fastest"] = fastest
            if fastest is not None and "verify" in good:
                rec["per_round_us"] = {"layers": layers, "verify": round(good["verify"] * layers, 1),
                                       fastest: round(good[fastest] * layers, 1)}
            out[f"bs {bs} budget {budget}"] = rec
            print(f"[bench_tree_attention] bs {bs} budget {budget}: " + ", ".join(
                f"{key} {r['us'] if 'us' in r else r.get('error')}{'' if r.get('ok', True) else ' (WRONG)'}"
                for key, r in rec.items() if isinstance(r, dict) and key != "per_round_us")
                + f"; fastest {fastest} (verify = {rec['verify_launch']})", flush=True)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_tree_attention", usage="%(prog)s [options] (see --help)",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--bs", default="1,8,16,32,64", help="batch sizes (comma-separated)")
    ap.add_argument("--budgets", default="15,63", help="tree budgets (N = budget + 1 rows a request)")
    ap.add_argument("--heads", type=int, default=32, help="query heads (Qwen3-8B: 32)")
    ap.add_argument("--kv-heads", type=int, default=8, help="KV heads (Qwen3-8B: 8)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=36, help="target layers (per-round figure; Qwen3-8B: 36)")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="BLOCK_NxROWSxHEADSxWARPS (comma-separated); the "
                                                               "first is the baseline of the per-round figure")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--timer", choices=TIMERS, default="graph",
                    help="graph: --layers launches a CUDA-graph replay, as in the verify (default); launch: each "
                         "launch timed alone (its host launch shows, session 27)")
    ap.add_argument("--out", help="JSON report")
    args = ap.parse_args(argv)
    try:
        bs_list, budgets, configs = parse_bs(args.bs), parse_budgets(args.budgets), parse_configs(args.configs)
    except ValueError as e:
        ap.error(str(e))
    for flag, value in (("--heads", args.heads), ("--kv-heads", args.kv_heads), ("--layers", args.layers),
                        ("--iters", args.iters)):
        if value < 1:
            ap.error(f"{flag} {value}: must be at least 1")
    if args.heads % args.kv_heads:
        ap.error(f"--heads {args.heads}: must be a multiple of --kv-heads ({args.kv_heads})")
    if args.head_dim & (args.head_dim - 1) or not 16 <= args.head_dim <= 256:
        ap.error(f"--head-dim {args.head_dim}: must be a power of two in [16, 256]")
    try:
        results = run(bs_list, budgets, args.heads, args.kv_heads, args.head_dim, args.layers, configs, args.iters,
                      args.timer)
    except (ImportError, RuntimeError) as e:
        print(f"bench_tree_attention: error: {e}", file=sys.stderr)
        return 1
    if args.out:
        write_report(args.out, sys.argv[1:] if argv is None else list(argv),
                     settings={"bs": bs_list, "budgets": budgets, "heads": args.heads, "kv_heads": args.kv_heads,
                               "head_dim": args.head_dim, "layers": args.layers, "iters": args.iters,
                               "timer": args.timer,
                               "tolerance": TOLERANCE, "configs": [config_name(*c) for c in configs]},
                     by_shape=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
