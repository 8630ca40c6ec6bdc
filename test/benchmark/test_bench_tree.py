"""benchmark/bench_tree.py's CPU-side logic: --help, what each timed column runs, exactness flags, the head.

Timers are replaced by a fake that calls the function once (so every timed path runs, on the PyTorch
backend here) and records which ops it called; each column's fake time is the index of its call.
"""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from sglang_ddtree.tree.reference import build_tree_torch

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmark", "bench_tree.py")
spec = importlib.util.spec_from_file_location("bench_tree", _PATH)
bench_tree = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_tree)

CPU = torch.device("cpu")


def test_help_runs():
    proc = subprocess.run([sys.executable, _PATH, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for word in ("triton_accept_commit_ms", "head_results", "round_parts", "--head-shapes"):
        assert word in proc.stdout, word


def test_parse_args_defaults_and_head_shapes():
    args = bench_tree.parse_args([])
    assert args.head_shapes == [("qwen3_8b", 4096, 151936), ("tiny_pair", 256, 2048)]
    assert (args.bs, args.L, args.K) == ([1, 8, 32, 64], 16, 8)
    assert bench_tree.parse_args(["--head-shapes", ""]).head_shapes == []
    quick = bench_tree.parse_args(["--quick"])
    assert (quick.bs, quick.budgets) == ([1, 64], [64, 512])


@pytest.fixture
def timed(monkeypatch):
    """Fake timers; returns the list of op-name tuples each time_graph call ran (fake time = 1-based index)."""
    calls, timed = [], []

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapped

    for name in ("build_tree", "build_verify_topology", "greedy_accept_commit", "accept_greedy"):
        monkeypatch.setattr(bench_tree, name, spy(name, getattr(bench_tree, name)))
    # the pinned-strategy builder is Triton-only: stand in the PyTorch path (same trees)
    monkeypatch.setattr(
        bench_tree, "build_tree_triton",
        spy("build_tree", lambda lp, ids, budget, roots, strategy: build_tree_torch(lp, ids, budget, roots)),
    )

    def fake_time_graph(fn, iters):
        calls.clear()
        fn()
        timed.append(tuple(calls))
        return float(len(timed))

    monkeypatch.setattr(bench_tree, "time_graph", fake_time_graph)
    monkeypatch.setattr(bench_tree, "time_heap", lambda *args: -1.0)
    return timed


def _ran(timed, rec, key):
    return timed[int(rec[key]) - 1]


def test_round_times_what_the_worker_runs(timed):
    args = bench_tree.parse_args(["--iters", "1", "--prefix-len", "37"])
    rec = bench_tree.bench_config(2, 16, args, torch.Generator().manual_seed(0), CPU)
    assert _ran(timed, rec, "triton_round_ms") == ("build_tree", "build_verify_topology", "greedy_accept_commit")
    assert _ran(timed, rec, "triton_build_ms") == ("build_tree",)
    assert _ran(timed, rec, "triton_topology_ms") == ("build_verify_topology",)
    assert _ran(timed, rec, "triton_accept_commit_ms") == ("greedy_accept_commit",)
    assert _ran(timed, rec, "triton_accept_greedy_ms") == ("accept_greedy",)
    assert rec["triton_parts_sum_ms"] == sum(rec[k] for k in bench_tree.ROUND_PARTS)
    for key in ("exact_vs_torch_path", "exact_topology", "exact_accept_commit", "exact_bitonic", "exact_merge"):
        assert rec[key] is True, key
    assert rec["accept_len_mean"] > 1  # the planted path of the last row is accepted (depth >= 1)
    assert rec["heap_build_ms"] == -1.0 and "torch_round_ms" in rec
    assert "goal_ms" not in rec
    goal = bench_tree.bench_config(1, 64, args, torch.Generator().manual_seed(1), CPU)
    assert goal["goal_ms"] == 0.06 and goal["goal_met"] is (goal["triton_round_ms"] <= 0.06)


def test_head_record(timed):
    args = bench_tree.parse_args(["--iters", "1"])
    weight = bench_tree.head_weight(256, 2048, CPU)
    assert weight.shape == (2048, 256) and weight.dtype == torch.bfloat16
    rec = bench_tree.bench_head("tiny_pair", weight, 3, args)
    assert (rec["hidden"], rec["vocab"], rec["bs"], rec["tokens"]) == (256, 2048, 3, 3 * 15)
    assert rec["sorted_log_probs"] is True and rec["ids_in_vocab"] is True
    assert rec["head_ms"] == float(len(timed))


def test_guarded_records_errors_and_the_table_prints(capsys):
    def boom():
        raise RuntimeError("no")

    err = bench_tree._guarded(boom, {"bs": 1, "budget": 16})
    assert err["bs"] == 1 and "RuntimeError" in err["error"] and "wall_s" in err
    ok = {"bs": 8, "budget": 64, "triton_round_ms": 0.1, "triton_accept_commit_ms": 0.01}
    head = {"model": "tiny_pair", "hidden": 256, "vocab": 2048, "bs": 1, "head_ms": 0.02}
    bench_tree.print_table({"results": [err, ok], "head_results": [head]})
    out = capsys.readouterr().out
    assert "ERROR" in out and "0.1000" in out and "head tiny_pair" in out and "0.0200 ms" in out
