"""Move the accepted path's target KV into place (COMMIT step), every layer in one launch.

Grid (request, buffer, byte tile): one program moves one byte tile of request b's live entries in one KV
buffer (the pool's ``data_ptrs``: K and V of every layer, slot-major rows of ``data_strides[buf]`` bytes).
Entry d of request b moves slot ``src[b, d]`` to ``tgt[b, d]``; it is live when d < accept length and
src != tgt, so a round moves only what changed (upstream's tiled copy moves every listed pair, (0, 0)
padding included, and at 544 pairs it took 1.5 ms of an 8B-shape round on the H200). A program loads all
its live rows before it stores any, so moves inside one request may read slots another of its entries
writes (kv_commit's order argument); requests own disjoint slots. A program whose request has no live entry
stops before touching the pool (session 23's 8B-shape profile at c 32, where random weights accept only the root:
98 us of every round in this kernel's 9216 programs moving nothing).
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["width"])
def move_kv_rows_kernel(
    data_ptrs,  # [B] uint64: base address of each KV buffer
    data_strides,  # [B] int64: bytes per slot row of each buffer
    tgt_ptr,  # [bs, W] int64: destination slot of entry d
    src_ptr,  # [bs, W] int64: source slot of entry d
    accept_len_ptr,  # [bs] int32: entries 0 .. accept length - 1 are candidates
    width,  # W
    BLOCK_W: tl.constexpr,  # next_pow2(W)
    TILE: tl.constexpr,  # bytes per program
):
    b = tl.program_id(0).to(tl.int64)
    buf = tl.program_id(1)
    tile = tl.program_id(2).to(tl.int64)
    n_live = tl.load(accept_len_ptr + b)
    row_bytes = tl.load(data_strides + buf).to(tl.int64)
    # a request that accepted only its root has nothing to move (entry 0's source is its target): its programs
    # stop here, and so does a program whose request moves nothing at all (every path already in place)
    if (n_live > 1) & (tile * TILE < row_bytes):
        d = tl.arange(0, BLOCK_W)
        in_row = d < width
        tgt = tl.load(tgt_ptr + b * width + d, mask=in_row, other=0)
        src = tl.load(src_ptr + b * width + d, mask=in_row, other=0)
        live = in_row & (d < n_live) & (src != tgt)
        if tl.max(live.to(tl.int32), axis=0) > 0:
            base = tl.cast(tl.load(data_ptrs + buf), tl.pointer_type(tl.uint8))
            off = tile * TILE + tl.arange(0, TILE)
            m = live[:, None] & (off[None, :] < row_bytes)
            vals = tl.load(base + src[:, None] * row_bytes + off[None, :], mask=m, other=0)
            tl.store(base + tgt[:, None] * row_bytes + off[None, :], vals, mask=m)
