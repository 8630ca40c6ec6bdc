"""benchmark/bench_paired.py end to end on CPU, with its test-only fake engine (BENCH_PAIRED_FAKE_ENGINE=1):
child processes, the rotated alternation, the per-repetition paired ratios and the JSON report."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmark", "bench_paired.py")


def _pair():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from sglang_ddtree.fixtures import tiny_pair_path

    return tiny_pair_path()


def test_paired_run_with_fake_engines(tmp_path):
    pair = _pair()
    out = tmp_path / "paired.json"
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1")
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain,dflash,ddtree:8:2", "--bs", "1,4", "--repeats", "3",
                           "--num-prompts", "4", "--max-new-tokens", "5", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert set(rep["results"]) == {"plain", "dflash", "ddtree:8:2"}
    for spec, by_bs in rep["results"].items():
        for bs in ("1", "4"):
            m = by_bs[bs]
            assert len(m["tokens_per_s"]) == 3 and m["equal_to_plain"] == "4/4"
            assert ("speedup_vs_dflash" in m) == (spec != "dflash")
            assert ("speedup_vs_plain" in m) == (spec != "plain")
    assert rep["results"]["dflash"]["1"]["mean_accept_length"] == 2.0
    assert rep["results"]["plain"]["1"]["mean_accept_length"] is None
    assert "ddtree:8:2 bs   1: median" in proc.stdout


def test_bad_config_fails_before_any_engine(tmp_path):
    pair = _pair()
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain,ddtree:64", "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "unknown config 'ddtree:64'" in proc.stderr


def test_baseline_must_be_a_config(tmp_path):
    pair = _pair()
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain,ddtree:8:2", "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--baselines ['dflash'] are not in --configs" in proc.stderr
