#!/usr/bin/env python3
"""Host time of budget auto's per-round bookkeeping on the CPU: one ``CostModel.observe`` plus one
``WidthPolicy.choose`` (7 buckets, 64 batch sizes), with and without ``follow_drift``. Session 38's notes quote it.

    PYTHONPATH=python python benchmark/results/session38/cost_model_overhead.py
"""
import random
import time

from sglang_ddtree.width_policy import CostModel, TableAcceptModel, WidthPolicy

BUDGETS = (0, 1, 3, 7, 15, 31, 63)
SIZES = list(range(1, 65))
for follow in (False, True):
    costs = CostModel(SIZES, BUDGETS, follow_drift=follow)
    for bs in SIZES:
        for b in BUDGETS:
            costs.seed(bs, b, 1.0 + 0.01 * b)
    for _ in range(300):
        for b in BUDGETS:
            costs.observe(16, b, 1.0 + 0.01 * b + random.random() * 0.1)
    policy = WidthPolicy(BUDGETS, costs, TableAcceptModel({1: 1.5, 3: 2.0, 7: 2.5, 15: 3.0, 31: 3.2, 63: 3.4}))
    n = 20000
    tic = time.perf_counter()
    for _ in range(n):
        costs.observe(16, 63, 1.6 + random.random() * 0.01)
        policy.choose(16)
    print(f"follow_drift={follow}: {(time.perf_counter() - tic) / n * 1e6:.1f} us per observe + choose")
