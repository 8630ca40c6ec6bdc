#!/usr/bin/env python3
"""Host time of one flashinfer replay plan: upstream's ``plan()`` against DDTREE's sync-free plan
(``sglang_ddtree.worker.flashinfer_plan``), piece by piece, with the GPU idle and with it busy.

Why: at the Qwen3-8B shape (session 18, ``benchmark/results/session18/``) the sync-free plan removed every host
sync from a DDTREE round on flashinfer and still made the round slower (3.00 ms outside the CUDA graphs at
concurrency 1 against upstream's 1.73 ms, another session). The round's 3-level profile could not say whether
the plan's own host work is the cause. This times it alone, on one CUDA-graph-mode paged prefill wrapper with a
tree mask (as SGLang builds its target-verify wrappers), per call:

- ``upstream``: ``wrapper.plan(...)`` from device indptrs and the bool mask (copies them to the host and syncs);
- ``ours``: ``flashinfer_plan.plan`` from host upper bounds (no sync), and its parts: ``host_layout``, the
  buffer refresh, ``pack_tree_mask`` (one Triton launch) and FlashInfer's ``_cached_module.plan``.

``--busy-ms`` queues that much GPU work (``torch.cuda._sleep``) before every timed call, as a verify forward in
flight would: upstream's syncs then wait for it, ours must not. The spec's ``generate_attn_arg_prefill`` is
precomputed (its cost is the same on both paths and is not timed here). Medians over ``--iters`` calls, in
microseconds; a GPU with FlashInfer 0.6.14 is required.

    python benchmark/bench_flashinfer_plan.py [--bs 1,32] [--prefix 160] [--iters 200] [--busy-ms 5] [--out X.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from typing import Callable, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import positive_ints, write_report  # noqa: E402

N, HEADS, KV_HEADS, HEAD_DIM = 16, 32, 8, 128  # DDTREE budget 15 at the Qwen3-8B shape


def parse_bs(text: str) -> List[int]:
    return positive_ints(text, "--bs", "batch sizes", "1,32")


def _median_us(samples: Sequence[float]) -> float:
    return round(statistics.median(samples) * 1e6, 1)


class _Case:
    """One batch: device tensors of a DDTREE verify (prefix + N keys a request, N rows, a tree mask), the
    wrapper, and the host upper bounds the worker would pass (the forward's host lengths)."""

    def __init__(self, torch, fi, bs: int, prefix: int):
        dev = "cuda"
        self.torch, self.bs = torch, bs
        pool = bs * (prefix + N) + 1
        self.req_to_token = torch.arange(1, pool, dtype=torch.int32, device=dev).view(bs, prefix + N)
        self.rpi = torch.arange(bs, device=dev)
        self.prefix_t = torch.full((bs,), prefix, dtype=torch.int64, device=dev)
        kv_lens = self.prefix_t.to(torch.int32) + N
        self.kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
        self.kv_indptr[1:] = torch.cumsum(kv_lens, 0)
        self.qo_indptr = torch.arange(0, (bs + 1) * N, N, dtype=torch.int32, device=dev)
        self.kv_indices = self.req_to_token.reshape(-1).clone()
        tree = torch.tril(torch.rand(N, N, device=dev) < 0.4) | torch.eye(N, dtype=torch.bool, device=dev)
        self.mask = torch.cat([torch.ones(N, prefix, dtype=torch.bool, device=dev), tree], 1).repeat(bs, 1).reshape(-1)
        self.host = torch.full((bs,), prefix + N, dtype=torch.int64)  # the forward's host lengths
        ws = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
        bufs = dict(qo_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
                    paged_kv_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
                    paged_kv_indices_buf=torch.zeros(pool + bs * 64, dtype=torch.int32, device=dev),
                    paged_kv_last_page_len_buf=torch.ones(bs, dtype=torch.int32, device=dev),
                    custom_mask_buf=torch.zeros(bs * N * (prefix + N + 64) // 8 + 64 * bs, dtype=torch.uint8,
                                                device=dev),
                    mask_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device=dev))
        self.w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=True, backend="fa2", **bufs)
        outer = self

        class Spec:  # generate_attn_arg_prefill precomputed: the same on both paths
            draft_token_num = N

            @staticmethod
            def generate_attn_arg_prefill(*_):
                return outer.kv_indices, outer.kv_indptr, outer.qo_indptr, outer.mask

        self.spec = Spec()
        self.updater = types.SimpleNamespace(
            attn_backend=types.SimpleNamespace(dispatch_reason=None, page_size=1),
            kv_last_page_len=torch.ones(bs, dtype=torch.int32, device=dev), num_qo_heads=HEADS,
            num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, req_to_token=self.req_to_token)

    def upstream(self):
        t = self.torch
        self.w.plan(self.qo_indptr, self.kv_indptr, self.kv_indices, self.updater.kv_last_page_len, HEADS, KV_HEADS,
                    HEAD_DIM, 1, custom_mask=self.mask, q_data_type=t.bfloat16, kv_data_type=t.bfloat16,
                    non_blocking=True)


def measure(fn: Callable[[], object], iters: int, busy_cycles: int, torch) -> List[float]:
    """Host seconds of ``fn`` per call; ``busy_cycles`` of GPU sleep queued before each (outside the timing);
    the queue is drained after each call (outside the timing)."""
    out = []
    for _ in range(iters):
        if busy_cycles:
            torch.cuda._sleep(busy_cycles)
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    return out


def run(bs_list: Sequence[int], prefix: int, iters: int, busy_ms: float) -> Dict[str, dict]:
    import torch

    import flashinfer as fi
    from sglang_ddtree.worker import flashinfer_plan as fp

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU: this benchmark times FlashInfer's plan on one")
    if not fp.flashinfer_tested():
        raise RuntimeError(f"flashinfer {fp.installed_flashinfer()}: the sync-free plan is written against "
                           f"{', '.join(fp.TESTED_FLASHINFER)}")
    # cycles per ms of torch.cuda._sleep on this GPU, measured
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(10_000_000)
    torch.cuda.synchronize()
    cycles_per_ms = 10_000_000 / ((time.perf_counter() - t0) * 1e3)
    results = {}
    for bs in bs_list:
        case = _Case(torch, fi, bs, prefix)
        case.upstream()  # the capture's plan: _cached_module exists from here on
        lag = 0
        u = case.updater
        layout = fp.host_layout(case.host, N, lag)
        parts: Dict[str, Callable[[], object]] = {
            "upstream": case.upstream,
            "ours": lambda: fp.plan(u, case.w, case.rpi, case.prefix_t, int(bs * prefix), case.spec, case.host),
            "ours.host_layout": lambda: fp.host_layout(case.host, N, lag),
            "ours.pack_tree_mask": lambda: fp.pack_tree_mask(case.mask, case.qo_indptr, case.kv_indptr,
                                                             case.w._custom_mask_buf, case.w._mask_indptr_buf,
                                                             layout[4]),
            "ours.cached_module_plan": lambda: fp.schedule(case.w, *layout[:3], bs, HEADS, KV_HEADS, HEAD_DIM),
        }
        row = {}
        for busy in (0.0, busy_ms) if busy_ms > 0 else (0.0,):
            cycles = int(busy * cycles_per_ms)
            for name, fn in parts.items():
                measure(fn, 10, 0, torch)  # warm-up (Triton's first launch compiles)
                row[f"{name} busy {busy:g} ms"] = _median_us(measure(fn, iters, cycles, torch))
        results[str(bs)] = row
        print(f"[bench_flashinfer_plan] bs {bs}: " + ", ".join(f"{k} {v} us" for k, v in row.items()), flush=True)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_flashinfer_plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bs", default="1,32", help="batch sizes (comma-separated)")
    ap.add_argument("--prefix", type=int, default=160, help="keys before the verify rows, per request")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--busy-ms", type=float, default=5.0, help="GPU work queued before each call (0: idle only)")
    ap.add_argument("--out", help="JSON report")
    args = ap.parse_args(argv)
    try:
        bs_list = parse_bs(args.bs)
    except ValueError as e:
        ap.error(str(e))
    for flag, value, low in (("--prefix", args.prefix, 1), ("--iters", args.iters, 1)):
        if value < low:
            ap.error(f"{flag} {value}: must be at least {low}")
    if args.busy_ms < 0:
        ap.error(f"--busy-ms {args.busy_ms}: must be >= 0")
    try:
        results = run(bs_list, args.prefix, args.iters, args.busy_ms)
    except (ImportError, RuntimeError) as e:
        print(f"bench_flashinfer_plan: error: {e}", file=sys.stderr)
        return 1
    if args.out:
        write_report(args.out, sys.argv[1:] if argv is None else list(argv),
                     settings={"bs": bs_list, "prefix": args.prefix, "iters": args.iters, "busy_ms": args.busy_ms,
                               "rows_per_request": N, "heads": [HEADS, KV_HEADS, HEAD_DIM]},
                     host_us_median=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
