"""Tiny seeded random target + DFlash drafter pairs for CPU tests and the demo (float32, seconds).

``sharp=True`` makes random weights behave predictably, so that speculative rounds accept deep paths:
the residual stream stays ~ the token embedding (layer outputs scaled by 0.05) and the lm_head turns
it into a deterministic successor map with logit margins of ~3: a token in a small set S (the mask
token and the ATTRACTOR token included) is followed by the attractor, any other token x by a random
succ(x) (any token but the mask and the attractor, so greedy decoding usually walks into S). A sharp drafter (same scaling) sees the mask token at depths 1..L-1, so it proposes
the attractor everywhere (its final norm is scaled up so it does so confidently): rounds are rejected
at depth 1 until greedy decoding reaches S, then deep paths are accepted every round. ``sharp=False`` gives plain random weights (bonus-only rounds).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from sglang_ddtree.reference.dflash import DFlashConfig, DFlashDraftModel
from sglang_ddtree.reference.qwen3 import Qwen3Config, Qwen3ForCausalLM

ATTRACTOR = 7


def tiny_target_config(vocab_size: int = 256, hidden_size: int = 64, num_layers: int = 4) -> Qwen3Config:
    return Qwen3Config(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                       num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=hidden_size // 4, rope_theta=10000.0)


def _shrink_layer_outputs(layers, scale: float = 0.05) -> None:
    for layer in layers:
        layer.self_attn.o_proj.weight.mul_(scale)
        layer.mlp.down_proj.weight.mul_(scale)


@torch.no_grad()
def random_target(seed: int = 0, sharp: bool = True, cfg: Optional[Qwen3Config] = None,
                  mask_token_id: Optional[int] = None, frac_s: float = 0.08, margin: float = 4.0) -> Qwen3ForCausalLM:
    cfg = cfg or tiny_target_config()
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).eval()
    if not sharp:
        return model
    g = torch.Generator().manual_seed(seed)
    V, H = cfg.vocab_size, cfg.hidden_size
    mask_token_id = V - 1 if mask_token_id is None else mask_token_id
    in_s = torch.rand(V, generator=g) < frac_s
    in_s[[ATTRACTOR, mask_token_id]] = True
    emb = torch.randn(V, H, generator=g)
    emb[:, 0] = torch.where(in_s, 1.0, -1.0)  # dim 0 says "in S"
    head = torch.randn(V, H, generator=g) * 1e-3
    head[ATTRACTOR] = 0.0
    head[ATTRACTOR, 0] = margin  # S -> attractor
    choices = torch.tensor([t for t in range(V) if t not in (ATTRACTOR, mask_token_id)])
    succ = choices[torch.randint(len(choices), (V,), generator=g)]
    for x in (~in_s).nonzero().flatten().tolist():  # x -> succ(x): row succ(x) reads x's identity (dims 1..)
        head[succ[x], 1:] += margin * emb[x, 1:] / (H - 1)
    model.model.embed_tokens.weight.copy_(emb)
    model.lm_head.weight.copy_(head)
    _shrink_layer_outputs(model.model.layers)
    return model


@torch.no_grad()
def random_drafter(target: Qwen3ForCausalLM, seed: int = 0, sharp: bool = True, num_layers: int = 2,
                   block_size: int = 8, target_layer_ids: Sequence[int] = (0, 2),
                   mask_token_id: Optional[int] = None) -> DFlashDraftModel:
    cfg = DFlashConfig.for_target(target.config, num_hidden_layers=num_layers, block_size=block_size,
                                  target_layer_ids=list(target_layer_ids), mask_token_id=mask_token_id)
    torch.manual_seed(seed + 1000)
    drafter = DFlashDraftModel(cfg).eval()
    if sharp:
        _shrink_layer_outputs(drafter.layers)
        drafter.norm.weight.fill_(3.0)  # a confident drafter: log-prob of its top-1 ~ -0.1, not ~ -1.8
    return drafter
