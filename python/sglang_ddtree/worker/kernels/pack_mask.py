"""Pack a flashinfer tree verify's FULL_MASK into bits on the device (``worker.flashinfer_plan``), one launch.

Grid (request, byte tile): request b's block is its [q_len x kv_len] mask, row-major, back to back with the
other requests' (q_len, kv_len from the device indptrs); byte j of its packed segment holds elements 8j .. 8j+7,
element 8j+k in bit k (FlashInfer's ``segment_packbits(..., bitorder="little")``), and the segment starts at
the running sum of the earlier segments' ceil(q_len * kv_len / 8) bytes. Every program computes those sums
over all requests itself (bs <= B_POW2, a few hundred at most), so nothing is read back to the host; program
(0, 0) also writes the byte offsets ([bs + 1] int32, FlashInfer's mask_indptr).
"""

import triton
import triton.language as tl


@triton.jit
def pack_tree_mask_kernel(
    mask_ptr,  # [>= sum q_len * kv_len] uint8 (bool viewed as uint8): the requests' blocks back to back
    qo_ptr,  # [bs + 1] int32: query-row offsets
    kv_ptr,  # [bs + 1] int32: key offsets
    out_ptr,  # [>= total packed bytes] uint8
    out_indptr_ptr,  # [bs + 1] int32: written, byte offsets of the packed segments
    bs,
    B_POW2: tl.constexpr,  # next_pow2(bs + 1)
    BLOCK: tl.constexpr,  # bytes per program
):
    b = tl.program_id(0)
    blk = tl.program_id(1)
    i = tl.arange(0, B_POW2)
    live_i = i < bs
    q = tl.load(qo_ptr + i + 1, mask=live_i, other=0) - tl.load(qo_ptr + i, mask=live_i, other=0)
    kv = tl.load(kv_ptr + i + 1, mask=live_i, other=0) - tl.load(kv_ptr + i, mask=live_i, other=0)
    seg = q.to(tl.int64) * kv.to(tl.int64)
    nbytes = (seg + 7) // 8
    bit_end = tl.cumsum(seg, 0)
    byte_end = tl.cumsum(nbytes, 0)
    if (b == 0) & (blk == 0):
        tl.store(out_indptr_ptr + i + 1, byte_end.to(tl.int32), mask=live_i)
        tl.store(out_indptr_ptr + i, tl.zeros([B_POW2], tl.int32), mask=i == 0)
    sel = i == b
    my_seg = tl.sum(tl.where(sel, seg, 0), 0)
    my_bit0 = tl.sum(tl.where(sel, bit_end - seg, 0), 0)
    my_byte0 = tl.sum(tl.where(sel, byte_end - nbytes, 0), 0)
    j = blk * BLOCK + tl.arange(0, BLOCK)
    live = j < (my_seg + 7) // 8
    acc = tl.zeros([BLOCK], tl.int32)
    for k in tl.static_range(8):
        pos = j.to(tl.int64) * 8 + k
        v = tl.load(mask_ptr + my_bit0 + pos, mask=live & (pos < my_seg), other=0)
        acc = acc | ((v != 0).to(tl.int32) << k)
    tl.store(out_ptr + my_byte0 + j, acc.to(tl.uint8), mask=live)
