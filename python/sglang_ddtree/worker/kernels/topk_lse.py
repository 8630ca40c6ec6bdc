"""Top-K and logsumexp of each row of the draft head's logits, reading the (bf16) logits once.

The draft head needs, for every block position, the K largest logits with their token ids and the row's
logsumexp (log-prob = logit - logsumexp). In PyTorch that is an fp32 copy of the [T, V] logits, a radix
top-K over it and a logsumexp that materialises exp(x - max): at the Qwen3-8B shape, batch 32, the draft
phase spent 1.9 ms more GPU time per round than DFLASH's argmax (H200 profile). Here:
  pass 1 (grid T x ceil(V / BLOCK)): each program takes one BLOCK-wide slice of a row: its max, its sum of
         exp(x - max) (float32), and its top-K (K rounds of max, lowest index among equals);
  pass 2 (grid T): merges the row's slices: top-K of the ceil(V / BLOCK) * K candidates (equal values: the
         lower slice, then the earlier pick, i.e. the lower token id) and logsumexp = M + log(sum z_s
         exp(m_s - M)).
Values are the logits' own (bf16 widened exactly to float32); no host sync, CUDA-graph capturable.

Session 18 measured pass 1 at 349 us of a c 32 round at the Qwen3-8B shape, about ten reads of its logits:
reductions (2K + 2 per program), not memory. A packed-key form of pass 1 (each logit and its column in one int64
key, one max per pick: K + 1 reductions) was measured slower on the H200 and removed: session 20
(``benchmark/results/session20/topk_lse.json``, block 4096 x 8 warps, us per launch, packed vs this form):
65.3 vs 68.3 at 15 rows, but 165.5 vs 120.2 at 120, 274.8 vs 203.2 at 224 and 310.2 vs 210.0 at 256 rows
(35-48 % slower). ``benchmark/bench_topk_lse.py`` times the launch configurations.

A threshold form skips most slices' K rounds (``draft_head.topk_lse(..., select="threshold")``; the draft head
takes it at every row count, in slices of 2048 columns, where the H200 measured it faster): a row's
top-K all lie in slices whose max reaches tau, the K-th largest slice max (K slices hold an element >= tau, so an
element below tau has K larger ones; ties at tau qualify), and at V / BLOCK = 38 slices and K = 8 about K of them
do:
  stats     (grid T x S): each slice's max and sum of exp(x - max), 2 reductions;
  threshold (grid T): tau per row from its S slice maxima;
  select    (grid T x S): a slice whose max reaches tau takes its top-K as pass 1 does; any other writes -inf
            candidates and stops;
  merge     as above (the -inf candidates never win: K others are >= tau > them).
Same values, ids and tie order as pass 1, since every candidate that can be in the top-K is still produced.
"""

import triton
import triton.language as tl


@triton.jit
def _load_slice(logits_ptr, t, stride_row, vocab, s, BLOCK: tl.constexpr):
    """Slice s of row t as float32 (-inf past the vocabulary)."""
    cols = tl.arange(0, BLOCK)
    col0 = s * BLOCK
    x = tl.load(logits_ptr + t * stride_row + col0 + cols, mask=col0 + cols < vocab, other=float("-inf"))
    return x.to(tl.float32)


@triton.jit
def _store_slice_topk(x, s, out, slice_val_ptr, slice_idx_ptr, K: tl.constexpr, BLOCK: tl.constexpr):
    """The slice's K largest values (K rounds of max, lowest column among equals) and their token ids at
    candidate row ``out``."""
    cols = tl.arange(0, BLOCK)
    for j in tl.static_range(K):
        v = tl.max(x, axis=0)
        i = tl.min(tl.where(x == v, cols, BLOCK), axis=0)
        tl.store(slice_val_ptr + out * K + j, v)
        tl.store(slice_idx_ptr + out * K + j, (s * BLOCK + i).to(tl.int64))
        x = tl.where(cols == i, float("-inf"), x)


@triton.jit(do_not_specialize=["vocab"])
def topk_lse_slices_kernel(
    logits_ptr,  # [T, V] any float dtype
    stride_row,
    vocab,  # V
    slice_val_ptr,  # [T, S, K] float32 out
    slice_idx_ptr,  # [T, S, K] int64 out (token ids within the row)
    slice_max_ptr,  # [T, S] float32 out
    slice_sum_ptr,  # [T, S] float32 out: sum of exp(x - slice max)
    num_slices,  # S
    K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    x = _load_slice(logits_ptr, t, stride_row, vocab, s, BLOCK)
    m = tl.max(x, axis=0)
    z = tl.sum(tl.exp(x - m), axis=0)
    out = (t * num_slices + s)
    tl.store(slice_max_ptr + out, m)
    tl.store(slice_sum_ptr + out, z)
    _store_slice_topk(x, s, out, slice_val_ptr, slice_idx_ptr, K, BLOCK)


@triton.jit
def topk_lse_merge_kernel(
    slice_val_ptr,  # [T, S, K] float32
    slice_idx_ptr,  # [T, S, K] int64
    slice_max_ptr,  # [T, S] float32
    slice_sum_ptr,  # [T, S] float32
    out_val_ptr,  # [T, K] float32 out: top-K logits, descending
    out_idx_ptr,  # [T, K] int64 out
    out_lse_ptr,  # [T] float32 out
    num_slices,  # S
    K: tl.constexpr,
    BLOCK_C: tl.constexpr,  # next_pow2(S * K)
    BLOCK_S: tl.constexpr,  # next_pow2(S)
):
    t = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_C)
    n_cand = num_slices * K
    vals = tl.load(slice_val_ptr + t * n_cand + c, mask=c < n_cand, other=float("-inf"))
    for j in tl.static_range(K):
        v = tl.max(vals, axis=0)
        p = tl.min(tl.where(vals == v, c, BLOCK_C), axis=0)
        tl.store(out_val_ptr + t * K + j, v)
        tl.store(out_idx_ptr + t * K + j, tl.load(slice_idx_ptr + t * n_cand + p))
        vals = tl.where(c == p, float("-inf"), vals)
    s = tl.arange(0, BLOCK_S)
    ms = tl.load(slice_max_ptr + t * num_slices + s, mask=s < num_slices, other=float("-inf"))
    zs = tl.load(slice_sum_ptr + t * num_slices + s, mask=s < num_slices, other=0.0)
    big = tl.max(ms, axis=0)
    total = tl.sum(tl.where(s < num_slices, zs * tl.exp(ms - big), 0.0), axis=0)
    tl.store(out_lse_ptr + t, big + tl.log(total))


@triton.jit(do_not_specialize=["vocab"])
def topk_lse_stats_kernel(
    logits_ptr,  # [T, V] any float dtype
    stride_row,
    vocab,  # V
    slice_max_ptr,  # [T, S] float32 out
    slice_sum_ptr,  # [T, S] float32 out: sum of exp(x - slice max)
    num_slices,  # S
    BLOCK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    x = _load_slice(logits_ptr, t, stride_row, vocab, s, BLOCK)
    m = tl.max(x, axis=0)
    out = t * num_slices + s
    tl.store(slice_max_ptr + out, m)
    tl.store(slice_sum_ptr + out, tl.sum(tl.exp(x - m), axis=0))


@triton.jit
def topk_lse_threshold_kernel(
    slice_max_ptr,  # [T, S] float32
    thresh_ptr,  # [T] float32 out: the K-th largest slice max (-inf when S < K)
    num_slices,  # S
    K: tl.constexpr,
    BLOCK_S: tl.constexpr,  # next_pow2(S)
):
    t = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    ms = tl.load(slice_max_ptr + t * num_slices + s, mask=s < num_slices, other=float("-inf"))
    for _ in tl.static_range(K):  # K rounds: the last max taken is the K-th largest, counting repeats
        v = tl.max(ms, axis=0)
        i = tl.min(tl.where(ms == v, s, BLOCK_S), axis=0)
        ms = tl.where(s == i, float("-inf"), ms)
    tl.store(thresh_ptr + t, v)


@triton.jit(do_not_specialize=["vocab"])
def topk_lse_select_kernel(
    logits_ptr,  # [T, V] any float dtype
    stride_row,
    vocab,  # V
    slice_max_ptr,  # [T, S] float32
    thresh_ptr,  # [T] float32
    slice_val_ptr,  # [T, S, K] float32 out
    slice_idx_ptr,  # [T, S, K] int64 out (token ids within the row)
    num_slices,  # S
    K: tl.constexpr,
    BLOCK: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    out = t * num_slices + s
    if tl.load(slice_max_ptr + out) >= tl.load(thresh_ptr + t):
        _store_slice_topk(_load_slice(logits_ptr, t, stride_row, vocab, s, BLOCK), s, out, slice_val_ptr,
                          slice_idx_ptr, K, BLOCK)
    else:
        for j in tl.static_range(K):
            tl.store(slice_val_ptr + out * K + j, float("-inf"))
            tl.store(slice_idx_ptr + out * K + j, (s * BLOCK).to(tl.int64))
