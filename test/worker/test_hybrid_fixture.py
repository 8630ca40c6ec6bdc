"""scripts/make_hybrid_fixture.py on the CPU: the tiny hybrid Qwen3.5 target and its DFlash drafter
load through SGLang 0.5.16's own config parsing, model registry and model classes (every parameter
written, no checkpoint tensor left over, stacked params equal to their parts), transformers reads the
same layout, DDTREE's two hybrid refusals fire on it, and the files are the same bytes for the same seed.
The SGLang checks run in a child process (``--check`` sets up a gloo group and global server args)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "make_hybrid_fixture.py")
_spec = importlib.util.spec_from_file_location("make_hybrid_fixture", SCRIPT)
fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture)


def _files(d):
    return {os.path.relpath(os.path.join(r, f), d): open(os.path.join(r, f), "rb").read()
            for r, _, fs in os.walk(d) for f in fs}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    pytest.importorskip("sglang")
    out = tmp_path_factory.mktemp("hybrid")
    proc = subprocess.run([sys.executable, SCRIPT, str(out), "--check"], capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(lines[-1]), out


def test_sglang_parses_it_as_a_hybrid_qwen35(checked):
    proc, rep, _ = checked
    assert proc.returncode == 0 and rep["ok"], json.dumps(rep, indent=1)
    assert rep["hf_config"] == "Qwen3_5Config" and rep["mambaish_config"] == "Qwen3_5TextConfig"
    assert rep["architecture"] == rep["model_class"] == "Qwen3_5ForConditionalGeneration"
    assert rep["is_hybrid_linear_attention"] is True
    assert rep["layers_block_type"] == ["linear_attention", "linear_attention", "attention"] * 2


@pytest.mark.parametrize("which, tensors, params", [("target_load", 102, 84), ("draft_load", 25, 19)])
def test_sglang_loads_every_weight(checked, which, tensors, params):
    load = checked[1][which]
    assert (load["checkpoint_tensors"], load["parameters"]) == (tensors, params)
    assert load["unwritten"] == [] and load["wrong"] == [] and load["unused_checkpoint_tensors"] == []


def test_ddtree_refuses_it_off_0_5_16_in_validation_and_in_the_worker(checked):
    refusals = checked[1]["ddtree_refusals"]
    from sglang_ddtree.hybrid_args import release_refusal

    assert refusals["worker"] == refusals["validation"] == release_refusal("Qwen3_5ForConditionalGeneration", "0.5.18")


def test_transformers_reads_the_layout_and_greedy_follows_the_successor_map(checked):
    _, rep, out = checked
    hf = rep["transformers"]
    assert hf["loading_info"] == {}  # no missing, unexpected or mismatched keys
    succ, _ = fixture.successor_table(str(out / "target"))
    chain = [42]  # the report's prompt ends with token 42; its context barely moves the logits
    for _ in range(12):
        chain.append(int(succ[chain[-1]]))
    for dtype in ("float32", "bfloat16"):
        assert hf[dtype]["greedy"] == chain[1:] and hf[dtype]["min_margin"] > 1.0, hf


def test_config_and_sizes(tmp_path):
    target, draft = fixture.write_fixture(str(tmp_path), seed=0)
    cfg = json.loads(open(os.path.join(target, "config.json")).read())
    text = cfg["text_config"]
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"] and text["model_type"] == "qwen3_5_text"
    assert text["layer_types"].count("linear_attention") == 4 and text["layer_types"].count("full_attention") == 2
    assert (text["hidden_size"], text["vocab_size"], text["head_dim"]) == (128, 2048, 256)
    assert (text["linear_num_key_heads"], text["linear_num_value_heads"], text["linear_key_head_dim"]) == (2, 4, 128)
    dcfg = json.loads(open(os.path.join(draft, "config.json")).read())
    assert dcfg["architectures"] == ["DFlashDraftModel"] and dcfg["num_target_layers"] == 6
    assert dcfg["dflash_config"] == {"target_layer_ids": [1, 2], "mask_token": "<|MASK|>", "mask_token_id": 1,
                                     "block_size": 16}
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(os.listdir(draft)) == files
    assert sorted(os.listdir(target)) == sorted(files + ["preprocessor_config.json", "video_preprocessor_config.json"])
    assert sum(len(b) for b in _files(str(tmp_path)).values()) < 8_000_000
    _, gap = fixture.successor_table(target)
    assert float(gap.median()) > 3.0  # sharp: most tokens' greedy successor wins by several logits


def test_target_ships_the_multimodal_processor_sglang_loads(tmp_path):
    """SGLang's tokenizer manager builds this architecture's multimodal processor even for text requests
    (the first GPU run failed there without these files); transformers must load it from the target alone."""
    from transformers import AutoProcessor

    target, _ = fixture.write_fixture(str(tmp_path), seed=0)
    processor = AutoProcessor.from_pretrained(target)
    vision = json.loads(open(os.path.join(target, "config.json")).read())["vision_config"]
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert processor.image_processor.patch_size == vision["patch_size"]
    assert processor.image_processor.merge_size == vision["spatial_merge_size"]


def test_same_seed_same_bytes(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        fixture.write_fixture(str(tmp_path / name), seed=seed)
    assert _files(str(tmp_path / "a")) == _files(str(tmp_path / "b"))
    a, c = _files(str(tmp_path / "a")), _files(str(tmp_path / "c"))
    for role in ("target", "draft"):
        assert a[f"{role}/model.safetensors"] != c[f"{role}/model.safetensors"]
