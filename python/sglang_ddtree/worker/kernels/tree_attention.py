"""The tree part of DDTREE's target verify on the fa3 backend, fused with the merge into the prefix part.

Row i of request b attends to the committed prefix (one FlashAttention call upstream: o_prefix and its
LSE) and to its ancestors among the N tree rows, itself included. Upstream computes the tree part as a
second FlashAttention call with every row its own length-1 sequence, then merges (3.9 ms per round at 512
rows on the H200, a causal verify of the same rows takes 0.55 ms). Here:
  ancestor_bits_kernel (grid (request, BLOCK_R-row block)): each row's ancestor set packed in int32 words;
  tree_attention_merge_kernel (grid (BLOCK_M-row block, request, kv head x head group)): the GB query heads
         of one kv head that share its K/V tiles, BLOCK_M rows each (GB * BLOCK_M query rows per program),
         online softmax over the key tiles up to the block's last row (a parent row is below its child),
         then the LSE merge with the prefix part. No host sync, CUDA-graph capturable.
"""

import triton
import triton.language as tl

# Bits per word of the packed ancestor mask.
BITS_PER_WORD = tl.constexpr(32)
LOG2E = tl.constexpr(1.4426950408889634)
# The running max starts finite: a row none of whose keys in a tile is visible gets p = 0 and alpha = 1
# instead of exp(-inf - -inf) = NaN (pads see only themselves, far from key tile 0).
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit(do_not_specialize=["max_depth"])
def ancestor_bits_kernel(
    parents_ptr,  # [bs, N] int32/int64: parent row; -1 for the root and for pads
    stride_pb,  # parents.stride(0)
    out_ptr,  # [>= bs*N, NW] int32 out: row b*N + i, bit j % 32 of word j // 32 = "j is i or an ancestor"
    stride_ot,  # out.stride(0)
    num_rows,  # N
    num_words,  # NW = cdiv(N, 32)
    max_depth,  # hops walked from each row
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_W: tl.constexpr,  # next_pow2(NW)
):
    b = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = i < num_rows
    w = tl.arange(0, BLOCK_W)
    one = tl.full([BLOCK_R, BLOCK_W], 1, tl.int32)
    bits = tl.zeros([BLOCK_R, BLOCK_W], dtype=tl.int32)
    cur = tl.where(row_ok, i, -1)  # the row itself, then its ancestors; -1 once past the root
    for _ in range(max_depth + 1):
        live = cur >= 0
        safe = tl.where(live, cur, 0)
        hit = (w[None, :] == (safe // BITS_PER_WORD)[:, None]) & live[:, None]
        bits = bits | tl.where(hit, one << (safe % BITS_PER_WORD)[:, None], 0)
        cur = tl.load(parents_ptr + b * stride_pb + safe, mask=live, other=-1).to(tl.int32)
    t = b * num_rows + i
    tl.store(out_ptr + t[:, None] * stride_ot + w[None, :], bits, mask=row_ok[:, None] & (w[None, :] < num_words))


@triton.jit(do_not_specialize=["stride_lh", "stride_lt"])
def tree_attention_merge_kernel(
    q_ptr,  # [T, Hq, D] T = bs*N, row b*N + i
    k_ptr,  # [T, Hkv, D] the tree rows' keys
    v_ptr,  # [T, Hkv, D] the tree rows' values
    bits_ptr,  # [T, NW] int32: ancestor_bits_kernel's output
    op_ptr,  # [T, Hq, D] prefix-only attention output (may be out_ptr's tensor)
    lse_ptr,  # [Hq, T] float32 natural-log LSE of the scaled prefix scores; -inf = empty prefix
    out_ptr,  # [T, Hq, D] out, q's dtype
    stride_qt, stride_qh,
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_bt,
    stride_ot_p, stride_oh_p,
    stride_lh, stride_lt,
    stride_ot, stride_oh,
    num_rows,  # N
    num_words,  # NW
    group,  # G = Hq // Hkv
    groups_per_kv,  # cdiv(G, GB)
    sm_scale,
    HEAD_DIM: tl.constexpr,  # D
    GB: tl.constexpr,  # query heads per program (power of two)
    BLOCK_M: tl.constexpr,  # tree rows per program
    BLOCK_N: tl.constexpr,  # keys per tile, a multiple of 32
    DOT_F32: tl.constexpr,  # float32 dots, full precision (no TF32): fp32 inputs, or bf16 interpreted
):
    n_m = tl.cdiv(num_rows, BLOCK_M)
    pid_m = n_m - 1 - tl.program_id(0)  # the blocks with the most keys start first
    b = tl.program_id(1).to(tl.int64)
    z = tl.program_id(2)
    kvh = z // groups_per_kv
    # Query row m of the program: tree row i = pid_m * BLOCK_M + m // GB, head g0 + m % GB of kv head kvh.
    m = tl.arange(0, BLOCK_M * GB)
    i = pid_m * BLOCK_M + m // GB
    g = (z % groups_per_kv) * GB + m % GB
    row_ok = (i < num_rows) & (g < group)
    qh = kvh * group + g
    t = b * num_rows + i
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + t[:, None] * stride_qt + qh[:, None] * stride_qh + d[None, :], mask=row_ok[:, None],
                other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M * GB], NEG_BIG, tl.float32)  # running max of the base-2 scores
    l_i = tl.zeros([BLOCK_M * GB], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M * GB, HEAD_DIM], dtype=tl.float32)
    hi = tl.minimum(num_rows, (pid_m + 1) * BLOCK_M)  # keys past the block's last row are no ancestors
    jl = tl.arange(0, BLOCK_N)
    for n0 in range(0, hi, BLOCK_N):
        j = n0 + jl
        key_ok = j < hi
        kt = b * num_rows + j
        k = tl.load(k_ptr + kt[:, None] * stride_kt + kvh * stride_kh + d[None, :], mask=key_ok[:, None], other=0.0)
        v = tl.load(v_ptr + kt[:, None] * stride_vt + kvh * stride_vh + d[None, :], mask=key_ok[:, None], other=0.0)
        if DOT_F32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        # The words of keys n0 .. n0 + BLOCK_N - 1, one per 32 keys, spread over the tile's columns.
        word = tl.zeros([BLOCK_M * GB, BLOCK_N], dtype=tl.int32)
        for wi in tl.static_range(BLOCK_N // BITS_PER_WORD):
            wcol = n0 // BITS_PER_WORD + wi
            wv = tl.load(bits_ptr + t * stride_bt + wcol, mask=row_ok & (wcol < num_words), other=0)
            word = tl.where((jl // BITS_PER_WORD == wi)[None, :], wv[:, None], word)
        visible = ((word >> (jl % BITS_PER_WORD)[None, :]) & 1) != 0
        visible = (visible | (j[None, :] == i[:, None])) & (j[None, :] <= i[:, None]) & key_ok[None, :]
        if DOT_F32:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k))
        s = tl.where(visible, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DOT_F32:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    # Merge in base 2: the tree part's LSE is m_i + log2(l_i) (l_i >= 1 on real rows: the diagonal).
    l_safe = tl.where(row_ok, l_i, 1.0)
    lse_t = m_i + tl.log2(l_safe)
    lse_p = tl.load(lse_ptr + qh * stride_lh + t * stride_lt, mask=row_ok, other=float("-inf")) * LOG2E
    big = tl.maximum(lse_p, lse_t)
    w_p = tl.exp2(lse_p - big)
    w_t = tl.exp2(lse_t - big)
    o_p = tl.load(op_ptr + t[:, None] * stride_ot_p + qh[:, None] * stride_oh_p + d[None, :], mask=row_ok[:, None],
                  other=0.0).to(tl.float32)
    o = (w_p[:, None] * o_p + (w_t / l_safe)[:, None] * acc) / (w_p + w_t)[:, None]
    tl.store(out_ptr + t[:, None] * stride_ot + qh[:, None] * stride_oh + d[None, :], o.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])
