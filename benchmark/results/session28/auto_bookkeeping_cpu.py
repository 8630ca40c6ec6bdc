"""Session 28, CPU only: the Python cost of budget auto's own per-round bookkeeping (``widths.AutoWidth.choose`` +
``begin`` + ``finish``, a forecast every 4th drafting round) at bs 16, on CPU tensors with stand-in CUDA events and
host buffers. A bound on what the policy code adds to a round on the host, not a GPU measurement: on CUDA each of
``finish``'s few tensor ops also pays a launch. From the repository root:

    PYTHONPATH=python python benchmark/results/session28/auto_bookkeeping_cpu.py
"""
import time

import torch

import sglang_ddtree.worker.widths as W
from sglang_ddtree.config import DDTreeConfig


class _Event:  # stand-in for torch.cuda.Event: always complete, a fixed period
    def __init__(self, enable_timing=False):
        pass

    def record(self, *args):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 6.0


def main(bs=16, rounds=3000):
    torch.cuda.Event = _Event
    W._pinned = lambda n: torch.zeros(n, dtype=torch.float32)
    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
    auto = W.AutoWidth(config, [1, 2, 4, 8, 16, 32, 48], max_batch_size=48, device="cpu")
    for b in (1, 2, 4, 8, 16, 32, 48):
        for budget in config.buckets:
            auto.costs.seed(b, budget, 5.0 + budget * 0.01)
    scores = torch.randn(bs, 64).sort(dim=1, descending=True).values - 1.0
    scores[:, 0] = 0.0
    accept_lens = torch.full((bs,), 3, dtype=torch.int32)
    tic = time.perf_counter()
    for _ in range(rounds):
        budget = auto.choose(bs)
        slot = auto.begin(bs, budget)
        auto.finish(slot, scores if auto.wants_forecast(budget) else None, accept_lens)
    us = (time.perf_counter() - tic) / rounds * 1e6
    print(f"budget auto's bookkeeping at bs {bs}: {us:.1f} us a round (CPU tensors, stand-in events)")


if __name__ == "__main__":
    main()
