"""DDTREE's tree verify on SGLang's fa3 backend without the per-row expand call (VERIFY step).

Upstream's fa3 backend runs a topk > 1 target verify as cascade attention, per layer: (1) one FlashAttention
call over each request's committed prefix for all its N tree rows (non-causal, returns the softmax LSE),
(2) a second call in which every tree row is its own length-1 sequence over the tree columns its FULL_MASK
row keeps (page table and lengths rebuilt per round by ~20 eager ops), (3) a merge. At the Qwen3-8B shape on
the H200, batch 32, budget 15 (512 rows), the FlashAttention kernels took 3.90 ms of a 16.66 ms verify graph
against 0.55 ms for DFLASH's causal verify of the same 512 tokens
(``benchmark/results/shape_8b_kernels_h200_session7.json``). Here (2) + (3) are one Triton launch
(``worker.tree_attention.tree_attention_merge``): the tree part is at most N keys per request, read from
the layer's own k / v, with each row's ancestor set as bit words (``ancestor_bits``), merged into (1)'s
output through its LSE. (1) stays upstream's kernel with upstream's metadata; at graph replay only that
metadata is built (``apply_cuda_graph_metadata``), not (2)'s per-row page table.

Switch: ``SGLANG_DDTREE_FA3_TREE_ATTENTION`` = 1 (this path) | 0 (upstream's cascade); unset = this path on the
releases that can carry it (``release_supported``; the cascade elsewhere). The GPU checks of this path passed on
the H200 (session 8: kernels natively incl. graph replay, node-by-node verify logits, sharp parity at budgets
15 / 64 / 256 / auto, graphs and overlap off, T > 0, features), and it is faster than the cascade at every load
measured: Qwen3-8B shape, budget 15, paired, ms per round at concurrency 1 / 8 / 32 / 64: 6.86 / 7.34 / 17.71 /
36.06 against 7.36 / 8.96 / 20.36 / 43.14 (``benchmark/results/shape_8b_auto_h200_session9.json``). The path
applies to a layer only when nothing it does not handle is in play (``_fast_layer``); anything else runs
upstream's ``forward_extend`` unchanged.

CUDA graphs: the verify graphs are warmed up and captured with a dummy spec input that has no tokens and no
bits; the kernel then reads the backend's static bit buffer (``STATIC_BITS``, allocated with the backend's
other graph buffers in ``init_cuda_graph_state``), which the worker fills every round before the verify
forward (``round_tree_bits``), on the same stream. Eager rounds read the same buffer (or a per-round tensor
when no graph state exists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sglang_ddtree.config import DDTreeConfig, env_switch, is_validated_ddtree_args

if TYPE_CHECKING:
    import torch


ENV = "SGLANG_DDTREE_FA3_TREE_ATTENTION"
STATIC_BITS = "_ddtree_tree_bits"  # attribute of the target's FlashAttentionBackend: [max tokens, NW] int32


def release_supported() -> bool:
    """Whether the installed SGLang release can carry this path (the compat adapter refuses it where upstream's
    fa3 graph metadata changed)."""
    from sglang_ddtree.compat import adapter

    try:
        return ENV not in adapter().refused_features()
    except RuntimeError:  # no sglang installed: nothing runs anyway
        return True


def _switch(default: bool) -> bool:
    return env_switch(ENV, on="DDTREE's fused tree attention on fa3", off="upstream's cascade", default=default)


def enabled() -> bool:
    """The switch (module docstring): 1 on, 0 off, unset on where the release supports it; a value other than
    0 / 1 is an error naming the variable."""
    return _switch(release_supported())


def explicitly_enabled() -> bool:
    """The switch set to 1 by the user (validation refuses that on a release that cannot carry it)."""
    return _switch(False)


def _is_fa3_backend(backend) -> bool:
    from sglang.srt.layers.attention.flashattention_backend import FlashAttentionBackend

    return isinstance(backend, FlashAttentionBackend)


def backend_serves_ddtree(backend) -> bool:
    """A target-side fa3 backend of a DDTREE server that would run upstream's cascade (topk > 1) and may
    take this path instead; the drafter's backend (topk 1 in its view of the server args) never does."""
    from sglang.srt.runtime_context import get_server_args

    return (enabled() and _is_fa3_backend(backend) and int(getattr(backend, "topk", 0) or 0) > 1
            and is_validated_ddtree_args(get_server_args()))


# Static bit buffers of this process's target fa3 backends (one per backend that captured verify graphs).
_STATIC_BACKENDS: list = []


def static_bit_buffers() -> list:
    return [getattr(b, STATIC_BITS) for b in _STATIC_BACKENDS]


# ---- hooks (AROUND) ---------------------------------------------------------------------------------
def init_cuda_graph_state(original, backend, max_bs: int, max_num_tokens: int, *args, **kwargs):
    """Upstream's graph buffers, plus the static ancestor-bit buffer the captured tree kernel reads."""
    import torch

    from sglang_ddtree.worker.tree_attention import num_words

    out = original(backend, max_bs, max_num_tokens, *args, **kwargs)
    if backend_serves_ddtree(backend):
        n = int(backend.speculative_num_draft_tokens)
        setattr(backend, STATIC_BITS, torch.zeros((int(max_num_tokens), num_words(n)), dtype=torch.int32,
                                                  device=backend.device))
        if backend not in _STATIC_BACKENDS:
            _STATIC_BACKENDS.append(backend)
    return out


def apply_cuda_graph_metadata(original, backend, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
                              forward_mode, spec_info, seq_lens_cpu, *args, **kwargs):
    """The graph metadata of a DDTREE verify: only upstream's first half (the prefix call's), since the fused
    path never reads the second (the per-row expand page table: ~20 ops per round, among them a gather of
    whole req_to_token rows and a sort); everything else is upstream's."""
    from sglang_ddtree.worker.info import DDTreeVerifyInput

    if not (forward_mode.is_target_verify() and isinstance(spec_info, DDTreeVerifyInput) and encoder_lens is None
            and backend_serves_ddtree(backend) and not backend.has_swa and not backend.use_sliding_window_kv_pool):
        return original(backend, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode,
                        spec_info, seq_lens_cpu, *args, **kwargs)
    import torch

    from sglang_ddtree.compat import adapter

    metadata = backend.target_verify_metadata_topk_normal[bs]
    metadata.cache_seqlens_int32.copy_(seq_lens[:bs])  # the prefix: every tree row sees all of it
    metadata.max_seq_len_k = backend.max_context_len  # static bound (max_seq_len_q = N, cu_seqlens_q: capture's)
    metadata.cu_seqlens_k[1:].copy_(torch.cumsum(metadata.cache_seqlens_int32, dim=0, dtype=torch.int32))
    adapter().build_trtllm_mha_page_table(  # its module moved in 0.5.23
        req_to_token=backend.req_to_token, req_pool_indices=req_pool_indices[:bs],
        cache_seqlens=metadata.cache_seqlens_int32, page_table=metadata.page_table, page_size=backend.page_size)
    backend.forward_metadata = metadata
    backend.forward_metadata_spec_decode_expand = None  # upstream's cascade cannot run on this metadata
    return None


def forward_extend(original, backend, q, k, v, layer, forward_batch, save_kv_cache=True, *args, **kwargs):
    bits = _round_bits(backend, k, layer, forward_batch, save_kv_cache, args, kwargs)
    if bits is None:
        if (forward_batch.forward_mode.is_target_verify() and backend_serves_ddtree(backend)
                and getattr(backend, "forward_metadata_spec_decode_expand", 0) is None):
            raise RuntimeError(
                f"DDTREE: layer {layer.layer_id} cannot take fa3's fused tree attention (sliding window, softcap, "
                f"head dims or KV dtype it does not handle) while this verify's metadata is the fused path's; "
                f"run with {ENV}=0.")
        return original(backend, q, k, v, layer, forward_batch, save_kv_cache, *args, **kwargs)
    return _tree_verify_attention(backend, q, k, v, layer, forward_batch, bits)


def _round_bits(backend, k, layer, forward_batch, save_kv_cache, args, kwargs) -> Optional[torch.Tensor]:
    """The ancestor bits this forward's fused tree attention reads, or None: upstream's path."""
    from sglang_ddtree.worker.info import DDTreeVerifyInput

    spec = forward_batch.spec_info
    if not (forward_batch.forward_mode.is_target_verify() and isinstance(spec, DDTreeVerifyInput) and enabled()):
        return None
    # Extra arguments (MLA ropes, sinks, descales, score_mod, rel_bias) are never passed by a plain MHA layer.
    if args or any(v is not None for v in kwargs.values()):
        return None
    if k is None or not save_kv_cache or not _fast_layer(backend, layer):
        return None
    if spec.tree_bits is not None:
        return spec.tree_bits
    # The graph runner's dummy input (no tokens: warm-up and capture) has no bits: it reads the static buffer,
    # which the worker fills every round, so the captured graphs do too (and the warm-up compiles the kernel
    # before any capture). A real round without bits keeps upstream's path.
    static = getattr(backend, STATIC_BITS, None)
    if static is not None and spec.draft_token is None:
        return static
    return None


def _fast_layer(backend, layer) -> bool:
    """What this path reproduces of upstream's cascade branch: FA3, MHA with a KV cache of the model's dtype,
    full attention (no sliding window, chunked-local or context parallel), no softcap, decoder self-attention;
    and what the tree kernel takes: one head dim for q, k and v, a power of two in [16, 256]."""
    from sglang.srt.layers.radix_attention import AttentionType

    swa = layer.sliding_window_size is not None and layer.sliding_window_size > -1
    return (int(backend.fa_impl_ver) == 3 and int(backend.topk) > 1 and not backend.use_mla
            and not backend.fa_skip_kv_cache and backend.kv_cache_dtype_str == "auto"
            and not backend.kv_cache_is_mxfp8 and not backend.has_local_attention
            and not backend.use_sliding_window_kv_pool and int(backend.attn_cp_size) == 1
            and not swa and not layer.is_cross_attention and layer.attn_type == AttentionType.DECODER
            and not layer.logit_cap and layer.v_head_dim == layer.head_dim
            and layer.head_dim in (16, 32, 64, 128, 256))


def _tree_verify_attention(backend, q, k, v, layer, forward_batch, bits):
    """Upstream's step (1) as upstream calls it, then the tree part fused with the merge (module docstring)."""
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    from sglang_ddtree.worker.tree_attention import tree_attention_merge

    metadata = backend.forward_metadata
    hq, hkv, hv = layer.tp_q_head_num, layer.tp_k_head_num, layer.tp_v_head_num
    d, dv = layer.head_dim, layer.v_head_dim
    backend.token_to_kv_pool.set_kv_buffer(
        layer, KVWriteLoc(forward_batch.out_cache_loc, metadata.swa_out_cache_loc), k, v, layer.k_scale,
        layer.v_scale,
    )
    key_cache, value_cache = backend.token_to_kv_pool.get_kv_buffer(layer.layer_id)
    key_cache = key_cache.view(-1, backend.page_size, hkv, d)
    value_cache = value_cache.view(-1, backend.page_size, hv, dv)
    q3 = q.contiguous().view(-1, hq, d)
    o, lse, *_ = backend.flash_attn_with_kvcache(
        q=q3, k_cache=key_cache, v_cache=value_cache, page_table=metadata.page_table,
        cache_seqlens=metadata.cache_seqlens_int32, cu_seqlens_q=metadata.cu_seqlens_q,
        cu_seqlens_k_new=metadata.cu_seqlens_k, max_seqlen_q=metadata.max_seq_len_q,
        softmax_scale=layer.scaling, causal=False, window_size=(-1, -1), softcap=layer.logit_cap,
        return_softmax_lse=True, num_splits=backend.num_splits, ver=backend.fa_impl_ver,
    )
    rows = q3.shape[0]
    tree_attention_merge(
        q3, k.reshape(rows, hkv, d), v.reshape(rows, hv, dv), bits[:rows], o, lse,
        num_rows=int(forward_batch.spec_info.draft_token_num), sm_scale=layer.scaling, out=o,
    )
    return o.view(-1, hq * dv)


# ---- the worker's side --------------------------------------------------------------------------------
def target_uses_fa3(model_runner) -> bool:
    """Whether the target's verify may run on an fa3 backend (plain, or inside a hybrid prefill / decode one)."""
    backend = model_runner.attn_backend
    candidates = (backend, getattr(backend, "decode_backend", None), getattr(backend, "prefill_backend", None))
    return any(b is not None and backend_serves_ddtree(b) for b in candidates)


def _fitting_statics(rows: int, words: int, backend) -> list:
    """The static bit buffers of the verify's attention backend (``backend``: the target's, or the active width's
    under ``budget auto``; inside a hybrid prefill / decode backend, each fa3 part's) that fit ``rows`` rows of
    ``words`` words; their captured graphs read them."""
    parts = (backend, getattr(backend, "decode_backend", None), getattr(backend, "prefill_backend", None))
    return [s for s in (getattr(b, STATIC_BITS, None) for b in parts if b is not None)
            if s is not None and s.shape[0] >= rows and s.shape[1] == words]


def round_bits_out(tree, backend=None) -> torch.Tensor:
    """Where this round's ancestor bits [bs*N, NW] int32 go: the head of the first static buffer that fits the
    round (``_fitting_statics``), or a fresh tensor when none has graph state. The tree's verify topology writes
    them (``tree_api.verify_topology(..., bits_out=)``: the same launch); ``share_tree_bits`` then copies them to
    the other parts' buffers."""
    from sglang_ddtree.worker.tree_attention import num_words

    rows, words = tree.batch_size * tree.num_rows, num_words(tree.num_rows)
    statics = _fitting_statics(rows, words, backend)
    if statics:
        return statics[0][:rows]
    import torch

    return torch.empty((rows, words), dtype=torch.int32, device=tree.parents.device)


def share_tree_bits(bits: torch.Tensor, backend=None) -> torch.Tensor:
    """After ``bits`` (from ``round_bits_out``) are written: copy them into every other fitting static buffer (a
    hybrid backend's second fa3 part). Returns ``bits``."""
    for s in _fitting_statics(bits.shape[0], bits.shape[1], backend)[1:]:
        s[:bits.shape[0]].copy_(bits)
    return bits


def round_tree_bits(tree, config: DDTreeConfig, backend=None) -> torch.Tensor:
    """This round's ancestor bits [bs*N, NW] int32 for the fused path by their own launch (``ancestor_bits``; a
    chain-shaped round, which has no verify topology), into ``round_bits_out``'s buffer, shared to the other
    parts'. A tree round has its topology write them instead."""
    from sglang_ddtree.worker.tree_attention import ancestor_bits

    bits = ancestor_bits(tree.parents, config.max_depth, out=round_bits_out(tree, backend))
    return share_tree_bits(bits, backend)
