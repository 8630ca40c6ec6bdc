"""CPU: the pieces of ``scripts/device/hybrid_parity.py`` (the GPU hybrid parity runner) that decide what its
fault test can see: the common-prefix count, the replay oracle's spec written from the reference's outputs and
read back by the test plugin's loader, the oracle reaching only the configurations that ask for it, and every
configuration that ``test_hybrid_gpu.py`` names existing. No engine starts here."""

import importlib.util
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _test_plugin_env  # noqa: E402,F401  (puts the test plugin on sys.path)

from ddtree_test_hooks.draft_oracle import load_draft_oracle  # noqa: E402
from ddtree_test_hooks.env import DRAFT_ORACLE, HYBRID_FAULT  # noqa: E402
from sglang_ddtree.config import DDTreeConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def hp():
    return _load("hybrid_parity", os.path.join(ROOT, "scripts", "device", "hybrid_parity.py"))


def test_compare_counts_the_common_prefix(hp):
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9]]
    got = [[1, 2, 3, 4], [5, 6, 0, 8], [8, 9]]
    r = hp.compare(ref, got)
    assert (r["equal"], r["total"], r["prefix_tokens"], r["tokens"]) == (1, 3, 4 + 2 + 0, 10)
    assert r["first_mismatch"]["prompt"] == 1 and r["first_mismatch"]["pos"] == 2


def test_oracle_spec_replays_the_reference(hp, tmp_path):
    prompts, shared = [[10, 11], [12]], [[20, 21, 22]]
    ref = {"greedy": {1: [[30, 31, 32, 33], [40, 41, 42, 43]], 8: [[30, 31, 32, 33], [40, 41, 42, 43]]},
           "shared": {1: [[50, 51, 52, 53]]}}
    path = hp.write_oracle(str(tmp_path / "oracle.json"), ref, prompts, shared, vocab_size=64)
    spec = json.load(open(path))
    assert spec["vocab_size"] == 64 and spec["seed"] == hp.ORACLE_SEED
    assert [10, 11, 30, 31, 32, 33] in spec["replay"] and [20, 21, 22, 50, 51, 52, 53] in spec["replay"]
    import torch

    oracle = load_draft_oracle(path, DDTreeConfig(budget=8, topk=2, block_size=4), vocab_size=64, device="cpu")
    cont = oracle.replay(torch.tensor([30, 22]), torch.tensor([2, 2]))  # roots at their positions
    assert cont.tolist() == [[31, 32, 33], [50, 51, 52]]


def test_the_oracle_reaches_only_the_configurations_that_ask(hp, tmp_path):
    spec = tmp_path / "oracle.json"
    spec.write_text(json.dumps({"replay": [[1, 2, 3]], "vocab_size": 8}))
    env = hp._engine_env("chain_commit", False, str(spec))
    assert env[DRAFT_ORACLE] == str(spec) and env[HYBRID_FAULT] == "chain_commit"
    assert hp._engine_env("chain_commit", False, "")[DRAFT_ORACLE] == ""
    assert DRAFT_ORACLE not in hp._engine_env(None, False, "")
    oracle_configs = [n for n, kw in hp.CONFIGS.items() if kw.get("_oracle")]
    assert oracle_configs == ["dd_b64_oracle", "dd_b64_oracle_fault_chain", "dd_b64_oracle_fault_siblings"]
    with pytest.raises(RuntimeError, match="list a plain configuration first"):
        hp.run_config("dd_b64_oracle", "target", "draft", [], [], 4, oracle="")


def test_every_configuration_the_gpu_tests_name_exists(hp):
    gpu = _load("test_hybrid_gpu_names", os.path.join(ROOT, "test", "worker", "test_hybrid_gpu.py"))
    names = {n for group in gpu.GROUPS.values() for n in group} | set(gpu.FAULTS)
    assert names <= set(hp.CONFIGS), names - set(hp.CONFIGS)
    assert gpu.FAULTS[0].startswith("plain") and all(n.startswith("dd_b64_oracle") for n in gpu.FAULTS[1:])


def test_only_configurations_beyond_the_verified_one_get_a_switch(hp, tmp_path, monkeypatch):
    """DDTREE engines on triton at tp 1 run as users run them (no switch, page sizes > 1 included); tp 2 gets the
    hybrid switch; plain and DFLASH engines get no environment."""
    for name, cfg in hp.CONFIGS.items():
        spec = tmp_path / "oracle.json"
        spec.write_text("{}")
        kw, env = hp.config_engine(name, oracle=str(spec) if cfg.get("_oracle") else "")
        assert "_fault" not in kw and "_cycle" not in kw and "_oracle" not in kw
        if cfg.get("speculative_algorithm") != "DDTREE":
            assert env == {}, name
            continue
        assert (env.get(hp.HYBRID_ENV) == "1") == (cfg.get("tp_size", 1) > 1), name
        assert env.get(hp.PAGED_ENV) is None, name  # every paged config is a verified one (fixed budget, tp 1)
    assert {n for n, c in hp.CONFIGS.items() if c.get("page_size", 1) > 1} >= {"plain_p16", "dd_b15_p16", "dd_b64_p64"}
    # beyond the verified paged configuration (budget auto, tp 2) the paged switch is set
    monkeypatch.setitem(hp.CONFIGS, "dd_auto_p16", hp.ddtree("auto", 8, page_size=16))
    monkeypatch.setitem(hp.CONFIGS, "dd_b15_p16_tp2", hp.ddtree(15, 4, page_size=16, tp_size=2))
    assert hp.config_engine("dd_auto_p16")[1] == {hp.PAGED_ENV: "1"}
    assert hp.config_engine("dd_b15_p16_tp2")[1] == {hp.PAGED_ENV: "1", hp.HYBRID_ENV: "1"}
