"""benchmark/bench_shape.py on CPU with its test-only fake engine (BENCH_SHAPE_FAKE_ENGINE=1): the shapes'
config dirs, child processes, the rotated alternation, the differential round time (the fake's per-round cost
must come back), the projection with log2 interpolation, paired ratios, the profile analysis, the JSON, argument
errors before any engine starts, and the plot mode. ``ddtree:auto``: the projection's accept table reaches the
engine's process, every window's verified budgets come back through the worker's Prometheus counter, and the
projection is the mean of tau over rounds, not tau at the mean budget."""

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmark", "bench_shape.py")
_spec = importlib.util.spec_from_file_location("bench_shape", SCRIPT)
bench_shape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_shape)  # puts benchmark/ on sys.path
import shape_budgets  # noqa: E402
import shape_projection  # noqa: E402

CONFIGS = ["plain", "dflash+fa3", "ddtree:100:4+nograph", "ddtree:auto:8"]  # default baselines: dflash+fa3, plain
AUTO = "ddtree:auto:8"
SHAPES = ["qwen3-8b", "qwen3-4b"]


def _cli(*args, fake=True, timeout=120, path_first=None):
    env = dict(os.environ, BENCH_SHAPE_FAKE_ENGINE="1") if fake else dict(os.environ)
    if path_first:
        env["PATH"] = path_first + os.pathsep + env.get("PATH", "")
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _fake_nvidia_smi(bin_dir):
    """An nvidia-smi that reports a GPU at its power cap: 1755 MHz, 650 W, 60 C, sw_power_cap (0x4)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/usr/bin/env bash\ncase \"$*\" in *reasons*) echo '1755, 650.0, 60, 0x4' ;; "
                   "*) echo '1755, 650.0, 60' ;; esac\n")
    smi.chmod(0o755)
    return str(bin_dir)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench_shape")
    out = tmp / "shape.json"
    proc = _cli("--out", str(out), "--shapes", ",".join(SHAPES), "--configs", ",".join(CONFIGS),
                "--concurrency", "1,4", "--repeats", "3", "--new-tokens", "32", "--base-tokens", "8",
                "--model-dir", str(tmp / "models"), "--profile-dir", str(tmp / "prof"), "--profile-concurrency", "4",
                "--profile-depth", "2", timeout=300, path_first=_fake_nvidia_smi(tmp / "bin"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text()), tmp


def test_config_dirs_are_the_shapes(run):
    _, rep, tmp = run
    for shape, (hidden, inter, tied) in (("qwen3-8b", (4096, 12288, False)), ("qwen3-4b", (2560, 9728, True))):
        target = json.loads((tmp / "models" / shape / "target" / "config.json").read_text())
        draft = json.loads((tmp / "models" / shape / "draft" / "config.json").read_text())
        assert target["architectures"] == ["Qwen3ForCausalLM"] and target["model_type"] == "qwen3"
        assert (target["num_hidden_layers"], target["hidden_size"], target["intermediate_size"]) == (36, hidden, inter)
        assert (target["num_attention_heads"], target["num_key_value_heads"], target["head_dim"]) == (32, 8, 128)
        assert target["vocab_size"] == 151936 and target["tie_word_embeddings"] is tied
        assert target["rope_parameters"]["rope_theta"] == 1e6 and target["rms_norm_eps"] == 1e-6
        assert target["max_position_embeddings"] == 40960 and target["torch_dtype"] == "bfloat16"
        assert draft["architectures"] == ["DFlashDraftModel"] and draft["num_hidden_layers"] == 5
        assert (draft["hidden_size"], draft["intermediate_size"], draft["num_attention_heads"]) == (hidden, inter, 32)
        assert draft["layer_types"] == ["full_attention"] * 5
        assert draft["block_size"] == 16 and draft["num_target_layers"] == 36
        assert draft["dflash_config"] == {"target_layer_ids": [1, 9, 17, 25, 33], "mask_token": "<|MASK|>",
                                          "mask_token_id": 151669, "block_size": 16}
        dirs = {"target_dir": str(tmp / "models" / shape / "target"), "draft_dir": str(tmp / "models" / shape / "draft")}
        assert rep["shapes"][shape] == {"target": target, "draft": draft, **dirs}


def test_hybrid_qwen35_shape_is_written_and_parses(tmp_path):
    from transformers import AutoConfig

    from sglang_ddtree.reference.dflash import DFlashConfig
    from sglang_ddtree.validation import is_hybrid_linear_attention

    target_dir, draft_dir = bench_shape.write_shape(str(tmp_path), "qwen3.5-9b")
    assert (target_dir, draft_dir) == (str(tmp_path / "qwen3.5-9b" / "target"), str(tmp_path / "qwen3.5-9b" / "draft"))
    target = json.loads((tmp_path / "qwen3.5-9b" / "target" / "config.json").read_text())
    assert (target, json.loads((tmp_path / "qwen3.5-9b" / "draft" / "config.json").read_text())) == \
        bench_shape.shape_configs("qwen3.5-9b")
    cfg = AutoConfig.from_pretrained(target_dir)
    assert cfg.architectures == ["Qwen3_5ForConditionalGeneration"] and is_hybrid_linear_attention(cfg)
    text = cfg.get_text_config()
    assert (text.num_hidden_layers, text.hidden_size, text.intermediate_size) == (32, 4096, 12288)
    assert text.vocab_size == 248320
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (16, 4, 256)
    assert (text.linear_num_key_heads, text.linear_num_value_heads, text.linear_key_head_dim) == (16, 32, 128)
    assert [i for i, t in enumerate(text.layer_types) if t == "full_attention"] == list(range(3, 32, 4))
    assert target["text_config"]["full_attention_interval"] == 4 and cfg.tie_word_embeddings is False
    assert cfg.vision_config.out_hidden_size == 4096
    draft = DFlashConfig.from_hf_dict(json.loads(open(os.path.join(draft_dir, "config.json")).read()))
    assert (draft.hidden_size, draft.intermediate_size, draft.num_hidden_layers) == (4096, 12288, 5)
    assert (draft.num_attention_heads, draft.num_key_value_heads, draft.head_dim) == (16, 4, 256)
    assert (draft.target_layer_ids, draft.num_target_layers, draft.mask_token_id, draft.block_size) == \
        ([1, 8, 15, 22, 29], 32, 248070, 16)
    h, i, q, kv = 4096, 12288, 16 * 256, 4 * 256  # "1B parameters": 5 layers + the context projection fc
    assert 5 * (2 * h * q + 2 * h * kv + 3 * h * i) + 5 * h * h == pytest.approx(1.05e9, rel=0.01)


def test_hybrid_shape_engines_are_text_only_without_the_radix_cache(tmp_path):
    """Every config of a hybrid shape runs text-only (SGLang would load a multimodal processor the dummy shape has no
    files for), without the radix cache and with at most the largest concurrency running (SGLang sizes the
    recurrent-state pool from it; unset, from half the free memory: session 25's OOM); DDTREE's also with the
    experimental hybrid switch. Dense shapes: nothing."""
    from sglang.srt.configs.model_config import ModelConfig

    assert bench_shape.shape_settings("qwen3-8b", "ddtree:15:8", 32) == ({}, {})
    for spec, env in (("plain", {}), ("dflash+fa3", {}), ("ddtree:15:8", {"SGLANG_DDTREE_EXPERIMENTAL_HYBRID": "1"})):
        assert bench_shape.shape_settings("qwen3.5-9b", spec, 16) == (
            {"enable_multimodal": False, "disable_radix_cache": True, "max_running_requests": 16}, env)
    target_dir, _ = bench_shape.write_shape(str(tmp_path), "qwen3.5-9b")
    assert ModelConfig(target_dir, enable_multimodal=False).is_multimodal is False


def test_round_cost_of_the_fake_is_recovered(run):
    _, rep, _ = run
    for shape in SHAPES:
        res = rep["results"][shape]
        assert set(res) == set(CONFIGS)
        for spec in CONFIGS:
            for c in (1, 4):
                m = res[spec][str(c)]
                assert len(m["round_ms"]) == 3
                assert m["round_ms_min"] <= m["round_ms_median"] <= m["round_ms_max"]
                assert m["round_ms_median"] == pytest.approx(bench_shape.fake_round_ms(spec, c), rel=0.1)
                # rounds: plain makes one token per round after the prefill's; the fake accepts 2 per round
                assert m["rounds"] == ([[7, 31]] * 3 if spec == "plain" else [[4, 16]] * 3)
                assert m["accept_length_observed"] == pytest.approx(32 / 31 if spec == "plain" else 2.0, abs=1e-4)


def test_rotated_alternation(run):
    proc, _, _ = run
    lines = re.findall(r"\[bench_shape\] qwen3-8b rep (\d)/3 c +(\d) +(\S+):", proc.stdout)
    n = len(CONFIGS)
    assert len(lines) == 3 * 2 * n
    for i in range(0, len(lines), n):
        rep = int(lines[i][0]) - 1
        assert [spec for _, _, spec in lines[i:i + n]] == CONFIGS[rep % n:] + CONFIGS[:rep % n]


def test_projection_ratios_and_best(run):
    _, rep, _ = run
    res = rep["results"]["qwen3-8b"]
    w = (math.log2(100) - 6) / (7 - 6)  # budget 100 lies between the table's 64 and 128
    expect_tau = {"plain": 1.0, "dflash+fa3": 7.79, "ddtree:100:4+nograph": 9.75 + w * (10.20 - 9.75)}
    for spec in CONFIGS:
        for c in (1, 4):
            m = res[spec][str(c)]
            if spec == AUTO:
                expect_tau[spec] = _fake_auto_tau(c)
            assert m["tau"] == pytest.approx(expect_tau[spec], abs=1e-3)
            assert m["projected_tokens_per_s"] == pytest.approx(c * m["tau"] / m["round_ms_median"] * 1000, rel=1e-3)
            for base in ("dflash+fa3", "plain"):
                if base == spec:
                    assert f"round_ms_ratio_vs_{base}" not in m
                    continue
                ratio = m[f"round_ms_ratio_vs_{base}"]
                assert len(ratio["per_repetition"]) == 3
                assert ratio["median"] == pytest.approx(bench_shape.fake_round_ms(spec, c)
                                                        / bench_shape.fake_round_ms(base, c), rel=0.1)
                assert m[f"projected_speedup_vs_{base}"]["median"] == pytest.approx(
                    expect_tau[spec] / expect_tau[base] / ratio["median"], rel=0.05)
    assert res["ddtree:100:4+nograph"]["1"]["tau_source"] == "interpolated in log2(budget) between 64 and 128"
    for c in ("1", "4"):
        best = max(CONFIGS, key=lambda s: res[s][c]["projected_tokens_per_s"])
        assert rep["best_projected"]["qwen3-8b"][c]["config"] == best


def test_profile_traces_are_analysed(run):
    _, rep, tmp = run
    res = rep["results"]["qwen3-4b"]
    for spec in CONFIGS:
        assert "profile" not in res[spec]["1"]
        prof = res[spec]["4"]["profile"]
        assert prof["rounds"] == 5 and prof["round_function"] == "sglang_ddtree/worker/worker.py:_decode_round"
        assert "call_tree" not in prof and "loop_tree" not in prof
        assert prof["trace"].startswith(str(tmp / "prof" / "qwen3-4b"))
        full = json.loads(open(prof["trace"] + ".analysis.json").read())
        assert "call_tree" in full and full["rounds"] == 5
        # the fake's rounds replay one 50 us graph each: the rest of the measured round is outside the graphs
        m = res[spec]["4"]
        assert prof["graph_gpu_us_per_round"] == 50.0 and m["graphs_gpu_ms"] == 0.05
        assert m["outside_graphs_ms"] == pytest.approx(m["round_ms_median"] - 0.05, abs=1e-3)


def test_profile_depth_reaches_the_analysis(tmp_path, monkeypatch):
    import analyze_trace

    seen = {}
    monkeypatch.setattr(analyze_trace, "load", lambda path: [])
    monkeypatch.setattr(analyze_trace, "analyze", lambda events, depth=3, min_us=5.0: seen.setdefault(
        "depth", depth) and {"rounds": 0, "call_tree": []})
    (tmp_path / "x-TP-0.trace.json").write_text("[]")
    bench_shape._analyze_profile(str(tmp_path), 6)
    assert seen == {"depth": 6}
    assert json.loads((tmp_path / "x-TP-0.trace.json.analysis.json").read_text())["rounds"] == 0


def test_outside_graphs():
    from bench_shape import outside_graphs

    assert outside_graphs(10.0, {"graph_gpu_us_per_round": 7500.0}) == {
        "graphs_gpu_ms": 7.5, "outside_graphs_ms": 2.5, "outside_graphs_fraction": 0.25}
    assert outside_graphs(10.0, {"error": "only 2 decode rounds found in the trace"}) == {}
    assert outside_graphs(10.0, None) == {}


def test_report_records_how_it_ran(run):
    _, rep, _ = run
    assert rep["settings"]["fake_engine"] is True and rep["settings"]["engine"]["load_format"] == "dummy"
    assert rep["settings"]["engine"]["cuda_graph_max_bs_decode"] == 4
    assert rep["settings"]["engine"]["max_running_requests"] == 4  # not upstream's speculative reset to 48
    assert rep["settings"]["engine"]["sleep_on_idle"] is True  # idle engines must not spin next to the timed one
    for spec in CONFIGS:  # the host's load and the GPU's clock beside every measurement
        loads = rep["results"]["qwen3-8b"][spec]["1"]["loadavg_1m"]
        assert len(loads) == 3 and all(x >= 0 for x in loads)
        gpu = rep["results"]["qwen3-8b"][spec]["1"]["gpu"]
        assert len(gpu) == 3 and all(g["samples"] >= 1 and g["sm_mhz_median"] == 1755.0 and g["power_w_max"] == 650.0
                                     and g["throttle"] == ["sw_power_cap"] for g in gpu), gpu
        assert rep["results"]["qwen3-4b"][spec]["4"]["profile"]["gpu"]["sm_mhz_min"] == 1755.0
    assert "SM 1755 MHz, 650 W, throttle sw_power_cap" in run[0].stdout
    assert rep["settings"]["baselines"] == ["dflash+fa3", "plain"] and rep["errors"] == {}
    assert rep["accept_table"] == EXTENDED
    assert "bench_shape.py" in rep["command"] and "--profile-concurrency 4" in rep["command"]
    assert "python" in rep["environment"] and "torch" in rep["environment"]


def test_plot_mode(run):
    pytest.importorskip("matplotlib")
    _, _, tmp = run
    proc = _cli("--plot", str(tmp / "shape.json"), "--plot-dir", str(tmp / "plots"), fake=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for shape in SHAPES:
        for name in ("projected_tokens_per_s", "round_ms", "chosen_budget"):
            path = tmp / "plots" / f"{name}_{shape}.png"
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_mode_merges_reports_of_different_concurrency_levels(run, tmp_path):
    """Two device calls (c 1-8, then 16-64) plot as one figure; a level measured twice is refused in one line."""
    pytest.importorskip("matplotlib")
    _, rep, _ = run
    low = {"results": {"qwen3-8b": {s: {"1": m["1"]} for s, m in rep["results"]["qwen3-8b"].items()}}}
    high = {"results": {"qwen3-8b": {s: {"4": m["4"]} for s, m in rep["results"]["qwen3-8b"].items()
                                     if s != "plain"}}}
    merged = bench_shape.merge_results([low, high])["qwen3-8b"]
    assert set(merged["plain"]) == {"1"} and set(merged[AUTO]) == {"1", "4"}
    assert merged[AUTO]["4"] == rep["results"]["qwen3-8b"][AUTO]["4"]
    a, b = tmp_path / "low.json", tmp_path / "high.json"
    a.write_text(json.dumps(low))
    b.write_text(json.dumps(high))
    proc = _cli("--plot", f"{a},{b}", "--plot-dir", str(tmp_path / "plots"), fake=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "plots" / "chosen_budget_qwen3-8b.png").read_bytes()[:4] == b"\x89PNG"
    proc = _cli("--plot", f"{a},{a}", "--plot-dir", str(tmp_path / "plots"), fake=False)
    assert proc.returncode == 2 and "qwen3-8b plain: concurrency 1 is in two reports" in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("sgl_kernel") is not None, reason="sgl_kernel is installed here")
def test_a_run_on_fa3_stops_before_any_engine_when_fa3_does_not_import(tmp_path):
    """Session 24 lost a device call: the machine had been given back, the staged fa3 library with it, and the
    run spent its first engine's start finding out. Now it is one error line before anything starts."""
    proc = _cli("--out", str(tmp_path / "x.json"), "--model-dir", str(tmp_path / "models"),
                "--configs", "plain+fa3,ddtree:15:8+fa3", fake=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("bench_shape: error: a config runs on fa3 but sgl_kernel.flash_attn does not "
                                  "import") and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "models").exists() and not (tmp_path / "x.json").exists()


def test_bad_config_fails_before_any_engine(tmp_path):
    proc = _cli("--out", str(tmp_path / "x.json"), "--model-dir", str(tmp_path / "models"),
                "--configs", "plain,ddtree:64")
    assert proc.returncode == 2 and "--configs: unknown config 'ddtree:64'" in proc.stderr
    assert not (tmp_path / "models").exists() and not (tmp_path / "x.json").exists()


def test_an_engine_that_does_not_start_is_reported(tmp_path):
    out = tmp_path / "x.json"
    proc = _cli("--out", str(out), "--shapes", "qwen3-8b,qwen3-4b", "--configs", "plain,dflash",
                "--concurrency", "1", "--start-timeout-s", "0.01", "--model-dir", str(tmp_path / "models"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["results"] == {} and set(rep["errors"]) == {"qwen3-8b", "qwen3-4b"}  # the second shape still ran
    assert rep["errors"]["qwen3-4b"]["error"].startswith("TimeoutError: plain: no answer within 0.01 s; see ")


@pytest.mark.parametrize("args, message", [
    (["--shapes", "qwen3-9b"],
     "--shapes ['qwen3-9b']: unknown; use one or more of ['qwen3-4b', 'qwen3-8b', 'qwen3.5-9b']"),
    (["--concurrency", "0,2"], "--concurrency '0,2': want comma-separated positive integers"),
    (["--new-tokens", "16", "--base-tokens", "16"], "--new-tokens 16: must be larger than --base-tokens 16"),
    (["--prompt-len", "1000"], "--prompt-len 1000 + --new-tokens 64: must leave a draft block"),
    (["--baselines", "dflash+fa3"], "--baselines ['dflash+fa3'] are not in --configs"),
    (["--profile-dir", "P", "--profile-concurrency", "3"], "--profile-concurrency [3]: each must be in --concurrency"),
    (["--plot", "x.json"], "--plot JSON_IN and --plot-dir DIR go together"),
    (["--profile-depth", "0"], "--profile-depth 0: must be at least 1"),
    (["--attention-backend", "fa4"], "argument --attention-backend: invalid choice: 'fa4'"),
])
def test_argument_errors(tmp_path, args, message):
    proc = _cli("--out", str(tmp_path / "x.json"), *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_accept_table_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"plain": 1.0, "ddtree": {"16": 8.0}}))
    proc = _cli("--out", str(tmp_path / "x.json"), "--accept-table", str(bad))
    assert proc.returncode == 2 and f"--accept-table {bad}: want" in proc.stderr
    good = {"source": "mine", "plain": 1.0, "dflash": 3.0, "ddtree": {"8": 4.0, "32": 6.0}}
    (tmp_path / "good.json").write_text(json.dumps(good))
    assert bench_shape.load_accept_table(str(tmp_path / "good.json")) == good


def test_projection_rules():
    table = bench_shape.PAPER_ACCEPT
    assert bench_shape.config_key("dflash+fa3") == ("dflash", None)
    assert bench_shape.config_key("ddtree:16:8+fa3+nograph") == ("ddtree", 16)
    assert bench_shape.config_key("ddtree:auto:8") == ("ddtree", "auto")
    assert bench_shape.tau_for_budget(table["ddtree"], 64) == (9.75, "table")
    assert bench_shape.tau_for_budget(table["ddtree"], 8) == (8.61, "clamped to the table's budget 16")
    assert bench_shape.tau_for_budget(table["ddtree"], 4096) == (10.98, "clamped to the table's budget 1024")
    assert bench_shape.tau_for_budget(table["ddtree"], 45.254834)[0] == pytest.approx((9.27 + 9.75) / 2)  # 2^5.5
    assert bench_shape.projected_tau("plain+nograph", table, None) == (1.0, "table")
    assert bench_shape.projected_tau("ddtree:auto:8", table)[0] is None
    assert bench_shape.projected_tau("ddtree:auto:8", table, {})[0] is None


def test_prompts_are_seeded_and_fresh():
    a = bench_shape.prompts(0, "1:64", 4, 128)
    assert a == bench_shape.prompts(0, "1:64", 4, 128)  # the same for every config (and process)
    assert a != bench_shape.prompts(0, "1:16", 4, 128) and a != bench_shape.prompts(1, "1:64", 4, 128)
    assert len(a) == 4 and all(len(p) == 128 and 1000 <= min(p) and max(p) < 150000 for p in a)
    assert len({tuple(p) for p in a}) == 4


# ---- ddtree:auto ---------------------------------------------------------------------------------
def _window(c: int, generates=((8, 4), (32, 16))) -> dict:
    """The fake's verified budgets of one window: its M0 and M1 generates (new tokens, rounds)."""
    out = {}
    for _, rounds in generates:
        for b in bench_shape.fake_auto_budgets(c, rounds):
            out[b] = out.get(b, 0) + 1
    return out


# What a run with an auto config projects from: the paper's table plus the stated small-budget assumption and the
# chain bucket's entry (DFLASH's tau).
EXTENDED = shape_projection.with_chain_bucket(
    shape_projection.with_small_budgets(bench_shape.PAPER_ACCEPT, bench_shape.AUTO_BUCKETS))


def _fake_auto_tau(c: int, table=EXTENDED) -> float:
    w = _window(c)
    return sum(n * (1.0 if b == 0 else bench_shape.tau_for_budget(table["ddtree"], b)[0]) for b, n in w.items()) \
        / sum(w.values())


def test_auto_windows_keep_their_budget_distribution(run):
    """Every window (concurrency x repetition) has exactly the budgets the fake verified in it, per generate."""
    _, rep, _ = run
    for shape in SHAPES:
        for c in (1, 4):
            m = rep["results"][shape][AUTO][str(c)]
            window = {str(b): n for b, n in sorted(_window(c).items())}
            assert m["budget_rounds_per_repetition"] == [window] * 3
            assert m["budget_rounds"] == {b: 3 * n for b, n in window.items()}
            assert m["budget_rounds_coverage"] == [[20, 20]] * 3
            total = sum(_window(c).values())
            assert m["budget_mean"] == pytest.approx(sum(b * n for b, n in _window(c).items()) / total, abs=1e-3)
    # the fake narrows its budgets at c 4: the distributions differ between concurrencies
    res = rep["results"]["qwen3-8b"][AUTO]
    assert res["1"]["budget_rounds"] != res["4"]["budget_rounds"] and "0" in res["4"]["budget_rounds"]


def test_auto_projection_is_the_mean_of_tau_over_rounds_not_tau_at_the_mean_budget(run):
    _, rep, _ = run
    for c in (1, 4):
        m = rep["results"]["qwen3-8b"][AUTO][str(c)]
        at_mean = bench_shape.tau_for_budget(EXTENDED["ddtree"], m["budget_mean"])[0]
        assert abs(_fake_auto_tau(c) - at_mean) > 1.0  # the fake's mix makes the two far apart
        assert m["tau"] == pytest.approx(_fake_auto_tau(c), abs=1e-3)
        assert m["tau_per_repetition"] == [pytest.approx(_fake_auto_tau(c), abs=1e-9)] * 3
        assert m["projected_tokens_per_s"] == pytest.approx(c * m["tau"] / m["round_ms_median"] * 1000, rel=1e-3)
        assert m["tau_by_budget"]["0"] == 1.0 and m["tau_source"].startswith("mean over 60 verified rounds")
        speed = m["projected_speedup_vs_dflash+fa3"]["median"]
        assert speed == pytest.approx(_fake_auto_tau(c) / 7.79 / m["round_ms_ratio_vs_dflash+fa3"]["median"], rel=0.05)


def test_auto_engine_gets_the_projection_table(run):
    _, rep, _ = run
    want = json.dumps({b: t for b, t in sorted(EXTENDED["ddtree"].items(), key=lambda x: int(x[0].lstrip("chain")))})
    for shape in SHAPES:
        engines = rep["engines"][shape]
        assert engines[AUTO]["accept_table_env_seen"] == want == engines[AUTO]["env"][bench_shape.ACCEPT_TABLE_ENV]
        for spec in CONFIGS:
            if spec != AUTO:
                assert engines[spec]["accept_table_env_seen"] is None
            # every engine has its own Prometheus dir (the counter of one never sums another's)
        dirs = [engines[s]["prometheus_dir"] for s in CONFIGS]
        assert all(dirs) and len(set(dirs)) == len(dirs)
    assert rep["settings"]["engine"]["enable_metrics"] is True and rep["settings"]["engine"]["decode_log_interval"] == 1


def test_auto_with_an_own_accept_table(tmp_path):
    """--accept-table reaches the auto engine's process and is the table its projection uses."""
    table = {"source": "test", "plain": 1.0, "dflash": 3.0, "ddtree": {"1": 1.5, "15": 3.0, "63": 4.0}}
    (tmp_path / "t.json").write_text(json.dumps(table))
    out = tmp_path / "x.json"
    proc = _cli("--out", str(out), "--configs", f"dflash,{AUTO}", "--concurrency", "4", "--repeats", "1",
                "--new-tokens", "32", "--base-tokens", "8", "--accept-table", str(tmp_path / "t.json"),
                "--model-dir", str(tmp_path / "models"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rep = json.loads(out.read_text())
    seen = json.loads(rep["engines"]["qwen3-8b"][AUTO]["accept_table_env_seen"])
    assert seen == {"1": 1.5, "15": 3.0, "chain15": 3.0, "63": 4.0}  # the chain: DFLASH's tau (with_chain_bucket)
    m = rep["results"]["qwen3-8b"][AUTO]["4"]
    w = _window(4)  # budgets 15 and 0
    assert m["tau"] == pytest.approx((w[15] * 3.0 + w[0] * 1.0) / sum(w.values()), abs=1e-3)
    assert "lie below the accept table" not in proc.stdout and "assumed" not in rep["accept_table"]  # starts at 1


def test_paper_table_states_its_assumption_for_small_auto_buckets(tmp_path):
    out = tmp_path / "x.json"
    proc = _cli("--out", str(out), "--configs", AUTO, "--concurrency", "1", "--repeats", "1",
                "--new-tokens", "16", "--base-tokens", "8", "--model-dir", str(tmp_path / "models"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ddtree budgets [1, 3, 7, 15] lie below the accept table: assumed the larger of DFLASH's chain" in proc.stdout
    table = json.loads(out.read_text())["accept_table"]
    assert table["assumed"]["budgets"] == [1, 3, 7, 15] and table["ddtree"]["15"] == pytest.approx(8.1344, abs=1e-3)


def test_a_fixed_small_budget_is_projected_alike_with_or_without_auto_beside_it(tmp_path):
    """Budget 15 lies below the paper's table (it starts at 16): it gets the stated small-budget assumption (8.13
    tokens: 15 / 16 of the 16-node tree's drafts) whether or not an auto config runs in the same call (session 26's
    c 16 run without auto had clamped it to 8.61)."""
    taus = []
    for configs in ("dflash,ddtree:15:8", f"dflash,ddtree:15:8,{AUTO}"):
        out = tmp_path / f"{len(taus)}.json"
        proc = _cli("--out", str(out), "--configs", configs, "--concurrency", "1", "--repeats", "1",
                    "--new-tokens", "16", "--base-tokens", "8", "--model-dir", str(tmp_path / "models"))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "lie below the accept table: assumed the larger of DFLASH's chain" in proc.stdout
        rep = json.loads(out.read_text())
        taus.append(rep["results"]["qwen3-8b"]["ddtree:15:8"]["1"]["tau"])
    assert taus[0] == taus[1] == pytest.approx(8.1344, abs=1e-3)


def test_auto_fake_refuses_to_start_without_the_table(tmp_path):
    """The fake, like the real worker, needs the env: an orchestration that drops it fails."""
    setup = {"spec": AUTO, "target": "T", "concurrency": [1], "base_tokens": 8, "new_tokens": 16,
             "prompts": {"seed": 0, "length": 8}, "engine": {"enable_metrics": True}}
    env = {k: v for k, v in os.environ.items() if k != bench_shape.ACCEPT_TABLE_ENV}
    proc = subprocess.run([sys.executable, SCRIPT, "--serve"], input=json.dumps(setup) + "\n", text=True,
                          capture_output=True, timeout=60, env=dict(env, BENCH_SHAPE_FAKE_ENGINE="1"))
    assert proc.returncode != 0 and f"started without {bench_shape.ACCEPT_TABLE_ENV}" in proc.stderr


def test_config_env():
    table = {"plain": 1.0, "dflash": 7.0, "ddtree": {"64": 9.75, "16": 8.61}}
    assert shape_budgets.config_env("ddtree:auto:8+triton", table) == {
        bench_shape.ACCEPT_TABLE_ENV: '{"16": 8.61, "64": 9.75}'}
    assert shape_budgets.config_env("ddtree:auto:8+fa3+fa3tree", table)["SGLANG_DDTREE_FA3_TREE_ATTENTION"] == "1"
    assert shape_budgets.config_env("ddtree:16:8", table) == {} and shape_budgets.config_env("dflash", table) == {}


def test_the_policy_reads_the_table_as_the_projection_does(monkeypatch):
    """widths.accept_model on the env bench_shape sets gives, per bucket, the tau the projection applies."""
    pytest.importorskip("torch")
    from sglang_ddtree.worker import widths

    assert widths.ACCEPT_TABLE_ENV == bench_shape.ACCEPT_TABLE_ENV
    env = shape_budgets.config_env(AUTO, bench_shape.PAPER_ACCEPT)
    monkeypatch.setenv(widths.ACCEPT_TABLE_ENV, env[widths.ACCEPT_TABLE_ENV])
    model = widths.accept_model(bench_shape.AUTO_BUCKETS)
    taus = shape_projection.tau_by_budget(bench_shape.PAPER_ACCEPT["ddtree"], bench_shape.AUTO_BUCKETS)
    for b in bench_shape.AUTO_BUCKETS:
        assert model.tokens_per_request(b) == pytest.approx(taus[b][0], abs=1e-9), b


def test_auto_tau_rules():
    table = bench_shape.PAPER_ACCEPT["ddtree"]
    tau, how = shape_projection.auto_tau(table, {0: 1, 64: 1})
    assert tau == pytest.approx((1.0 + 9.75) / 2) and how.startswith("mean over 2 verified rounds")
    assert shape_projection.auto_tau(table, {"64": 3})[0] == 9.75  # string keys, as in the JSON
    assert "budgets [1] clamped" in shape_projection.auto_tau(table, {1: 2, 64: 2})[1]
    assert bench_shape.projected_tau(AUTO, bench_shape.PAPER_ACCEPT, {0: 3})[0] == 1.0


def test_a_window_without_budget_counts_voids_the_projection():
    def m(counts):
        return {"round_ms": 10.0, "rounds": [4, 16], "accept_length": 1.0, "budget_rounds": counts,
                "budget_rounds_counted": sum(counts.values()) if counts else 0, "rounds_run": 20}

    runs = {AUTO: {2: [m({"63": 10, "0": 10}), m({}), m({"63": 20})]}}
    res, best = bench_shape.summarize(runs, bench_shape.PAPER_ACCEPT, [])
    rec = res[AUTO]["2"]
    assert rec["tau"] is None and rec["projected_tokens_per_s"] is None and best == {}
    assert rec["tau_source"] == "ddtree:auto: repetitions [1] counted no verified budgets"
    assert rec["budget_rounds_per_repetition"][0] == {"63": 10, "0": 10} and rec["budget_rounds"] == {"0": 10, "63": 30}


def test_a_repetition_below_the_plain_step_is_left_out_of_every_statistic():
    # the H200 case (session 12): auto at c 32 measured 13.57 then 0.95 ms/round against a ~5.2 ms plain step
    def m(ms):
        return {"round_ms": ms, "rounds": [15, 47], "accept_length": 1.02}

    runs = {"plain+fa3": {32: [m(5.37), m(5.16)]}, "dflash+fa3": {32: [m(15.73), m(16.03)]},
            "ddtree:15:8+fa3": {32: [m(17.85), m(0.95)]}}
    res, best = bench_shape.summarize(runs, bench_shape.PAPER_ACCEPT, ["dflash+fa3", "plain+fa3"])
    rec = res["ddtree:15:8+fa3"]["32"]
    assert rec["round_ms"] == [17.85, 0.95] and rec["round_ms_median"] == 17.85 and rec["round_ms_min"] == 17.85
    assert list(rec["invalid_repetitions"]) == ["1"] and "stall" in rec["invalid_repetitions"]["1"]
    assert rec["round_ms_ratio_vs_dflash+fa3"]["per_repetition"] == [round(17.85 / 15.73, 4)]
    assert "invalid_repetitions" not in res["dflash+fa3"]["32"] and best["32"]["config"] != "ddtree:15:8+fa3"
    # every repetition invalid: no median, no projection, no crash in the table
    runs["ddtree:15:8+fa3"][32] = [m(1.0), m(0.9)]
    res, best = bench_shape.summarize(runs, bench_shape.PAPER_ACCEPT, ["dflash+fa3"])
    assert res["ddtree:15:8+fa3"]["32"]["round_ms_median"] is None
    bench_shape._print_table("qwen3-8b", res, best, [32])
    # without a plain config nothing is judged
    del runs["plain+fa3"]
    res, _ = bench_shape.summarize(runs, bench_shape.PAPER_ACCEPT, ["dflash+fa3"])
    assert "invalid_repetitions" not in res["ddtree:15:8+fa3"]["32"]


def test_count_diff():
    assert shape_budgets.count_diff({0: 5, 63: 9}, {0: 5, 63: 2}) == {63: 7}
    with pytest.raises(AssertionError):
        shape_budgets.count_diff({63: 1}, {63: 2})


def test_small_auto_buckets_get_the_larger_of_two_lower_bounds():
    """Below the paper's smallest budget (16) auto's buckets take the larger of DFLASH's chain acceptance and b / 16
    of the 16-node tree's drafts, stated in the table (``assumed``) and read the same way by the policy
    (TableAcceptModel) and the projection."""
    from shape_projection import PAPER_ACCEPT, chain_rate, tau_for_budget, with_small_budgets

    from sglang_ddtree.width_policy import TableAcceptModel

    a = chain_rate(7.79, 15)
    assert sum(a ** i for i in range(16)) == pytest.approx(7.79, abs=1e-9)
    t = with_small_budgets(PAPER_ACCEPT, (0, 1, 3, 7, 15, 31, 63))
    assert t["assumed"]["budgets"] == [1, 3, 7, 15] and PAPER_ACCEPT["ddtree"].keys() == {
        "16", "32", "64", "128", "256", "512", "1024"}  # the paper's table itself unchanged
    taus = [tau_for_budget(t["ddtree"], b)[0] for b in (1, 3, 7, 15, 16, 31, 63)]
    assert taus == sorted(taus) and taus[0] == pytest.approx(1 + a)
    assert taus[3] == pytest.approx(1 + 15 / 16 * (8.61 - 1), abs=1e-4)  # 15: the nested tree's bound (8.13) beats the chain's
    for b, tau in zip((1, 3, 7), taus):  # 1 / 3 / 7: the chain's bound beats b / 16 of the 16-node tree's drafts
        assert tau == pytest.approx(sum(a ** i for i in range(b + 1)), abs=1e-4) and tau > 1 + b / 16 * (8.61 - 1)
    assert "the larger of DFLASH's chain" in t["assumed"]["rule"] and "b / 16 of the 16-node tree" in t["assumed"]["rule"]
    assert all(tau <= b + 1 for tau, b in zip(taus, (1, 3, 7, 15)))  # a budget-b tree commits at most b + 1
    policy_table = TableAcceptModel({int(b): v for b, v in t["ddtree"].items()})
    for b in (1, 3, 7, 15, 31, 63):
        assert policy_table.tokens_per_request(b) == pytest.approx(tau_for_budget(t["ddtree"], b)[0])
    assert with_small_budgets(t, (1, 3)) is t  # nothing below the (extended) table: unchanged
    with pytest.raises(ValueError):
        chain_rate(20.0, 15)


def test_killed_while_profiling_keeps_the_profiles_taken(tmp_path):
    """Each profile is analysed as soon as it is taken and the JSON rewritten, so a run stopped by its time limit
    during a later profile (session 16's close call on the H200) still reports the breakdowns it has."""
    out = tmp_path / "shape.json"
    env = dict(os.environ, BENCH_SHAPE_FAKE_ENGINE="1", BENCH_SHAPE_FAKE_STALL_PROFILE="dflash+fa3")
    proc = subprocess.Popen([sys.executable, SCRIPT, "--out", str(out), "--shapes", "qwen3-4b",
                             "--configs", "plain,dflash+fa3", "--concurrency", "1,4", "--repeats", "1",
                             "--new-tokens", "32", "--base-tokens", "8", "--model-dir", str(tmp_path / "models"),
                             "--profile-dir", str(tmp_path / "prof"), "--profile-concurrency", "1,4"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, res = time.time() + 120, {}
        while time.time() < deadline:  # plain's two profiles come first, then dflash+fa3's hangs
            try:
                res = json.loads(out.read_text())["results"].get("qwen3-4b", {})
            except (OSError, ValueError):
                res = {}
            if all("profile" in res.get("plain", {}).get(c, {}) for c in ("1", "4")):
                break
            assert proc.poll() is None, "the run ended before its stalled profile"
            time.sleep(0.1)
        else:
            raise AssertionError("plain's profiles never reached the JSON")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # as a time limit does: the engines' processes too
        proc.wait()
    rep = json.loads(out.read_text())
    res = rep["results"]["qwen3-4b"]
    assert rep["partial"] == {"shape": "qwen3-4b", "repetitions_done": 1}
    for c in ("1", "4"):
        m = res["plain"][c]
        assert m["profile"]["rounds"] == 5 and m["outside_graphs_ms"] == pytest.approx(m["round_ms_median"] - 0.05,
                                                                                       abs=1e-3)
        assert "profile" not in res["dflash+fa3"][c] and res["dflash+fa3"][c]["round_ms_median"] > 0


def test_killed_inside_a_repetition_keeps_its_measurements(tmp_path):
    """The JSON is rewritten after every measurement: session 17's cold engines left the first repetition too
    little time to finish, and a run saved per repetition kept nothing of what it had measured."""
    out = tmp_path / "shape.json"
    env = dict(os.environ, BENCH_SHAPE_FAKE_ENGINE="1", BENCH_SHAPE_FAKE_STALL_MEASURE="dflash+fa3@4")
    proc = subprocess.Popen([sys.executable, SCRIPT, "--out", str(out), "--shapes", "qwen3-4b",
                             "--configs", "plain,dflash+fa3", "--concurrency", "1,4", "--repeats", "2",
                             "--new-tokens", "32", "--base-tokens", "8", "--model-dir", str(tmp_path / "models")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, res = time.time() + 120, {}
        while time.time() < deadline:  # c 1 of both configs and c 4 of plain come first, then dflash+fa3 hangs
            try:
                res = json.loads(out.read_text())["results"].get("qwen3-4b", {})
            except (OSError, ValueError):
                res = {}
            if res.get("plain", {}).get("4", {}).get("round_ms_median"):
                break
            assert proc.poll() is None, "the run ended before its stalled measurement"
            time.sleep(0.1)
        else:
            raise AssertionError("the first repetition's measurements never reached the JSON")
        time.sleep(0.5)
        assert proc.poll() is None, "the stalled measurement did not stall"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    rep = json.loads(out.read_text())
    res = rep["results"]["qwen3-4b"]
    assert rep["partial"] == {"shape": "qwen3-4b", "repetitions_done": 0}
    assert len(res["plain"]["1"]["round_ms"]) == len(res["dflash+fa3"]["1"]["round_ms"]) == 1
    assert len(res["plain"]["4"]["round_ms"]) == 1 and res["dflash+fa3"]["4"]["round_ms"] == []
    assert res["dflash+fa3"]["4"]["round_ms_median"] is None
    assert res["dflash+fa3"]["1"]["round_ms_ratio_vs_plain"]["per_repetition"]


def test_normal_draft_weights_are_named_as_the_shipped_drafter_sglang_loads(tmp_path):
    """``--draft-weights normal`` writes a checkpoint whose names and shapes follow the scheme of the shipped tiny
    pair's drafter (loaded by SGLang on the H200; its DFlash loader skips unknown names silently), computed from a
    drafter config alone; matrices N(0, 0.02), norm weights 1, bf16."""
    import torch
    from safetensors import safe_open

    from sglang_ddtree.fixtures import tiny_pair_path

    tiny = tiny_pair_path().draft
    cfg = json.loads(open(os.path.join(tiny, "config.json")).read())
    with safe_open(os.path.join(tiny, "model.safetensors"), "pt") as f:
        shipped = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    assert bench_shape.draft_weight_shapes(cfg) == shipped
    small = dict(cfg, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=64)
    path = bench_shape.write_normal_draft_weights(str(tmp_path), small, seed=3)
    assert path == str(tmp_path / "model.safetensors")
    with safe_open(path, "pt") as f:
        got = {k: f.get_tensor(k) for k in f.keys()}
    assert {k: tuple(v.shape) for k, v in got.items()} == bench_shape.draft_weight_shapes(small)
    assert all(v.dtype == torch.bfloat16 for v in got.values())
    assert all((v == 1).all() for k, v in got.items() if v.dim() == 1)
    mats = torch.cat([v.float().flatten() for v in got.values() if v.dim() == 2])
    assert abs(mats.std().item() - 0.02) < 0.001 and abs(mats.mean().item()) < 0.001
    assert len({v.float().flatten()[:8].sum().item() for v in got.values() if v.dim() == 2}) == \
        sum(v.dim() == 2 for v in got.values())  # every matrix its own draw (SGLang's dummy repeats one seed)


def test_the_8b_drafter_checkpoint_is_the_published_size():
    shapes = bench_shape.draft_weight_shapes(bench_shape.shape_configs("qwen3-8b")[1])
    assert sum(math.prod(s) for s in shapes.values()) == pytest.approx(1.05e9, rel=0.01)
    assert len(shapes) == 3 + 5 * 11


def test_draft_weights_reach_only_engines_with_a_drafter(tmp_path):
    for spec in ("dflash+fa3", "ddtree:15:8", "ddtree:auto:8+flashinfer"):
        kw = bench_shape.engine_kwargs(spec, "/d", "triton")
        assert bench_shape.draft_load_settings("normal", kw) == {"speculative_draft_load_format": "auto"}
        assert bench_shape.draft_load_settings("dummy", kw) == {}
    assert bench_shape.draft_load_settings("normal", bench_shape.engine_kwargs("plain+fa3", "/d", "triton")) == {}
    target_dir, draft_dir = bench_shape.write_shape(str(tmp_path), "qwen3-8b")  # dummy: configs only
    assert sorted(os.listdir(draft_dir)) == ["config.json"] and sorted(os.listdir(target_dir)) == ["config.json"]
    with pytest.raises(ValueError, match="draft_weights must be one of"):
        bench_shape.write_shape(str(tmp_path), "qwen3-8b", "xavier")
    proc = _cli("--out", str(tmp_path / "x.json"), "--draft-weights", "xavier", "--configs", "plain")
    assert proc.returncode == 2 and "--draft-weights: invalid choice: 'xavier'" in proc.stderr


def test_engines_that_cannot_fit_the_gpu_are_refused_before_any_starts(tmp_path):
    """Session 32's first 8B-shape run on an 80 GB H100: five engines, the fourth out of memory after 200 s. The
    weights + KV floor says so before any engine starts; three fit and run (here on the fake engine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/usr/bin/env bash\ncase \"$*\" in *memory.total*) echo 81559 ;; *reasons*) "
                   "echo '1755, 650.0, 60, 0x4' ;; *) echo '1755, 650.0, 60' ;; esac\n")
    smi.chmod(0o755)
    five = "plain+fa3,dflash+fa3,ddtree:15:8+fa3,ddtree:auto:8+fa3,ddtree:auto:8+fa3+nochain"
    out = tmp_path / "x.json"
    proc = _cli("--out", str(out), "--shapes", "qwen3-8b", "--configs", five, "--concurrency", "1",
                "--max-total-tokens", "24000", "--model-dir", str(tmp_path / "models"), path_first=str(bin_dir))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    msg = ("5 engines of qwen3-8b stay alive together and need about 120.2 GiB (weights + KV at --max-total-tokens "
           "24000, CUDA graphs at batch sizes up to 1, 3.5 GiB of headroom each), more than the GPU's 79.6 GiB: pass fewer "
           "--configs, a lower --concurrency or a smaller --max-total-tokens")
    assert msg in proc.stdout
    rep = json.loads(out.read_text())
    assert rep["errors"]["qwen3-8b"] == {"error": "MemoryError: " + msg} and rep["results"] == {}
    assert not (tmp_path / "models").exists()  # refused before writing the shape or starting an engine

    t, d = bench_shape.shape_configs("qwen3-8b")
    floors = [bench_shape.engine_floor_gib(t, d, s, 24000) for s in ("plain+fa3", "dflash+fa3", "ddtree:auto:8")]
    assert [round(f, 1) for f in floors] == [18.6, 21.0, 21.0]
    assert bench_shape.memory_shortfall("qwen3-8b", five.split(","), 24000, 139.8) is None  # the H200 holds five
    assert bench_shape.memory_shortfall("qwen3-8b", five.split(",")[:3], 24000, 79.6) is None
    assert bench_shape.memory_shortfall("qwen3-8b", five.split(","), 24000, None) is None  # no nvidia-smi
    assert bench_shape.engine_floor_gib(*bench_shape.shape_configs("qwen3.5-9b"), "plain", 24000) is None


def test_the_fit_check_counts_each_engines_cuda_graphs_at_the_largest_concurrency():
    """Session 40 on an 80 GB H100: plain, DFLASH and auto at the 8B shape ran at c 32, and at c 64 budget auto's
    engine ran out of memory at its first prefill after ~200 s of start-up, its weights and KV well inside the GPU:
    its verify graphs of every bucket at 64 requests held 9.45 GB. Graph memory counts now, by the rows captured."""
    trio = ["plain+fa3", "dflash+fa3", "ddtree:auto:8+fa3"]
    assert bench_shape.memory_shortfall("qwen3-8b", trio, 24000, 79.6, 32, "fa3") is None
    short = bench_shape.memory_shortfall("qwen3-8b", trio, 24000, 79.6, 64, "fa3")
    assert short is not None and short.startswith("3 engines of qwen3-8b stay alive together and need about 81.1 GiB")
    assert "CUDA graphs at batch sizes up to 64" in short
    assert bench_shape.memory_shortfall("qwen3-8b", trio[1:], 24000, 79.6, 64, "fa3") is None  # two of them fit
    # rows a request: plain 1, DFLASH its block, a fixed budget b + 1, auto every bucket (the chain's on fa3 only)
    rows = {spec: bench_shape.captured_rows(spec, "fa3") for spec in ("plain", "dflash", "ddtree:15:8", "ddtree:auto:8",
                                                                      "ddtree:auto:8+nochain")}
    assert rows == {"plain": 1, "dflash": 16, "ddtree:15:8": 16, "ddtree:auto:8": 143, "ddtree:auto:8+nochain": 127}
    assert bench_shape.captured_rows("ddtree:auto:8", "triton") == 127
    assert bench_shape.captured_rows("ddtree:auto:8+fa3", "triton") == 143
    t, d = bench_shape.shape_configs("qwen3-8b")
    one, many = (bench_shape.engine_estimate_gib(t, d, "ddtree:auto:8", 24000, c, "fa3") for c in (1, 64))
    assert many - one == pytest.approx(143 * 63 * 7.0 * 151936 / 2 ** 30)
