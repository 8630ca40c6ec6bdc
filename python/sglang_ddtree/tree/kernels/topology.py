"""Verify topology of a built tree: ancestor masks, positions and retrieve links, one pass.

Serves the verify step. Grid (request, block of rows): each program walks its rows' root paths through
``parents`` (at most max_depth hops), then writes the compact ancestor mask, the FULL_MASK rows
(prefix all True, then the tree part), positions and the retrieve_* links of those rows (first child:
lowest child row; next sibling: next higher row with the same parent; pads have parent -1 and no links).
"""

import triton
import triton.language as tl


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
    BLOCK_C: tl.constexpr,  # tree columns per chunk
    BLOCK_PC: tl.constexpr,  # prefix columns per chunk
    BLOCK_L: tl.constexpr,  # next_pow2(max_depth + 1)
    BLOCK_S: tl.constexpr,  # requests per chunk of the seq_lens prefix sum
):
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

    first = tl.full([BLOCK_R], num_rows, tl.int64)  # lowest child row
    sib = tl.full([BLOCK_R], num_rows, tl.int64)  # lowest later row with the same parent
    for c0 in range(0, num_rows, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C).to(tl.int64)
        cmask = cols < num_rows
        pc = tl.load(par_b + cols, mask=cmask, other=-1)
        child = (pc[None, :] == rows[:, None]) & cmask[None, :]
        first = tl.minimum(first, tl.min(tl.where(child, cols[None, :], num_rows), axis=1))
        later = (pc[None, :] == par_r[:, None]) & (par_r[:, None] >= 0) & (cols[None, :] > rows[:, None])
        sib = tl.minimum(sib, tl.min(tl.where(later & cmask[None, :], cols[None, :], num_rows), axis=1))
        on_path = (path[:, None, :] == cols.to(tl.int32)[None, :, None]).to(tl.int32)  # [R, C, L]
        anc = tl.sum(on_path, axis=2) > 0
        m = rmask[:, None] & cmask[None, :]
        if WRITE_TREE_MASK:
            offs = b * num_rows * num_rows + rows[:, None] * num_rows + cols[None, :]
            tl.store(tree_mask_ptr + offs, anc, mask=m)
        if WRITE_FULL_MASK:
            tl.store(full_mask_ptr + row_base[:, None] + seq + cols[None, :], anc, mask=m)
    tl.store(rnext_ptr + b * num_rows + rows, tl.where(first < num_rows, first, -1), mask=rmask)
    tl.store(rsib_ptr + b * num_rows + rows, tl.where(sib < num_rows, sib, -1), mask=rmask)
