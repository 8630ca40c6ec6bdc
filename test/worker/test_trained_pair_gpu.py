"""GPU: DDTREE on the packaged trained pair (bf16; triton, flashinfer, fa3) is lossless up to bf16 near-ties.

Runs ``benchmark/bench_e2e.py`` in a subprocess (autoregressive, DFLASH and DDTREE engines on the
same greedy prompts), then recomputes in float32 on CPU, with the reference target, the logits at
every first token where a speculative output left the autoregressive one
(``benchmark/analyze_divergence.py``). A divergence is accepted only when the two tokens are the
target's float32 top-2 and their logit gap is below EPSILON; the count of such near-ties is reported.
A wrong tree mask, misplaced KV or a bad acceptance walk produces tokens far from the top-2.
EPSILON: on the H200 run of 2026-11-30 every divergence had gap <= 0.131 (DDTREE) and <= 0.093
(upstream DFLASH) (benchmark/results/e2e_tiny_pair_h200_divergence.json); 0.25 leaves bf16 headroom.
Needs the wheel installed (the plugin's entry point) and SGLang's GPU stack.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from _gpu_backend import fa3_status

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPSILON = 0.25
# Issue 5's matrix on the trained pair: budgets {1, 15, 64, 256}, batch sizes {1, 4, 16, 48}, 48 distinct
# prompts, CUDA graphs on and off, overlap scheduler on and off, triton and flashinfer.
CONFIGS = {
    "triton": ["plain", "dflash", "ddtree:1:1", "ddtree:15:4", "ddtree:64:8", "ddtree:256:8", "ddtree:64:8+nograph",
               "ddtree:15:4+nooverlap"],
    "flashinfer": ["plain", "ddtree:1:1", "ddtree:15:4", "ddtree:64:8", "ddtree:256:8", "ddtree:64:8+nograph"],
    "fa3": ["plain", "dflash", "ddtree:1:1", "ddtree:15:4", "ddtree:64:8", "ddtree:256:8", "ddtree:64:8+nograph",
            "ddtree:15:4+nooverlap"],
}
BATCH_SIZES = ["1", "4", "16", "48"]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmark", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.join(ROOT, "benchmark"))
    spec.loader.exec_module(mod)
    return mod


def run_e2e(backend: str, configs: list, tmp_dir, name: str, batch_sizes: list) -> dict:
    """bench_e2e.py on the trained pair in a subprocess: its report (kept under SGLANG_DDTREE_KEEP_REPORTS)."""
    from sglang_ddtree.fixtures import tiny_pair_path

    pair = tiny_pair_path()
    out = tmp_dir / f"{name}.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmark", "bench_e2e.py"), "--target", pair.target,
                           "--draft", pair.draft, "--configs", ",".join(configs),
                           "--bs", ",".join(batch_sizes), "--num-prompts", "48", "--attention-backend", backend,
                           "--max-new-tokens", "64", "--out", str(out)], capture_output=True, text=True, timeout=1800)
    keep = os.environ.get("SGLANG_DDTREE_KEEP_REPORTS")
    if keep:  # e.g. the device scripts bring the raw report back
        os.makedirs(keep, exist_ok=True)
        shutil.copy(out, keep)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out) as f:
        return json.load(f)


def assert_every_config_ran(report, batch_sizes: list) -> None:
    for rec in report["results"]:
        assert "error" not in rec, (rec["config"], rec.get("traceback"))
        assert set(rec["by_bs"]) == set(batch_sizes)


def assert_divergences_are_near_ties(report, name: str) -> dict:
    """Every config's first token off the ``plain`` config's output is a float32 top-2 near-tie (gap < EPSILON);
    the analysis is kept as ``name`` under SGLANG_DDTREE_KEEP_REPORTS and returned."""
    import torch

    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    analyze = _load("analyze_divergence")
    target = Qwen3ForCausalLM.from_pretrained(report["settings"]["target"], dtype=torch.float32).eval()
    result = analyze.analyse(report, target, EPSILON)
    keep = os.environ.get("SGLANG_DDTREE_KEEP_REPORTS")
    if keep:
        with open(os.path.join(keep, name), "w") as f:
            json.dump(result, f, indent=1)
    for config, c in result["configs"].items():
        bad = [case for case in c["cases"] if abs(case["margin"]) >= EPSILON or case["speculative_token_rank"] > 1]
        assert not bad, (config, bad)
        print(f"{config}: {c['divergent_prompts']} near-tie divergences (|margin| < {EPSILON})")
    return result


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def report(request, tmp_path_factory):
    backend = request.param
    fa3_ok, fa3_reason = fa3_status() if backend == "fa3" else (True, "")
    if not fa3_ok:
        pytest.skip(fa3_reason)
    return run_e2e(backend, CONFIGS[backend], tmp_path_factory.mktemp("e2e"), f"e2e_{backend}", BATCH_SIZES)


def test_every_config_ran(report):
    assert_every_config_ran(report, BATCH_SIZES)


def test_divergences_are_only_near_ties(report):
    assert_divergences_are_near_ties(report, f"divergence_{report['settings']['attention_backend']}.json")


def test_ddtree_accepts_more_than_dflash(report):
    acc = {r["config"]: r["by_bs"]["1"]["mean_accept_length"] for r in report["results"]}
    if "dflash" in acc:
        assert acc["ddtree:64:8"] > acc["dflash"] > 1.0, acc
    # a bigger tree never accepts less on the same prompts (up to bf16 noise); budget 1 is a 1-token chain
    assert acc["ddtree:256:8"] >= acc["ddtree:64:8"] - 0.05 and acc["ddtree:64:8"] > acc["ddtree:15:4"] > acc["ddtree:1:1"] >= 1.0, acc
