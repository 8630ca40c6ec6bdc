"""benchmark/bench_tree_attention.py: argument errors are one line before anything runs, a machine without a GPU
gets one error line (exit 1), and on a GPU (marked) every launch configuration matches the PyTorch reference and
the report names the fastest with its per-round figure."""

import json

import pytest

import _scripts

bta = _scripts.load("bench_tree_attention")


def _cli(*args):
    return _scripts.cli("bench_tree_attention", *args)


@pytest.mark.parametrize("args, message", [
    (["--bs", "0"], "--bs '0': comma-separated batch sizes >= 1"),
    (["--budgets", "x"], "--budgets 'x': comma-separated budgets >= 1"),
    (["--configs", "64x64x16"], "--configs '64x64x16': BLOCK_NxROWSxHEADSxWARPS (four fields)"),
    (["--configs", "48x64x16x0"], "--configs '48x64x16x0': BLOCK_NxROWSxHEADSxWARPS (block_n must be a power of two"),
    (["--configs", "32x8x4x0"], "--configs '32x8x4x0': BLOCK_NxROWSxHEADSxWARPS (rows_per_program must be"),
    (["--configs", "32x16x32x0"], "--configs '32x16x32x0': BLOCK_NxROWSxHEADSxWARPS (max_heads must be"),
    (["--configs", "32x64x16x3"], "--configs '32x64x16x3': BLOCK_NxROWSxHEADSxWARPS (num_warps must be"),
    (["--configs", ","], "--configs ',': at least one BLOCK_NxROWSxHEADSxWARPS"),
    (["--heads", "12", "--kv-heads", "8"], "--heads 12: must be a multiple of --kv-heads (8)"),
    (["--head-dim", "96"], "--head-dim 96: must be a power of two in [16, 256]"),
    (["--iters", "0"], "--iters 0: must be at least 1"),
    (["--timer", "wall"], "--timer: invalid choice: 'wall' (choose from"),
])
def test_argument_errors(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") <= 3, proc.stderr


def test_parsers():
    assert bta.parse_bs("1,16") == [1, 16] and bta.parse_budgets("15,63") == [15, 63]
    configs = bta.parse_configs(bta.DEFAULT_CONFIGS)
    assert configs[0] == (64, 64, 16, 0)  # the verify's launch before session 29 first
    from sglang_ddtree.worker.tree_attention import DEFAULT_MERGE_LAUNCH, MergeLaunch

    assert MergeLaunch(*configs[0]) == DEFAULT_MERGE_LAUNCH
    assert bta.config_name(32, 64, 2, 0) == "32x64x2x0"


@pytest.mark.skipif(not _scripts.no_gpu_here(), reason="a GPU is present: the GPU test below covers this machine")
def test_without_a_gpu_one_error_line():
    proc = _cli("--iters", "1", "--bs", "1", "--budgets", "3")
    assert proc.returncode == 1 and proc.stderr.startswith("bench_tree_attention: error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.gpu
def test_every_configuration_matches_the_reference_and_the_fastest_is_named(tmp_path):
    out = tmp_path / "tree_attention.json"
    proc = _cli("--bs", "1,16", "--budgets", "15", "--iters", "5", "--configs", "64x64x16x0,32x64x16x0,32x64x2x0",
                "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rep = json.loads(out.read_text())
    assert rep["settings"]["timer"] == "graph"  # 36 launches a replay, as the verify graph runs them
    for bs in (1, 16):
        rec = rep["by_shape"][f"bs {bs} budget 15"]
        for key in ("verify", "64x64x16x0", "32x64x16x0", "32x64x2x0"):
            assert rec[key]["ok"] and rec[key]["us"] > 0, rec
        assert rec["fastest"] in ("64x64x16x0", "32x64x16x0", "32x64x2x0")
        assert rec["verify_launch"] == ("32x16x16x0" if bs == 1 else "32x64x16x0")  # the H200's 132 SMs
        assert rec["per_round_us"]["layers"] == 36 and rec["per_round_us"]["verify"] > 0
