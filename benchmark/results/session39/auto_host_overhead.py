"""Budget auto's per-round host Python (AutoWidth.choose + begin + wants_forecast + finish), CPU only, with fake CUDA
events and CPU tensors (session 39): not a GPU number. Run: PYTHONPATH=python python benchmark/results/session39/auto_host_overhead.py"""
import time, torch, sys

from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker import metrics, widths

class Clock: now = 0.0
class Ev:
    def __init__(self, enable_timing=False): self.t = None
    def record(self, stream=None): self.t = Clock.now
    def query(self): return self.t is not None
    def elapsed_time(self, o): return o.t - self.t
widths.torch.cuda.Event = Ev
widths._pinned = lambda n: torch.zeros(n, dtype=torch.float32)
cfg = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
auto = widths.AutoWidth(cfg, [1, 2, 4, 8, 16, 24, 32, 40, 48], max_batch_size=48, device="cpu")
for bs in auto.costs.batch_sizes:
    for b in auto.budgets: auto.costs.seed(bs, b, 2.4 if b else 1.6)
bs = 16
scores = torch.randn(bs, 64).sort(-1, descending=True).values
scores[:, 0] = 0
acc = torch.full((bs,), 3, dtype=torch.int32)
lp = torch.randn(bs, 15)
def round_():
    b = auto.choose(bs)
    slot = auto.begin(bs, b)
    Clock.now += 2.4
    f = auto.wants_forecast(b)
    auto.finish(slot, scores if f else None, acc if b else None, lp if (f and cfg.chain) else None)
    return b
for _ in range(500): round_()
n = 3000
t = time.perf_counter()
for _ in range(n): round_()
print("per round us (choose+begin+wants+finish, CPU tensors):", round((time.perf_counter() - t) / n * 1e6, 1))
import cProfile, pstats
pr = cProfile.Profile(); pr.enable()
for _ in range(2000): round_()
pr.disable(); pstats.Stats(pr).sort_stats("cumtime").print_stats(18)
