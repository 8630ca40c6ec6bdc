"""fa3's tree verify through DDTREE's fused tree-attention kernel (``worker.fa3_tree``), on CPU.

The fa3 backend itself needs sgl_kernel's CUDA library, so the backend here is a stand-in with the attributes
the path reads; its ``flash_attn_with_kvcache`` is the prefix call computed in float64 from the page table
(what FA3 returns: the normalised output and the natural-log LSE as [Hq, T]). What is checked: the hooked
``forward_extend`` writes the round's K / V into the cache like upstream and returns, for every tree row,
attention over its request's prefix and its ancestors (float64 reference built here); what falls back to
upstream's path; the switch; the static bit buffer the captured graphs read.
The same path on the H200 (verify logits node by node, sharp parity, T > 0, features on fa3) is the GPU
check in ``scripts/device/issue12.sh tree``.
"""

import types

import pytest
import torch

from sglang_ddtree.tree import build_tree
from sglang_ddtree.worker import fa3_tree, hooks
from sglang_ddtree.worker.info import DDTreeVerifyInput
from sglang_ddtree.worker.tree_attention import ancestor_bits

HQ, HKV, D = 4, 2, 16


@pytest.fixture
def fused_on(monkeypatch):
    monkeypatch.setenv(fa3_tree.ENV, "1")
    monkeypatch.setattr(fa3_tree, "_is_fa3_backend", lambda backend: isinstance(backend, _Backend))
    monkeypatch.setattr("sglang.srt.runtime_context.get_server_args", lambda: _SERVER_ARGS)


_SERVER_ARGS = types.SimpleNamespace(speculative_algorithm="DDTREE", speculative_ddtree_budget=4,
                                     speculative_ddtree_topk=2, speculative_dflash_block_size=4)


class _Pool:
    def __init__(self, slots):
        g = torch.Generator().manual_seed(1)
        self.k = torch.randn(slots, HKV, D, generator=g)
        self.v = torch.randn(slots, HKV, D, generator=g)
        self.writes = []

    def set_kv_buffer(self, layer, loc, k, v, k_scale, v_scale):
        self.writes.append(loc.loc.clone())
        self.k[loc.loc] = k.view(-1, HKV, D)
        self.v[loc.loc] = v.view(-1, HKV, D)

    def get_kv_buffer(self, layer_id):
        return self.k, self.v


class _Backend:
    """The attributes of FlashAttentionBackend the fused path reads; the prefix call in float64."""

    fa_impl_ver, topk, use_mla, fa_skip_kv_cache = 3, 2, False, False
    kv_cache_dtype_str, kv_cache_is_mxfp8, has_local_attention = "auto", False, False
    use_sliding_window_kv_pool, attn_cp_size, page_size, num_splits = False, 1, 1, 0
    device = torch.device("cpu")

    def __init__(self, pool, metadata, n):
        self.token_to_kv_pool, self.forward_metadata, self.speculative_num_draft_tokens = pool, metadata, n
        self.prefix_calls = []

    def flash_attn_with_kvcache(self, *, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q,
                                max_seqlen_q, softmax_scale, causal, return_softmax_lse, **kw):
        assert causal is False and return_softmax_lse and kw["window_size"] == (-1, -1)
        self.prefix_calls.append(kw)
        o = torch.zeros_like(q)
        lse = torch.full((q.shape[1], q.shape[0]), float("-inf"))
        for b in range(len(cache_seqlens)):
            rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
            slots = page_table[b, : int(cache_seqlens[b])]
            kk = k_cache.view(-1, HKV, D)[slots].double().repeat_interleave(HQ // HKV, 1)  # [P, Hq, D]
            vv = v_cache.view(-1, HKV, D)[slots].double().repeat_interleave(HQ // HKV, 1)
            s = torch.einsum("thd,phd->htp", q[rows].double(), kk) * softmax_scale
            o[rows] = torch.einsum("htp,phd->thd", s.softmax(-1), vv).to(q.dtype)
            lse[:, rows] = s.logsumexp(-1).float()
        return o, lse


def _layer(**over):
    base = dict(layer_id=0, tp_q_head_num=HQ, tp_k_head_num=HKV, tp_v_head_num=HKV, head_dim=D, v_head_dim=D,
                scaling=D ** -0.5, logit_cap=0.0, sliding_window_size=-1, is_cross_attention=False,
                k_scale=None, v_scale=None)
    from sglang.srt.layers.radix_attention import AttentionType

    return types.SimpleNamespace(attn_type=AttentionType.DECODER, **{**base, **over})


def _round(bs=2, budget=4, topk=2, depth=3, prefix=(3, 1), seed=0):
    """A verify forward of real trees: (backend, layer, q, k, v, forward_batch, reference output [T, Hq, D])."""
    g = torch.Generator().manual_seed(seed)
    lp, ids = torch.log_softmax(torch.randn(bs, depth, 6, generator=g), -1).topk(topk, dim=-1)
    tree = build_tree(lp, ids, budget, backend="torch")
    n = tree.num_rows
    t = bs * n
    slots_per_req = max(prefix) + n
    page_table = torch.arange(bs * slots_per_req).view(bs, slots_per_req) + 1  # slot 0: SGLang's dummy
    out_loc = torch.cat([page_table[b, prefix[b]: prefix[b] + n] for b in range(bs)])
    pool = _Pool(1 + bs * slots_per_req)
    metadata = types.SimpleNamespace(
        page_table=page_table, cache_seqlens_int32=torch.tensor(prefix, dtype=torch.int32),
        cu_seqlens_q=torch.arange(0, t + 1, n, dtype=torch.int32), cu_seqlens_k=None, max_seq_len_q=n,
        swa_out_cache_loc=None)
    backend = _Backend(pool, metadata, n)
    q, k, v = (torch.randn(t, h, D, generator=g) for h in (HQ, HKV, HKV))
    spec = DDTreeVerifyInput(draft_token=tree.token_ids.reshape(-1), positions=None, draft_token_num=n, topk=topk,
                             custom_mask=None, tree_bits=ancestor_bits(tree.parents, depth))
    fb = types.SimpleNamespace(forward_mode=types.SimpleNamespace(is_target_verify=lambda: True), spec_info=spec,
                               out_cache_loc=out_loc)
    # Reference: each row over its prefix slots and its ancestors' (and its own) tree slots, float64.
    ref = torch.empty(t, HQ, D, dtype=torch.float64)
    parents = tree.parents.tolist()
    for b in range(bs):
        for i in range(n):
            seen, j = [], i
            while j != -1 and len(seen) <= depth:
                seen.append(j)
                j = parents[b][j]
            keys_k = torch.cat([pool.k[page_table[b, : prefix[b]]], k[[b * n + j for j in seen]]]).double()
            keys_v = torch.cat([pool.v[page_table[b, : prefix[b]]], v[[b * n + j for j in seen]]]).double()
            kk, vv = keys_k.repeat_interleave(HQ // HKV, 1), keys_v.repeat_interleave(HQ // HKV, 1)
            s = torch.einsum("hd,phd->hp", q[b * n + i].double(), kk) * D ** -0.5
            ref[b * n + i] = torch.einsum("hp,phd->hd", s.softmax(-1), vv)
    return backend, _layer(), q, k, v, fb, ref


def _upstream(*args, **kwargs):
    return "upstream"


def test_fused_forward_is_attention_over_prefix_and_ancestors(fused_on):
    backend, layer, q, k, v, fb, ref = _round()
    out = fa3_tree.forward_extend(_upstream, backend, q, k, v, layer, fb, True, q_rope=None, sinks=None)
    assert out.shape == (q.shape[0], HQ * D)
    assert torch.allclose(out.view(-1, HQ, D).double(), ref, atol=1e-5)
    # the round's K / V went into the cache at the verify's slots (what upstream writes), once
    (loc,) = backend.token_to_kv_pool.writes
    assert torch.equal(loc, fb.out_cache_loc)
    assert torch.equal(backend.token_to_kv_pool.k[loc], k)


def test_a_deeper_batch_with_one_token_prefixes(fused_on):
    backend, layer, q, k, v, fb, ref = _round(bs=3, budget=9, topk=3, depth=4, prefix=(1, 5, 2), seed=3)
    out = fa3_tree.forward_extend(_upstream, backend, q, k, v, layer, fb, True)
    assert torch.allclose(out.view(-1, HQ, D).double(), ref, atol=1e-5)


@pytest.mark.parametrize("change", [
    dict(layer=dict(sliding_window_size=128)), dict(layer=dict(logit_cap=30.0)),
    dict(layer=dict(v_head_dim=2 * D)), dict(layer=dict(is_cross_attention=True)),
    dict(backend=dict(kv_cache_dtype_str="fp8_e4m3")), dict(backend=dict(use_mla=True)),
    dict(backend=dict(topk=1)), dict(backend=dict(fa_impl_ver=4)), dict(backend=dict(attn_cp_size=2)),
    dict(kwargs=dict(sinks=torch.zeros(HQ))), dict(save_kv_cache=False), dict(k=None),
    dict(mode="decode"), dict(spec="other"), dict(no_bits=True), dict(env="0"),
])
def test_everything_it_does_not_reproduce_runs_upstreams_path(fused_on, monkeypatch, change):
    backend, layer, q, k, v, fb, _ = _round()
    for name, value in change.get("layer", {}).items():
        setattr(layer, name, value)
    for name, value in change.get("backend", {}).items():
        setattr(backend, name, value)
    if change.get("mode") == "decode":
        fb.forward_mode = types.SimpleNamespace(is_target_verify=lambda: False)
    if change.get("spec") == "other":
        fb.spec_info = types.SimpleNamespace(tree_bits=fb.spec_info.tree_bits)
    if change.get("no_bits"):  # an eager round without bits (not a capture): upstream's path
        fb.spec_info.tree_bits = None
    if "env" in change:
        monkeypatch.setenv(fa3_tree.ENV, change["env"])
    k_arg = None if "k" in change else k
    out = fa3_tree.forward_extend(_upstream, backend, q, k_arg, v, layer, fb, change.get("save_kv_cache", True),
                                  **change.get("kwargs", {}))
    assert out == "upstream" and not backend.token_to_kv_pool.writes


def test_graph_dummies_read_the_static_buffer_the_worker_fills(fused_on):
    """Verify graphs are warmed up and captured with the runner's dummy input (no tokens, no bits): the kernel
    reads the backend's static buffer, which round_tree_bits fills each round; a real round without bits
    keeps upstream's path (test_everything_it_does_not_reproduce_runs_upstreams_path, no_bits)."""
    backend, layer, q, k, v, fb, ref = _round()
    bits = fb.spec_info.tree_bits
    fa3_tree._STATIC_BACKENDS.clear()
    fa3_tree.init_cuda_graph_state(lambda *a, **kw: None, backend, 4, 4 * fb.spec_info.draft_token_num)
    try:
        static = getattr(backend, fa3_tree.STATIC_BITS)
        assert static.shape == (4 * fb.spec_info.draft_token_num, 1) and static.dtype == torch.int32
        assert fa3_tree.static_bit_buffers() == [static]
        fb.spec_info.tree_bits, fb.spec_info.draft_token = None, None  # the runner's dummy
        static[: bits.shape[0]] = bits  # what the worker's round_tree_bits left there
        out = fa3_tree.forward_extend(_upstream, backend, q, k, v, layer, fb, True)
        assert torch.allclose(out.view(-1, HQ, D).double(), ref, atol=1e-5)
        fb.spec_info.draft_token = torch.zeros(q.shape[0], dtype=torch.int64)  # a real round without bits
        assert fa3_tree.forward_extend(_upstream, backend, q, k, v, layer, fb, True) == "upstream"
    finally:
        fa3_tree._STATIC_BACKENDS.clear()


def test_round_tree_bits_writes_the_active_backends_static_buffers(fused_on):
    g = torch.Generator().manual_seed(5)
    lp, ids = torch.log_softmax(torch.randn(2, 3, 6, generator=g), -1).topk(2, dim=-1)
    tree = build_tree(lp, ids, 4, backend="torch")
    cfg = types.SimpleNamespace(max_depth=3)
    parts = [_Backend(None, None, 5), _Backend(None, None, 5)]  # a hybrid backend's decode and prefill halves
    other_width = _Backend(None, None, 40)  # budget auto: another bucket's backend (40 rows: 2 bit words)
    hybrid = types.SimpleNamespace(decode_backend=parts[0], prefill_backend=parts[1])
    fa3_tree._STATIC_BACKENDS.clear()
    try:
        for b in parts + [other_width]:
            fa3_tree.init_cuda_graph_state(lambda *a, **kw: None, b, 8, 80)
        statics = fa3_tree.static_bit_buffers()
        for s in statics:
            s.fill_(-1)
        bits = fa3_tree.round_tree_bits(tree, cfg, hybrid)
        want = ancestor_bits(tree.parents, 3)
        assert torch.equal(bits, want) and bits.data_ptr() == statics[0].data_ptr()
        for s in statics[:2]:
            assert torch.equal(s[:10], want) and bool((s[10:] == -1).all())
        assert bool((statics[2] == -1).all())  # not the active width's buffer: untouched
        assert torch.equal(fa3_tree.round_tree_bits(tree, cfg, parts[1]), want)
        assert bits.data_ptr() != fa3_tree.round_tree_bits(tree, cfg, other_width).data_ptr()  # words differ
    finally:
        fa3_tree._STATIC_BACKENDS.clear()
    # without graph state: a fresh tensor
    assert torch.equal(fa3_tree.round_tree_bits(tree, cfg), ancestor_bits(tree.parents, 3))


def test_no_static_buffer_for_backends_that_keep_upstreams_path(fused_on, monkeypatch):
    drafter = _Backend(None, None, 4)
    drafter.topk = 1  # the drafter's view of the server args: topk 1, no cascade
    fa3_tree.init_cuda_graph_state(lambda *a, **kw: None, drafter, 8, 32)
    monkeypatch.setenv(fa3_tree.ENV, "0")
    target = _Backend(None, None, 5)
    fa3_tree.init_cuda_graph_state(lambda *a, **kw: None, target, 8, 40)
    assert not hasattr(drafter, fa3_tree.STATIC_BITS) and not hasattr(target, fa3_tree.STATIC_BITS)
    assert fa3_tree.static_bit_buffers() == []


def test_the_switch(monkeypatch):
    """Unset: on where the release carries the path (the cascade elsewhere); 1 on, 0 off."""
    from sglang_ddtree.compat import adapter

    monkeypatch.delenv(fa3_tree.ENV, raising=False)
    supported = fa3_tree.ENV not in adapter().refused_features()
    assert fa3_tree.enabled() is supported and fa3_tree.release_supported() is supported
    assert fa3_tree.explicitly_enabled() is False
    monkeypatch.setattr(type(adapter()), "refused_features", lambda self: {fa3_tree.ENV: "changed upstream"})
    assert fa3_tree.enabled() is False and fa3_tree.explicitly_enabled() is False
    monkeypatch.setenv(fa3_tree.ENV, "0")
    assert fa3_tree.enabled() is False and hooks.fa3_hook_targets() == {}
    monkeypatch.setenv(fa3_tree.ENV, "1")
    assert fa3_tree.enabled() is True and fa3_tree.explicitly_enabled() is True
    monkeypatch.setattr("sglang_ddtree.backends.fa3_library_installed", lambda: False)
    assert hooks.fa3_hook_targets() == {}  # no FA3 library: nothing to hook
    monkeypatch.setattr("sglang_ddtree.backends.fa3_library_installed", lambda: True)
    assert hooks.fa3_hook_targets() == hooks.FA3_HOOK_TARGETS and len(hooks.FA3_HOOK_TARGETS) == 3
    monkeypatch.setenv(fa3_tree.ENV, "yes")
    with pytest.raises(ValueError, match=f"{fa3_tree.ENV}='yes': use 1 .* or 0"):
        fa3_tree.enabled()


def test_graph_metadata_of_a_ddtree_verify_is_the_prefix_half_only(fused_on, monkeypatch):
    """The replay metadata the fused path needs (upstream's first half: prefix lengths, their cumsum, the page
    table), without the expand half; then the verify through it equals attention over prefix + ancestors.
    Anything else (a DFLASH verify, a decode) goes to upstream's function."""
    backend, layer, q, k, v, fb, ref = _round(bs=3, budget=9, topk=3, depth=4, prefix=(1, 5, 2), seed=3)
    want = backend.forward_metadata
    bs, width = want.page_table.shape
    backend.req_to_token = torch.zeros(8, width + 4, dtype=torch.int32)
    rpi = torch.tensor([5, 2, 7])
    backend.req_to_token[rpi, :width] = want.page_table.to(torch.int32)
    backend.max_context_len, backend.has_swa = 4096, False
    captured = types.SimpleNamespace(
        cache_seqlens_int32=torch.zeros(4, dtype=torch.int32), cu_seqlens_k=torch.zeros(5, dtype=torch.int32),
        page_table=torch.zeros(4, width + 4, dtype=torch.int32), cu_seqlens_q=want.cu_seqlens_q,
        max_seq_len_q=want.max_seq_len_q, swa_out_cache_loc=None, max_seq_len_k=None)
    views = types.SimpleNamespace(cache_seqlens_int32=captured.cache_seqlens_int32[:bs],
                                  cu_seqlens_k=captured.cu_seqlens_k[: bs + 1], page_table=captured.page_table[:bs],
                                  cu_seqlens_q=want.cu_seqlens_q, max_seq_len_q=want.max_seq_len_q,
                                  swa_out_cache_loc=None, max_seq_len_k=None)
    backend.target_verify_metadata_topk_normal = {bs: views}
    backend.forward_metadata, backend.forward_metadata_spec_decode_expand = None, "stale"

    def page_table_reference(*, req_to_token, req_pool_indices, cache_seqlens, page_table, page_size):
        assert page_size == 1
        for b, (r, n) in enumerate(zip(req_pool_indices.tolist(), cache_seqlens.tolist())):
            page_table[b, :n] = req_to_token[r, :n]

    from sglang_ddtree.compat import adapter

    monkeypatch.setattr(type(adapter()), "build_trtllm_mha_page_table",
                        lambda self, **kwargs: page_table_reference(**kwargs))  # upstream's builds it on the GPU
    verify = types.SimpleNamespace(is_target_verify=lambda: True)
    seq_lens = torch.tensor([1, 5, 2, 99])  # padded to a captured size: the row past bs is not read
    assert fa3_tree.apply_cuda_graph_metadata(_upstream, backend, bs, torch.cat([rpi, rpi[:1]]), seq_lens, 8, None,
                                              verify, fb.spec_info, None) is None
    assert backend.forward_metadata is views and backend.forward_metadata_spec_decode_expand is None
    assert captured.cache_seqlens_int32.tolist() == [1, 5, 2, 0]
    assert captured.cu_seqlens_k.tolist() == [0, 1, 6, 8, 0] and views.max_seq_len_k == 4096
    out = fa3_tree.forward_extend(_upstream, backend, q, k, v, layer, fb, True)
    assert torch.allclose(out.view(-1, HQ, D).double(), ref, atol=1e-5)
    # a layer the fused path cannot take, on this metadata: a clear error, not upstream's cascade on None
    with pytest.raises(RuntimeError, match=f"layer 0 cannot take fa3's fused tree attention.*{fa3_tree.ENV}=0"):
        fa3_tree.forward_extend(_upstream, backend, q, k, v, _layer(logit_cap=30.0), fb, True)
    # not a DDTREE verify: upstream's metadata
    other = types.SimpleNamespace(tree_bits=None)
    assert fa3_tree.apply_cuda_graph_metadata(_upstream, backend, bs, rpi, seq_lens, 8, None, verify, other,
                                              None) == "upstream"
    decode = types.SimpleNamespace(is_target_verify=lambda: False)
    assert fa3_tree.apply_cuda_graph_metadata(_upstream, backend, bs, rpi, seq_lens, 8, None, decode,
                                              fb.spec_info, None) == "upstream"


def test_the_topologys_bits_are_the_fused_paths_ancestor_bits():
    """A tree round's bits come from its verify topology (``bits_out``), a chain-shaped round's from
    ``ancestor_bits``: the same words for every tree (pads, several words, depth-limited trees)."""
    from sglang_ddtree.tree import build_verify_topology
    from sglang_ddtree.worker.tree_attention import ancestor_bits_torch

    g = torch.Generator().manual_seed(11)
    for bs, depth, k, budget in ((1, 3, 2, 4), (2, 5, 3, 31), (3, 15, 8, 63), (2, 15, 8, 100)):
        lp, ids = torch.log_softmax(torch.randn(bs, depth, 16, generator=g), -1).topk(k, dim=-1)
        tree = build_tree(lp, ids, budget, backend="torch")
        n = tree.num_rows
        out = torch.full((bs * n, (n + 31) // 32), -1, dtype=torch.int32)
        topo = build_verify_topology(tree, torch.randint(0, 50, (bs,), generator=g), None, with_tree_mask=False,
                                     bits_out=out, backend="torch")
        assert topo.tree_bits.data_ptr() == out.data_ptr()
        assert torch.equal(out, ancestor_bits_torch(tree.parents, depth)), (bs, depth, budget)
