"""ACCEPT + COMMIT of a greedy DDTree round in one launch: one program per request.

The walk is ``sglang_ddtree.tree.kernels.accept.greedy_walk`` (from the root, take the child whose token is
the target's token at the current node; stop at the first miss); the same program then writes everything
the round hands back to SGLang (``worker.kv_commit.RoundCommit``), which otherwise takes ~25 small
PyTorch ops per round on the CPU-bound path.
"""

import triton
import triton.language as tl

from sglang_ddtree.tree.kernels.accept import greedy_walk


@triton.jit(do_not_specialize=["num_rows", "width"])
def ddtree_accept_commit_kernel(
    tok_ptr,  # [bs, N] int64, tree tokens (row 0 = root)
    par_ptr,  # [bs, N] int64, parent row (-1 root / pads)
    valid_ptr,  # [bs, N] bool
    target_ptr,  # [bs, N] int32/int64, target's token at each row
    loc_ptr,  # [bs, N] int64, verify out_cache_loc
    prefix_ptr,  # [bs] int32/int64, committed length before the round
    out_tok_ptr,  # [bs, W] int64 out: new tokens, the first accept length valid
    bonus_ptr,  # [bs] int64 out
    accept_len_ptr,  # [bs] int32 out: accepted drafts + 1
    new_len_ptr,  # [bs] int64 out: prefix + accept length
    kv_tgt_ptr,  # [bs, W] int64 out: move_kv_cache targets (0 past the accept length)
    kv_src_ptr,  # [bs, W] int64 out: move_kv_cache sources (0 past the accept length)
    ctx_row_ptr,  # [bs, W] int64 out: flattened verify row of the node at each depth (b * N past the accept length)
    ctx_loc_ptr,  # [bs, W] int64 out: final slot of depth d = verify_loc[b, d] (0, SGLang's dummy slot, for d >= N)
    ctx_pos_ptr,  # [bs, W] int64 out: prefix + d
    num_rows,  # N
    width,  # W = max depth + 1: the server's accept width; may exceed N (a small bucket of budget auto, whose
    # tree accepts at most N tokens: columns N.. are past every accept length)
    stride_target,
    stride_loc,
    BLOCK_N: tl.constexpr,  # next_pow2(N)
    BLOCK_W: tl.constexpr,  # next_pow2(W)
):
    b = tl.program_id(0).to(tl.int64)
    rows, n_acc, bonus = greedy_walk(tok_ptr, par_ptr, valid_ptr, target_ptr, b, num_rows, stride_target, width,
                                     BLOCK_N, BLOCK_W)
    ws = tl.arange(0, BLOCK_W)
    a = n_acc + 1
    wm = ws < width
    live = (ws < a) & wm
    safe = tl.where(live, rows, 0)
    out = b * width + ws
    tl.store(out_tok_ptr + out, tl.load(target_ptr + b * stride_target + safe, mask=live, other=0).to(tl.int64),
             mask=wm)
    loc_d = tl.load(loc_ptr + b * stride_loc + ws, mask=wm & (ws < num_rows), other=0)
    loc_src = tl.load(loc_ptr + b * stride_loc + safe, mask=live, other=0)
    tl.store(kv_tgt_ptr + out, tl.where(live, loc_d, 0), mask=wm)
    tl.store(kv_src_ptr + out, tl.where(live, loc_src, 0), mask=wm)
    tl.store(ctx_row_ptr + out, b * num_rows + safe, mask=wm)
    tl.store(ctx_loc_ptr + out, loc_d, mask=wm)
    p = tl.load(prefix_ptr + b).to(tl.int64)
    tl.store(ctx_pos_ptr + out, p + ws, mask=wm)
    tl.store(accept_len_ptr + b, a)
    tl.store(new_len_ptr + b, p + a.to(tl.int64))
    tl.store(bonus_ptr + b, bonus)
