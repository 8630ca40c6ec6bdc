"""benchmark/bench_tree.py's CPU-side logic: --help, and the per-FULL_MASK-writer columns and best pick."""

import importlib.util
import os
import subprocess
import sys

import torch

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmark", "bench_tree.py")
spec = importlib.util.spec_from_file_location("bench_tree", _PATH)
bench_tree = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_tree)


def test_help_runs():
    proc = subprocess.run([sys.executable, _PATH, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "triton_round_best_ms" in proc.stdout


def test_full_mask_columns_and_fastest_exact_pick(monkeypatch):
    from sglang_ddtree.tree import Tree

    tree = Tree.make_dummy(2, 16, "cpu")
    seq = torch.tensor([3, 17])
    fake = iter([1.0, 0.5, 0.7])  # fused, fill_then_tree, fill_then_wide (the default, wide, is timed already)
    monkeypatch.setattr(bench_tree, "time_graph", lambda fn, iters: (fn(), next(fake))[1])
    real = bench_tree.build_verify_topology

    def corrupt_wide(*args, full_mask_impl=None, **kwargs):
        topo = real(*args, full_mask_impl=full_mask_impl, **kwargs)
        if full_mask_impl == "wide":
            topo.custom_mask[0] = False  # a prefix column: must be True
        return topo

    rec = {"triton_topology_ms": 0.4}
    bench_tree.add_full_mask_impls(rec, tree, seq, 20, iters=1)
    assert rec["full_mask_impl_default"] == "wide"
    assert all(rec[f"exact_full_mask_{i}"] for i in bench_tree.FULL_MASK_IMPLS)
    assert rec["triton_topology_wide_ms"] == 0.4  # the default writer's column is triton_topology_ms
    assert rec["triton_topology_fused_ms"] == 1.0 and rec["triton_topology_fill_then_tree_ms"] == 0.5
    assert rec["full_mask_impl_best"] == "wide"

    fake = iter([1.0, 0.5, 0.7])
    monkeypatch.setattr(bench_tree, "build_verify_topology", corrupt_wide)
    rec = {"triton_topology_ms": 0.4}
    bench_tree.add_full_mask_impls(rec, tree, seq, 20, iters=1)
    assert rec["exact_full_mask_wide"] is False and rec["exact_full_mask_fused"]
    assert rec["full_mask_impl_best"] == "fill_then_tree"  # the fastest exact one
