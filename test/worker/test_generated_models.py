"""CPU: the models _generated_models.py makes for test_worker_gpu.py load everywhere they must and the
sharp target really is sharp (bf16-safe greedy margins), so the GPU parity test needs no external script."""

import importlib.util
import json
import os
import time

import pytest
import torch

from _generated_models import (BLOCK_SIZE, DRAFT_LAYERS, EOS_ID, HEAD_DIM, MASK_ID, TARGET_LAYER_IDS, VOCAB,
                               generate_models, model_dirs)

_FIXTURES_CONFTEST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                  "fixtures", "conftest.py")
PROMPTS = ["the quick brown fox jumps over", "speculative decoding drafts a tree of tokens",
           "def class return import 123", "alpha beta gamma delta one two three"]


def _expected_draft_weight_names(num_layers: int) -> set:
    """test/fixtures/conftest.py's list of the names SGLang's DFlashDraftModel.load_weights maps."""
    spec = importlib.util.spec_from_file_location("_fixtures_conftest_names", _FIXTURES_CONFTEST)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.expected_draft_weight_names(num_layers)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ddtree_models"))
    t0 = time.perf_counter()
    generate_models(root)
    return root, time.perf_counter() - t0


def test_generation_is_fast(generated):
    assert generated[1] < 20.0, f"generating the models took {generated[1]:.1f}s on CPU"


@pytest.mark.parametrize("variant", ["sharp", "bias"])
def test_dirs_load_with_reference_and_transformers(generated, variant):
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    from sglang_ddtree.reference.dflash import DFlashDraftModel
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    target_dir, draft_dir = model_dirs(generated[0], variant)
    target = Qwen3ForCausalLM.from_pretrained(target_dir)
    drafter = DFlashDraftModel.from_pretrained(draft_dir)
    tc, dc = target.config, drafter.config
    assert (tc.vocab_size, tc.hidden_size, tc.num_attention_heads, tc.num_key_value_heads, tc.head_dim) == \
        (VOCAB, 256, 2, 2, HEAD_DIM)
    assert (dc.hidden_size, dc.head_dim, dc.vocab_size, dc.block_size) == (tc.hidden_size, HEAD_DIM, VOCAB, BLOCK_SIZE)
    assert dc.mask_token_id == MASK_ID and dc.num_target_layers == tc.num_hidden_layers
    assert list(dc.target_layer_ids) == list(TARGET_LAYER_IDS)
    assert max(dc.target_layer_ids) < tc.num_hidden_layers - 1  # SGLang never captures the last layer
    target.check_capture_ids(dc.target_layer_ids)

    for d, arch in ((target_dir, "Qwen3ForCausalLM"), (draft_dir, "DFlashDraftModel")):
        hf = AutoConfig.from_pretrained(d)
        assert hf.architectures == [arch] and hf.model_type == "qwen3"
        assert (hf.hidden_size, hf.num_attention_heads, hf.num_key_value_heads, hf.head_dim) == (256, 2, 2, HEAD_DIM)
        tok = AutoTokenizer.from_pretrained(d)
        assert len(tok) <= VOCAB
        assert tok.convert_tokens_to_ids("<|MASK|>") == MASK_ID and tok.eos_token_id == EOS_ID
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
        assert dtypes == {"BF16"}, (d, dtypes)
    with open(os.path.join(draft_dir, "config.json")) as f:
        raw = json.load(f)
    assert raw["dflash_config"]["mask_token_id"] == MASK_ID and raw["dflash_config"]["mask_token"] == "<|MASK|>"
    with safe_open(os.path.join(draft_dir, "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert names == _expected_draft_weight_names(DRAFT_LAYERS)


@torch.no_grad()
def test_sharp_target_greedy_margins(generated):
    """float32 reference forward of the saved (bf16) sharp target: every greedy step's top-1 beats the
    top-2 by >= 1.0 (bf16 logit noise is ~0.01), so the GPU test may demand exact parity."""
    from transformers import AutoTokenizer

    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    target_dir, _ = model_dirs(generated[0], "sharp")
    target = Qwen3ForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(target_dir)
    worst = float("inf")
    for text in PROMPTS:
        ids = tok.encode(text)
        for _ in range(16):
            x = torch.tensor([ids])
            logits = target(x, torch.arange(len(ids))[None]).logits[0, -1].float()
            top2 = logits.topk(2).values
            worst = min(worst, float(top2[0] - top2[1]))
            ids.append(int(logits.argmax()))
    assert worst >= 1.0, worst
