"""Verify topology of a built tree: ancestor masks, positions and retrieve links, one pass.

Serves the verify step. Grid (request, block of rows): each program walks its rows' root paths through
``parents`` (at most max_depth hops), turns each path into 32-column bit words (an ancestor j sets bit
j % 32 of word j // 32: O(rows x words x depth) compares instead of O(rows x columns x depth)), then
expands the words into the compact ancestor mask and the FULL_MASK rows (prefix all True, then the
tree part). In the same column sweep it finds the retrieve links of its rows (first child: lowest
row whose parent is the row; next sibling: lowest later row with the same parent; pads have parent
-1 and no links), and it writes positions and retrieve_index. With WRITE_BITS it also writes the ancestor bit
words themselves ([bs*N, NW] int32, fa3's fused tree attention reads them), the same words the sweep
builds for the compact tree mask: the round needs no launch of its own for them.

FULL_MASK rows are written as 16-byte-aligned int32 words (4 per 16 bytes, so ``st.global.v4`` when
the buffer is 16-byte aligned), and only the up-to-15-byte edges of each row part (prefix, tree) byte
by byte. A tree word is a nibble of the row's ancestor bits shifted to the word's alignment, spread to
one 0/1 byte per bit (``_spread_nibbles``).
"""

import triton
import triton.language as tl

_NO_ROW = tl.constexpr(2147483647)  # int32 max (2**31 - 1): "no row found" in the link min-reductions (N < 2**31)
_ONES_WORD = tl.constexpr(0x01010101)  # an int32 word of four True (0x01) mask bytes


@triton.jit
def _or(a, b):
    return a | b


@triton.jit
def _spread_nibbles(bits, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    """[R, W] int32 bit words -> [R, 8 * W] int32 mask words: byte k of word 8 * w + i = bit 4 * i + k of
    bits[:, w], as 0/1 (little-endian: byte k is the k-th column of the word)."""
    ns = tl.arange(0, 8)
    nib = tl.reshape((bits[:, :, None] >> (4 * ns)[None, None, :]) & 15, [BLOCK_R, 8 * BLOCK_W])
    return (nib * 0x204081) & _ONES_WORD  # bit k of a nibble lands on bit 8 * k (no carries)


@triton.jit
def _edge_columns(head, groups, length, rmask):
    """The columns of a row part of ``length`` bytes that no aligned word covers: the head
    [0, min(head, length)) and the tail [head + 16 * groups, length), < 16 each. Shape: head / groups
    [R] int64 -> columns [R, 32] int64 (head in 0..15, tail in 16..31), store mask [R, 32]."""
    es = tl.arange(0, 32)
    k = (es & 15)[None, :]
    col = tl.where(es[None, :] < 16, k, (head + 16 * groups)[:, None] + k)
    m = rmask[:, None] & (col < length) & ((es[None, :] >= 16) | (col < head[:, None]))
    return col, m


@triton.jit
def _row_bits(path_word, path_bit, word):
    """[R] int32: bit word ``word`` [R] (columns 32 * word ..) of each row's ancestor bits."""
    return tl.reduce(tl.where(path_word == word[:, None], path_bit, 0), 1, _or)


@triton.jit
def _store_tree_edges(full_mask_ptr, t_start, t_head, t_groups, num_rows, rmask, path_word, path_bit):
    """The tree columns no aligned word covers, byte by byte: head columns (< 16) lie in bit word 0,
    the tail's 16 in words tw and tw + 1. Shape: t_start / t_head / t_groups [R] int64, path_* [R, L]."""
    t_col, t_m = _edge_columns(t_head, t_groups, num_rows, rmask)
    t_col32 = t_col.to(tl.int32)
    tw = ((t_head + 16 * t_groups) >> 5).to(tl.int32)  # [R]
    w_head = _row_bits(path_word, path_bit, tw * 0)
    w_lo = _row_bits(path_word, path_bit, tw)
    w_hi = _row_bits(path_word, path_bit, tw + 1)
    e_bits = tl.where((t_col32 >> 5) == tw[:, None], w_lo[:, None], w_hi[:, None])
    e_bits = tl.where(t_col32 < 16, w_head[:, None], e_bits)
    tl.store(full_mask_ptr + t_start[:, None] + t_col, ((e_bits >> (t_col32 & 31)) & 1) != 0, mask=t_m)


@triton.jit(do_not_specialize=["num_rows", "max_depth", "bits_stride", "num_words"])
def ddtree_topology_kernel(
    par_ptr,  # [bs, N] int64, parent row, -1 for root and pads
    dep_ptr,  # [bs, N] int64, depth
    seq_lens_ptr,  # [bs] int32/int64, prefix length (tokens already in the KV cache)
    positions_ptr,  # [bs * N] int64 out
    ridx_ptr,  # [bs, N] int64 out: retrieve_index
    rnext_ptr,  # [bs, N] int64 out: retrieve_next_token
    rsib_ptr,  # [bs, N] int64 out: retrieve_next_sibling
    tree_mask_ptr,  # [bs, N, N] bool out (if WRITE_TREE_MASK)
    full_mask_ptr,  # [seq_lens_sum * N + bs * N * N] bool out (if WRITE_FULL_MASK)
    bits_ptr,  # [bs * N, NW] int32 out (if WRITE_BITS): bit j % 32 of word j // 32 = j is the row or its ancestor
    num_rows,  # N
    max_depth,  # L - 1
    mask_mis,  # full_mask_ptr's address mod 16 (specialised: 0 lets the word stores be 16-byte vectors)
    bits_stride,  # bits_ptr's row stride (elements)
    num_words,  # NW = cdiv(N, 32)
    WRITE_TREE_MASK: tl.constexpr,
    WRITE_FULL_MASK: tl.constexpr,
    WRITE_BITS: tl.constexpr,
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_W: tl.constexpr,  # 32-column words per chunk (a chunk is 32 * BLOCK_W tree columns)
    BLOCK_PC: tl.constexpr,  # prefix columns per chunk
    BLOCK_L: tl.constexpr,  # next_pow2(max_depth + 1)
    BLOCK_S: tl.constexpr,  # requests per chunk of the seq_lens prefix sum
):
    BLOCK_C: tl.constexpr = 32 * BLOCK_W
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    rmask = rows < num_rows
    par_b = par_ptr + b * num_rows

    # Root path of every row: path[r, s] = s-th ancestor (s = 0: the row itself), -1 past the root.
    ls = tl.arange(0, BLOCK_L)
    cur = tl.where(rmask, rows, -1).to(tl.int32)
    path = tl.where(ls[None, :] == 0, cur[:, None], -1)  # [BLOCK_R, BLOCK_L] int32
    for s in range(1, max_depth + 1):
        cur = tl.load(par_b + cur, mask=cur >= 0, other=-1).to(tl.int32)
        path = tl.where(ls[None, :] == s, cur[:, None], path)
    path_word = path >> 5  # -1 (never a word) past the root
    path_bit = tl.full([BLOCK_R, BLOCK_L], 1, tl.int32) << (path & 31)

    seq = tl.load(seq_lens_ptr + b).to(tl.int64)
    dep = tl.load(dep_ptr + b * num_rows + rows, mask=rmask, other=0)
    tl.store(positions_ptr + b * num_rows + rows, seq + dep, mask=rmask)
    tl.store(ridx_ptr + b * num_rows + rows, b * num_rows + rows, mask=rmask)

    par_r = tl.load(par_b + rows, mask=rmask, other=-1)

    if WRITE_FULL_MASK:
        pre = tl.zeros([], dtype=tl.int64)
        for s0 in range(0, b, BLOCK_S):
            idx = s0 + tl.arange(0, BLOCK_S)
            pre += tl.sum(tl.load(seq_lens_ptr + idx, mask=idx < b, other=0).to(tl.int64), axis=0)
        width = seq + num_rows
        row_base = num_rows * pre + b * num_rows * num_rows + rows * width  # [BLOCK_R]
        # Word u of word_ptr covers bytes [4u - mask_mis, 4u - mask_mis + 4) of full_mask_ptr; a row part
        # starting at byte s has head = bytes to the next 16-byte boundary, then whole 16-byte groups.
        word_ptr = (full_mask_ptr.to(tl.pointer_type(tl.int8)) - mask_mis).to(tl.pointer_type(tl.int32))
        t_start = row_base + seq  # [BLOCK_R] first tree byte
        t_head = (-(t_start + mask_mis)) & 15
        t_groups = tl.where(t_head <= num_rows, (num_rows - t_head) >> 4, 0)
        t_word0 = tl.multiple_of((t_start + mask_mis + t_head) >> 2, 4)
        # Prefix columns: all True.
        p_head = (-(row_base + mask_mis)) & 15
        p_groups = tl.where(p_head <= seq, (seq - p_head) >> 4, 0)
        p_word0 = tl.multiple_of((row_base + mask_mis + p_head) >> 2, 4)
        ones_w = tl.full([BLOCK_R, BLOCK_PC // 4], _ONES_WORD, tl.int32)
        for w0 in range(0, seq // 4, BLOCK_PC // 4):
            wc = w0 + tl.arange(0, BLOCK_PC // 4)
            pm = rmask[:, None] & ((wc // 4)[None, :] < p_groups[:, None])
            tl.store(word_ptr + p_word0[:, None] + wc[None, :], ones_w, mask=pm)
        p_col, p_m = _edge_columns(p_head, p_groups, seq, rmask)
        tl.store(full_mask_ptr + row_base[:, None] + p_col, p_col >= 0, mask=p_m)
        if not WRITE_TREE_MASK:  # here, before the sweep: 80 instead of 144 registers on sm_90
            _store_tree_edges(full_mask_ptr, t_start, t_head, t_groups, num_rows, rmask, path_word, path_bit)
        # Tree bits shifted by t_head: shifted bit q = column q + t_head (columns < t_head: edges).
        s_path = tl.where(path >= 0, path - t_head[:, None].to(tl.int32), -1)
        s_word = s_path >> 5  # -1 (never a word) before t_head and past the root
        s_bit = tl.full([BLOCK_R, BLOCK_L], 1, tl.int32) << (s_path & 31)

    # Column sweep in int32 (N < 2**31) to keep the [rows, columns] tiles light on registers.
    rows32 = rows.to(tl.int32)
    par_r32 = par_r.to(tl.int32)
    if WRITE_TREE_MASK:
        tree_row_ptr = tree_mask_ptr + b * num_rows * num_rows + rows * num_rows  # [BLOCK_R]
    ws = tl.arange(0, BLOCK_W)
    js = tl.arange(0, 32)
    first = tl.full([BLOCK_R], _NO_ROW, tl.int32)  # lowest child row
    sib = tl.full([BLOCK_R], _NO_ROW, tl.int32)  # lowest later row with the same parent
    for c0 in range(0, num_rows, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        cmask = cols < num_rows
        pc = tl.load(par_b + cols, mask=cmask, other=-1).to(tl.int32)
        child = pc[None, :] == rows32[:, None]
        first = tl.minimum(first, tl.min(tl.where(child, cols[None, :], _NO_ROW), axis=1))
        later = (pc[None, :] == par_r32[:, None]) & (par_r32[:, None] >= 0) & (cols[None, :] > rows32[:, None])
        sib = tl.minimum(sib, tl.min(tl.where(later, cols[None, :], _NO_ROW), axis=1))
        words = c0 // 32 + ws  # [BLOCK_W]
        if WRITE_TREE_MASK or WRITE_BITS:
            hit = path_word[:, None, :] == words[None, :, None]  # [R, W, L]
            bits = tl.reduce(tl.where(hit, path_bit[:, None, :], 0), 2, _or)  # [R, W] int32
        if WRITE_BITS:
            bm = rmask[:, None] & (words < num_words)[None, :]
            tl.store(bits_ptr + (b * num_rows + rows)[:, None] * bits_stride + words[None, :], bits, mask=bm)
        if WRITE_TREE_MASK:
            anc = ((bits[:, :, None] >> js[None, None, :]) & 1) != 0  # [R, W, 32]
            anc = tl.reshape(anc, [BLOCK_R, BLOCK_C])
            m = rmask[:, None] & cmask[None, :]
            tl.store(tree_row_ptr[:, None] + cols[None, :], anc, mask=m)
        if WRITE_FULL_MASK:  # the 8 * BLOCK_W words of shifted columns [c0, c0 + BLOCK_C)
            s_hit = s_word[:, None, :] == words[None, :, None]  # [R, W, L]
            s_bits = tl.reduce(tl.where(s_hit, s_bit[:, None, :], 0), 2, _or)  # [R, W] int32
            wc = c0 // 4 + tl.arange(0, 8 * BLOCK_W)
            wm = rmask[:, None] & ((wc // 4)[None, :] < t_groups[:, None])
            tl.store(word_ptr + t_word0[:, None] + wc[None, :], _spread_nibbles(s_bits, BLOCK_R, BLOCK_W), mask=wm)
    if WRITE_FULL_MASK and WRITE_TREE_MASK:  # here, not before the sweep: ptxas spilled there
        _store_tree_edges(full_mask_ptr, t_start, t_head, t_groups, num_rows, rmask, path_word, path_bit)
    tl.store(rnext_ptr + b * num_rows + rows, tl.where(first < num_rows, first, -1).to(tl.int64), mask=rmask)
    tl.store(rsib_ptr + b * num_rows + rows, tl.where(sib < num_rows, sib, -1).to(tl.int64), mask=rmask)
