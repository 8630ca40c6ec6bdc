"""Verify topology of a built tree: ancestor masks, positions and retrieve links, one pass.

Serves the verify step. Grid (request, block of rows): each program walks its rows' root paths through
``parents`` (at most max_depth hops), turns each path into 32-column bit words (an ancestor j sets bit
j % 32 of word j // 32: O(rows x words x depth) compares instead of O(rows x columns x depth)), then
expands the words into the compact ancestor mask and the FULL_MASK rows (prefix all True, then the
tree part). In the same column sweep it finds the retrieve links of its rows (first child: lowest
row whose parent is the row; next sibling: lowest later row with the same parent; pads have parent
-1 and no links), and it writes positions and retrieve_index.
"""

import triton
import triton.language as tl


@triton.jit
def _or(a, b):
    return a | b


@triton.jit(do_not_specialize=["num_rows", "max_depth"])
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
    WRITE_TREE_MASK: tl.constexpr,
    WRITE_FULL_MASK: tl.constexpr,
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
        for c0 in range(0, seq, BLOCK_PC):
            pcols = c0 + tl.arange(0, BLOCK_PC)
            pm = rmask[:, None] & (pcols < seq)[None, :]
            ones = tl.full([BLOCK_R, BLOCK_PC], 1, tl.int1)
            tl.store(full_mask_ptr + row_base[:, None] + pcols[None, :], ones, mask=pm)

    # Column sweep in int32 (N < 2**31) to keep the [rows, columns] tiles light on registers.
    rows32 = rows.to(tl.int32)
    par_r32 = par_r.to(tl.int32)
    if WRITE_TREE_MASK:
        tree_row_ptr = tree_mask_ptr + b * num_rows * num_rows + rows * num_rows  # [BLOCK_R]
    if WRITE_FULL_MASK:
        full_row_ptr = full_mask_ptr + row_base + seq  # [BLOCK_R], first tree column of each row
    ws = tl.arange(0, BLOCK_W)
    js = tl.arange(0, 32)
    first = tl.full([BLOCK_R], 2147483647, tl.int32)  # lowest child row
    sib = tl.full([BLOCK_R], 2147483647, tl.int32)  # lowest later row with the same parent
    for c0 in range(0, num_rows, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        cmask = cols < num_rows
        pc = tl.load(par_b + cols, mask=cmask, other=-1).to(tl.int32)
        child = pc[None, :] == rows32[:, None]
        first = tl.minimum(first, tl.min(tl.where(child, cols[None, :], 2147483647), axis=1))
        later = (pc[None, :] == par_r32[:, None]) & (par_r32[:, None] >= 0) & (cols[None, :] > rows32[:, None])
        sib = tl.minimum(sib, tl.min(tl.where(later, cols[None, :], 2147483647), axis=1))
        if WRITE_TREE_MASK or WRITE_FULL_MASK:
            words = c0 // 32 + ws  # [BLOCK_W]
            hit = path_word[:, None, :] == words[None, :, None]  # [R, W, L]
            bits = tl.reduce(tl.where(hit, path_bit[:, None, :], 0), 2, _or)  # [R, W] int32
            anc = ((bits[:, :, None] >> js[None, None, :]) & 1) != 0  # [R, W, 32]
            anc = tl.reshape(anc, [BLOCK_R, BLOCK_C])
            m = rmask[:, None] & cmask[None, :]
            if WRITE_TREE_MASK:
                tl.store(tree_row_ptr[:, None] + cols[None, :], anc, mask=m)
            if WRITE_FULL_MASK:
                tl.store(full_row_ptr[:, None] + cols[None, :], anc, mask=m)
    tl.store(rnext_ptr + b * num_rows + rows, tl.where(first < num_rows, first, -1).to(tl.int64), mask=rmask)
    tl.store(rsib_ptr + b * num_rows + rows, tl.where(sib < num_rows, sib, -1).to(tl.int64), mask=rmask)
