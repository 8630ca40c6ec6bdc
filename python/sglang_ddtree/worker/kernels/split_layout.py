"""Rewrite a FlashInfer split-KV prefill schedule's work list from the device key counts (``worker.flashinfer_plan``),
one launch.

FlashInfer's fa2 prefill kernel writes query row r's partial output of KV chunk j at ``o_indptr[b] + r *
chunks(b) + j``, with ``chunks(b) = ceil(max(kv_len, 1) / kv_chunk_size)`` computed on the device from the TRUE key
count, while its plan lays out the work list (request, q tile, kv tile), ``o_indptr`` and the merge's
``merge_indptr`` from the host key counts it was given. DDTREE's sync-free plan gives upper bounds, so wherever a
bound spans more chunks than the true count the two disagree. This kernel rewrites those arrays in the wrapper's
device int workspace (after the plan's host-to-device copy, on the same stream) exactly as FlashInfer's plan would
write them for the true key counts, keeping the plan's chunk size (chosen for the bounds: never more work than the
graph's fixed grid holds). Every request has ``rows`` query rows and ``q_tiles`` query tiles (a verify or draft
block: the same for all).

Grid (bs,): program b reads every request's key count (bs <= B_POW2), so nothing is read back to the host; it writes
its own work items, ``o_indptr[b]`` and its rows' ``merge_indptr`` entries; program 0 also writes
``merge_indptr[0]`` and clears ``block_valid_mask`` past the last work item, the last program ``o_indptr[bs]``.
"""

import triton
import triton.language as tl


@triton.jit
def split_kv_layout_kernel(
    kv_indptr_ptr,  # [bs + 1] int32: key offsets (page size 1: key counts are the differences)
    chunk_ptr,  # [1] int32: the plan's kv_chunk_size (device int workspace)
    request_ptr,  # [padded] int32: written, request of each work item
    qo_tile_ptr,  # [padded] int32: written, query tile of each work item
    kv_tile_ptr,  # [padded] int32: written, KV chunk of each work item
    valid_ptr,  # [padded] uint8 (FlashInfer's bool block_valid_mask): written
    o_indptr_ptr,  # [bs + 1] int32: written, first partial-output slot of each request
    merge_indptr_ptr,  # [bs * rows + 1] int32: written, first partial-output slot of each query row
    bs,
    rows,  # query rows per request
    q_tiles,  # query tiles per request
    padded,  # work items the graph's grid holds (FlashInfer's padded_batch_size)
    B_POW2: tl.constexpr,  # next_pow2(bs + 1)
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    chunk = tl.load(chunk_ptr)
    i = tl.arange(0, B_POW2)
    live = i < bs
    kv = tl.load(kv_indptr_ptr + i + 1, mask=live, other=0) - tl.load(kv_indptr_ptr + i, mask=live, other=0)
    chunks = tl.where(live, (tl.maximum(kv, 1) + chunk - 1) // chunk, 0)
    before = tl.sum(tl.where(i < b, chunks, 0), 0)
    mine = tl.sum(tl.where(i == b, chunks, 0), 0)
    total = tl.sum(chunks, 0)
    work0 = before * q_tiles
    n_work = mine * q_tiles
    for start in range(0, n_work, BLOCK):
        w = start + tl.arange(0, BLOCK)
        m = w < n_work
        tl.store(request_ptr + work0 + w, tl.zeros([BLOCK], tl.int32) + b, mask=m)
        tl.store(qo_tile_ptr + work0 + w, (w // mine).to(tl.int32), mask=m)
        tl.store(kv_tile_ptr + work0 + w, (w % mine).to(tl.int32), mask=m)
        tl.store(valid_ptr + work0 + w, tl.full([BLOCK], 1, tl.uint8), mask=m)
    o0 = before * rows
    tl.store(o_indptr_ptr + b, o0.to(tl.int32))
    for start in range(0, rows, BLOCK):
        r = start + tl.arange(0, BLOCK)
        tl.store(merge_indptr_ptr + b * rows + r + 1, (o0 + (r + 1) * mine).to(tl.int32), mask=r < rows)
    if b == bs - 1:
        tl.store(o_indptr_ptr + bs, (total * rows).to(tl.int32))
    if b == 0:
        tl.store(merge_indptr_ptr, 0)
        for start in range(total * q_tiles, padded, BLOCK):
            w = start + tl.arange(0, BLOCK)
            tl.store(valid_ptr + w, tl.zeros([BLOCK], tl.uint8), mask=w < padded)
