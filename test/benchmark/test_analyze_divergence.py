"""benchmark/analyze_divergence.py: margins at the first differing token, with the packaged target."""

import importlib.util
import os
import sys

import pytest
import torch

_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "benchmark")
sys.path.insert(0, _DIR)
spec = importlib.util.spec_from_file_location("analyze_divergence", os.path.join(_DIR, "analyze_divergence.py"))
analyze = importlib.util.module_from_spec(spec)
spec.loader.exec_module(analyze)


def test_margin_at_first_divergence_is_the_logit_difference():
    from sglang_ddtree.fixtures import tiny_pair_path
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    pair = tiny_pair_path()
    target = Qwen3ForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    report = {"settings": {"target": pair.target, "num_prompts": 2}, "results": []}
    prompts = analyze._prompts(report)
    # A greedy continuation of 6 tokens, and a "speculative" copy that picks the runner-up at step 3.
    ref, logits_at_3 = [], None
    with torch.no_grad():
        for step in range(6):
            ids = torch.tensor([prompts[0] + ref])
            logits = target(ids, torch.arange(ids.shape[1])[None]).logits[0, -1]
            if step == 3:
                logits_at_3 = logits
            ref.append(int(logits.argmax()))
    runner_up = int(torch.topk(logits_at_3, 2).indices[1])
    got = ref[:3] + [runner_up, 0, 0]
    report["results"] = [
        {"config": "plain", "by_bs": {"1": {"outputs": [ref, ref]}}},
        {"config": "ddtree:4:2", "by_bs": {"1": {"outputs": [got, ref]}}},
    ]
    out = analyze.analyse(report, target, epsilon=1e9)["configs"]["ddtree:4:2 bs 1"]
    assert out["divergent_prompts"] == 1 and out["near_ties"] == 1
    [case] = out["cases"]
    assert (case["prompt"], case["pos"], case["speculative_token"], case["speculative_token_rank"]) == (0, 3, runner_up, 1)
    expected = float(logits_at_3[ref[3]] - logits_at_3[runner_up])
    assert case["margin"] == pytest.approx(expected, abs=1e-4) and case["margin"] == case["top2_gap"]
