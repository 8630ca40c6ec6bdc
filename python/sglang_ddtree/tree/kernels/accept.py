"""Greedy acceptance: one program per request walks the tree from the root, all rows in registers.

Serves the accept step. At each depth the child of the current node whose token equals the target's
token at the current node is taken (sibling tokens are distinct, so at most one matches); the walk
stops at the first miss, and the target's token at the last accepted node is the bonus token.
"""

import triton
import triton.language as tl


@triton.jit
def greedy_walk(tok_ptr, par_ptr, valid_ptr, target_ptr, b, num_rows, stride_target, width,
                BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
    """Request ``b``'s greedy walk, ``width - 1`` steps deep at most (the accept width W = max depth + 1).

    Returns (rows [BLOCK_W] int64: 0 (the root) then the accepted row at each depth, -1 past the path;
    n_acc int32: accepted drafts; bonus int64: the target's token at the last accepted row). Shared by
    ``ddtree_accept_kernel`` and the worker's fused ACCEPT + COMMIT kernel.
    """
    idx = tl.arange(0, BLOCK_N)
    m = idx < num_rows
    tok = tl.load(tok_ptr + b * num_rows + idx, mask=m, other=-1)
    par = tl.load(par_ptr + b * num_rows + idx, mask=m, other=-2)
    ok = tl.load(valid_ptr + b * num_rows + idx, mask=m, other=0) != 0
    tgt = tl.load(target_ptr + b * stride_target + idx, mask=m, other=-1).to(tl.int64)
    ws = tl.arange(0, BLOCK_W)
    rows = tl.where(ws == 0, 0, -1).to(tl.int64)
    cur = tl.zeros([], dtype=tl.int64)
    alive = cur == 0
    n_acc = tl.zeros([], dtype=tl.int32)
    for s in range(1, width):
        t = tl.sum(tl.where(idx == cur, tgt, 0), axis=0)
        hit = (par == cur) & (tok == t) & ok & alive
        nxt = tl.min(tl.where(hit, idx, BLOCK_N), axis=0).to(tl.int64)
        alive = nxt < BLOCK_N
        cur = tl.where(alive, nxt, cur)
        n_acc += alive.to(tl.int32)
        rows = tl.where((ws == s) & alive, nxt, rows)
    return rows, n_acc, tl.sum(tl.where(idx == cur, tgt, 0), axis=0)


@triton.jit(do_not_specialize=["num_rows", "max_depth"])
def ddtree_accept_kernel(
    tok_ptr,  # [bs, N] int64, draft token of each row
    par_ptr,  # [bs, N] int64, parent row (-1 root/pads)
    valid_ptr,  # [bs, N] bool
    target_ptr,  # [bs, N] int64, target's token at each row (argmax for greedy)
    accept_len_ptr,  # [bs] int32 out
    accepted_ptr,  # [bs, max_depth + 1] int32 out: row 0 then accepted rows, pad -1
    bonus_ptr,  # [bs] int64 out
    num_rows,  # N
    max_depth,  # L - 1
    stride_target,
    BLOCK_N: tl.constexpr,  # next_pow2(N)
    BLOCK_L: tl.constexpr,  # next_pow2(max_depth + 1)
):
    b = tl.program_id(0).to(tl.int64)
    accepted, n_acc, bonus = greedy_walk(tok_ptr, par_ptr, valid_ptr, target_ptr, b, num_rows, stride_target,
                                         max_depth + 1, BLOCK_N, BLOCK_L)
    ls = tl.arange(0, BLOCK_L)
    tl.store(accepted_ptr + b * (max_depth + 1) + ls, accepted.to(tl.int32), mask=ls <= max_depth)
    tl.store(accept_len_ptr + b, n_acc)
    tl.store(bonus_ptr + b, bonus)
