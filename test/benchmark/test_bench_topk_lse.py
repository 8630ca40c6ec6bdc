"""benchmark/bench_topk_lse.py: argument errors are one line before anything runs, a machine without a GPU gets
one error line (exit 1), and on a GPU (marked) every launch configuration's result equals PyTorch's top-K and
logsumexp of the same logits, and the report names the fastest."""

import json

import pytest

import _scripts

btl = _scripts.load("bench_topk_lse")


def _cli(*args):
    return _scripts.cli("bench_topk_lse", *args)


@pytest.mark.parametrize("args, message", [
    (["--rows", "0"], "--rows '0': comma-separated row counts >= 1"),
    (["--rows", "a"], "--rows 'a': comma-separated row counts >= 1"),
    (["--configs", "4096"], "--configs '4096': [threshold:]BLOCKxWARPS with BLOCK a power of two >= 64"),
    (["--configs", "3000x8"], "--configs '3000x8': [threshold:]BLOCKxWARPS"),
    (["--configs", "4096x3"], "--configs '4096x3': [threshold:]BLOCKxWARPS"),
    (["--configs", "fast:4096x8"], "--configs 'fast:4096x8': [threshold:]BLOCKxWARPS"),
    (["--configs", "threshold:4096"], "--configs 'threshold:4096': [threshold:]BLOCKxWARPS"),
    (["--configs", "a:threshold:4096x8"], "--configs 'a:threshold:4096x8': [threshold:]BLOCKxWARPS"),
    (["--configs", "keyed:4096x8"], "--configs 'keyed:4096x8': [threshold:]BLOCKxWARPS"),  # packed keys: removed
    (["--configs", ","], "--configs ',': at least one [threshold:]BLOCKxWARPS"),
    (["--iters", "0"], "--iters 0: must be at least 1"),
    (["--topk", "9", "--vocab", "8"], "--topk 9: must be at most --vocab (8)"),
    (["--timer", "wall"], "--timer: invalid choice: 'wall' (choose from"),
])
def test_argument_errors(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") <= 3, proc.stderr


def test_parsers():
    assert btl.parse_rows("15,256") == [15, 256]
    assert btl.parse_configs("4096x8, threshold:16384x16") == [(4096, 8, "all"), (16384, 16, "threshold")]
    assert btl.parse_configs(btl.DEFAULT_CONFIGS)[0] == (4096, 8, "all")  # the draft head's own default first
    assert btl.config_name(16384, 16) == "16384x16"
    assert btl.config_name(4096, 8, "threshold") == "threshold:4096x8"


@pytest.mark.skipif(not _scripts.no_gpu_here(), reason="a GPU is present: the GPU test below covers this machine")
def test_without_a_gpu_one_error_line():
    proc = _cli("--iters", "1", "--rows", "2")
    assert proc.returncode == 1 and proc.stderr.startswith("bench_topk_lse: error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.gpu
def test_every_configuration_matches_torch_and_the_fastest_is_named(tmp_path):
    out = tmp_path / "topk.json"
    proc = _cli("--rows", "15,256", "--iters", "5", "--configs", "4096x8,16384x16,threshold:4096x8", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rep = json.loads(out.read_text())
    assert rep["settings"]["timer"] == "graph" and rep["settings"]["graph_calls"] == btl.GRAPH_CALLS
    for rows in ("15", "256"):
        rec = rep["by_rows"][rows]
        assert rec["torch_topk_logsumexp_us"] > 0
        for key in ("4096x8", "16384x16", "threshold:4096x8"):
            assert rec[key]["exact"] and rec[key]["lse_ok"] and rec[key]["us"] > 0, rec
        assert rec["fastest"] in ("4096x8", "16384x16", "threshold:4096x8")
