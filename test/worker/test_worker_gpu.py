"""GPU: greedy DDTREE output == the same engine without speculation, token for token.

Runs ``scripts/device/ddtree_parity.py`` (one engine per configuration, in a subprocess: a dying
scheduler takes its parent process with it) on tiny random bf16 models that a module fixture writes to a
tmp dir with the project's own reference code (``_generated_models.py``: ``sharp/`` and ``bias/`` laid
out as ddtree_parity.py's MODEL_DIRS expects; test_generated_models.py checks them on CPU). Set
``DDTREE_TEST_MODELS`` to a directory of the same layout (e.g. make_tiny_models.py's output) to
use other models instead.
Sharp models: exact parity required (but their attention barely moves the logits, so a wrong tree mask
could pass). Bias models: attention matters, but bf16 near-ties make even plain batched vs single runs
differ, so DDTREE must agree with plain on at least as many prompts as upstream DFLASH (same drafter,
chain verify) does, up to a slack of 2 prompts; a wrong mask or misplaced KV diverges almost everywhere.
(Seen on the H200: DDTREE budget 64 and DFLASH had identical divergence positions and accept lengths.)
``dd_triton_b64_reversed`` reverses the drafter's top-K order through the TEST-ONLY plugin in test/_test_plugin
(DDTREE_TEST_REVERSE_RANKS; ddtree_parity.py puts the plugin on the engine's sys.path): acceptance must walk
past first children and the output must stay exact. None of these models checks the tree mask node by node:
test_verify_logits_gpu.py does.
"""

import json
import os
import subprocess
import sys

import pytest

from _gpu_backend import fa3_status

from _generated_models import generate_models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "device", "ddtree_parity.py")

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def models_root(tmp_path_factory):
    """``DDTREE_TEST_MODELS`` if set, else freshly generated models (about a second on CPU)."""
    override = os.environ.get("DDTREE_TEST_MODELS")
    if override:
        return override
    return generate_models(str(tmp_path_factory.mktemp("ddtree_models")))


def _run(models_root, tmp_path, configs):
    out = tmp_path / "out"
    subprocess.run([sys.executable, SCRIPT, "--models-root", models_root, "--out", str(out), "--configs",
                    ",".join(configs)], check=False, timeout=3600)
    return {r["config"]: r for r in map(json.loads, open(out / "results.jsonl"))}


def _exact(results, name) -> dict:
    """The record of sharp ``name``, asserted error-free and token-identical to its reference at every batch size."""
    rec = results[f"sharp:{name}"]
    assert "error" not in rec, rec.get("traceback")
    for bs, rep in rec["parity"].items():
        assert rep["equal"] == rep["total"], (name, bs, rep["first_mismatch"])
    return rec


@pytest.mark.parametrize("backend", ["triton", "flashinfer", "fa3"])
def test_sharp_models_token_identical(models_root, tmp_path, backend):
    fa3_ok, fa3_reason = fa3_status() if backend == "fa3" else (True, "")
    if not fa3_ok:
        pytest.skip(fa3_reason)
    dd = [f"dd_{backend}_b1", f"dd_{backend}_b15", f"dd_{backend}_b64", f"dd_{backend}_b256",
          f"dd_{backend}_b64_nograph", f"dd_{backend}_b15_nooverlap"]
    dd += ["dd_triton_b15_nograph", "dd_triton_b64_reversed"] if backend == "triton" else []
    results = _run(models_root, tmp_path, [f"sharp:plain_{backend}"] + [f"sharp:{c}" for c in dd])
    for name in dd:
        assert _exact(results, name)["mean_accept_length"] >= 1.0


@pytest.mark.parametrize("backend", ["triton", "flashinfer", "fa3"])
def test_paged_kv_is_token_identical_to_page_size_1(models_root, tmp_path, backend):
    """--page-size 16 / 64 on each backend as validation takes it (``validation.PAGED_VERIFIED_BACKENDS``):
    greedy output == the page-1 plain engine's, for plain decoding itself and for DDTREE with graphs and overlap on
    and off (sharp models: exact)."""
    fa3_ok, fa3_reason = fa3_status() if backend == "fa3" else (True, "")
    if not fa3_ok:
        pytest.skip(fa3_reason)
    paged = [f"plain_{backend}_p16", f"plain_{backend}_p64", f"dd_{backend}_b15_p16", f"dd_{backend}_b64_p64",
             f"dd_{backend}_b15_p64_nooverlap", f"dd_{backend}_b64_p16_nograph"]
    results = _run(models_root, tmp_path, [f"sharp:plain_{backend}"] + [f"sharp:{c}" for c in paged])
    for name in paged:
        _exact(results, name)


def test_bias_models_diverge_like_dflash(models_root, tmp_path):
    results = _run(models_root, tmp_path, ["bias:plain_triton", "bias:dflash_triton", "bias:dd_triton_b64"])
    rec, ref = results["bias:dd_triton_b64"], results["bias:dflash_triton"]
    assert "error" not in rec, rec.get("traceback")
    for bs, rep in rec["parity"].items():
        assert rep["equal"] >= ref["parity"][bs]["equal"] - 2, (bs, rep, ref["parity"][bs])


@pytest.mark.skipif(not __import__("torch").cuda.is_available() or __import__("torch").cuda.device_count() < 2,
                    reason="needs 2 CUDA GPUs (tensor parallelism)")
def test_sharp_models_token_identical_tp2(models_root, tmp_path):
    """tp 2: the target, the drafter and the draft top-K head (per-rank vocab shards merged) split over two
    GPUs; greedy output == the plain tp-2 engine's at budgets 15 and 64 and auto (its own widths, agreed by the
    ranks, and the fixed bucket cycle; behind SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP until this has run), with and
    without overlap scheduling."""
    dd = ["dd_triton_b15_tp2", "dd_triton_b64_tp2", "dd_triton_b15_tp2_nooverlap", "dd_triton_b64_tp2_nooverlap",
          "dd_triton_auto_tp2", "dd_triton_auto_tp2_nooverlap", "dd_triton_auto_cycle_tp2"]
    results = _run(models_root, tmp_path, ["sharp:plain_triton_tp2"] + [f"sharp:{c}" for c in dd])
    assert "error" not in results["sharp:plain_triton_tp2"], results["sharp:plain_triton_tp2"].get("traceback")
    for name in dd:
        assert _exact(results, name)["mean_accept_length"] > 1.0
