"""Fixtures for the plugin tests: tiny target / drafter *configs* (no weights: argument validation
reads only config.json), and SGLang with the plugin loaded through its real entry point."""

import json
import os

import pytest


def _write_target(path, **overrides):
    from transformers import Qwen3Config

    cfg = Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                      max_position_embeddings=2048, **overrides)
    cfg.architectures = ["Qwen3ForCausalLM"]
    cfg.save_pretrained(path)
    return str(path)


def _write_drafter(path, block_size):
    from transformers import Qwen3Config

    d = Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=128).to_dict()
    d.pop("layer_types", None)
    d.update(architectures=["DFlashDraftModel"], block_size=block_size, num_target_layers=4,
             dflash_config={"target_layer_ids": [1, 2], "mask_token": "<|MASK|>", "mask_token_id": 3})
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(d, f)
    return str(path)


@pytest.fixture(scope="session")
def tiny_configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("configs")
    return {
        "target": _write_target(root / "target"),
        "drafter": _write_drafter(root / "drafter", block_size=16),
        "drafter8": _write_drafter(root / "drafter8", block_size=8),
    }


@pytest.fixture(scope="session")
def hybrid_target(tmp_path_factory):
    from transformers import Qwen3NextConfig

    path = tmp_path_factory.mktemp("configs") / "hybrid"
    cfg = Qwen3NextConfig(vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=128)
    cfg.architectures = ["Qwen3NextForCausalLM"]
    cfg.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def sglang_with_plugin():
    """SGLang with every installed plugin loaded the way launch_server / Engine load them."""
    pytest.importorskip("sglang")
    from sglang.srt.plugins import load_plugins

    load_plugins()
    return True
