"""DDTREE's host-sync-free flashinfer plan (``worker/flashinfer_plan.py``) gives the attention upstream's plan()
gives, on FlashInfer itself (GPU; FlashInfer 0.6.14, SGLang 0.5.16's pin):

- a CUDA-graph-mode paged prefill wrapper with a tree mask, as SGLang builds its target-verify wrappers, planned
  once by upstream's ``plan()`` (exact lengths) and once by ``flashinfer_plan.plan`` (host UPPER BOUNDS of the key
  counts, as a DDTREE round has them: a request whose host length lags, a graph pad row at the fill value): both
  outputs equal float32 masked attention over the same keys, and each other up to split-KV rounding;
- the same inside a captured CUDA graph: captured after upstream's plan at other lengths, replayed after ours;
- the comparison can fail: a mask packed big-endian leaves the reference.

End-to-end greedy parity with the switch on (``dd_flashinfer_*_fiplan``) runs through
``scripts/device/ddtree_parity.py`` (``scripts/device/issue14.sh fiplan``).
"""

import types

import pytest
import torch

pytestmark = pytest.mark.gpu

N, HEADS, KV_HEADS, HEAD_DIM = 16, 32, 8, 128
POOL, ROW = 16384, 1024


def _flashinfer():
    fi = pytest.importorskip("flashinfer")
    from sglang_ddtree.worker import flashinfer_plan as fp

    if not fp.flashinfer_tested():
        pytest.skip(f"flashinfer {fp.installed_flashinfer()} is not one the plan was written against "
                    f"({fp.TESTED_FLASHINFER})")
    return fi, fp


class _Spec:
    """Upstream's DFLASH verify-input arguments for FlashInfer (``generate_attn_arg_prefill``): N rows per
    request over prefix + N keys, KV indices gathered from req_to_token, and the FULL_MASK."""

    def __init__(self, mask_rows):
        self.draft_token_num, self.mask_rows = N, mask_rows

    def generate_attn_arg_prefill(self, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, req_to_token):
        dev = paged_kernel_lens.device
        kv_lens = paged_kernel_lens.to(torch.int32) + N
        kv_indptr = torch.zeros(len(kv_lens) + 1, dtype=torch.int32, device=dev)
        kv_indptr[1:] = torch.cumsum(kv_lens, 0)
        qo_indptr = torch.arange(0, (len(kv_lens) + 1) * N, N, dtype=torch.int32, device=dev)
        kv_indices = torch.cat([req_to_token[r, :int(n)] for r, n in zip(req_pool_indices.tolist(), kv_lens.tolist())])
        mask = torch.cat([m.reshape(-1) for m in self.mask_rows])
        return kv_indices.to(torch.int32), kv_indptr, qo_indptr, mask


def _round(prefix, seed):
    """KV cache, req_to_token, queries and per-request [N, prefix + N] masks (prefix columns all kept, the tree
    part a random ancestor set with the diagonal), as a DDTREE verify sees them."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    bs = len(prefix)
    k = torch.randn(POOL, 1, KV_HEADS, HEAD_DIM, device="cuda", generator=g).to(torch.bfloat16)
    v = torch.randn(POOL, 1, KV_HEADS, HEAD_DIM, device="cuda", generator=g).to(torch.bfloat16)
    req_to_token = torch.randperm(POOL - 1, device="cuda", generator=g)[: 8 * ROW].view(8, ROW).to(torch.int32) + 1
    q = torch.randn(bs * N, HEADS, HEAD_DIM, device="cuda", generator=g).to(torch.bfloat16)
    masks = []
    for p in prefix:
        tree = torch.rand(N, N, device="cuda", generator=g) < 0.4
        tree = torch.tril(tree) | torch.eye(N, dtype=torch.bool, device="cuda")
        masks.append(torch.cat([torch.ones(N, p, dtype=torch.bool, device="cuda"), tree], 1))
    return k, v, req_to_token, q, masks


def _reference(q, k, v, req_to_token, rpi, prefix, masks):
    out = torch.empty(q.shape, dtype=torch.float32, device="cuda")
    group = HEADS // KV_HEADS
    for b, (r, p) in enumerate(zip(rpi.tolist(), prefix)):
        slots = req_to_token[r, :p + N].long()
        kb = k[slots, 0].float().repeat_interleave(group, 1)  # [kv, H, D]
        vb = v[slots, 0].float().repeat_interleave(group, 1)
        qb = q[b * N:(b + 1) * N].float()  # [N, H, D]
        s = torch.einsum("qhd,khd->hqk", qb, kb) / HEAD_DIM ** 0.5
        s = s.masked_fill(~masks[b].unsqueeze(0), float("-inf"))
        out[b * N:(b + 1) * N] = torch.einsum("hqk,khd->qhd", s.softmax(-1), vb)
    return out


def _wrapper(fi, bs):
    ws = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    bufs = dict(qo_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device="cuda"),
                paged_kv_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device="cuda"),
                paged_kv_indices_buf=torch.zeros(POOL, dtype=torch.int32, device="cuda"),
                paged_kv_last_page_len_buf=torch.ones(bs, dtype=torch.int32, device="cuda"),
                custom_mask_buf=torch.zeros(1 << 20, dtype=torch.uint8, device="cuda"),
                mask_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device="cuda"))
    return fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=True, backend="fa2", **bufs)


def _updater():
    return types.SimpleNamespace(attn_backend=types.SimpleNamespace(dispatch_reason=None, page_size=1),
                                 kv_last_page_len=torch.ones(64, dtype=torch.int32, device="cuda"),
                                 num_qo_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM)


def _upstream_plan(w, spec, rpi, prefix_t, req_to_token):
    kv_indices, kv_indptr, qo_indptr, mask = spec.generate_attn_arg_prefill(rpi, prefix_t, int(prefix_t.sum()),
                                                                            req_to_token)
    w.plan(qo_indptr, kv_indptr, kv_indices, torch.ones(len(prefix_t), dtype=torch.int32, device="cuda"), HEADS,
           KV_HEADS, HEAD_DIM, 1, custom_mask=mask, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
           non_blocking=True)


def _ours(fp, w, spec, rpi, prefix_t, req_to_token, host):
    updater = _updater()
    updater.req_to_token = req_to_token
    assert fp.plan(updater, w, rpi, prefix_t, int(prefix_t.sum()), spec, host)


# prefix lengths on the device; the forward's host lengths (committed + N): one lagging the device by 10 (a round's
# commit not yet seen; the margin max(N, W) covers it), one exact, one above, one whose bound spans one KV chunk
# more than its true key count (bound 110 + 16 + 16 = 142 keys, true 116; FlashInfer picks chunks of 128 keys for
# these bounds), a pad row at the fill value 1. Session 22: without the work-list rewrite the fourth request's rows
# leave the reference (the merge read other rows' partial outputs).
PREFIX = [300, 17, 64, 100, 1]
HOST = torch.tensor([290 + N, 17 + N, 64 + N + 2, 110 + N, 1])
REAL = 4 * N  # rows of the real requests (the pad row's output is discarded, as the graph runner does)


def test_bounds_plan_the_attention_upstreams_plan_does():
    fi, fp = _flashinfer()
    k, v, req_to_token, q, masks = _round(PREFIX, seed=1)
    rpi, prefix_t = torch.tensor([3, 1, 6, 2, 0], device="cuda"), torch.tensor(PREFIX, device="cuda")
    ref = _reference(q, k, v, req_to_token, rpi, PREFIX, masks)
    spec = _Spec(masks)
    w = _wrapper(fi, len(PREFIX))
    _upstream_plan(w, spec, rpi, prefix_t, req_to_token)
    o_up = w.run(q, (k, v)).float()
    _ours(fp, w, spec, rpi, prefix_t, req_to_token, HOST)
    o_ours = w.run(q, (k, v)).float()
    torch.cuda.synchronize()
    assert (o_up[:REAL] - ref[:REAL]).abs().max() < 3e-2
    assert (o_ours[:REAL] - ref[:REAL]).abs().max() < 3e-2
    assert (o_ours[:REAL] - o_up[:REAL]).abs().max() < 2e-2


def test_a_captured_graph_replays_with_the_sync_free_plan():
    fi, fp = _flashinfer()
    k, v, req_to_token, q, masks = _round(PREFIX, seed=2)
    rpi, prefix_t = torch.tensor([3, 1, 6, 2, 0], device="cuda"), torch.tensor(PREFIX, device="cuda")
    w = _wrapper(fi, len(PREFIX))
    # capture as SGLang does: plan() with the capture's dummy lengths, then the run inside the graph
    cap_prefix = torch.tensor([1] * len(PREFIX), device="cuda")
    cap_masks = [torch.ones(N, 1 + N, dtype=torch.bool, device="cuda") for _ in PREFIX]
    _upstream_plan(w, _Spec(cap_masks), rpi, cap_prefix, req_to_token)
    q_static = q.clone()
    out = torch.empty_like(q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        w.run(q_static, (k, v), out=out)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w.run(q_static, (k, v), out=out)
    _ours(fp, w, _Spec(masks), rpi, prefix_t, req_to_token, HOST)
    graph.replay()
    torch.cuda.synchronize()
    ref = _reference(q, k, v, req_to_token, rpi, PREFIX, masks)
    assert (out.float()[:REAL] - ref[:REAL]).abs().max() < 3e-2


def _leaves(out, ref, tol=0.1):
    """Whether ``out`` left the reference: an element more than ``tol`` off, or NaN (session 23: the stale layout's
    merge read other rows' slots, NaN and 1e35 among them, and a NaN max compares false against any tolerance)."""
    diff = (out.float() - ref).abs()
    return bool(diff.isnan().any()) or diff.max().item() > tol


def test_the_comparison_catches_a_wrongly_packed_mask():
    """The checks above can fail: the same plan with each mask byte's bit order reversed (big-endian packing)
    attends to other keys, and the output leaves the reference."""
    fi, fp = _flashinfer()
    k, v, req_to_token, q, masks = _round(PREFIX, seed=3)
    rpi, prefix_t = torch.tensor([3, 1, 6, 2, 0], device="cuda"), torch.tensor(PREFIX, device="cuda")
    ref = _reference(q, k, v, req_to_token, rpi, PREFIX, masks)
    w = _wrapper(fi, len(PREFIX))
    _upstream_plan(w, _Spec(masks), rpi, prefix_t, req_to_token)
    _ours(fp, w, _Spec(masks), rpi, prefix_t, req_to_token, HOST)
    assert (w.run(q, (k, v)).float()[:REAL] - ref[:REAL]).abs().max() < 3e-2
    used = int(w._mask_indptr_buf[-1])
    table = torch.tensor([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=torch.uint8, device="cuda")
    w._custom_mask_buf[:used] = table[w._custom_mask_buf[:used].long()]
    assert _leaves(w.run(q, (k, v))[:REAL], ref[:REAL])


def test_without_the_work_list_rewrite_a_bound_one_chunk_long_leaves_the_reference(monkeypatch):
    """Session 22's bug, kept reproducible: with the schedule made from the bounds and NOT rewritten for the device
    key counts, the request whose bound spans one KV chunk more than its true count (the fourth) leaves the
    reference, in a captured graph as SGLang replays it; with the rewrite (the tests above) it does not."""
    fi, fp = _flashinfer()
    k, v, req_to_token, q, masks = _round(PREFIX, seed=4)
    rpi, prefix_t = torch.tensor([3, 1, 6, 2, 0], device="cuda"), torch.tensor(PREFIX, device="cuda")
    ref = _reference(q, k, v, req_to_token, rpi, PREFIX, masks)
    w = _wrapper(fi, len(PREFIX))
    cap_masks = [torch.ones(N, 1 + N, dtype=torch.bool, device="cuda") for _ in PREFIX]
    _upstream_plan(w, _Spec(cap_masks), rpi, torch.tensor([1] * len(PREFIX), device="cuda"), req_to_token)
    out = torch.empty_like(q)
    w.run(q, (k, v), out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w.run(q, (k, v), out=out)
    monkeypatch.setattr(fp, "rewrite_split_layout", lambda *args, **kwargs: None)
    _ours(fp, w, _Spec(masks), rpi, prefix_t, req_to_token, HOST)
    graph.replay()
    torch.cuda.synchronize()
    fourth = slice(3 * N, 4 * N)
    assert _leaves(out[fourth], ref[fourth])
    monkeypatch.undo()
    _ours(fp, w, _Spec(masks), rpi, prefix_t, req_to_token, HOST)
    graph.replay()
    torch.cuda.synchronize()
    assert (out.float()[:REAL] - ref[:REAL]).abs().max() < 3e-2
