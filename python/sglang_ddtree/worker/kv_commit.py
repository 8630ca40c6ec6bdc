"""Commit the accepted path (COMMIT step of the round): target KV moves and the drafter's new context.

The verify forward wrote node j of request b at slot ``verify_loc[b, j]`` (= req_to_token[b, prefix + j]).
The accepted path (root, then one node per depth) must end up at slots prefix + 0 .. prefix + a - 1,
i.e. at ``verify_loc[b, d]`` for depth d. Every slot here comes from the verify's own out_cache_loc,
never from a post-verify read of req_to_token: with DFLASH-family CUDA graphs the target publishes
"read done" before replay, after which the scheduler may already rewrite req_to_token rows
(DESIGN.md hazard). Unused entries point at slot 0, SGLang's dummy slot for padded writes.

Moves: request b's entries are contiguous and ordered by depth, and a source node's depth-slot is never
smaller than its depth, so a move never reads a slot an earlier entry of the same request wrote.
Every drafting round takes ``greedy_accept_commit`` (one Triton launch; at T > 0 fed with one draw per node
instead of the argmax, ``sampling.node_samples``), which returns a ``RoundCommit``. A width-0 round (the root
alone: nothing drafted, nothing to accept or move) takes ``root_commit`` and ``root_slots`` instead: a handful of
PyTorch ops where the Triton launches cost ~45 us of host time each on the tiny pair (session 36's phase split).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class RoundCommit(NamedTuple):
    """Everything the ACCEPT + COMMIT steps hand back, W = accept width (root + max depth).

    out_tokens [bs, W] int64: this round's new tokens (accepted drafts, then the bonus), the first
    accept_lens valid, 0 after; bonus [bs] int64; accept_lens [bs] int32 (1..W); new_seq_lens [bs]
    int64 = prefix + accept_lens; kv_tgt / kv_src [bs*W] int64: ``move_kv_cache`` pairs, (0, 0) past
    accept_lens; ctx_rows [bs*W] int64: flattened verify row of the accepted node at each depth (the
    drafter's new context; rows past accept_lens are any row of the request); ctx_loc_2d [bs, W] int64
    and ctx_positions [bs*W] int64: its final slots and positions.
    """

    out_tokens: torch.Tensor
    bonus: torch.Tensor
    accept_lens: torch.Tensor
    new_seq_lens: torch.Tensor
    kv_tgt: torch.Tensor
    kv_src: torch.Tensor
    ctx_rows: torch.Tensor
    ctx_loc_2d: torch.Tensor
    ctx_positions: torch.Tensor


def root_slots(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor) -> torch.Tensor:
    """The verify slot of each request's root (a width-0 round's one verify row): req_to_token[b, prefix[b]].
    Shape: req_to_token [rows, max context] int32, req_pool_indices [bs] int64, prefix_lens [bs] int -> [bs]
    int64 (what ``assign_extend_cache_locs`` writes for one token per request). No host sync."""
    return req_to_token[req_pool_indices, prefix_lens].to(torch.int64)


def root_commit(target: torch.Tensor, prefix_lens: torch.Tensor, width: int) -> RoundCommit:
    """ACCEPT + COMMIT of a width-0 round: every request commits its root (already at its final slot, verified
    at req_to_token[prefix]) and takes the target's token there as its bonus; what ``greedy_accept_commit``
    returns for a one-row tree, without its launch. Shape: target [bs, 1] or [bs] int64 (the target's token at
    the root: its argmax, or at T > 0 the draw), prefix_lens [bs] int, width W >= 1 -> ``RoundCommit`` with
    out_tokens [bs, W] (column 0 the bonus, 0 after), accept_lens 1, new_seq_lens prefix + 1; no KV moves and no
    context rows (``kv_tgt`` .. ``ctx_positions`` None: the drafter's new context is the verify's one row per
    request, ``DraftKVAppendGraphs.append_root``). No host sync."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    bonus = target.reshape(-1).to(torch.int64)  # no copy when already int64
    bs = bonus.shape[0]
    return RoundCommit(
        out_tokens=torch.nn.functional.pad(bonus.view(bs, 1), (0, width - 1)), bonus=bonus,
        accept_lens=torch.ones(bs, dtype=torch.int32, device=bonus.device),
        new_seq_lens=prefix_lens.to(torch.int64) + 1,
        kv_tgt=None, kv_src=None, ctx_rows=None, ctx_loc_2d=None, ctx_positions=None,
    )


def commit_from_rows(
    node_tokens: torch.Tensor, rows: torch.Tensor, accept_lens: torch.Tensor, verify_loc: torch.Tensor,
    prefix_lens: torch.Tensor,
) -> RoundCommit:
    """PyTorch COMMIT from an acceptance result.

    Shape: node_tokens [bs, N] int (the token after each accepted node: the target's argmax, or the
    sampler's ``predict``), rows [bs, W] int local accepted rows (column 0 = root, -1 padded),
    accept_lens [bs] int (1..W), verify_loc [bs, N] int64, prefix_lens [bs] int.
    """
    bs, width = rows.shape
    n = verify_loc.shape[1]
    dev = verify_loc.device
    depth = torch.arange(width, device=dev)
    live = depth.unsqueeze(0) < accept_lens.view(bs, 1).to(torch.int64)
    safe = torch.where(live, rows.to(torch.int64), 0)
    zero = torch.zeros((), dtype=torch.int64, device=dev)
    out_tokens = torch.where(live, node_tokens.to(torch.int64).gather(1, safe), zero)
    bonus = out_tokens.gather(1, (accept_lens.to(torch.int64) - 1).view(bs, 1)).squeeze(1)
    loc_d = verify_loc[:, :width]
    prefix = prefix_lens.to(torch.int64)
    return RoundCommit(
        out_tokens=out_tokens, bonus=bonus, accept_lens=accept_lens.to(torch.int32),
        new_seq_lens=prefix + accept_lens.to(torch.int64),
        kv_tgt=torch.where(live, loc_d, zero).reshape(-1),
        kv_src=torch.where(live, verify_loc.gather(1, safe), zero).reshape(-1),
        ctx_rows=(torch.arange(bs, device=dev).view(bs, 1) * n + safe).reshape(-1),
        ctx_loc_2d=loc_d.contiguous(),
        ctx_positions=(prefix.view(bs, 1) + depth.view(1, width)).reshape(-1),
    )


def greedy_accept_commit(
    tree, tokens: torch.Tensor, target: torch.Tensor, verify_loc: torch.Tensor, prefix_lens: torch.Tensor,
    width: int, *, backend: str = "auto",
) -> RoundCommit:
    """Greedy ACCEPT + COMMIT of every request: one Triton launch on CUDA, PyTorch elsewhere.

    Shape: tree (``sglang_ddtree.tree.Tree``, N rows), tokens [bs, N] int64 (the tree's tokens with the
    root filled in), target [bs, N] int32/int64 (the target's argmax at each row), verify_loc [bs, N]
    int64, prefix_lens [bs] int, width W >= 1: the accept width of the rows handed back. A tree of N < W rows
    (a small bucket of budget auto) accepts at most N tokens; its columns N .. W - 1 are written as
    ``pad_commit`` writes them, in the same launch. Accepts what ``verify_tree_greedy`` accepts. No host sync.
    """
    from sglang_ddtree.tree import accept_greedy
    from sglang_ddtree.tree._common import next_pow2, num_warps_for_rows, use_triton

    bs, n = tokens.shape
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    if not use_triton("greedy_accept_commit", tokens.device, backend):
        w = min(width, n)
        res = accept_greedy(tree, target, backend="torch")
        return pad_commit(commit_from_rows(target, res.accepted_node_idx[:, :w], res.num_accepted + 1, verify_loc,
                                           prefix_lens), width)

    from sglang_ddtree.worker.kernels.commit import ddtree_accept_commit_kernel

    dev = tokens.device
    i64 = dict(dtype=torch.int64, device=dev)
    # nine separate allocations: views of one buffer (session 34) put the fields at offsets that are not 16-byte
    # aligned, and Triton compiled a new specialisation of this kernel and move_kv's for each new alignment pattern
    # (the compile watch: ~one compile a round at first, benchmark/results/session34/parity_triton_cycle)
    out = RoundCommit(
        out_tokens=torch.empty(bs, width, **i64), bonus=torch.empty(bs, **i64),
        accept_lens=torch.empty(bs, dtype=torch.int32, device=dev), new_seq_lens=torch.empty(bs, **i64),
        kv_tgt=torch.empty(bs * width, **i64), kv_src=torch.empty(bs * width, **i64),
        ctx_rows=torch.empty(bs * width, **i64), ctx_loc_2d=torch.empty(bs, width, **i64),
        ctx_positions=torch.empty(bs * width, **i64),
    )
    if bs == 0:
        return out
    target = target if target.stride(1) == 1 else target.contiguous()
    verify_loc = verify_loc if verify_loc.stride(1) == 1 else verify_loc.contiguous()
    ddtree_accept_commit_kernel[(bs,)](
        tokens.contiguous(), tree.parents, tree.valid, target, verify_loc, prefix_lens,
        out.out_tokens, out.bonus, out.accept_lens, out.new_seq_lens, out.kv_tgt, out.kv_src, out.ctx_rows,
        out.ctx_loc_2d, out.ctx_positions,
        n, width, target.stride(0), verify_loc.stride(0),
        BLOCK_N=next_pow2(n), BLOCK_W=next_pow2(width), num_warps=num_warps_for_rows(n),
    )
    return out


def pad_commit(c: RoundCommit, width: int) -> RoundCommit:
    """``c`` (accept width w, from a tree of fewer rows than the server's accept width: a small bucket of budget
    auto) widened to ``width`` >= w columns, the new ones past every accept length: tokens 0, KV moves (0, 0),
    context rows the request's root, context slots 0 (SGLang's dummy slot) and positions prefix + depth, as the
    kernel leaves unused columns. No host sync."""
    bs, w = c.out_tokens.shape
    if w == width:
        return c
    dev, extra = c.out_tokens.device, width - w

    def wide(t2d: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        return torch.cat([t2d, fill.to(t2d.dtype).expand(bs, extra)], dim=1)

    zero = torch.zeros((1, 1), dtype=torch.int64, device=dev)
    rows = c.ctx_rows.view(bs, w)
    positions = c.ctx_positions.view(bs, w)
    return RoundCommit(
        out_tokens=wide(c.out_tokens, zero), bonus=c.bonus, accept_lens=c.accept_lens, new_seq_lens=c.new_seq_lens,
        kv_tgt=wide(c.kv_tgt.view(bs, w), zero).reshape(-1), kv_src=wide(c.kv_src.view(bs, w), zero).reshape(-1),
        ctx_rows=torch.cat([rows, rows[:, :1].expand(bs, extra)], dim=1).reshape(-1),
        ctx_loc_2d=wide(c.ctx_loc_2d, zero),
        ctx_positions=torch.cat([positions, positions[:, :1] + torch.arange(w, width, device=dev).view(1, extra)],
                                dim=1).reshape(-1),
    )


class AcceptedKVMover:
    """Applies a round's target-KV moves (``RoundCommit.kv_tgt`` / ``kv_src``) to the target's pool.

    Our one-launch kernel (``kernels.kv_move``: live entries only) where the pool is one upstream moves with
    its tiled slot-row copy over ``data_ptrs`` (slot-major rows, no native move, no scale buffers), else
    upstream's ``pool.move_kv_cache``, which copies the same rows. Built once per worker (row sizes from the
    buffers' host-side shapes); no host sync.
    """

    TILE = 512  # bytes per program: a Qwen3 KV row (8 heads x 128 x bf16) is 2 KiB

    def __init__(self, pool, *, backend: str = "auto"):
        from sglang_ddtree.tree._common import use_triton

        self.pool = pool
        device = getattr(pool, "device", "cpu")
        self.own = (use_triton("move_accepted_kv", torch.device(device), backend)
                    and getattr(pool, "data_ptrs", None) is not None
                    and getattr(pool, "data_strides", None) is not None
                    and getattr(pool, "_kv_copy_config", None) is not None
                    and not getattr(pool, "use_hnd", False) and not getattr(pool, "use_native_move_kv_cache", False)
                    and getattr(pool, "k_scale_buffer", None) is None and int(getattr(pool, "layer_num", 0)) > 0)
        if self.own:  # data_ptrs must be exactly the K and V buffers; their row sizes come from host shapes
            bufs = list(pool.k_buffer) + list(pool.v_buffer)
            self.own = int(pool.data_ptrs.numel()) == len(bufs)
        self.tiles = -(-max(b[0].numel() * b.element_size() for b in bufs) // self.TILE) if self.own else 0

    def __call__(self, commit: RoundCommit, width: int) -> None:
        if not self.own:
            self.pool.move_kv_cache(commit.kv_tgt, commit.kv_src)
            return
        bs = commit.accept_lens.shape[0]
        if bs == 0:
            return
        from sglang_ddtree.tree._common import next_pow2
        from sglang_ddtree.worker.kernels.kv_move import move_kv_rows_kernel

        move_kv_rows_kernel[(bs, self.pool.data_ptrs.numel(), self.tiles)](
            self.pool.data_ptrs, self.pool.data_strides, commit.kv_tgt, commit.kv_src, commit.accept_lens, width,
            BLOCK_W=next_pow2(width), TILE=self.TILE, num_warps=4,
        )
