"""The reference DFlash drafter: SGLang checkpoint format, upstream parity, training-path semantics."""

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from sglang_ddtree.reference.dflash import (
    DFlashConfig, DFlashDraftModel, default_target_layer_ids, dflash_loss, draft_block_logits, training_blocks)
from sglang_ddtree.reference.qwen3 import KVCache
from sglang_ddtree.reference.toy import random_drafter, random_target

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def expected_names(num_layers):
    """Every name SGLang 0.5.16's DFlashDraftModel.load_weights maps (it ignores any other)."""
    per_layer = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "self_attn.q_norm", "self_attn.k_norm", "input_layernorm", "post_attention_layernorm",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    names = {f"layers.{i}.{n}.weight" for i in range(num_layers) for n in per_layer}
    return names | {"norm.weight", "fc.weight", "hidden_norm.weight"}


@pytest.fixture(scope="module")
def pair():
    target = random_target(4, sharp=False)
    return target, random_drafter(target, 4, sharp=False, num_layers=2, block_size=6, target_layer_ids=(0, 2))


def _context(target, drafter, ids):
    pos = torch.arange(ids.shape[1])[None]
    feats = target(ids, pos, capture_layer_ids=drafter.config.target_layer_ids).features
    ctx = KVCache(drafter.config.num_hidden_layers)
    ctx.append(drafter.context_kv(feats, pos))
    return ctx


@torch.no_grad()
def test_save_load_round_trip_and_exact_names(pair, tmp_path):
    target, drafter = pair
    drafter.save_pretrained(str(tmp_path))
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "model.safetensors"))
    assert set(saved) == expected_names(2)
    assert saved["fc.weight"].shape == (64, 2 * 64)  # [H, num_target_layers_used * H]
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["block_size"] == 6 and cfg["num_hidden_layers"] == 2
    assert cfg["dflash_config"] == {"target_layer_ids": [0, 2], "mask_token": "<|MASK|>",
                                    "mask_token_id": 255, "block_size": 6}
    loaded = DFlashDraftModel.from_pretrained(str(tmp_path))
    assert loaded.config == drafter.config
    ids = torch.randint(255, (1, 10), generator=torch.Generator().manual_seed(0))
    ctx = _context(target, drafter, ids)
    want = draft_block_logits(target, drafter, torch.tensor([3]), 10, ctx)
    assert torch.equal(draft_block_logits(target, loaded, torch.tensor([3]), 10, ctx), want)


def test_bf16_checkpoint_and_transformers_config(pair, tmp_path):
    _, drafter = pair
    drafter.save_pretrained(str(tmp_path), dtype=torch.bfloat16)
    from safetensors.torch import load_file

    assert {t.dtype for t in load_file(str(tmp_path / "model.safetensors")).values()} == {torch.bfloat16}
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.AutoConfig.from_pretrained(str(tmp_path))  # what SGLang reads the draft with
    assert (hf_cfg.hidden_size, hf_cfg.num_hidden_layers, hf_cfg.head_dim) == (64, 2, 16)
    assert DFlashDraftModel.from_pretrained(str(tmp_path)).fc.weight.dtype == torch.float32


def test_default_target_layer_ids_and_config_errors():
    assert default_target_layer_ids(36, 1) == [18]
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    base = DFlashConfig.for_target(random_target(0, sharp=False).config, block_size=4).to_hf_dict()
    with pytest.raises(ValueError, match="mask_token_id"):
        DFlashConfig.from_hf_dict({**base, "dflash_config": {"target_layer_ids": [1]}})
    with pytest.raises(ValueError, match="full_attention"):
        DFlashConfig.from_hf_dict({**base, "layer_types": ["sliding_attention"]})


@pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="needs the sglang source package")
def test_matches_upstream_sglang_draft_model():
    """SGLang's own DFlashDraftModel loads every parameter from our checkpoint and, with its layers and
    context materialisation (RoPE and RadixAttention stubbed), gives our hidden states."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "test/reference/upstream_dflash_check.py"),
                           os.path.join(ROOT, "python"), str(port)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["all_loaded"] and res["num_upstream_params"] == 2 * 8 + 3  # qkv and gate_up are fused upstream
    assert (res["block_size"], res["target_layer_ids"], res["mask_token_id"]) == (6, [0, 2], 255)
    assert res["max_abs_diff"] <= 1e-5 * max(1.0, res["scale"])


@torch.no_grad()
def test_block_attention_is_non_causal(pair):
    target, drafter = pair
    ctx = _context(target, drafter, torch.arange(8)[None])
    a = drafter(target.embed(torch.tensor([[3, 255, 255, 255, 255, 255]])), torch.arange(8, 14)[None], ctx)
    b = drafter(target.embed(torch.tensor([[3, 255, 255, 255, 255, 9]])), torch.arange(8, 14)[None], ctx)
    assert not torch.allclose(a[0, 1], b[0, 1])  # position 1 sees position 5


@torch.no_grad()
def test_training_blocks_match_inference_blocks(pair):
    """One masked forward over many anchored blocks == one inference draft per anchor whose context
    is the target features of the positions before the anchor."""
    target, drafter = pair
    L, T = drafter.config.block_size, 20
    ids = torch.randint(255, (1, T), generator=torch.Generator().manual_seed(1))
    anchors = torch.tensor([[3, 9, 17]])
    block_ids, positions, labels, mask = training_blocks(ids, anchors, L, drafter.config.mask_token_id)
    assert labels[0, :L].tolist() == [-100] + ids[0, 4:9].tolist()
    assert labels[0, 2 * L:].tolist() == [-100] + ids[0, 18:20].tolist() + [-100] * 3  # past the end
    ctx = _context(target, drafter, ids)
    logits = target.lm_head(drafter(target.embed(block_ids), positions, ctx, mask))
    for j, a in enumerate(anchors[0].tolist()):
        want = draft_block_logits(target, drafter, ids[:, a], a, _context(target, drafter, ids[:, :a]))
        torch.testing.assert_close(logits[0, j * L + 1:(j + 1) * L], want[0], atol=1e-5, rtol=1e-5)


def test_dflash_loss_trains_only_the_drafter(pair):
    target, drafter = pair
    target.requires_grad_(False)
    ids = torch.randint(255, (2, 16), generator=torch.Generator().manual_seed(2))
    loss = dflash_loss(target, drafter, ids, torch.tensor([[0, 7], [2, 12]]),
                       position_weights=torch.tensor([0.0, 1.0, 0.8, 0.6, 0.4, 0.2]))
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    assert drafter.fc.weight.grad is not None and drafter.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert target.lm_head.weight.grad is None
    drafter.zero_grad()
