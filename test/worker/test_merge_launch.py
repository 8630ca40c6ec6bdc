"""The fa3 verify's launch rule for the tree merge (``worker.tree_attention.merge_launch``), on CPU.

The rule was fitted to the H200 timings of session 29 (``benchmark/bench_tree_attention.py``, nine launches at
the Qwen3-8B heads, ``benchmark/results/session29/tree_attention.json``): at every one of those ten shapes it
must pick the launch that was fastest there; the kernel tests (``test_tree_attention_interp.py``) hold both of
its launches to the float64 reference.
"""

import json
import pathlib

import pytest

from sglang_ddtree.worker.tree_attention import DEFAULT_MERGE_LAUNCH, MergeLaunch, merge_launch

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "benchmark/results/session29/tree_attention.json"


def _name(launch: MergeLaunch) -> str:
    return f"{launch.block_n}x{launch.rows_per_program}x{launch.max_heads}x{launch.num_warps}"


def test_the_rule_picks_the_measured_fastest_launch_at_every_h200_shape():
    rep = json.loads(RESULTS.read_text())
    s = rep["settings"]
    assert rep["environment"]["gpu"] == "NVIDIA H200"
    shapes = 0
    for key, rec in rep["by_shape"].items():
        bs, budget = int(key.split()[1]), int(key.split()[3])
        got = _name(merge_launch(budget + 1, bs, s["kv_heads"], s["heads"] // s["kv_heads"], num_sms=132))
        assert got == rec["fastest"], (key, got, rec)
        assert rec[got]["us"] < rec[_name(DEFAULT_MERGE_LAUNCH)]["us"], (key, rec)
        shapes += 1
    assert shapes == 10


@pytest.mark.parametrize("bs, n, kv_heads, group, sms, rows", [
    (1, 16, 8, 4, 132, 16),  # 8 programs at 64 rows: too few, four times as many at 16
    (16, 16, 8, 4, 132, 64),  # 128 programs >= 0.75 x 132
    (16, 16, 8, 4, 192, 16),  # the same shape on a larger GPU
    (8, 64, 8, 4, 132, 64),
    (1, 64, 8, 4, 132, 16),
    (4, 16, 4, 8, 132, 16),  # tp 2 halves the KV heads; G 8 -> 8 rows a program of 64
    (64, 512, 2, 16, 132, 64),  # 16 heads a program: rows stay >= max heads
])
def test_rows_per_program_follows_the_grid(bs, n, kv_heads, group, sms, rows):
    launch = merge_launch(n, bs, kv_heads, group, sms)
    assert launch.block_n == 32 and launch.rows_per_program == rows and launch.max_heads == 16
    assert launch.num_warps == 0
