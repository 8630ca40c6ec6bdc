"""A minimal Qwen3 causal LM in pure PyTorch: the TARGET of the reference DDTree round.

It loads a Hugging Face ``Qwen3ForCausalLM`` checkpoint directory (config.json + safetensors) and
runs a forward over new tokens at arbitrary positions, with an arbitrary boolean attention mask over
(cached prefix + new tokens). That one primitive serves prefill (causal mask), plain decoding and the
VERIFY step, where a whole draft tree is scored in one forward with an ancestor-only mask.
It can also return DFlash context features: the residual stream after selected layers, concatenated
in ascending layer order, exactly what SGLang 0.5.16 captures for DFLASH ("before layer k+1").
Shapes use B = batch, T = new tokens, S = cached tokens, H = hidden size, D = head dim.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

KV = Tuple[torch.Tensor, torch.Tensor]  # (k, v), each [B, num_kv_heads, T, D]


@dataclass
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

    @classmethod
    def from_hf_dict(cls, d: dict) -> "Qwen3Config":
        """Read a Hugging Face Qwen3 config.json dict (transformers v4 or v5 layout)."""
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"reference Qwen3 supports only default RoPE, got rope_type={rope_type!r}")
        heads = d["num_attention_heads"]
        return cls(
            vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"], num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads, num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", d.get("rope_theta", 10000.0)),
            max_position_embeddings=d.get("max_position_embeddings", 4096),
            tie_word_embeddings=d.get("tie_word_embeddings", False),
        )

    def to_hf_dict(self) -> dict:
        """A config.json dict that transformers and SGLang read as a Qwen3ForCausalLM."""
        d = asdict(self)
        theta = d.pop("rope_theta")
        d.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_act="silu",
                 attention_bias=False, rope_parameters={"rope_theta": theta, "rope_type": "default"},
                 layer_types=["full_attention"] * self.num_hidden_layers, torch_dtype="float32")
        return d


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style (rotate-half) RoPE.  x: [B, heads, T, D]; positions: [B, T] int64."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    freqs = positions[:, None, :, None].float() * inv_freq  # [B, 1, T, D/2]
    cos, sin = freqs.cos().repeat(1, 1, 1, 2), freqs.sin().repeat(1, 1, 1, 2)
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x.float() * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)  # per-head, before RoPE
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:  # [B, T, n*D] -> [B, n, T, D]
        return x.view(*x.shape[:2], n, self.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor, positions: torch.Tensor) -> KV:
        """K (k_norm + RoPE at ``positions``) and V of x [B, T, H]; each [B, n_kv, T, D].
        DFlash uses this alone to turn context features into draft KV."""
        k = self.k_norm(self._heads(self.k_proj(x), self.n_kv))
        return apply_rope(k, positions, self.cfg.rope_theta), self._heads(self.v_proj(x), self.n_kv)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, past: Optional[KV],
                mask: torch.Tensor) -> Tuple[torch.Tensor, KV]:
        """x: [B, T, H]; past: cached (k, v) [B, n_kv, S, D] or None; mask: [B, T, S+T] bool
        (True = may attend). Returns the output [B, T, H] and the new tokens' (k, v)."""
        q = apply_rope(self.q_norm(self._heads(self.q_proj(x), self.n_heads)), positions, self.cfg.rope_theta)
        k, v = self.project_kv(x, positions)
        k_all, v_all = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        rep = self.n_heads // self.n_kv
        k_all, v_all = k_all.repeat_interleave(rep, dim=1), v_all.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask[:, None])  # [B, heads, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:2], -1)), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm Qwen3 block; the DFlash drafter reuses it unchanged (same weight names)."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, positions, past: Optional[KV], mask) -> Tuple[torch.Tensor, KV]:
        attn, kv = self.self_attn(self.input_layernorm(x), positions, past, mask)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class KVCache:
    """Committed K/V per layer, each [B, n_kv, S, D]. Forwards never modify it: they return the new
    tokens' K/V and the caller commits what it keeps (e.g. only the accepted tree path)."""

    def __init__(self, num_layers: int):
        self.layers: List[Optional[KV]] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.layers[0] is None else self.layers[0][0].shape[2]

    def append(self, new: Sequence[KV], keep: Optional[torch.Tensor] = None) -> None:
        """Append the new tokens' K/V; keep: [n] int64 indices of the new tokens to keep (all if None)."""
        for i, (k, v) in enumerate(new):
            if keep is not None:
                k, v = k[:, :, keep], v[:, :, keep]
            old = self.layers[i]
            self.layers[i] = (k, v) if old is None else (torch.cat([old[0], k], 2), torch.cat([old[1], v], 2))


def causal_mask(num_new: int, num_cached: int, device=None) -> torch.Tensor:
    """[1, T, S+T] bool: every new token sees the whole cache and new tokens up to itself."""
    return torch.ones(num_new, num_cached + num_new, dtype=torch.bool, device=device).tril(num_cached)[None]


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [B, T, V] float
    features: Optional[torch.Tensor]  # [B, T, len(capture_layer_ids) * H], None if none requested
    kv: List[KV]  # per layer, the new tokens' (k, v) [B, n_kv, T, D]


class Qwen3Model(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3ForCausalLM(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.model = Qwen3Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def check_capture_ids(self, layer_ids: Sequence[int]) -> List[int]:
        """SGLang captures the input of layer k+1 for target layer k: the last layer (whose output
        only feeds the final norm) and duplicates are never captured there, so they are errors here."""
        n = self.config.num_hidden_layers
        if len(set(layer_ids)) != len(layer_ids) or not all(0 <= k < n - 1 for k in layer_ids):
            raise ValueError(f"target_layer_ids must be distinct layers in [0, {n - 2}], got {list(layer_ids)}")
        return sorted(layer_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: Optional[KVCache] = None,
                mask: Optional[torch.Tensor] = None, capture_layer_ids: Sequence[int] = ()) -> TargetOutput:
        """Shape: input_ids [B, T] int64; positions [B, T] int64; mask [B or 1, T, S+T] bool over
        (cache + new tokens), True = may attend, None = causal. The cache is read, not modified."""
        num_cached = 0 if cache is None else cache.length
        if mask is None:
            mask = causal_mask(input_ids.shape[1], num_cached, input_ids.device)
        mask = mask.expand(input_ids.shape[0], -1, -1)
        capture = self.check_capture_ids(capture_layer_ids)
        x = self.embed(input_ids)
        feats, new_kv = [], []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, positions, None if cache is None else cache.layers[i], mask)
            new_kv.append(kv)
            if i in capture:
                feats.append(x)  # the residual stream after layer i (pre final norm)
        logits = self.lm_head(self.model.norm(x))
        return TargetOutput(logits, torch.cat(feats, -1) if feats else None, new_kv)

    # ---- checkpoints (Hugging Face layout: model.* + lm_head.weight) ----
    @classmethod
    def from_pretrained(cls, path: str, dtype: torch.dtype = torch.float32) -> "Qwen3ForCausalLM":
        with open(os.path.join(path, "config.json")) as f:
            model = cls(Qwen3Config.from_hf_dict(json.load(f)))
        state = _read_safetensors(path)
        state = {k: v for k, v in state.items() if "rotary_emb" not in k}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        model.load_state_dict(state, strict=True)
        return model.to(dtype).eval()

    def save_pretrained(self, path: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight")
        save_file(state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(self.config.to_hf_dict(), f, indent=1)


def _read_safetensors(path: str) -> dict:
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    state = {}
    for f in files:
        state.update(load_file(f))
    return state
