"""Session 42: the stretch-noise simulation of notes.md section 6 (budget auto's CostModel / WidthPolicy from this
checkout; run with python3 benchmark/results/session42/sim_stretch_noise.py; ~1 minute on one core)."""
import math, pathlib, random, statistics, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "python"))
from sglang_ddtree.width_policy import CostModel, WidthPolicy, TableAcceptModel

def skewed(rng, core_sd=0.003):
    u, core = rng.random(), math.exp(rng.gauss(0.0, core_sd))
    if u < 0.08: return core * rng.uniform(1.07, 1.2)
    if u < 0.13: return core * rng.uniform(0.8, 0.93)
    return core

class Stretch:
    """log S(t) = AR(1): slow stretches of a shared factor (all buckets alike)."""
    def __init__(self, rng, sd=0.08, tau=80.0):
        self.rng, self.x, self.a, self.sd = rng, 0.0, math.exp(-1.0 / tau), sd
    def step(self):
        self.x = self.a * self.x + math.sqrt(1 - self.a ** 2) * self.sd * self.rng.gauss(0, 1)
        return math.exp(self.x)

def run(scenario, seed, make_costs, policy_kw, rounds=2000, skip=100):
    rng = random.Random(seed)
    budgets, seeds, true_ms, table, bs = scenario
    costs = make_costs([bs], budgets)
    for b, ms in seeds.items(): costs.seed(bs, b, ms)
    policy = WidthPolicy(budgets, costs, table, **policy_kw)
    st = Stretch(rng)
    picks, spent, tokens = [], 0.0, 0.0
    for i in range(rounds):
        b = policy.choose(bs)
        s = st.step()
        ms = true_ms[b] * s * skewed(rng, 0.02)
        costs.observe(bs, b, ms)
        if i >= skip:
            picks.append(b); spent += true_ms[b] * s; tokens += table.tokens_per_request(b)
    best = max(table.tokens_per_request(b) / true_ms[b] for b in budgets)
    best_b = max(budgets, key=lambda b: table.tokens_per_request(b) / true_ms[b])
    return tokens / spent / best, picks.count(best_b) / len(picks)

TINY = ((0, 1, 3, 7, 15, 31, 63), {0: 0.13, 1: 0.34, 3: 0.34, 7: 0.34, 15: 0.34, 31: 0.34, 63: 0.36},
        {0: 1.9, 1: 2.40, 3: 2.40, 7: 2.42, 15: 2.43, 31: 2.45, 63: 2.48},
        TableAcceptModel({1: 1.7, 3: 2.3, 7: 2.9, 15: 3.3, 32: 3.55, 64: 3.73}), 4)
C8 = ((0, 1, 3, 7, 15, 31, 63), {0: 6.84, 1: 8.61, 3: 8.70, 7: 8.85, 15: 9.18, 31: 10.42, 63: 13.85},
      {0: 7.0, 1: 8.8, 3: 8.9, 7: 9.0, 15: 9.4, 31: 9.7, 63: 16.5},
      TableAcceptModel({1: 1.89, 3: 3.40, 7: 5.56, 15: 8.13, 16: 8.61, 32: 9.24, 64: 9.75}), 8)

if __name__ == '__main__':
    for name, sc in (('tiny', TINY), ('c8', C8)):
        for label, kw in (('stale', dict(explore_stale=True)), ('nostale', dict(explore_stale=False))):
            res = [run(sc, s, CostModel, kw) for s in range(12)]
            rates = [r for r, _ in res]; shares = [h for _, h in res]
            print(name, label, 'rate mean %.4f min %.4f' % (statistics.mean(rates), min(rates)), 'best-share mean %.2f min %.2f' % (statistics.mean(shares), min(shares)))
