"""Verify topology of a built tree: ancestor masks, positions and retrieve links, one launch.

Serves the verify step. Grid (request, block of rows, part). Part 0 walks its rows' root paths through
``parents`` (at most max_depth hops), writes positions and retrieve_index, finds the retrieve links in a
column sweep (first child: lowest row whose parent is the row; next sibling: lowest later row with the
same parent; pads have parent -1 and no links) and writes the tree columns of its mask rows. Parts >= 1
fill the all-True prefix columns of the FULL_MASK rows. Masks are bool bytes but written as 4-byte words
(0x01 per True byte) through an int32 view of the buffer: a row's path becomes a bit stream shifted
to the row's word alignment (tree column j -> bit j + a, a = the row's first tree byte mod 4), so each
word is a 4-bit nibble spread to bytes. Only words wholly inside one row are stored as words; the
partial words at a row's two ends are stored byte by byte, so no two programs ever write one word.
"""

import triton
import triton.language as tl


@triton.jit
def _or(a, b):
    return a | b


@triton.jit
def _word_ptr(mask_ptr, align):
    """int32 view of a byte buffer: word u covers bytes [4u - align, 4u - align + 4) of ``mask_ptr``."""
    return (mask_ptr.to(tl.pointer_type(tl.int8)) - align).to(tl.pointer_type(tl.int32))


@triton.jit
def _store_tree_columns(mask_ptr, align, row_start, seq, rmask, path, num_rows,
                        BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_L: tl.constexpr):
    """Mask row r = bytes [row_start[r], row_start[r] + seq + num_rows) of ``mask_ptr``: ``seq`` True
    prefix columns, then tree column j True iff j is on the row's root path ``path[r]``. Writes every
    byte of the row except the 4-byte words wholly inside the prefix (:func:`_store_prefix_words`).

    Bit stream S of a row: bit p = byte ts + p - a (ts = first tree byte, a = ts mod 4, in bytes from
    the 4-aligned base), i.e. bits p < a are prefix columns (True) and tree column j is bit j + a; the
    whole word u0 + t (u0 = ts // 4) is then nibble t of S, spread to one 0/1 per byte.
    """
    words_ptr = _word_ptr(mask_ptr, align)
    rs = row_start + align  # [BLOCK_R] int64: bytes from the aligned base
    ts = rs + seq
    re = ts + num_rows
    u_lo = (rs + 3) >> 2  # first whole word of the row
    u_hi = re >> 2  # end of the whole words
    u0 = ts >> 2
    a = (ts & 3).to(tl.int32)
    sp = tl.where(path >= 0, path + a[:, None], -1)  # [BLOCK_R, BLOCK_L] int32: bit of S per ancestor
    s_word = sp >> 5  # -1 (no word) past the root
    s_bit = tl.full([BLOCK_R, BLOCK_L], 1, tl.int32) << (sp & 31)
    low = (tl.full([BLOCK_R], 1, tl.int32) << a) - 1  # the prefix bits below a
    ws = tl.arange(0, BLOCK_W)
    ns = tl.arange(0, 8)
    for w0 in range(0, (num_rows + 34) // 32, BLOCK_W):  # S words (32 bits = 8 mask words each)
        words = w0 + ws  # [BLOCK_W]
        hit = s_word[:, None, :] == words[None, :, None]  # [R, W, L]
        bits = tl.reduce(tl.where(hit, s_bit[:, None, :], 0), 2, _or)  # [R, W] int32
        bits = bits | tl.where(words[None, :] == 0, low[:, None], 0)
        nib = (bits[:, :, None] >> (4 * ns)[None, None, :]) & 15  # [R, W, 8]
        val = (nib * 0x204081) & 0x01010101  # bit k of the nibble -> byte k
        u = u0[:, None, None] + (8 * words)[None, :, None] + ns[None, None, :]
        m = rmask[:, None, None] & (u >= u_lo[:, None, None]) & (u < u_hi[:, None, None])
        tl.store(words_ptr + u, val, mask=m)
    # The partial words at both ends of the row, byte by byte: head [rs, 4 u_lo), tail [4 u_hi, re).
    ks = tl.arange(0, 8)
    q = tl.where(ks[None, :] < 4, rs[:, None] + ks[None, :], 4 * tl.maximum(u_hi, u_lo)[:, None] + ks[None, :] - 4)
    head = (ks[None, :] < 4) & (q < 4 * u_lo[:, None])
    tail = (ks[None, :] >= 4) & (q >= 4 * u_lo[:, None])
    qm = rmask[:, None] & (head | tail) & (q >= rs[:, None]) & (q < re[:, None])  # [R, 8]
    j = (q - ts[:, None]).to(tl.int32)  # tree column (< 0: prefix)
    on_path = tl.max((path[:, None, :] == j[:, :, None]).to(tl.int32), axis=2) > 0
    tl.store(mask_ptr + (q - align), (j < 0) | on_path, mask=qm)


@triton.jit
def _store_prefix_words(mask_ptr, align, row_start, seq, rmask, part, num_parts,
                        BLOCK_R: tl.constexpr, BLOCK_PW: tl.constexpr):
    """The 4-byte words wholly inside the prefix of each row (all True: 0x01010101); chunks of
    BLOCK_PW words per row, chunk c by part c % num_parts."""
    words_ptr = _word_ptr(mask_ptr, align)
    rs = row_start + align
    u_lo = (rs + 3) >> 2
    u_end = (rs + seq) >> 2  # at most seq // 4 words in [u_lo, u_end)
    ones = tl.full([BLOCK_R, BLOCK_PW], 0x01010101, tl.int32)
    ts = tl.arange(0, BLOCK_PW)
    for t0 in range(part * BLOCK_PW, seq // 4, num_parts * BLOCK_PW):
        u = u_lo[:, None] + t0 + ts[None, :]
        tl.store(words_ptr + u, ones, mask=rmask[:, None] & (u < u_end[:, None]))


@triton.jit(do_not_specialize=["num_rows", "max_depth", "tree_align", "full_align"])
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
    num_rows,  # N
    max_depth,  # L - 1
    tree_align,  # tree_mask_ptr's address mod 4
    full_align,  # full_mask_ptr's address mod 4
    WRITE_TREE_MASK: tl.constexpr,
    WRITE_FULL_MASK: tl.constexpr,
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_W: tl.constexpr,  # 32-column words per chunk (a chunk is 32 * BLOCK_W columns)
    BLOCK_L: tl.constexpr,  # next_pow2(max_depth + 1)
    BLOCK_S: tl.constexpr,  # requests per chunk of the seq_lens prefix sum
    BLOCK_PW: tl.constexpr,  # prefix words (4 columns each) per row per chunk
):
    BLOCK_C: tl.constexpr = 32 * BLOCK_W
    b = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    part = tl.program_id(2)
    rmask = rows < num_rows
    par_b = par_ptr + b * num_rows
    seq = tl.load(seq_lens_ptr + b).to(tl.int64)

    if WRITE_FULL_MASK:
        pre = tl.zeros([], dtype=tl.int64)
        for s0 in range(0, b, BLOCK_S):
            idx = s0 + tl.arange(0, BLOCK_S)
            pre += tl.sum(tl.load(seq_lens_ptr + idx, mask=idx < b, other=0).to(tl.int64), axis=0)
        full_row = num_rows * pre + b * num_rows * num_rows + rows * (seq + num_rows)  # [BLOCK_R]

    if part == 0:
        # Root path of every row: path[r, s] = s-th ancestor (s = 0: the row itself), -1 past the root.
        ls = tl.arange(0, BLOCK_L)
        cur = tl.where(rmask, rows, -1).to(tl.int32)
        path = tl.where(ls[None, :] == 0, cur[:, None], -1)  # [BLOCK_R, BLOCK_L] int32
        for s in range(1, max_depth + 1):
            cur = tl.load(par_b + cur, mask=cur >= 0, other=-1).to(tl.int32)
            path = tl.where(ls[None, :] == s, cur[:, None], path)

        dep = tl.load(dep_ptr + b * num_rows + rows, mask=rmask, other=0)
        tl.store(positions_ptr + b * num_rows + rows, seq + dep, mask=rmask)
        tl.store(ridx_ptr + b * num_rows + rows, b * num_rows + rows, mask=rmask)

        # Links: column sweep in int32 (N < 2**31) to keep the [rows, columns] tiles light on registers.
        rows32 = rows.to(tl.int32)
        par_r32 = tl.load(par_b + rows, mask=rmask, other=-1).to(tl.int32)
        first = tl.full([BLOCK_R], 2147483647, tl.int32)  # lowest child row
        sib = tl.full([BLOCK_R], 2147483647, tl.int32)  # lowest later row with the same parent
        for c0 in range(0, num_rows, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            pc = tl.load(par_b + cols, mask=cols < num_rows, other=-1).to(tl.int32)
            child = pc[None, :] == rows32[:, None]
            first = tl.minimum(first, tl.min(tl.where(child, cols[None, :], 2147483647), axis=1))
            later = (pc[None, :] == par_r32[:, None]) & (par_r32[:, None] >= 0) & (cols[None, :] > rows32[:, None])
            sib = tl.minimum(sib, tl.min(tl.where(later, cols[None, :], 2147483647), axis=1))
        tl.store(rnext_ptr + b * num_rows + rows, tl.where(first < num_rows, first, -1).to(tl.int64), mask=rmask)
        tl.store(rsib_ptr + b * num_rows + rows, tl.where(sib < num_rows, sib, -1).to(tl.int64), mask=rmask)

        if WRITE_TREE_MASK:
            _store_tree_columns(tree_mask_ptr, tree_align, (b * num_rows + rows) * num_rows, 0, rmask, path,
                                num_rows, BLOCK_R, BLOCK_W, BLOCK_L)
        if WRITE_FULL_MASK:
            _store_tree_columns(full_mask_ptr, full_align, full_row, seq, rmask, path, num_rows,
                                BLOCK_R, BLOCK_W, BLOCK_L)
    else:
        if WRITE_FULL_MASK:
            _store_prefix_words(full_mask_ptr, full_align, full_row, seq, rmask, part - 1,
                                tl.num_programs(2) - 1, BLOCK_R, BLOCK_PW)
