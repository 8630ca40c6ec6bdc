"""benchmark/bench_paired.py end to end on CPU, with its test-only fake engine (BENCH_PAIRED_FAKE_ENGINE=1):
child processes, the rotated alternation, the per-repetition paired ratios and the JSON report."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import _scripts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmark", "bench_paired.py")


bench_e2e = _scripts.load("bench_e2e")


def _pair():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from sglang_ddtree.fixtures import tiny_pair_path

    return tiny_pair_path()


@pytest.mark.parametrize("plain", ["plain", "plain+fa3"])
def test_paired_run_with_fake_engines(tmp_path, plain):
    """Every config's outputs are compared with the plain-decoding one, also when it carries a modifier (session
    27: runs of plain+fa3 had recorded no equality)."""
    pair = _pair()
    out = tmp_path / "paired.json"
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1")
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", f"{plain},dflash,ddtree:8:2", "--baselines", f"dflash,{plain}", "--bs", "1,4",
                           "--repeats", "3", "--num-prompts", "4", "--max-new-tokens", "5", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert set(rep["results"]) == {plain, "dflash", "ddtree:8:2"}
    for spec, by_bs in rep["results"].items():
        for bs in ("1", "4"):
            m = by_bs[bs]
            assert len(m["tokens_per_s"]) == 3 and m["equal_to_plain"] == "4/4"
            assert ("speedup_vs_dflash" in m) == (spec != "dflash")
            assert (f"speedup_vs_{plain}" in m) == (spec != plain)
    assert rep["results"]["dflash"]["1"]["mean_accept_length"] == 2.0
    assert rep["results"][plain]["1"]["mean_accept_length"] is None
    assert "ddtree:8:2 bs   1: median" in proc.stdout and "== plain 4/4" in proc.stdout


@pytest.mark.parametrize("warmup", [0, 1])
def test_the_untimed_warm_up_absorbs_each_batch_sizes_first_decode(tmp_path, warmup):
    """A fake engine whose first generate at each batch size takes 0.3 s longer (a one-time compile): with one
    untimed warm-up repetition every timed repetition runs at the same speed; without, the first one is the slow
    one (what session 25's paired tiny-pair run showed at bs 16 / 48)."""
    pair = _pair()
    out = tmp_path / "paired.json"
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1", BENCH_PAIRED_FAKE_FIRST_CALL_S="0.3")
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain,dflash", "--bs", "1,4", "--repeats", "2", "--warmup-repeats",
                           str(warmup), "--num-prompts", "4", "--max-new-tokens", "5", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["settings"]["warmup_repeats"] == warmup and ("warmup_s" in rep) == bool(warmup)
    for spec, by_bs in rep["results"].items():
        for bs, m in by_bs.items():
            first, second = m["tokens_per_s"]
            if warmup:
                assert first > second / 5, (spec, bs, m["tokens_per_s"])
            else:
                assert first < second / 5, (spec, bs, m["tokens_per_s"])


def test_the_continuous_schedule_runs_end_to_end(tmp_path):
    pair = _pair()
    out = tmp_path / "paired.json"
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1")
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain,ddtree:8:2", "--baselines", "plain", "--bs", "2", "--repeats", "2",
                           "--num-prompts", "5", "--max-new-tokens", "5", "--schedule", "continuous",
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["settings"]["schedule"] == "continuous"
    # bs 2 fits COMMON's graph cap: every engine keeps it
    assert rep["settings"]["cuda_graph_max_bs_decode"] == 48
    assert rep["engines_cuda_graph_max_bs_decode"] == {"plain": 48, "ddtree:8:2": 48}
    m = rep["results"]["ddtree:8:2"]["2"]
    assert len(m["tokens_per_s"]) == 2 and m["equal_to_plain"] == "5/5" and "speedup_vs_plain" in m
    bad = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft, "--schedule",
                          "batches", "--out", str(out)], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--schedule: invalid choice: 'batches'" in bad.stderr


def test_every_engine_captures_graphs_up_to_the_largest_batch_size(tmp_path):
    """Session 39: at bs 64 with the cap at 48 every engine decoded without graphs and the speculative ones ran
    48 requests at a time, so bs 64 measured the cap (plain 13000 tok/s against 29148 at bs 48)."""
    pair = _pair()
    out = tmp_path / "paired.json"
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1")
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain,ddtree:8:2", "--baselines", "plain", "--bs", "64,4", "--repeats", "1",
                           "--num-prompts", "4", "--max-new-tokens", "2", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["settings"]["cuda_graph_max_bs_decode"] == 64
    assert rep["engines_cuda_graph_max_bs_decode"] == {"plain": 64, "ddtree:8:2": 64}


def test_a_length_spread_reaches_every_engine_and_keeps_the_comparison_paired(tmp_path):
    pair = _pair()
    out = tmp_path / "paired.json"
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1")
    args = [sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft, "--configs", "plain,ddtree:8:2",
            "--baselines", "plain", "--bs", "2", "--repeats", "2", "--num-prompts", "6", "--max-new-tokens", "20",
            "--length-spread", "0.5", "--out", str(out)]
    for schedule in ("waves", "continuous"):
        proc = subprocess.run(args + ["--schedule", schedule], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        rep = json.loads(out.read_text())
        assert rep["settings"]["length_spread"] == 0.5
        m = rep["results"]["ddtree:8:2"]["2"]
        assert m["equal_to_plain"] == "6/6" and "speedup_vs_plain" in m
        lengths = [p["max_new_tokens"] for p in bench_e2e.request_params(dict(max_new_tokens=20), 6, 0.5)]
        assert len(set(lengths)) > 1  # the spread reached the engines: each prompt its own length
        assert m["output_tokens"] == rep["results"]["plain"]["2"]["output_tokens"] == sum(lengths)
        # each timed cell's prefill batches, counted in its engine's log between the parent's cell markers (the
        # fake engine logs one per wave, one per arrival under continuous); the warm-up cell's are not counted
        for spec in ("plain", "ddtree:8:2"):
            assert rep["results"][spec]["2"]["prefill_batches"] == ([3, 3] if schedule == "waves" else [6, 6])
        assert "prefills [3, 3]" in proc.stdout or schedule != "waves"
    bad = subprocess.run(args[:-4] + ["--length-spread", "1", "--out", str(out)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--length-spread 1.0: must be in [0, 1)" in bad.stderr


def test_prefill_batches_are_counted_per_cell_from_the_engine_log(tmp_path):
    paired = _scripts.load("bench_paired")
    log = tmp_path / "engine_0.log"
    log.write_text("\n".join([
        "[2026-12-06 10:44:20] Prefill batch, #new-seq: 2",  # the engine's own warm-up: before any cell
        paired._CELL + json.dumps({"bs": 16, "rep": "warmup"}),
        "[..] Prefill batch, #new-seq: 16", "[..] Decode batch, #running-req: 16",
        paired._CELL + json.dumps({"bs": 16, "rep": 0}),
        "[..] Prefill batch, #new-seq: 16", "[..] Decode batch", "[..] Prefill batch, #new-seq: 1",
        paired._CELL + json.dumps({"bs": 48, "rep": 0}),
        paired._CELL + json.dumps({"bs": 16, "rep": 1}),
        "[..] Prefill batch, #new-seq: 3", "",
    ]))
    assert paired.prefill_batches(str(log)) == {("16", "warmup"): 1, ("16", 0): 2, ("48", 0): 0, ("16", 1): 1}


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


def test_a_run_cut_short_keeps_every_finished_repetition(tmp_path):
    """--out is rewritten after every repetition (a device call's time limit once lost a whole paired run that
    had finished one of five) and --deadline-s stops between repetitions; both say how many ran."""
    import signal
    import time

    pair = _pair()
    env = dict(os.environ, BENCH_PAIRED_FAKE_ENGINE="1")
    base = [sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft, "--configs", "plain,dflash",
            "--bs", "1,4", "--num-prompts", "4", "--max-new-tokens", "5"]
    out = tmp_path / "deadline.json"
    proc = subprocess.run(base + ["--repeats", "3", "--deadline-s", "0.001", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert (rep["repetitions_done"], rep["complete"]) == (1, False) and "stopping after 1 repetitions" in proc.stdout
    assert [len(rep["results"][s][bs]["tokens_per_s"]) for s in ("plain", "dflash") for bs in ("1", "4")] == [1] * 4

    out = tmp_path / "killed.json"
    p = subprocess.Popen(base + ["--repeats", "100000", "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        t0 = time.time()
        while not out.exists() and time.time() - t0 < 240 and p.poll() is None:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # as `timeout -s KILL` would: nothing of the script runs after this
        p.wait()
    rep = json.loads(out.read_text())  # whole JSON: written to a temporary file, then renamed
    n = rep["repetitions_done"]
    assert n >= 1 and rep["complete"] is False
    assert all(len(rep["results"][s][bs]["tokens_per_s"]) == n for s in ("plain", "dflash") for bs in ("1", "4"))
    assert rep["results"]["dflash"]["1"]["speedup_vs_plain"]["median"] > 0


@pytest.mark.skipif(importlib.util.find_spec("sgl_kernel") is not None, reason="sgl_kernel is installed here")
def test_a_run_on_fa3_stops_before_any_engine_when_fa3_does_not_import(tmp_path):
    pair = _pair()
    proc = subprocess.run([sys.executable, SCRIPT, "--target", pair.target, "--draft", pair.draft,
                           "--configs", "plain+fa3,dflash+fa3", "--baselines", "plain+fa3",
                           "--out", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("bench_paired: error: a config runs on fa3 but sgl_kernel.flash_attn does not "
                                  "import") and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "x.json").exists()
