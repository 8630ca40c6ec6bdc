#!/usr/bin/env python3
"""Session 23's noisy batch-32 tie at the Qwen3-8B shape (``test_width_policy._noisy_batch32``, 40 seeds) with the cost
model's ``follow_drift`` off, on following every move, and on with ``drift_min`` 15 % (the default): per setting the
worst seed's share of rounds (after the first 16) at the better bucket 7, the worst and the mean committed tokens per
true millisecond over budget 7's. CPU only; session 38's notes and ``CostModel``'s docstring quote it.

    PYTHONPATH=python python benchmark/results/session38/drift_tie_sim.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "test", "worker"))
import test_width_policy as t  # noqa: E402

for name, cost_kw in (("off", {}), ("every move", dict(follow_drift=True, drift_min=0.0)),
                      ("drift_min 15 %", dict(follow_drift=True))):
    shares, rates = [], []
    for seed in range(40):
        picks, got, best = t._noisy_batch32(seed, cost_kw=cost_kw)
        shares.append(picks[16:].count(7) / len(picks[16:]))
        rates.append(got / best)
    print(f"{name:>15}: worst share at 7 {min(shares):.2f}, worst rate {min(rates):.4f}, "
          f"mean rate {sum(rates) / len(rates):.4f}")
