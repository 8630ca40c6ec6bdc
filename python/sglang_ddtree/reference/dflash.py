"""The DFlash block-diffusion drafter in pure PyTorch, in SGLang 0.5.16's checkpoint format.

Serves the DRAFT step of a round. Semantics follow SGLang's ``DFlashDraftModel`` + ``DFlashWorkerV2``:
- context: target features (residual stream after ``target_layer_ids``, concatenated) of every
  committed token -> ``fc`` -> ``hidden_norm`` -> per draft layer K = RoPE(k_norm(k_proj(ctx))) at the
  token's position and V = v_proj(ctx); no input_layernorm on the context (``project_kv``).
- block: the TARGET's embeddings of [bonus, mask, ..., mask] at positions [p, ..., p+L-1], where p is
  the number of committed tokens; each layer is a Qwen3 block whose attention is NON-causal within the
  block and sees all of the context; final ``norm``; the TARGET's lm_head gives logits for block
  positions 1..L-1 (the distributions of depths 1..L-1). The drafter has no embedding or lm_head.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from sglang_ddtree.reference.qwen3 import (
    KV, DecoderLayer, KVCache, Qwen3Config, Qwen3ForCausalLM, RMSNorm, _read_safetensors)

DEFAULT_MASK_TOKEN = "<|MASK|>"


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> List[int]:
    """SGLang's choice when the config names no layers: the middle layer for a 1-layer draft, else
    ``num_draft_layers`` ids spread evenly (rounded) from layer 1 to layer ``num_target_layers - 3``."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    if num_target_layers < 4:
        raise ValueError(f"default DFlash target layers need >= 4 target layers, got {num_target_layers}")
    last = num_target_layers - 3
    return [round(1 + i * (last - 1) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass
class DFlashConfig:
    hidden_size: int  # == the target's (the drafter reads the target's embeddings)
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's; only recorded in config.json
    block_size: int  # L: bonus + L-1 mask positions
    target_layer_ids: List[int]
    num_target_layers: int
    mask_token_id: int
    mask_token: str = DEFAULT_MASK_TOKEN
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 4096

    def __post_init__(self):
        if self.block_size < 2:
            raise ValueError(f"block_size must be >= 2, got {self.block_size}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} outside the vocab [0, {self.vocab_size})")

    @classmethod
    def for_target(cls, target: Qwen3Config, *, num_hidden_layers: int = 1, block_size: int = 16,
                   target_layer_ids: Optional[Sequence[int]] = None, mask_token_id: Optional[int] = None,
                   intermediate_size: Optional[int] = None) -> "DFlashConfig":
        """A drafter shaped like ``target`` (same hidden size, heads and RoPE)."""
        ids = target_layer_ids or default_target_layer_ids(target.num_hidden_layers, num_hidden_layers)
        return cls(
            hidden_size=target.hidden_size, intermediate_size=intermediate_size or target.intermediate_size,
            num_hidden_layers=num_hidden_layers, num_attention_heads=target.num_attention_heads,
            num_key_value_heads=target.num_key_value_heads, head_dim=target.head_dim,
            vocab_size=target.vocab_size, block_size=block_size, target_layer_ids=list(ids),
            num_target_layers=target.num_hidden_layers,
            mask_token_id=target.vocab_size - 1 if mask_token_id is None else mask_token_id,
            rms_norm_eps=target.rms_norm_eps, rope_theta=target.rope_theta,
            max_position_embeddings=target.max_position_embeddings)

    def layer_config(self) -> Qwen3Config:
        return Qwen3Config(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta, max_position_embeddings=self.max_position_embeddings)

    @classmethod
    def from_hf_dict(cls, d: dict) -> "DFlashConfig":
        """Read a DFlash draft config.json the way SGLang does (dflash_config keys win over top level)."""
        if d.get("architectures") not in (None, ["DFlashDraftModel"]):
            raise ValueError(f"not a DFlashDraftModel config: architectures={d.get('architectures')}")
        if any(t != "full_attention" for t in d.get("layer_types") or []):
            raise ValueError("reference DFlash supports only full_attention draft layers")
        dc = d.get("dflash_config") or {}
        lc = Qwen3Config.from_hf_dict(d)
        num_target = dc.get("num_target_layers", d.get("num_target_layers"))
        ids = dc.get("target_layer_ids", d.get("target_layer_ids"))
        if ids is None:
            if num_target is None:
                raise ValueError("DFlash config names neither target_layer_ids nor num_target_layers")
            ids = default_target_layer_ids(num_target, lc.num_hidden_layers)
        if dc.get("mask_token_id") is None:
            raise ValueError("reference DFlash needs dflash_config.mask_token_id (it has no tokenizer)")
        return cls(
            hidden_size=lc.hidden_size, intermediate_size=lc.intermediate_size,
            num_hidden_layers=lc.num_hidden_layers, num_attention_heads=lc.num_attention_heads,
            num_key_value_heads=lc.num_key_value_heads, head_dim=lc.head_dim, vocab_size=lc.vocab_size,
            block_size=int(dc.get("block_size", d.get("block_size", 16))), target_layer_ids=[int(i) for i in ids],
            num_target_layers=int(num_target if num_target is not None else max(ids) + 2),
            mask_token_id=int(dc["mask_token_id"]), mask_token=dc.get("mask_token") or DEFAULT_MASK_TOKEN,
            rms_norm_eps=lc.rms_norm_eps, rope_theta=lc.rope_theta,
            max_position_embeddings=lc.max_position_embeddings)

    def to_hf_dict(self) -> dict:
        d = self.layer_config().to_hf_dict()
        d.update(architectures=["DFlashDraftModel"], block_size=self.block_size,
                 num_target_layers=self.num_target_layers,
                 dflash_config={"target_layer_ids": list(self.target_layer_ids), "mask_token": self.mask_token,
                                "mask_token_id": self.mask_token_id, "block_size": self.block_size})
        return d


class DFlashDraftModel(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.config = cfg
        lc = cfg.layer_config()
        self.layers = nn.ModuleList(DecoderLayer(lc) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> List[KV]:
        """Draft K/V of committed tokens. Shape: features [B, S, C*H] (target features, C =
        len(target_layer_ids)); positions [B, S] int64. Returns per draft layer (k, v) [B, n_kv, S, D]."""
        ctx = self.hidden_norm(self.fc(features))
        return [layer.self_attn.project_kv(ctx, positions) for layer in self.layers]

    def forward(self, block_embeds: torch.Tensor, positions: torch.Tensor, context: KVCache,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Shape: block_embeds [B, Q, H] (target embeddings of the block tokens); positions [B, Q] int64;
        context: draft KV of S committed tokens; mask [B or 1, Q, S+Q] bool, None = every query sees
        all context and all block tokens (inference, one block). Returns hidden [B, Q, H] after ``norm``."""
        B, Q, _ = block_embeds.shape
        if mask is None:
            mask = torch.ones(1, Q, context.length + Q, dtype=torch.bool, device=block_embeds.device)
        mask = mask.expand(B, -1, -1)
        x = block_embeds
        for i, layer in enumerate(self.layers):
            x, _ = layer(x, positions, context.layers[i], mask)
        return self.norm(x)

    # ---- checkpoints: exactly the names SGLang's DFlashDraftModel.load_weights maps ----
    @classmethod
    def from_pretrained(cls, path: str, dtype: torch.dtype = torch.float32) -> "DFlashDraftModel":
        with open(os.path.join(path, "config.json")) as f:
            model = cls(DFlashConfig.from_hf_dict(json.load(f)))
        state = {k.removeprefix("model."): v for k, v in _read_safetensors(path).items() if "rotary_emb" not in k}
        model.load_state_dict(state, strict=True)
        return model.to(dtype).eval()

    def save_pretrained(self, path: str, dtype: Optional[torch.dtype] = None) -> None:
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        state = {k: v.detach().to(dtype or v.dtype).contiguous() for k, v in self.state_dict().items()}
        save_file(state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
        cfg = self.config.to_hf_dict()
        cfg["torch_dtype"] = str(dtype or self.fc.weight.dtype).removeprefix("torch.")
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)


def draft_block_logits(target: Qwen3ForCausalLM, drafter: DFlashDraftModel, bonus: torch.Tensor,
                       start: int, context: KVCache) -> torch.Tensor:
    """One DFlash draft forward for one request (the DRAFT step).
    Shape: bonus [B] int64 (the last verified token, at position ``start`` = committed length).
    Returns logits [B, L-1, V] for depths 1..L-1."""
    L = drafter.config.block_size
    block = torch.full((bonus.shape[0], L), drafter.config.mask_token_id, dtype=torch.long, device=bonus.device)
    block[:, 0] = bonus
    positions = start + torch.arange(L, device=bonus.device).expand(bonus.shape[0], -1)
    hidden = drafter(target.embed(block), positions, context)
    return target.lm_head(hidden[:, 1:])


# ---- training: many blocks of one sequence in one forward ----
def training_blocks(input_ids: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_token_id: int):
    """Blocks as DFlash trains them: block j = [x[a_j], mask, ...] at positions a_j.., seeing the
    context of positions < a_j and its own block; labels are x[a_j + 1 .. a_j + L-1] (-100 past the end).
    Shape: input_ids [B, T] int64; anchors [B, n] int64 in [0, T). Returns block_ids, positions,
    labels [B, n*L] int64 (labels -100 at block position 0) and mask [B, n*L, T + n*L] bool."""
    B, T = input_ids.shape
    n, L = anchors.shape[1], block_size
    offs = torch.arange(L, device=input_ids.device)
    positions = (anchors[:, :, None] + offs).reshape(B, n * L)  # [B, n*L]
    block_ids = torch.full_like(positions, mask_token_id)
    block_ids[:, ::L] = input_ids.gather(1, anchors)
    labels = input_ids.gather(1, positions.clamp(max=T - 1)).masked_fill(positions >= T, -100)
    labels[:, ::L] = -100
    ctx_mask = torch.arange(T, device=input_ids.device)[None, None, :] < anchors.repeat_interleave(L, 1)[:, :, None]
    blk = torch.arange(n, device=input_ids.device).repeat_interleave(L)
    self_mask = (blk[:, None] == blk[None, :]).expand(B, -1, -1)
    return block_ids, positions, labels, torch.cat([ctx_mask, self_mask], dim=2)


def dflash_loss(target: Qwen3ForCausalLM, drafter: DFlashDraftModel, input_ids: torch.Tensor,
                anchors: torch.Tensor, position_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Cross-entropy of the drafter on the blocks anchored at ``anchors`` of ``input_ids`` [B, T]
    (the target is frozen: features and embeddings are computed without grad). position_weights:
    [L] float weight per block position (e.g. DFlash's decay over depth), default uniform."""
    cfg = drafter.config
    B, T = input_ids.shape
    seq_pos = torch.arange(T, device=input_ids.device).expand(B, -1)
    with torch.no_grad():
        feats = target(input_ids, seq_pos, capture_layer_ids=cfg.target_layer_ids).features
    block_ids, positions, labels, mask = training_blocks(input_ids, anchors, cfg.block_size, cfg.mask_token_id)
    context = KVCache(cfg.num_hidden_layers)
    context.append(drafter.context_kv(feats, seq_pos))
    with torch.no_grad():
        embeds = target.embed(block_ids)
    logits = target.lm_head(drafter(embeds, positions, context, mask))  # lm_head frozen by the caller
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="none")
    w = torch.ones(cfg.block_size, device=loss.device) if position_weights is None else position_weights
    w = w.repeat(anchors.shape[1]).expand(B, -1).flatten() * (labels.flatten() != -100)
    return (loss * w).sum() / w.sum().clamp(min=1e-9)
