"""Session 28: the width policy's simulations (test_width_policy.py's scenarios) on the old (345b224) and new
cost model, more seeds than the tests use (the table in cost_model.md). From the repository root:

    mkdir -p /tmp/oldwp && git show 345b224:python/sglang_ddtree/width_policy.py > /tmp/oldwp/old_width_policy.py
    python benchmark/results/session28/compare_cost_models.py
"""
import importlib, os, sys
sys.path[:0] = [os.path.abspath(p) for p in ('python', 'test/worker')] + ['/tmp/oldwp']
import test_width_policy as t
import sglang_ddtree.width_policy as new
old = importlib.import_module('old_width_policy')
f = lambda xs: f"mean {sum(xs)/len(xs):.4f} worst {min(xs):.4f}"
for name, mod in (('345b224 (clipped moving average)', old), ('session 28 (lower median of 21)', new)):
    t.CostModel = mod.CostModel; t.WidthPolicy = mod.WidthPolicy; t.TableAcceptModel = mod.TableAcceptModel
    stall = [t._session24(1, s, stall_at=1) for s in range(40)]
    c1 = [t._session24(1, s) for s in range(120)]
    c2 = [t._session24(2, s) for s in range(120)]
    b32 = [t._noisy_batch32(s) for s in range(120)]
    r32 = [got / best for _, got, best in b32]
    share32 = [p[16:].count(7) / len(p[16:]) for p, _, _ in b32]
    print(f"{name}:")
    print(f"  session 24 c 1, stall as 63's first used round (40 seeds): {f(stall)}")
    print(f"  session 24 c 1, no stall (120 seeds):                     {f(c1)}")
    print(f"  session 24 c 2, skewed noise (120 seeds):                 {f(c2)}")
    print(f"  session 23 batch 32, drift + log-normal (120 seeds):      {f(r32)}, least share at 7 {min(share32):.2f}")
