"""benchmark/bench_gemm_power.py: argument errors are one line (after argparse's usage) before anything runs, a machine without a GPU gets
one error line (exit 1), the row patterns are what they claim (CPU), and on a GPU (marked) a short run reports every
pattern with its clock samples."""

import json

import pytest
import torch

import _scripts

bgp = _scripts.load("bench_gemm_power")


def _cli(*args):
    return _scripts.cli("bench_gemm_power", *args)


@pytest.mark.parametrize("args, message", [
    (["--patterns", "distinct,random"], "--patterns 'distinct,random': comma-separated names from distinct, block16"),
    (["--patterns", ","], "--patterns ',': comma-separated names"),
    (["--rows", "0"], "--rows 0: need an integer >= 1"),
    (["--repeats", "0"], "--repeats 0: need an integer >= 1"),
    (["--seconds", "0"], "--seconds 0.0: need a positive number"),
])
def test_argument_errors(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1], proc.stderr  # argparse's usage, one error line


def test_row_patterns():
    d = bgp.make_rows("distinct", 40, 8)
    assert d.shape == (40, 8) and torch.unique(d, dim=0).shape[0] == 40
    b = bgp.make_rows("block16", 40, 8)  # blocks of 16: row 0 its own, rows 1..15 one repeated draft
    assert torch.equal(b[0], d[0]) and torch.equal(b[16], d[16]) and torch.equal(b[32], d[32])
    for start in (0, 16, 32):
        block = b[start + 1 : start + 16]
        assert (block == block[0]).all() and not torch.equal(block[0], b[start])
    assert torch.unique(b, dim=0).shape[0] == 6  # 3 real rows + 3 repeated drafts
    s = bgp.make_rows("same", 40, 8)
    assert (s == s[0]).all()
    assert torch.equal(bgp.make_rows("block16", 40, 8), b)  # deterministic
    assert bgp.parse_patterns("same, distinct") == ["same", "distinct"]


@pytest.mark.skipif(not _scripts.no_gpu_here(), reason="the no-GPU path; this machine has a GPU")
def test_no_gpu_is_one_error_line():
    proc = _cli("--seconds", "0.1", "--repeats", "1")
    assert proc.returncode == 1 and "a CUDA GPU is required" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.gpu
def test_short_run_on_a_gpu(tmp_path):
    out = tmp_path / "power.json"
    proc = _cli("--rows", "64", "--n", "1024", "--seconds", "0.3", "--repeats", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.load(open(out))
    assert set(rep["summary"]) == set(bgp.PATTERNS) and rep["summary"]["distinct"]["ms_ratio_vs_distinct"] == 1.0
    for recs in rep["results"].values():
        assert len(recs) == 2 and all(r["ms_per_gemm"] > 0 and r["iters"] >= 20 for r in recs)
        assert all(r["gpu"]["samples"] >= 1 for r in recs)
