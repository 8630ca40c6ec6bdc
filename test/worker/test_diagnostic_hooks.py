"""The test plugin's diagnostic hooks. The compile watch (``DDTREE_TEST_COMPILE_LOG``): parsed, registered on the
warm-up and the round, and its lines say which kernels a round compiled after the start-up warm-up
(``worker.warmup``); CPU: the Triton counts are stand-ins here, ``test_warmup_gpu.py`` and the parity script's
``*_compiles`` configs count real ones. The pinned bucket (``DDTREE_TEST_PIN_BUDGET``, bench config ``+pin0``)."""

import importlib
import json
import os
import sys
import types
import warnings

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _test_plugin_env import plugin_env, registrations  # noqa: E402

from ddtree_test_hooks import compile_watch  # noqa: E402
from ddtree_test_hooks import hooks as test_hooks  # noqa: E402
from ddtree_test_hooks.env import HookEnv  # noqa: E402


def _check_path_variable(tmp_path, var: str, field: str, path: str) -> None:
    """A DDTREE_TEST_* variable naming a file prefix: parsed into ``field``, switches the plugin on, refused when its
    folder does not exist, and set by ``plugin_env``."""
    assert HookEnv.from_env({var: path}) == HookEnv(**{field: path})
    assert HookEnv(**{field: path}).any
    with pytest.raises(ValueError, match="its folder does not exist"):
        HookEnv.from_env({var: str(tmp_path / "missing" / "x")})
    assert plugin_env(**{field: path}, base={})[var] == path


def _fresh_phase_times(monkeypatch):
    """``phase_times`` with no process accumulators yet, and no exit hook or GC callback left behind."""
    from ddtree_test_hooks import phase_times

    monkeypatch.setattr(phase_times, "_TIMES", None)
    monkeypatch.setattr(phase_times.atexit, "register", lambda fn: None)
    monkeypatch.setattr(phase_times.gc, "callbacks", [])
    return phase_times


def test_env_and_registration(tmp_path, monkeypatch):
    from sglang.srt.plugins.hook_registry import HookType

    log = str(tmp_path / "compiles.jsonl")
    _check_path_variable(tmp_path, "DDTREE_TEST_COMPILE_LOG", "compile_log", log)
    assert registrations(monkeypatch, {"DDTREE_TEST_COMPILE_LOG": log}) == [("sglang_ddtree.worker.worker.DDTreeWorker._warm_round_kernels",
                      test_hooks.after_warm_compile_baseline, HookType.AFTER),
                     ("sglang_ddtree.worker.worker.DDTreeWorker._decode_round",
                      test_hooks.after_round_compile_check, HookType.AFTER)]
    from sglang_ddtree.worker.worker import DDTreeWorker  # both targets exist

    assert callable(DDTreeWorker._warm_round_kernels) and callable(DDTreeWorker._decode_round)


def test_kernel_list_names_real_triton_functions():
    for name, (module, attr) in compile_watch.KERNELS.items():
        assert compile_watch.variants(getattr(importlib.import_module(module), attr)) == 0, name  # none on CPU
    assert compile_watch.grown({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 1}) == {"b": [2, 3], "c": [0, 1]}


def test_hooks_log_only_rounds_that_compiled(tmp_path, monkeypatch):
    log = tmp_path / "compiles.jsonl"
    counts = {"build": 7, "commit": 7}
    monkeypatch.setattr(compile_watch, "counts", lambda: dict(counts))
    monkeypatch.setattr("sglang.srt.distributed.get_tp_group", lambda: types.SimpleNamespace(rank_in_group=0))
    test_hooks.configure(HookEnv(compile_log=str(log)))
    worker = types.SimpleNamespace(config=types.SimpleNamespace(buckets=(0, 1, 3)))
    batch = types.SimpleNamespace(seq_lens=[10, 11, 12])
    test_hooks.after_warm_compile_baseline(None, worker)
    for _ in range(2):
        assert test_hooks.after_round_compile_check("result", worker, batch, None) is None
    counts["commit"] = 8  # the third round compiled another commit specialisation
    test_hooks.after_round_compile_check("result", worker, batch=batch, on_publish=None)
    test_hooks.after_round_compile_check("result", worker, batch, None)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["event"] for x in lines] == ["warmed", "compiled"]
    assert lines[0]["counts"] == {"build": 7, "commit": 7} and lines[0]["buckets"] == [0, 1, 3]
    assert lines[1]["round"] == 3 and lines[1]["bs"] == 3 and lines[1]["grew"] == {"commit": [7, 8]}
    test_hooks.configure(HookEnv(compile_log=str(log)))  # no warm-up: the first round is the base, said once
    test_hooks.after_round_compile_check("result", worker, batch, None)
    assert json.loads(log.read_text().splitlines()[-1])["event"] == "no_warm_up"
    test_hooks.configure(HookEnv())


def test_parity_script_reads_the_log(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "scripts", "device"))
    import ddtree_parity

    assert "error" in ddtree_parity.compile_report(str(tmp_path / "none.jsonl"))
    log = tmp_path / "c.jsonl"
    log.write_text('{"event": "warmed", "counts": {}}\n{"event": "compiled", "round": 4, "bs": 2, "grew": {}}\n')
    report = ddtree_parity.compile_report(str(log))
    assert report["warmed"] == 1 and report["no_warm_up"] == 0 and report["rounds_that_compiled"][0]["round"] == 4
    assert ddtree_parity.CONFIGS["dd_triton_auto_cycle_compiles"]["_test_hooks"] == dict(cycle_budgets=True,
                                                                                        compile_watch=True)


def test_pin_budget_hook(monkeypatch):
    """DDTREE_TEST_PIN_BUDGET (a diagnostic): parsed, excludes the bucket cycle, registered on the choice, and every
    round verifies that bucket; one the server does not have fails the round."""
    from sglang.srt.plugins.hook_registry import HookType

    assert HookEnv.from_env({"DDTREE_TEST_PIN_BUDGET": "0"}) == HookEnv(pin_budget=0)
    assert HookEnv(pin_budget=0).any and not HookEnv().any
    for bad, match in (({"DDTREE_TEST_PIN_BUDGET": "-1"}, "an integer >= 0"),
                       ({"DDTREE_TEST_PIN_BUDGET": "3", "DDTREE_TEST_CYCLE_BUDGETS": "1"}, "exclude each other")):
        with pytest.raises(ValueError, match=match):
            HookEnv.from_env(bad)
    assert plugin_env(pin_budget=0, base={})["DDTREE_TEST_PIN_BUDGET"] == "0"
    assert plugin_env(base={})["DDTREE_TEST_PIN_BUDGET"] == ""
    assert registrations(monkeypatch, {"DDTREE_TEST_PIN_BUDGET": "0"}) == [
        ("sglang_ddtree.worker.widths.AutoWidth.choose", test_hooks.after_choose_pin, HookType.AFTER)]
    auto = types.SimpleNamespace(budgets=(0, 1, 3, 7))
    test_hooks.configure(HookEnv(pin_budget=0))
    assert [test_hooks.after_choose_pin(b, auto, 8) for b in (7, 3, 0)] == [0, 0, 0]
    test_hooks.configure(HookEnv(pin_budget=15))
    with pytest.raises(ValueError, match="not a bucket of this server"):
        test_hooks.after_choose_pin(7, auto, 8)
    test_hooks.configure(HookEnv())


class _Mode:
    def __init__(self, name):
        self.name = name

    def is_decode(self):
        return self.name == "DECODE"


def _batch(mode):
    return types.SimpleNamespace(forward_mode=_Mode(mode))


def test_phase_times_count_decode_iterations_only(tmp_path):
    """DDTREE_TEST_PHASE_TIMES's accumulators: an iteration runs from one ``run_batch`` to the next; only decode
    iterations count, a period only between two decode ones; times are the wrapped calls' clock differences."""
    from ddtree_test_hooks import phase_times

    now = [0.0]
    times = phase_times.PhaseTimes(str(tmp_path / "cfg"), clock=lambda: now[0])
    run_batch, step = times.around("run_batch"), times.around("process_batch_result")

    def run(_scheduler, batch, cost):
        now[0] += cost
        return batch.forward_mode.name

    def process(cost):
        now[0] += cost

    # prefill (not counted), then three decode iterations 5 apart, then another prefill and one decode
    assert run_batch(run, None, _batch("EXTEND"), 2.0) == "EXTEND"
    process(1.0)
    step(lambda *a: process(0.25), None)  # inside the prefill iteration: not counted
    for _ in range(3):
        run_batch(run, None, _batch("DECODE"), 3.0)
        step(lambda *a: process(2.0), None)
    times.gc_callback("start", {})
    now[0] += 0.5
    times.gc_callback("stop", {})  # a collection's pause inside a decode iteration
    run_batch(run, None, _batch("EXTEND"), 1.0)
    run_batch(run, None, _batch("DECODE"), 3.0)  # after a prefill: no period
    s = times.summary()
    assert s["targets"]["gc"] == {"calls": 1, "total_us": 0.5e6, "us_per_decode_iteration": 0.125e6, "max_us": 0.5e6}
    assert s["loop_steps_us_per_decode_iteration"] == 4.5e6  # run_batch 12 + process_batch_result 6 over 4
    # prefill 3.25 s, then decode 5 + 5 + (5.5 with the pause) up to the next prefill, whose iteration is 1 s
    assert s["transitions_us"] == {"decode->decode": 10e6, "decode->extend": 5.5e6, "extend->decode": 3.25e6 + 1e6}
    assert s["span_us"] == 3.25e6 + 10e6 + 5.5e6 + 1e6
    assert s["iterations"] == {"extend": 2, "decode": 4}
    assert s["period_us"] == {"count": 2, "median": 5e6, "mean": 5e6}
    assert s["targets"]["run_batch"] == {"calls": 4, "total_us": 12e6, "us_per_decode_iteration": 3e6, "max_us": 3e6}
    assert s["targets"]["process_batch_result"] == {"calls": 3, "total_us": 6e6, "us_per_decode_iteration": 1.5e6,
                                                    "max_us": 2e6}
    # the prefill iterations' steps, kept apart per mode: the first prefill's process_batch_result only
    assert s["other_modes"] == {"extend": {"process_batch_result": {"calls": 1, "total_us": 0.25e6,
                                                                     "us_per_iteration": 0.125e6, "max_us": 0.25e6},
                                           "run_batch": {"calls": 2, "total_us": 3e6, "us_per_iteration": 1.5e6,
                                                         "max_us": 2e6}}}
    assert "sync_watch" not in s
    times.dump()
    written = json.loads((tmp_path / f"cfg.{os.getpid()}.json").read_text())
    assert written["targets"] == s["targets"]
    idle = phase_times.PhaseTimes(str(tmp_path / "idle"))
    idle.dump()  # a process that ran no batch (tokenizer, detokenizer) writes nothing
    assert not list(tmp_path.glob("idle*"))


def test_phase_times_hooks_are_registered_around_resolvable_targets(tmp_path, monkeypatch):
    from sglang.srt.plugins.hook_registry import HookType

    prefix = str(tmp_path / "plain_fa3")
    _check_path_variable(tmp_path, "DDTREE_TEST_PHASE_TIMES", "phase_times", prefix)
    phase_times = _fresh_phase_times(monkeypatch)
    calls = registrations(monkeypatch, {"DDTREE_TEST_PHASE_TIMES": prefix})
    targets = [t for t, _, _ in calls]
    assert {h for _, _, h in calls} == {HookType.AROUND}
    # the scheduler loop, plain decoding's step, the round and the host waits all resolve in this SGLang
    for name in (phase_times.RUN_BATCH, "sglang.srt.managers.scheduler.Scheduler.process_batch_result",
                 "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
                 "sglang_ddtree.worker.worker.DDTreeWorker._decode_round", "torch.cuda.streams.Event.synchronize"):
        assert name in targets
    assert phase_times.resolvable("sglang_ddtree.worker.worker.DDTreeWorker._verify")
    assert not phase_times.resolvable("sglang_ddtree.worker.worker.DDTreeWorker.no_such_method")
    assert not phase_times.resolvable("no_such_module.f")
    assert set(targets) <= {t for t, _ in phase_times.TARGETS}


class _FakeCuda:
    """``torch.cuda``'s two calls the sync watch makes, on a machine without a GPU."""

    def __init__(self):
        self.mode, self.allocs = None, 0

    def set_sync_debug_mode(self, mode):
        self.mode = mode

    def memory_stats(self):
        return {"num_device_alloc": self.allocs, "num_device_free": 1, "num_alloc_retries": 0}


def _synchronizing_call():
    warnings.warn("called a synchronizing CUDA operation", UserWarning)


def test_sync_watch_counts_synchronizing_calls_by_site_after_the_first_iterations(tmp_path, monkeypatch):
    """DDTREE_TEST_SYNC_WATCH: nothing is counted before ``after`` decode iterations; then sync debug mode is on and
    each of torch's sync warnings is counted at its caller (every one, not once per site), other warnings pass
    through, and the allocator's counters are differences over the watched window."""
    from ddtree_test_hooks import phase_times

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.setattr(warnings, "filters", list(warnings.filters))
    cuda = _FakeCuda()
    times = phase_times.PhaseTimes(str(tmp_path / "cfg"))
    times.sync_watch = phase_times.SyncWatch(cuda, after=2)
    run_batch = times.around("run_batch")
    for i in range(2):
        run_batch(lambda *a: None, None, _batch("DECODE"))
        assert cuda.mode is None
    run_batch(lambda *a: None, None, _batch("EXTEND"))  # not a decode iteration: does not start the watch
    assert cuda.mode is None
    run_batch(lambda *a: None, None, _batch("DECODE"))
    assert cuda.mode == "warn"
    cuda.allocs = 3
    for _ in range(3):
        _synchronizing_call()
    passed = []
    monkeypatch.setattr(times.sync_watch, "_previous_showwarning", lambda *a, **k: passed.append(str(a[0])))
    warnings.warn("something else", UserWarning)
    s = times.summary()["sync_watch"]
    assert s["after_decode_iterations"] == 2 and s["watched_decode_iterations"] == 1
    assert s["syncs"] == 3 and passed == ["something else"]
    (site, count), = s["sites"].items()
    assert count == 3 and site.startswith("test_diagnostic_hooks.py:") and "_synchronizing_call" in site
    assert set(s["clocks"]) == {"wall_us_per_decode_iteration", "main_thread_cpu_us_per_decode_iteration",
                                "process_cpu_us_per_decode_iteration"}
    assert "MainThread" in s["threads"]
    assert s["allocator"] == {"num_device_alloc": 3, "num_device_free": 0, "num_alloc_retries": 0,
                              "num_sync_all_streams": 0}


def test_sync_watch_env_and_hooks(tmp_path, monkeypatch):
    """The sync watch is its own variable, excludes the full phase timer and times only the loop and the waits."""
    prefix = str(tmp_path / "pin0")
    _check_path_variable(tmp_path, "DDTREE_TEST_SYNC_WATCH", "sync_watch", prefix)
    with pytest.raises(ValueError, match="exclude each other"):
        HookEnv.from_env({"DDTREE_TEST_SYNC_WATCH": prefix, "DDTREE_TEST_PHASE_TIMES": prefix})
    phase_times = _fresh_phase_times(monkeypatch)
    calls = registrations(monkeypatch, {"DDTREE_TEST_SYNC_WATCH": prefix})
    targets = {t for t, _, _ in calls}
    assert phase_times.RUN_BATCH in targets and "torch.cuda.streams.Event.synchronize" in targets
    assert "sglang_ddtree.worker.worker.DDTreeWorker._decode_round" not in targets
    assert phase_times._TIMES.sync_watch is not None


def test_phase_split_env_and_hooks(tmp_path, monkeypatch):
    """DDTREE_TEST_PHASE_SPLIT=1 narrows the full phase timer to the loop, the waits and a decode iteration's
    once-an-iteration parts: the round, its parts (each called at most once a round) and its verify set-up stay
    timed, every Triton launch and graph replay does not; alone (without a phase-times path) or with another value it is refused."""
    prefix = str(tmp_path / "floor")
    with pytest.raises(ValueError, match="DDTREE_TEST_PHASE_TIMES too"):
        HookEnv.from_env({"DDTREE_TEST_PHASE_SPLIT": "1"})
    with pytest.raises(ValueError, match="use 1 or 0"):
        HookEnv.from_env({"DDTREE_TEST_PHASE_SPLIT": "yes", "DDTREE_TEST_PHASE_TIMES": prefix})
    assert HookEnv.from_env({"DDTREE_TEST_PHASE_SPLIT": "1", "DDTREE_TEST_PHASE_TIMES": prefix}).phase_split
    phase_times = _fresh_phase_times(monkeypatch)
    calls = registrations(monkeypatch, {"DDTREE_TEST_PHASE_TIMES": prefix, "DDTREE_TEST_PHASE_SPLIT": "1"})
    labels = {label for target, label in phase_times.TARGETS if target in {t for t, _, _ in calls}}
    assert labels <= phase_times.SPLIT_LABELS
    assert {"run_batch", "_decode_round", "prepare_for_verify", "ForwardBatch.init_new"} - labels == \
        {"ForwardBatch.init_new"}
    assert {"_draft", "build_tree", "greedy_accept_commit", "draft_kv_append", "AutoWidth.choose"} <= labels
    assert {"DFlashWorkerV2.forward", "draft_kv_append_eager", "get_new_batch_prefill"} <= labels  # the prefill's
    assert not labels & {"triton launches", "CUDAGraph.replay"}
    assert phase_times._TIMES.sync_watch is None
    _fresh_phase_times(monkeypatch)
    assert len(registrations(monkeypatch, {"DDTREE_TEST_PHASE_TIMES": prefix})) > len(calls)  # the full timer


def test_a_phase_timer_wraps_through_the_hook_registry(monkeypatch):
    """The timer's AROUND contract is the registry's (``fn(original, *args, **kwargs)``), on a method and a function
    of a throwaway module, patched and timed as SGLang's ``apply_hooks`` patches the real targets."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from ddtree_test_hooks import phase_times

    mod = types.ModuleType("_ddtree_phase_probe")

    class Loop:
        def run_batch(self, batch):
            return ("ran", batch.forward_mode.name)

        @classmethod
        def init_new(cls, n):  # a classmethod target, as ``ForwardBatch.init_new``
            return (cls.__name__, n)

    def work(x, *, scale=1):
        return x * scale

    mod.Loop, mod.work = Loop, work
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    times = phase_times.PhaseTimes("unused")
    for target, label in (("_ddtree_phase_probe.Loop.run_batch", "run_batch"), ("_ddtree_phase_probe.work", "work"),
                          ("_ddtree_phase_probe.Loop.init_new", "init_new")):
        HookRegistry._apply_target(target, [(HookType.AROUND, times.around(label), None)])
    loop = mod.Loop()
    assert loop.run_batch(_batch("DECODE")) == ("ran", "DECODE")
    assert mod.work(3, scale=2) == 6
    assert mod.Loop.init_new(5) == ("Loop", 5) and loop.init_new(6) == ("Loop", 6)
    assert loop.run_batch(batch=_batch("EXTEND")) == ("ran", "EXTEND")
    assert mod.work(1) == 1  # in a prefill iteration: not counted
    assert times.iterations == {"decode": 1, "extend": 1}
    assert times.calls == {"run_batch": 1, "work": 1, "init_new": 2}


def test_floor_round_env_and_registration(monkeypatch):
    """DDTREE_TEST_FLOOR_ROUND: 1 or 0, an AROUND hook on the round, and it excludes the hooks inside the round."""
    from sglang.srt.plugins.hook_registry import HookType

    import ddtree_test_hooks
    from ddtree_test_hooks.floor_round import floor_round

    assert HookEnv.from_env({"DDTREE_TEST_FLOOR_ROUND": "1"}) == HookEnv(floor_round=True)
    assert HookEnv(floor_round=True).any and not HookEnv.from_env({"DDTREE_TEST_FLOOR_ROUND": "0"}).any
    with pytest.raises(ValueError, match="use 1 or 0"):
        HookEnv.from_env({"DDTREE_TEST_FLOOR_ROUND": "yes"})
    with pytest.raises(ValueError, match="replaces the whole round"):
        HookEnv.from_env({"DDTREE_TEST_FLOOR_ROUND": "1", "DDTREE_TEST_CYCLE_BUDGETS": "1"})
    assert plugin_env(floor_round=True, base={})["DDTREE_TEST_FLOOR_ROUND"] == "1"
    calls = registrations(monkeypatch, {"DDTREE_TEST_FLOOR_ROUND": "1"})
    assert calls == [(ddtree_test_hooks.ROUND_TARGET, floor_round, HookType.AROUND)]


class _Widths:
    def __init__(self):
        self.active_budgets = []

    def active(self, budget):
        import contextlib

        self.active_budgets.append(budget)
        return contextlib.nullcontext()


def _floor_worker(*, widths=True, hybrid=False, causal=True):
    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker.chain_inputs import ChainInputs

    cfg = DDTreeConfig(budget=15, topk=8, block_size=16, adaptive=True)
    cfg_causal = types.SimpleNamespace(**{k: getattr(cfg, k) for k in ("topk", "max_depth", "accept_width")},
                                       verifies_causally=lambda budget: causal)
    seen = {}

    def verify(batch, verify_input, verify_loc, verify_cpu, verify_sum):
        seen.update(verify_input=verify_input, verify_loc=verify_loc, verify_cpu=verify_cpu, verify_sum=verify_sum)
        logits = torch.full((len(batch.seq_lens), 11), -1.0)
        logits[torch.arange(len(batch.seq_lens)), torch.tensor([3, 7, 5])] = 1.0
        return types.SimpleNamespace(next_token_logits=logits, hidden_states=torch.zeros(3, 4)), "fb", True

    host = types.SimpleNamespace(plus=lambda extra: (torch.tensor([11, 21, 31]), 63), mask_sum_bound=66)
    return types.SimpleNamespace(
        _widths=_Widths() if widths else None, _hybrid=hybrid, config=cfg_causal, device="cpu",
        model_runner=types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(req_to_token=None)),
        _host_seq_lens=lambda batch, draft_input: host, _verify=verify,
        _chain_inputs=lambda: ChainInputs([1], max_depth=15, device="cpu", batch_size=3)), seen


def _floor_batch(greedy=True):
    from sglang_ddtree.worker.info import make_draft_input

    prefix = torch.tensor([10, 20, 30])
    return types.SimpleNamespace(seq_lens=prefix, req_pool_indices=torch.tensor([2, 0, 1]),
                                 sampling_info=types.SimpleNamespace(is_all_greedy=greedy),
                                 spec_info=make_draft_input(torch.tensor([4, 8, 9]), prefix))


@pytest.mark.parametrize("causal", [True, False])
def test_floor_round_verifies_the_root_and_commits_the_argmax(monkeypatch, causal):
    """The floor round on CPU stand-ins: one verify of the bonus tokens at their positions in the width-0 bucket, the
    root's slot from upstream's slot assignment, and a result of accept length 1 with the argmax as the next token
    (column 0 of W), new lengths prefix + 1 published."""
    import sglang.kernels.ops.speculative.cache_locs as cache_locs

    from ddtree_test_hooks.floor_round import floor_round

    slots = {}

    def assign(**kw):
        slots.update(kw)
        return torch.tensor([100, 200, 300])

    monkeypatch.setattr(cache_locs, "assign_extend_cache_locs_func", assign)
    worker, seen = _floor_worker(causal=causal)
    published = []
    result = floor_round(None, worker, _floor_batch(), published.append)
    assert worker._widths.active_budgets == [0]
    assert slots["draft_token_num"] == 1 and slots["end_offset"].tolist() == [11, 21, 31]
    vi = seen["verify_input"]
    assert vi.draft_token.tolist() == [4, 8, 9] and vi.positions.tolist() == [10, 20, 30] and vi.draft_token_num == 1
    assert (vi.custom_mask is None) == causal and (vi.retrieve_index is None) == causal
    if not causal:
        assert vi.custom_mask.all() and vi.custom_mask.numel() == 66 + 3
    assert seen["verify_loc"].tolist() == [100, 200, 300] and seen["verify_sum"] == 63
    width = worker.config.accept_width
    assert result.next_token_ids.view(3, width)[:, 0].tolist() == [3, 7, 5]
    assert not result.next_token_ids.view(3, width)[:, 1:].any()
    assert result.accept_lens.tolist() == [1, 1, 1] and result.accept_lens.dtype == torch.int32
    assert result.new_seq_lens.tolist() == [11, 21, 31] and published[0].tolist() == [11, 21, 31]
    assert result.next_draft_input.bonus_tokens.tolist() == [3, 7, 5]
    assert result.speculative_num_draft_tokens == width and result.can_run_cuda_graph


def test_floor_round_refusals():
    from ddtree_test_hooks.floor_round import floor_round

    with pytest.raises(RuntimeError, match="needs --speculative-ddtree-budget auto"):
        floor_round(None, _floor_worker(widths=False)[0], _floor_batch(), None)
    with pytest.raises(RuntimeError, match="greedy batches only"):
        floor_round(None, _floor_worker()[0], _floor_batch(greedy=False), None)
    with pytest.raises(RuntimeError, match="hybrid"):
        floor_round(None, _floor_worker(hybrid=True)[0], _floor_batch(), None)
