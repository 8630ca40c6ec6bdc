"""benchmark/bench_e2e.py's CPU-side logic: config specs and the token-equality summary."""

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmark", "bench_e2e.py")
spec = importlib.util.spec_from_file_location("bench_e2e", _PATH)
bench_e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_e2e)


def test_config_specs():
    assert bench_e2e.engine_kwargs("plain", "D", "triton") == {"attention_backend": "triton"}
    assert bench_e2e.engine_kwargs("dflash", "D", "flashinfer") == {
        "attention_backend": "flashinfer", "speculative_algorithm": "DFLASH", "speculative_draft_model_path": "D"}
    assert bench_e2e.engine_kwargs("ddtree:64:8", "D", "triton") == {
        "attention_backend": "triton", "speculative_algorithm": "DDTREE", "speculative_draft_model_path": "D",
        "speculative_ddtree_budget": 64, "speculative_ddtree_topk": 8}
    assert bench_e2e.engine_kwargs("dflash+fa3", "D", "triton")["attention_backend"] == "fa3"
    assert bench_e2e.engine_kwargs("ddtree:15:8+nooverlap+flashinfer", "D", "triton") == {
        "attention_backend": "flashinfer", "disable_overlap_schedule": True, "speculative_algorithm": "DDTREE",
        "speculative_draft_model_path": "D", "speculative_ddtree_budget": 15, "speculative_ddtree_topk": 8}
    with pytest.raises(ValueError, match="unknown config modifier 'fa4'"):
        bench_e2e.engine_kwargs("plain+fa4", "D", "triton")
    for bad in ("eagle:1:1", "ddtree", "ddtree:64", "ddtree:a:8", "foo"):
        with pytest.raises(ValueError, match=f"unknown config '{bad}'"):
            bench_e2e.engine_kwargs(bad, "D", "triton")


def test_environment_modifiers(monkeypatch):
    """+fa3tree / +fa3cascade set the engine processes' switch of fa3's fused tree attention, nothing else."""
    var = "SGLANG_DDTREE_FA3_TREE_ATTENTION"
    assert bench_e2e.engine_kwargs("ddtree:15:8+fa3+fa3tree", "D", "triton") == bench_e2e.engine_kwargs(
        "ddtree:15:8+fa3", "D", "triton")
    assert bench_e2e.engine_env("ddtree:15:8+fa3+fa3tree") == {var: "1"}
    assert bench_e2e.engine_env("ddtree:15:8+fa3cascade+fa3") == {var: "0"}
    assert bench_e2e.engine_env("dflash+fa3") == {}
    assert bench_e2e.engine_env("ddtree:63:8+fa3+kveager") == {"SGLANG_DDTREE_DRAFT_KV_GRAPH": "0"}
    assert bench_e2e.engine_env("ddtree:63:8+fa3+kvgraph") == {"SGLANG_DDTREE_DRAFT_KV_GRAPH": "1"}
    assert bench_e2e.engine_env("ddtree:auto:8+fa3+warmup") == {"SGLANG_DDTREE_WARMUP": "1"}
    pinned = bench_e2e.engine_env("ddtree:auto:8+fa3+pin0")  # the test plugin's variable, and its folder on the path
    assert pinned["DDTREE_TEST_PIN_BUDGET"] == "0"
    assert pinned["PYTHONPATH"].split(os.pathsep)[0] == bench_e2e.TEST_PLUGIN_DIR
    # any bucket by its printed name: the chain's round alone, a tree's
    assert bench_e2e.engine_env("ddtree:auto:8+fa3+pinchain15")["DDTREE_TEST_PIN_BUDGET"] == "chain15"
    assert bench_e2e.engine_env("ddtree:auto:8+fa3+pin31")["DDTREE_TEST_PIN_BUDGET"] == "31"
    with pytest.raises(ValueError, match="unknown config modifier 'pinx'.*pin<bucket>"):
        bench_e2e.engine_kwargs("ddtree:auto:8+fa3+pinx", "D", "triton")
    assert os.path.isdir(os.path.join(bench_e2e.TEST_PLUGIN_DIR, "ddtree_test_hooks"))
    from sglang_ddtree.worker.flashinfer_plan import ENV as FI_PLAN_ENV

    assert bench_e2e.engine_env("ddtree:15:8+flashinfer+fiplan") == {FI_PLAN_ENV: "1"}
    assert bench_e2e.engine_env("ddtree:15:8+flashinfer+fiupstream") == {FI_PLAN_ENV: "0"}
    from sglang_ddtree.validation import PAGED_ENV

    assert bench_e2e.engine_env("ddtree:15:4+p16+pagedx") == {PAGED_ENV: "1"}
    from sglang_ddtree.worker.draft_head import TOPK_THRESHOLD_ENV

    assert bench_e2e.engine_env("ddtree:15:8+fa3+topkthr") == {TOPK_THRESHOLD_ENV: "1"}
    assert bench_e2e.engine_kwargs("ddtree:15:4+p16+pagedx", "D", "triton")["page_size"] == 16
    assert bench_e2e.engine_kwargs("plain+p64", "D", "triton") == {"attention_backend": "triton", "page_size": 64}
    assert bench_e2e.engine_kwargs("ddtree:15:8+flashinfer+fiplan", "D", "triton")["attention_backend"] == "flashinfer"
    monkeypatch.setenv(var, "0")
    with bench_e2e.engine_environment("ddtree:15:8+fa3tree"):
        assert os.environ[var] == "1"
    assert os.environ[var] == "0"
    monkeypatch.delenv(var)
    with bench_e2e.engine_environment("ddtree:15:8+fa3tree"):
        assert os.environ[var] == "1"
    assert var not in os.environ


def test_after_warmup_modifiers():
    """+gcfreeze changes no engine argument or variable; it freezes the warm engine's garbage collector."""
    assert bench_e2e.engine_kwargs("ddtree:auto:8+fa3+gcfreeze", "D", "triton") == bench_e2e.engine_kwargs(
        "ddtree:auto:8+fa3", "D", "triton")
    assert bench_e2e.engine_env("ddtree:63:8+gcfreeze") == {}

    class Engine:
        frozen = 0

        def freeze_gc(self):
            self.frozen += 1

    # +gclog: SGLang's GC logger (an environment variable) at INFO level (an engine argument)
    assert bench_e2e.engine_kwargs("ddtree:63:8+gclog", "D", "triton")["log_level"] == "info"
    assert bench_e2e.engine_env("ddtree:63:8+fa3+gclog") == {"SGLANG_LOG_GC": "1"}
    # +loginfo: the engine log at INFO (budget auto's start-up policy, its per-40-rounds budget mix), no env
    assert bench_e2e.engine_kwargs("ddtree:auto:8+fa3+loginfo", "D", "triton")["log_level"] == "info"
    assert bench_e2e.engine_env("ddtree:auto:8+fa3+loginfo") == {}
    # +logrounds: a decode-log line every round at INFO (auto_log_rounds.py reads the periods per bucket)
    kw = bench_e2e.engine_kwargs("ddtree:auto:8+fa3+logrounds", "D", "triton")
    assert kw["log_level"] == "info" and kw["decode_log_interval"] == 1
    e = Engine()
    bench_e2e.after_warmup(e, "ddtree:63:8+fa3")
    assert e.frozen == 0
    bench_e2e.after_warmup(e, "ddtree:63:8+gcfreeze+fa3")
    assert e.frozen == 1


@pytest.mark.parametrize("plain", ["plain", "plain+fa3"])
def test_summary_counts_outputs_equal_to_plain(capsys, plain):
    def rec(config, outs):
        return {"config": config, "by_bs": {"1": {"outputs": outs, "tokens_per_s": 1.0, "mean_accept_length": None}}}

    report = {"results": [rec("dflash", [[1, 2], [3, 4]]), rec(plain, [[1, 2], [3, 4]]),
                          rec("ddtree:4:2", [[1, 2], [3, 5]])]}
    bench_e2e._summarise(report, final=True)
    assert report["results"][2]["by_bs"]["1"]["equal_to_plain"] == "1/2"
    assert report["results"][1]["by_bs"]["1"]["equal_to_plain"] == "2/2"
    assert "ddtree:4:2 bs   1" in capsys.readouterr().out
    assert bench_e2e.plain_reference(["dflash", "plain+nograph", "plain"]) == "plain+nograph"
    assert bench_e2e.plain_reference(["dflash", "ddtree:4:2"]) is None


def test_write_report_puts_the_run_above_the_sections(tmp_path):
    import json

    path = tmp_path / "deep" / "r.json"
    rep = bench_e2e.write_report(str(path), ["--rows", "2"], settings={"rows": [2]}, by_rows={"2": {}})
    on_disk = json.loads(path.read_text())
    assert on_disk == rep and list(rep) == ["command", "environment", "settings", "by_rows"]
    assert rep["command"].endswith(" --rows 2") and "command" not in rep["environment"]
    assert {"python", "torch", "gpu", "date_utc", "sglang_ddtree"} <= set(rep["environment"])


def test_fa3_unavailable_names_the_import_error_only_when_a_config_runs_on_fa3():
    def missing():
        return "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."

    def present():
        return None

    assert bench_e2e.fa3_unavailable(["plain", "ddtree:15:8"], "triton", probe=missing) is None
    assert bench_e2e.fa3_unavailable(["plain", "dflash+fa3"], "triton", probe=present) is None
    why = bench_e2e.fa3_unavailable(["plain", "dflash+fa3"], "triton", probe=missing)
    assert why == ("a config runs on fa3 but sgl_kernel.flash_attn does not import (ImportError: Can not import FA3 "
                   "in sgl_kernel. Please check your installation.)")
    assert bench_e2e.fa3_unavailable(["plain"], "fa3", probe=missing) is not None  # the run's default backend


def test_the_kernel_timer_is_named_and_an_unknown_one_refused():
    """The kernel benchmarks' --timer: graph (GPU time of calls replayed from a CUDA graph) or launch (each call
    timed alone); anything else is one error naming both."""
    assert bench_e2e.TIMERS == ("graph", "launch")
    with pytest.raises(ValueError, match=r"timer must be one of \('graph', 'launch'\), got 'wall'"):
        bench_e2e.kernel_median_us("wall", lambda: None, 1, calls=1)


def test_profile_batches_take_profile_bs_prompts_a_call_in_order():
    prompts = [[1], [2], [3]]
    assert bench_e2e.profile_batches(prompts, 2, 1) == [[[1]], [[2]]]  # bs 1: one prompt a call, as before
    assert bench_e2e.profile_batches(prompts, 2, 2) == [[[1], [2]], [[3], [1]]]  # wraps around


@pytest.mark.parametrize("flag", ["--profile-bs", "--profile-prompts"])
def test_profile_counts_below_one_are_one_error_line(flag):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, _PATH, "--target", "T", "--draft", "D", "--out", "x.json", flag, "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"{flag} 0: must be at least 1" in proc.stderr, proc.stderr


def test_a_test_plugin_modifier_puts_the_plugin_on_the_path(monkeypatch):
    """``+pin0`` (a diagnostic through the TEST-ONLY plugin): while the in-process engine starts, its variable is set
    and the plugin's folder is on this process's sys.path, which a spawned scheduler copies."""
    import sys

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != bench_e2e.TEST_PLUGIN_DIR])
    monkeypatch.delenv("DDTREE_TEST_PIN_BUDGET", raising=False)
    with bench_e2e.engine_environment("ddtree:auto:8+fa3+pin0"):
        assert os.environ["DDTREE_TEST_PIN_BUDGET"] == "0"
    assert sys.path[0] == bench_e2e.TEST_PLUGIN_DIR and "DDTREE_TEST_PIN_BUDGET" not in os.environ
    with bench_e2e.engine_environment("ddtree:auto:8+fa3"):  # other configs: nothing of the plugin's
        assert "DDTREE_TEST_PIN_BUDGET" not in os.environ
    assert bench_e2e.engine_kwargs("ddtree:auto:8+fa3+pin0", "D", "triton") == bench_e2e.engine_kwargs(
        "ddtree:auto:8+fa3", "D", "triton")


def test_the_phases_modifier_names_a_file_per_config(tmp_path, monkeypatch):
    """``+phases``: the test plugin's phase times, written under $DDTREE_BENCH_PHASES_DIR, one prefix per config."""
    monkeypatch.setenv(bench_e2e.PHASES_DIR_ENV, str(tmp_path / "phases"))
    env = bench_e2e.engine_env("ddtree:auto:8+fa3+pin0+phases")
    assert env["DDTREE_TEST_PHASE_TIMES"] == str(tmp_path / "phases" / "ddtree_auto_8_fa3_pin0_phases")
    assert env["DDTREE_TEST_PIN_BUDGET"] == "0" and (tmp_path / "phases").is_dir()
    assert bench_e2e.engine_env("plain+fa3+phases")["DDTREE_TEST_PHASE_TIMES"].endswith("plain_fa3_phases")
    assert bench_e2e.engine_kwargs("plain+fa3+phases", "D", "triton") == bench_e2e.engine_kwargs("plain+fa3", "D",
                                                                                                 "triton")
    with pytest.raises(ValueError, match="unknown config modifier 'phase'.*phases"):
        bench_e2e.engine_kwargs("plain+phase", "D", "triton")


def test_the_syncwatch_and_floor_modifiers(tmp_path, monkeypatch):
    """``+syncwatch``: the sync watch's file per config, as ``+phases``; ``+floor``: the minimal width-0 round."""
    monkeypatch.setenv(bench_e2e.PHASES_DIR_ENV, str(tmp_path / "phases"))
    env = bench_e2e.engine_env("ddtree:auto:8+fa3+floor+syncwatch")
    assert env["DDTREE_TEST_SYNC_WATCH"] == str(tmp_path / "phases" / "ddtree_auto_8_fa3_floor_syncwatch")
    assert env["DDTREE_TEST_FLOOR_ROUND"] == "1" and env["DDTREE_TEST_PHASE_TIMES"] == ""
    assert bench_e2e.engine_env("ddtree:auto:8+fa3+syncwatch")["DDTREE_TEST_FLOOR_ROUND"] == ""
    assert bench_e2e.engine_kwargs("ddtree:auto:8+floor", "D", "triton") == bench_e2e.engine_kwargs("ddtree:auto:8",
                                                                                                    "D", "triton")


def test_the_split_modifier(tmp_path, monkeypatch):
    """``+split``: the phases file per config with the narrowed timer (``DDTREE_TEST_PHASE_SPLIT``); the engine's
    arguments are the config's own."""
    monkeypatch.setenv(bench_e2e.PHASES_DIR_ENV, str(tmp_path / "phases"))
    env = bench_e2e.engine_env("plain+fa3+split")
    assert env["DDTREE_TEST_PHASE_TIMES"] == str(tmp_path / "phases" / "plain_fa3_split")
    assert env["DDTREE_TEST_PHASE_SPLIT"] == "1" and env["DDTREE_TEST_SYNC_WATCH"] == ""
    assert bench_e2e.engine_env("plain+fa3+phases")["DDTREE_TEST_PHASE_SPLIT"] == ""
    assert bench_e2e.engine_kwargs("plain+fa3+split", "D", "triton") == bench_e2e.engine_kwargs("plain+fa3", "D",
                                                                                                 "triton")


def test_the_continuous_schedule_keeps_bs_requests_in_flight_and_refills_at_once():
    """``decode_continuous``: never more than bs requests at once, bs reached, a finished request replaced before
    the slowest of its wave ends (waves would wait for it), outputs in prompt order."""
    import asyncio

    class Engine:
        def __init__(self):
            self.loop = asyncio.new_event_loop()
            self.in_flight, self.most, self.events = 0, 0, []

        async def async_generate(self, input_ids, sampling_params):
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.events.append(("start", input_ids[0]))
            await asyncio.sleep(0.05 if input_ids[0] == 0 else 0.005)  # prompt 0 is the slow request
            self.events.append(("end", input_ids[0]))
            self.in_flight -= 1
            return {"output_ids": [input_ids[0]] * sampling_params["max_new_tokens"],
                    "meta_info": {"spec_accept_length": 2.0}}

    engine = Engine()
    prompts = [[i, 9] for i in range(6)]
    out = bench_e2e.decode_continuous(engine, prompts, 2, {"max_new_tokens": 3})
    assert engine.most == 2
    assert out["outputs"] == [[i] * 3 for i in range(6)] and out["tokens"] == 18 and out["mean_accept_length"] == 2.0
    # prompts 2..5 all started and ended while the slow prompt 0 was still running
    assert engine.events.index(("end", 5)) < engine.events.index(("end", 0))
    assert bench_e2e.SCHEDULES == {"waves": bench_e2e.decode_in_batches, "continuous": bench_e2e.decode_continuous}


def test_the_graph_cap_covers_the_largest_batch_size():
    assert bench_e2e.engine_caps([1, 16])["cuda_graph_max_bs_decode"] == bench_e2e.COMMON["cuda_graph_max_bs_decode"]
    caps = ("cuda_graph_max_bs_decode", "max_running_requests")
    assert [bench_e2e.engine_caps(["4", "64"])[k] for k in caps] == [64, 64]
    assert bench_e2e.engine_caps([16])["max_running_requests"] == 48
    assert {k: v for k, v in bench_e2e.engine_caps([64]).items() if k not in caps} == {
        k: v for k, v in bench_e2e.COMMON.items() if k not in caps}


def test_request_lengths_are_fixed_per_prompt_and_spread_around_the_mean():
    params = dict(temperature=0.0, max_new_tokens=128, ignore_eos=True)
    same = bench_e2e.request_params(params, 5, 0.0)
    assert [p["max_new_tokens"] for p in same] == [128] * 5 and same[0]["ignore_eos"] is True
    spread = bench_e2e.request_params(params, 400, 0.5)
    lengths = [p["max_new_tokens"] for p in spread]
    assert min(lengths) >= 64 and max(lengths) <= 192 and len(set(lengths)) > 50
    assert abs(sum(lengths) / len(lengths) - 128) < 6  # the mean stays ~M
    assert [p["max_new_tokens"] for p in bench_e2e.request_params(params, 400, 0.5)] == lengths  # fixed per index
    assert [p["max_new_tokens"] for p in bench_e2e.request_params(params, 10, 0.5)] == lengths[:10]
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="--length-spread"):
            bench_e2e.request_params(params, 3, bad)


def test_both_schedules_give_each_request_its_own_params():
    class Engine:
        def __init__(self):
            self.asked = []

        def generate(self, input_ids, sampling_params):
            self.asked += [p["max_new_tokens"] for p in sampling_params]
            return [{"output_ids": [1] * p["max_new_tokens"], "meta_info": {}} for p in sampling_params]

        @property
        def loop(self):
            import asyncio

            self._loop = getattr(self, "_loop", None) or asyncio.new_event_loop()
            return self._loop

        async def async_generate(self, input_ids, sampling_params):
            return {"output_ids": [1] * sampling_params["max_new_tokens"], "meta_info": {}}

    per = bench_e2e.request_params(dict(max_new_tokens=20), 7, 0.5)
    want = [p["max_new_tokens"] for p in per]
    engine = Engine()
    waves = bench_e2e.decode_in_batches(engine, [[1]] * 7, 3, per)
    assert engine.asked == want and [len(o) for o in waves["outputs"]] == want and waves["tokens"] == sum(want)
    cont = bench_e2e.decode_continuous(engine, [[1]] * 7, 3, per)
    assert [len(o) for o in cont["outputs"]] == want
    assert [len(o) for o in bench_e2e.decode_in_batches(Engine(), [[1]] * 2, 2, dict(max_new_tokens=4))["outputs"]] == [4, 4]
    with pytest.raises(ValueError, match="2 sampling params for 7 prompts"):
        bench_e2e.decode_in_batches(Engine(), [[1]] * 7, 3, per[:2])


def test_the_environment_record_names_the_host_cpu(tmp_path):
    """The tiny pair is host-bound: a record without its host cannot be set beside another session's."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Example CPU 9000 @ 3.0GHz\nflags\t: x\n\n"
                    "processor\t: 1\nmodel name\t: Example CPU 9000 @ 3.0GHz\n")
    cpu = bench_e2e.host_cpu(str(info))
    assert cpu["cpu_model"] == "Example CPU 9000 @ 3.0GHz" and cpu["cpu_count"] == os.cpu_count()
    assert isinstance(cpu["loadavg_1m"], float)
    assert bench_e2e.host_cpu(str(tmp_path / "missing"))["cpu_model"] is None
    env = bench_e2e.environment(["bench_paired.py", "--bs", "1"])
    assert {"cpu_model", "cpu_count", "loadavg_1m"} <= set(env)
