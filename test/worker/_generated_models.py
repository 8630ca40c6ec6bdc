"""Tiny random bf16 target + DFlash drafter checkpoints for the GPU parity test, made from the
project's own reference code (no external script): ``generate_models(root)`` writes

    root/sharp/target_sharp/  root/sharp/draft_sharp/   (--variant sharp of ddtree_parity.py)
    root/bias/target/         root/bias/draft_bias/     (--variant bias)

the layout ``scripts/device/ddtree_parity.py``'s MODEL_DIRS expects. Every directory also holds the
packaged tiny pair's tokenizer (byte-level BPE, 2048 ids, ``<|endoftext|>`` = 0, ``<|MASK|>`` = 1), so
``AutoTokenizer.from_pretrained(target)`` works and the model vocab (2048) covers every token id.

Shapes fit SGLang 0.5.16's GPU kernels: bf16 weights, hidden 256, 2 heads x head_dim 128, 2 KV heads,
4 target layers; the drafters (2 layers, block 8) read target layers (0, 2), never the last one, and
use ``<|MASK|>`` (a real token) as mask_token_id.
"sharp": ``toy.random_target(sharp=True)`` (deterministic successor map, float32 greedy margins of ~3,
far above bf16 noise) and a sharp ``random_drafter`` (proposes the attractor: deep accepts once the
chain reaches it). "bias": a plain random target (attention visibly moves the logits; bf16 near-ties
expected) with a plain random drafter. Deterministic (fixed seeds); takes a second or two on a CPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

VOCAB = 2048
MASK_ID = 1  # "<|MASK|>" in the packaged tokenizer
EOS_ID = 0  # "<|endoftext|>"
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 256, 2, 2, 128, 4
DRAFT_LAYERS, BLOCK_SIZE, TARGET_LAYER_IDS = 2, 8, (0, 2)
MODEL_DIRS = {"sharp": ("target_sharp", "draft_sharp"), "bias": ("target", "draft_bias")}  # == ddtree_parity.py
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def target_config():
    from sglang_ddtree.reference.toy import tiny_target_config

    return dataclasses.replace(tiny_target_config(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS),
                               num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM)


def _copy_tokenizer(dst: str) -> None:
    from sglang_ddtree.fixtures import tiny_pair_path

    src = tiny_pair_path().target
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))


def _patch_config(path: str, **updates) -> None:
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.update(updates)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)


def _save_pair(target, drafter, target_dir: str, draft_dir: str) -> None:
    """bf16 checkpoints with the packaged tokenizer, the config fields SGLang reads set."""
    import torch

    target.to(torch.bfloat16).save_pretrained(target_dir)
    _patch_config(target_dir, torch_dtype="bfloat16", dtype="bfloat16", bos_token_id=EOS_ID,
                  eos_token_id=EOS_ID, pad_token_id=EOS_ID)
    drafter.save_pretrained(draft_dir, dtype=torch.bfloat16)
    for d in (target_dir, draft_dir):
        _copy_tokenizer(d)


def write_pair(target_dir: str, draft_dir: str, *, sharp: bool, seed: int) -> None:
    import torch

    from sglang_ddtree.reference.toy import random_drafter, random_target

    with torch.random.fork_rng(devices=[]):  # toy seeds the global RNG: leave the caller's alone
        target = random_target(seed=seed, sharp=sharp, cfg=target_config(), mask_token_id=MASK_ID)
        drafter = random_drafter(target, seed=seed, sharp=sharp, num_layers=DRAFT_LAYERS, block_size=BLOCK_SIZE,
                                 target_layer_ids=TARGET_LAYER_IDS, mask_token_id=MASK_ID)
    _save_pair(target, drafter, target_dir, draft_dir)


def model_dirs(root: str, variant: str):
    return tuple(os.path.join(root, variant, d) for d in MODEL_DIRS[variant])


def generate_models(root: str) -> str:
    """Write both variants under ``root`` (the ``--models-root`` of ddtree_parity.py); returns root."""
    write_pair(*model_dirs(root, "sharp"), sharp=True, seed=0)
    write_pair(*model_dirs(root, "bias"), sharp=False, seed=1)
    return root


# ---- "succ": a context-free successor target for test_accept_coverage_gpu.py (additive) -------------
# ``toy.random_target(sharp=True)`` with frac_s=0 (S = {ATTRACTOR, MASK}: other tokens never map into S,
# so greedy chains wander a random functional graph instead of collapsing onto the attractor) and every
# layer's attention and MLP output zeroed (o_proj, down_proj = 0): the residual stream is exactly the
# token embedding, so the logits depend on the current token only and greedy decoding is exactly
# next = succ[current], with succ computable from the saved weights (``successor_table``).
SUCC_DIRS = ("target_succ", "draft_succ")


def write_succ_pair(root: str, seed: int = 3):
    """Write root/succ/target_succ and root/succ/draft_succ; returns (target_dir, draft_dir)."""
    import torch

    from sglang_ddtree.reference.toy import random_drafter, random_target

    target_dir, draft_dir = (os.path.join(root, "succ", d) for d in SUCC_DIRS)
    with torch.random.fork_rng(devices=[]):
        target = random_target(seed=seed, sharp=True, cfg=target_config(), mask_token_id=MASK_ID, frac_s=0.0)
        with torch.no_grad():
            for layer in target.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
        drafter = random_drafter(target, seed=seed, sharp=True, num_layers=DRAFT_LAYERS, block_size=BLOCK_SIZE,
                                 target_layer_ids=TARGET_LAYER_IDS, mask_token_id=MASK_ID)
    _save_pair(target, drafter, target_dir, draft_dir)
    return target_dir, draft_dir


def successor_logits(target_dir: str):
    """[V, V] float32 logits of the saved (bf16) succ target for a one-token context, as a bf16 engine
    computes them: final RMSNorm of the bf16 embedding (float32 math, rounded to bf16), bf16 lm_head,
    float32 accumulation. Row x: the logits after token x, whatever came before it."""
    import torch
    from safetensors.torch import load_file

    with open(os.path.join(target_dir, "config.json")) as f:
        eps = float(json.load(f).get("rms_norm_eps", 1e-6))
    w = load_file(os.path.join(target_dir, "model.safetensors"))
    emb = w["model.embed_tokens.weight"].float()
    x = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + eps) * w["model.norm.weight"].float()
    return x.to(torch.bfloat16).float() @ w["lm_head.weight"].float().T


def successor_table(target_dir: str):
    """succ[x] = the greedy token after x (list of V ints) for ``write_succ_pair``'s target."""
    return successor_logits(target_dir).argmax(-1).tolist()
