"""benchmark/bench_flashinfer_plan.py: argument errors are one line before anything runs, a machine without a
GPU / FlashInfer gets one error line (exit 1), and on a GPU (marked) the report's shape and the one behaviour the
sync-free plan exists for: with GPU work queued, upstream's plan() waits for it (its host copies sync) and
DDTREE's does not."""

import json

import pytest

import _scripts

bfp = _scripts.load("bench_flashinfer_plan")


def _cli(*args):
    return _scripts.cli("bench_flashinfer_plan", *args)


@pytest.mark.parametrize("args, message", [
    (["--bs", "0"], "--bs '0': comma-separated batch sizes >= 1"),
    (["--bs", "a,b"], "--bs 'a,b': comma-separated batch sizes >= 1"),
    (["--iters", "0"], "--iters 0: must be at least 1"),
    (["--prefix", "0"], "--prefix 0: must be at least 1"),
    (["--busy-ms", "-1"], "--busy-ms -1.0: must be >= 0"),
])
def test_argument_errors(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") <= 3, proc.stderr


def test_parse_bs():
    assert bfp.parse_bs("1,32") == [1, 32] and bfp.parse_bs("4") == [4]


@pytest.mark.skipif(not _scripts.no_gpu_here(), reason="a GPU is present: the GPU test below covers this machine")
def test_without_a_gpu_one_error_line():
    proc = _cli("--iters", "1")
    assert proc.returncode == 1 and proc.stderr.startswith("bench_flashinfer_plan: error: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.gpu
def test_upstream_waits_for_queued_work_ours_does_not(tmp_path):
    pytest.importorskip("flashinfer")
    from sglang_ddtree.worker import flashinfer_plan as fp

    if not fp.flashinfer_tested():
        pytest.skip(f"flashinfer {fp.installed_flashinfer()} is not {fp.TESTED_FLASHINFER}")
    out = tmp_path / "plan.json"
    proc = _cli("--bs", "1,8", "--iters", "20", "--busy-ms", "20", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rep = json.loads(out.read_text())
    for bs in ("1", "8"):
        row = rep["host_us_median"][bs]
        assert set(row) == {f"{p} busy {b} ms" for p in ("upstream", "ours", "ours.host_layout",
                                                         "ours.pack_tree_mask", "ours.cached_module_plan")
                            for b in ("0", "20")}
        # 20 ms of queued GPU work: upstream's device-to-host copies wait for it, the sync-free plan returns
        assert row["upstream busy 20 ms"] > 15_000, row
        assert row["ours busy 20 ms"] < 5_000, row
