"""The test plugin's diagnostic hooks. The compile watch (``DDTREE_TEST_COMPILE_LOG``): parsed, registered on the
warm-up and the round, and its lines say which kernels a round compiled after the start-up warm-up
(``worker.warmup``); CPU: the Triton counts are stand-ins here, ``test_warmup_gpu.py`` and the parity script's
``*_compiles`` configs count real ones. The pinned bucket (``DDTREE_TEST_PIN_BUDGET``, bench config ``+pin0``)."""

import importlib
import json
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _test_plugin_env import plugin_env, registrations  # noqa: E402

from ddtree_test_hooks import compile_watch  # noqa: E402
from ddtree_test_hooks import hooks as test_hooks  # noqa: E402
from ddtree_test_hooks.env import HookEnv  # noqa: E402


def test_env_and_registration(tmp_path, monkeypatch):
    from sglang.srt.plugins.hook_registry import HookType

    log = str(tmp_path / "compiles.jsonl")
    assert HookEnv.from_env({"DDTREE_TEST_COMPILE_LOG": log}) == HookEnv(compile_log=log)
    assert HookEnv(compile_log=log).any
    with pytest.raises(ValueError, match="its folder does not exist"):
        HookEnv.from_env({"DDTREE_TEST_COMPILE_LOG": str(tmp_path / "missing" / "x.jsonl")})
    assert plugin_env(compile_log=log, base={})["DDTREE_TEST_COMPILE_LOG"] == log
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
